#!/usr/bin/env bash
# bucketload's shard loader with its disk cache against MosaicML Streaming and LitData, same
# server, same data, same run: SAMPLES JPEGs of SIZE (`bucketload gen`), each tool's shards of
# SHARD_SIZE from its own writer (`bucketload shard`; MDSWriter and `litdata.optimize` in
# benchmarks/peers/streaming_write.py), read at each of LATENCIES (the server restarted with
# `--latency`), raw (bytes + label) and decoded (JPEG decode, RandomResizedCrop 224, flip,
# normalise):
#   bucketload: benchmarks/peers/bucketload_cache.py in .venv-bench (this script installs the
#               release build there): no cache, then cold and warm cache (two epochs, new process);
#               then cold and warm again with metadata_ttl="indefinite" (no HEAD per shard on the
#               warm epoch, which the peers never send either);
#   peers:      benchmarks/peers/streaming_cache.py in .venv-peers (made by
#               benchmarks/peers/setup-streaming.sh when missing: about 4 GB): cold and warm
#               cache, DataLoader workers RAW_WORKERS for raw reads and DECODED_WORKERS decoded.
# Every measurement checks it read each sample once, with its label, and raw, every byte; time
# to first batch is in every row. RUNS repeats everything; the table at the end gives the median
# and min–max. JSON lines go to OUT/results.jsonl. docs/BENCHMARKS.md records the table with
# this command.
#   indexed:    the same shards read by their indexes (`format="indexed"`), cold and warm, by
#               default and with metadata_ttl="indefinite" (bucketload-indexed, -indexed-ttl).
# TOOLS (default: all, comma-separated: bucketload, bucketload-ttl, bucketload-indexed,
# bucketload-indexed-ttl, mosaic, litdata) and MODES (default: raw,decoded) choose what runs.
# CACHE_ROOT=DIR puts the caches there (default: the scratch directory under /tmp).
# SKIP_BUILD=1 skips the release build and install (then BUCKETLOAD_BIN and BENCH_PYTHON, a
# python with a bucketload package that has `decode=False`, name what to run).
set -euo pipefail
cd "$(dirname "$0")/.."
samples="${SAMPLES:-4000}"
size="${SIZE:-100KB}"
shard_size="${SHARD_SIZE:-64MB}"
latencies="${LATENCIES:-0ms,50ms}"
runs="${RUNS:-3}"
tools=",${TOOLS:-bucketload,bucketload-ttl,bucketload-indexed,bucketload-indexed-ttl,mosaic,litdata},"
modes="${MODES:-raw,decoded}"
wants() { [[ "$tools" == *",$1,"* ]]; }  # wants TOOL: whether TOOLS names it
# The peers' shards written: only those of the peers that run.
peer_tools="$(for t in mosaic litdata; do wants "$t" && echo "$t"; done | paste -sd, -)"
raw_workers="${RAW_WORKERS:-0}"
decoded_workers="${DECODED_WORKERS:-2}"
port="${PORT:-9351}"
# Where every tool's cache directory goes (default: the scratch directory); one filesystem for all.
cache_root="${CACHE_ROOT:-}"
out="$(realpath -m "${OUT:-bench-peers-out}")"

if [ "${SKIP_BUILD:-0}" = 1 ]; then
    bin="${BUCKETLOAD_BIN:?SKIP_BUILD=1 needs BUCKETLOAD_BIN}"
    python="${BENCH_PYTHON:?SKIP_BUILD=1 needs BENCH_PYTHON}"
else
    cargo build --release --locked -p bucketload-cli
    bin="${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload"
    python="$(benchmarks/peers/setup.sh | tail -n 1)"
    "$python" -m pip install --quiet --disable-pip-version-check --no-deps .
fi
peers="$(benchmarks/peers/setup-streaming.sh | tail -n 1)"
# The shard size in bytes, as the peers' writers take it (`bucketload shard` parses it itself).
shard_bytes="$("$python" -c 'import sys, bucketload._util as u; print(u.parse_size(sys.argv[1]))' \
    "$shard_size")"

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
serve() {  # serve LATENCY: (re)start the server over the same root, with that first-byte latency
    if [ "${#pids[@]}" -gt 0 ]; then
        kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=()
    fi
    local flags=()
    case "$1" in 0|0ms|0s) ;; *) flags=(--latency "$1") ;; esac
    "$bin" serve --root "$work/root" --addr "127.0.0.1:$port" "${flags[@]}" >"$work/serve.log" 2>&1 &
    pids+=($!)
    wait_port "$port"
}

serve 0ms
echo "machine: $(machine)"
"$bin" gen s3://bench/files --samples "$samples" --classes 10 --size "$size" >/dev/null
# Format 1 (JSON): benchmarks/peers/bucketload_cache.py reads the shards' sample counts from it.
"$bin" shard s3://bench/files s3://bench/shards --shard-size "$shard_size" \
    --manifest-format 1 | head -n 1
if [ -n "$peer_tools" ]; then
    (cd benchmarks/peers && "$peers" streaming_write.py --source s3://bench/files \
        --mosaic-uri s3://bench/mds --litdata-uri s3://bench/litdata --shard-size "$shard_bytes" \
        --tools "$peer_tools" --work "$work/write" >"$work/write.log" 2>&1) \
        || { cat "$work/write.log" >&2; exit 1; }
    grep '^{' "$work/write.log"  # one line per peer (litdata.optimize prints its progress on stdout)
fi
echo "dataset: $samples x $size in s3://bench/files; shards of $shard_size in s3://bench/shards" \
    "(bucketload), s3://bench/mds (MosaicML Streaming) and s3://bench/litdata (LitData)"

rm -rf "$out"
mkdir -p "$out"
results="$out/results.jsonl"
# measure PYTHON SCRIPT ARGS...: one reader with a cache directory of its own (MosaicML
# Streaming keys its shared memory by the directory: a reused one can meet a dead run's state),
# deleted after; its JSON lines kept. A bucketload failure stops the benchmark; a peer's is
# shown, counted in the table ("failed" lines) and the benchmark goes on.
measured=0
measure() {
    local python="$1" script="$2" cache="${cache_root:-$work}/cache-$((++measured))"
    shift 2
    echo "-- $script $* (load $(load))" >&2
    if ! (cd benchmarks/peers && "$python" "$script" --label "$latency" --run "$run" "$@" \
        --cache-dir "$cache" 2>"$work/measure.log") | tee -a "$results"; then
        tail -n 5 "$work/measure.log" >&2
        [ "$script" = bucketload_cache.py ] && exit 1
        "$python" - "$latency" "$run" "$@" >>"$results" <<'PY'
import json, sys
latency, run, *args = sys.argv[1:]
opt = dict(zip(args[::2], args[1::2]))
print(json.dumps({"failed": True, "tool": opt["--tool"], "mode": opt["--mode"],
                  "workers": int(opt["--workers"]), "latency": latency, "run": int(run)}))
PY
    fi
    rm -rf "$cache"
}
for latency in ${latencies//,/ }; do
    serve "$latency"
    for run in $(seq "$runs"); do
        echo "== latency $latency, run $run"
        for mode in ${modes//,/ }; do
            workers="$raw_workers"
            [ "$mode" = decoded ] && workers="$decoded_workers"
            if wants bucketload; then
                for cache in none cached; do
                    measure "$python" bucketload_cache.py --mode "$mode" --cache "$cache" \
                        --uri s3://bench/shards
                done
            fi
            for tool in bucketload-ttl bucketload-indexed bucketload-indexed-ttl; do
                wants "$tool" || continue
                measure "$python" bucketload_cache.py --tool "$tool" --mode "$mode" \
                    --uri s3://bench/shards
            done
            for w in ${workers//,/ }; do
                if wants mosaic; then
                    measure "$peers" streaming_cache.py --tool mosaic --mode "$mode" \
                        --workers "$w" --uri s3://bench/mds
                fi
                if wants litdata; then
                    measure "$peers" streaming_cache.py --tool litdata --mode "$mode" \
                        --workers "$w" --uri s3://bench/litdata
                fi
            done
        done
    done
done
echo "load at the end: $(load)"
echo
python3 benchmarks/peers/cache_table.py "$results"
