#!/usr/bin/env bash
# Small files against Little's law, with the CPU each side spends: SAMPLES JPEGs of SIZE, one
# object per sample (`bucketload gen`), read once per concurrency by `bucketload read --format
# files` from `bucketload serve --latency LATENCY`, and by the Amazon S3 Connector for PyTorch
# (benchmarks/peers/s3torch_files.py: S3MapDataset in a DataLoader, for each of FILE_WORKERS)
# against the same server in the same run. For each row: samples/s, the bound (requests in
# flight ÷ latency) and the share of it, and the CPU of the reader (its process and workers)
# and of the server per sample, from their rusage and /proc. bucketload's rate is its epoch's
# (from the first request to the last sample, as its `--json` gives it); the connector's is
# from before its listing to its last batch (as benchmarks/peers/s3torch_files.py gives it).
#   SKIP_BUILD=1 BUCKETLOAD_BIN=target/release/bucketload BENCH_PYTHON=.venv-bench/bin/python \
#       scripts/bench-little.sh
# Knobs: SAMPLES (6000), SIZE (100KB), LATENCY (50ms), CONCURRENCY (16,32,64,128,256),
# FILE_WORKERS (2,8,16; empty: no peer), RUNS (1), PORT (9361), READER_THREADS (empty: the
# reader's default, one runtime thread per core; a list such as "2,1" reads once with each,
# through TOKIO_WORKER_THREADS in the reader's environment only, never the server's).
set -euo pipefail
cd "$(dirname "$0")/.."
samples="${SAMPLES:-6000}"
size="${SIZE:-100KB}"
latency="${LATENCY:-50ms}"
concurrency="${CONCURRENCY:-16,32,64,128,256}"
file_workers="${FILE_WORKERS-2,8,16}"
runs="${RUNS:-1}"
port="${PORT:-9361}"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release --locked -p bucketload-cli
fi
bin="${BUCKETLOAD_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload}"
python="${BENCH_PYTHON:-}"
if [ -n "$file_workers" ] && [ -z "$python" ]; then
    python="$(benchmarks/peers/setup.sh | tail -n 1)"
fi

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
"$bin" serve --root "$work/root" --addr "127.0.0.1:$port" --latency "$latency" >"$work/serve.log" 2>&1 &
server=$!
pids+=("$server")
wait_port "$port" 60
"$bin" gen s3://little/train --samples "$samples" --classes 10 --size "$size" --concurrency 256 >/dev/null

ms="${latency%ms}"
ticks="$(getconf CLK_TCK)"
server_cpu() { awk -v t="$ticks" '{print ($14 + $15) / t}' "/proc/$server/stat"; }

echo "machine: $(machine)"
echo "dataset: $samples × $size, one object each; server at $latency to first byte"
printf '| reader | in flight | samples/s | bound | share | client CPU µs/sample | server CPU µs/sample | cores busy |\n'
printf '|---|---|---|---|---|---|---|---|\n'

row() {  # row READER INFLIGHT SAMPLES WALL CLIENT_CPU SERVER_CPU
    awk -v r="$1" -v c="$2" -v n="$3" -v w="$4" -v cc="$5" -v sc="$6" -v ms="$ms" 'BEGIN {
        rate = n / w; bound = c * 1000 / ms;
        printf "| %s | %d | %.0f | %.0f | %.0f%% | %.0f | %.0f | %.2f |\n",
            r, c, rate, bound, 100 * rate / bound, 1e6 * cc / n, 1e6 * sc / n, (cc + sc) / w }'
}

for run in $(seq "$runs"); do
    for threads in $(echo "${READER_THREADS:-default}" | tr , " "); do
        label="bucketload read"
        reader_env=()
        if [ "$threads" != default ]; then
            label="bucketload read, $threads runtime thread(s)"
            reader_env=("TOKIO_WORKER_THREADS=$threads")
        fi
        for c in ${concurrency//,/ }; do
            before="$(server_cpu)"
            env "${reader_env[@]}" /usr/bin/time -f "%e %U %S" -o "$work/time" "$bin" read \
                s3://little/train --format files --concurrency "$c" --json >"$work/read.json"
            after="$(server_cpu)"
            read -r _ user sys <"$work/time"
            # The epoch's own wall time (from its first request to its last sample; opening
            # the dataset, one listing, is before it); CPU is the whole process's.
            read -r n wall inflight < <(python3 -c 'import json,sys
e = json.load(open(sys.argv[1]))["epochs"][0]
print(e["samples"], e["seconds"], round(e["mean_in_flight"]))' "$work/read.json")
            row "$label (mean in flight $inflight)" "$c" "$n" "$wall" "$(echo "$user + $sys" | bc -l)" "$(echo "$after - $before" | bc -l)"
        done
    done
    for w in ${file_workers//,/ }; do
        before="$(server_cpu)"
        "$python" benchmarks/peers/s3torch_files.py --endpoint "$AWS_ENDPOINT_URL" \
            --label "latency $latency" --workers "$w" --uri s3://little/train/ >"$work/peer.json" 2>/dev/null
        after="$(server_cpu)"
        read -r n wall cpu < <("$python" -c 'import json,sys
line = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(line["samples"], line["seconds"], line["cpu_seconds"])' "$work/peer.json")
        row "s3torchconnector S3MapDataset, $w workers" "$w" "$n" "$wall" "$cpu" "$(echo "$after - $before" | bc -l)"
    done
done
