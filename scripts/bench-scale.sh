#!/usr/bin/env bash
# What bucketload holds as datasets grow: one rank of a large job opening and reading its share.
#
# Shards datasets of N tar shards of 1,000 samples (SHARDS, default 10^3 10^4 10^5 10^6 shards,
# so 10^6 to 10^9 samples) and files datasets of N objects with keys like
# `train/class_042/sample_0001234.jpg` (FILES, default 10^5 10^6 2x10^6), built by
# benchmarks/scale/build.py as hard links to one real shard or JPEG in the embedded server's
# root: 10^9 samples cost one shard of disk and 4 x 10^6 directory entries (data and sidecars).
# Each dataset has a manifest, written through S3.
#
# For shards, rank 0 of N/10 ranks (10^4 samples, as a rank of a large job) reads its share:
# streamed (`--format shards`) and indexed (`--format indexed`), from the CLI (`bucketload read
# --json`: open_s, first_batch_s, seconds) and from Python (benchmarks/scale/open_py.py,
# bucketload.Loader with decode=False). For files, the CLI opens the dataset and reads rank 0 of
# N/1,000 ranks (1,000 objects); the slope of peak RSS between the smallest and largest count is
# the catalog's bytes per sample. Peak RSS is /usr/bin/time's maximum resident set size.
#
# ROOT (default /var/tmp/bucketload-scale) keeps the server's root between runs, so datasets are
# built once; KEEP=0 removes it at the end. SKIP_BUILD=1 uses BUCKETLOAD_BIN and BENCH_PYTHON
# (a python with bucketload installed) instead of a release build installed into .venv.
# MosaicML Streaming and LitData open the same shard counts (their own formats, hard links too,
# from a local directory). They open as one rank of one: more ranks need a torch.distributed
# process group in both. TOOLS="bucketload peers" (the default) says which tools run, and
# SURFACES="cli python" (the default) which of bucketload's surfaces ("python-without-torch":
# the Python loader with torch hidden from bucketload, for the loader's memory without torch's).
# With the Python surface, at ORDER shard counts (default 10^6; "" for none) the order itself is
# measured (benchmarks/scale/order_py.py): rank 0's shuffle quality (distinct shards per batch
# of 64, rank correlation between dataset and order positions); a resume at another world size
# (indexed: rank 0 of N/10 saves half-way, N/20 ranks resume; streamed: N/1,000 ranks to
# N/2,000, 10^4 samples left per old rank; checked on a closed subset of ranks); and a
# mixture of the dataset with a second one of the same size (the first's directories under
# `-b`, symlinks: no extra disk), read whole and resumed half-way at the same world size.
# TIMEOUT (default 600 s) bounds each measurement; one that runs out is reported as such.
# JSON lines go to OUT/results.jsonl and the table to OUT/table.md. docs/BENCHMARKS.md records
# the table with this command.
set -euo pipefail
cd "$(dirname "$0")/.."
shards_counts="${SHARDS:-1000 10000 100000 1000000}"
files_counts="${FILES-100000 1000000 2000000}"  # FILES="" for none
root="$(realpath -m "${ROOT:-/var/tmp/bucketload-scale}")"
out="$(realpath -m "${OUT:-bench-scale-out}")"
port="${PORT:-9361}"
limit="${TIMEOUT:-600}"
if [ "${SKIP_BUILD:-0}" = 1 ]; then
    bin="${BUCKETLOAD_BIN:?SKIP_BUILD=1 needs BUCKETLOAD_BIN}"
    python="${BENCH_PYTHON:?SKIP_BUILD=1 needs BENCH_PYTHON}"
else
    cargo build --release --locked -p bucketload-cli
    bin="${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload"
    python="$PWD/.venv/bin/python"
    "$python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps .
fi
. scripts/bench-lib.sh
mkdir -p "$out" "$root"
: >"$out/results.jsonl"

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
"$bin" serve --root "$root" --addr "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
pids+=($!)
wait_port "$port"
echo "machine: $(machine)" | tee "$out/machine.txt"

# The real shard and JPEG every link copies: 1,000 samples of 4 KB noise JPEGs in 10 classes.
if [ ! -e "$root/scale/one/_bucketload/manifest.json" ]; then
    "$bin" gen s3://scale/src --samples 1000 --size 4KB --classes 10 >/dev/null
    "$bin" shard s3://scale/src s3://scale/one --samples-per-shard 1000 >/dev/null
fi
if [ ! -e "$root/scale/src/_bucketload/manifest.json" ]; then
    "$bin" manifest s3://scale/src --manifest-format 1 >/dev/null 2>&1 || "$bin" manifest s3://scale/src >/dev/null
fi
jpeg_crc="$("$python" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["files"][0]["crc32c"])' \
    "$root/scale/src/_bucketload/manifest.json")"
jpeg_key="$("$python" -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["files"][0]["key"])' \
    "$root/scale/src/_bucketload/manifest.json")"

build() {  # build KIND PREFIX COUNT SOURCE [ARGS]: the dataset, unless a previous run built it
    local kind=$1 prefix=$2 count=$3 source=$4
    shift 4
    if [ -e "$root/scale/$prefix/_bucketload/manifest.json" ]; then return; fi
    echo "building s3://scale/$prefix: $count $kind" >&2
    "$python" benchmarks/scale/build.py remove "$root" scale "$prefix"
    "$python" benchmarks/scale/build.py "$kind" "$root" scale "$prefix" "$count" --source "$source" "$@"
}

# Every measurement runs in a memory cgroup capped at MEMORY_CAP (default 8G; cgroup v1 or v2,
# when this user may make one), so a tool that would take the machine's memory is killed alone
# and reported (status 137) instead.
cap="${MEMORY_CAP:-8G}"
cgroup=""
for base in /sys/fs/cgroup/memory /sys/fs/cgroup; do
    if [ -z "$cgroup" ] && mkdir -p "$base/bucketload-bench-scale" 2>/dev/null; then
        if echo "$cap" >"$base/bucketload-bench-scale/memory.limit_in_bytes" 2>/dev/null ||
            echo "$cap" >"$base/bucketload-bench-scale/memory.max" 2>/dev/null; then
            cgroup="$base/bucketload-bench-scale"
        fi
    fi
done
measure() {  # measure LABEL COMMAND...: one JSON line with the command's JSON, wall time and peak RSS
    local label=$1
    shift
    local status=0
    timeout "$limit" /usr/bin/time -f '%e %M' -o "$work/time" bash -c \
        'if [ -n "$0" ]; then echo $$ >"$0/cgroup.procs"; fi; exec "$@"' "$cgroup" "$@" \
        >"$work/stdout" 2>"$work/stderr" || status=$?
    "$python" - "$label" "$status" "$work/time" "$work/stdout" "$limit" <<'PY' | tee -a "$out/results.jsonl"
import json, sys
label, status, time_file, stdout, limit = sys.argv[1:]
row = {"case": label, "status": int(status)}
try:
    lines = [l for l in open(time_file).read().split("\n") if l.strip()]
    wall, rss = lines[-1].split()
    row.update(wall_s=float(wall), peak_rss_mb=round(int(rss) / 1024, 1))
except Exception:
    row.update(wall_s=None, peak_rss_mb=None)
if int(status) == 124:
    row["timed_out_after_s"] = int(limit)
if int(status) in (137, -9):
    row["killed"] = "out of memory (the cgroup's cap) or killed"
text = open(stdout).read().strip()
try:
    doc = json.loads(text.splitlines()[-1] if text.startswith("{\"") else text)
    if "epochs" in doc:
        e = doc["epochs"][0]
        row.update(open_s=doc.get("open_s"), first_batch_s=e["first_batch_s"],
                   share_s=e["seconds"], samples=e["samples"])
    else:
        row.update(doc)
except Exception:
    pass
print(json.dumps(row))
PY
}

tools="${TOOLS:-bucketload peers}"
surfaces="${SURFACES:-cli python}"
for n in $shards_counts; do
    [[ " $tools " == *" bucketload "* ]] || break
    prefix="shards-$n"
    build shards "$prefix" "$n" one/shard-000000.tar
    world=$((n / 10))
    [ "$world" -ge 1 ] || world=1
    for format in shards indexed; do
        if [[ " $surfaces " == *" cli "* ]]; then
            measure "cli $format $((n * 1000)) samples, $n shards, rank 0 of $world" \
                "$bin" read "s3://scale/$prefix" --format "$format" --rank 0 --world-size "$world" --json
        fi
        if [[ " $surfaces " == *" python "* ]]; then
            measure "python $format $((n * 1000)) samples, $n shards, rank 0 of $world" \
                "$python" benchmarks/scale/open_py.py "s3://scale/$prefix" "$format" 0 "$world"
        fi
        if [[ " $surfaces " == *" python-without-torch "* ]]; then
            measure "python without torch $format $((n * 1000)) samples, $n shards, rank 0 of $world" \
                "$python" benchmarks/scale/open_py.py "s3://scale/$prefix" "$format" 0 "$world" \
                --without-torch
        fi
    done
done

# The second dataset of a mixture: PREFIX's data and sidecar directories under another name.
alias_prefix() {  # alias_prefix PREFIX ALIAS
    ln -sfn "$1" "$root/scale/$2"
    ln -sfn "$1" "$root/.bucketload/meta/scale/$2"
}
for n in ${ORDER-1000000}; do
    [[ " $tools " == *" bucketload "* && " $surfaces " == *" python "* ]] || break
    prefix="shards-$n"
    build shards "$prefix" "$n" one/shard-000000.tar
    alias_prefix "$prefix" "$prefix-b"
    world=$((n / 10))
    [ "$world" -ge 2 ] || world=2
    for format in shards indexed; do
        measure "python order $format $((n * 1000)) samples, $n shards, rank 0 of $world" \
            "$python" benchmarks/scale/order_py.py order "s3://scale/$prefix" "$format" "$world"
        # Streams resume in a world of N/1,000 ranks (shares of 10^6), 10^4 left each: the
        # check reads two old ranks' whole shares, so fewer, larger ranks than indexed; the
        # restore replays every old rank (a binary search into the shard order for each).
        from=$world
        [ "$format" = indexed ] || from=$((n / 1000))
        [ "$from" -ge 2 ] || from=2
        consumed=$((n * 1000 / from - 10000))
        [ "$format" = shards ] || consumed=5000
        measure "python resume $format $((n * 1000)) samples, $from ranks → $((from / 2)) after $consumed each" \
            "$python" benchmarks/scale/order_py.py resume "s3://scale/$prefix" "$format" "$from" \
            "$((from / 2))" "$consumed"
        measure "python mixture $format 2 × $((n * 1000)) samples, rank 0 of $world" \
            "$python" benchmarks/scale/order_py.py mix "s3://scale/$prefix" "s3://scale/$prefix-b" \
            "$format" "$world"
    done
done

for n in $files_counts; do
    [[ " $tools " == *" bucketload "* ]] || break
    prefix="files-$n"
    build files "$prefix" "$n" "src/$jpeg_key" --crc32c "$jpeg_crc"
    world=$((n / 1000))
    [ "$world" -ge 1 ] || world=1
    measure "cli files $n objects, rank 0 of $world" \
        "$bin" read "s3://scale/$prefix" --format files --rank 0 --world-size "$world" --json
done

# The peers open the same shard counts, each in its own format, from a local directory:
# benchmarks/scale/peers_open.py in .venv-peers (benchmarks/peers/setup-streaming.sh).
if [[ " $tools " == *" peers "* ]]; then
    peers="$(benchmarks/peers/setup-streaming.sh | tail -n 1)"
    peer_root="$root-peers"
    mkdir -p "$peer_root"
    [ -e "$peer_root/lit-one/index.json" ] ||
        "$peers" benchmarks/scale/peers_open.py make "$peer_root" "$root/scale/src" >/dev/null 2>&1
    for n in $shards_counts; do
        [ -e "$peer_root/lit-$n/index.json" ] ||
            "$peers" benchmarks/scale/peers_open.py build "$peer_root" "$n"
        for peer in mosaicml-streaming litdata; do
            measure "$peer $((n * 1000)) samples, $n shards, one rank of one" \
                "$peers" benchmarks/scale/peers_open.py open "$peer_root" "$peer" "$n"
        done
    done
fi

"$python" benchmarks/scale/table.py "$out/results.jsonl" | tee "$out/table.md"
if [ "${KEEP:-1}" = 0 ]; then rm -rf "$root" "$root-peers"; fi
