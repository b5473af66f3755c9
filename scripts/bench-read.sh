#!/usr/bin/env bash
# Measures the loader (`bucketload read`) next to its peer, the Amazon S3 Connector for PyTorch
# (benchmarks/peers/), against the same embedded servers in the same run:
#   - files:   SAMPLES JPEGs of SIZE (`bucketload gen`), one object per sample, read by
#              s3torch_files.py (S3MapDataset in a DataLoader, for each of FILE_WORKERS) and by
#              `bucketload read --format files`, at LATENCY first-byte latency;
#   - shards:  the same samples cut by `bucketload shard --shard-size SHARD_SIZE`, streamed by
#              s3torch_shards.py (S3IterableDataset + WebDataset, for each of SHARD_WORKERS) and
#              by `bucketload read --format shards`, at LATENCY and at 0 ms;
#   - indexed: the shards read through their indexes (`--format indexed`), at LATENCY;
#   - cache:   two epochs of the files through `--cache`, at LATENCY.
# The `bucketload read` rows run only when the binary has the subcommand. PEERS=0 skips the
# peers (their environment, .venv-bench, is made by benchmarks/peers/setup.sh when missing:
# about 4 GB). Results go to stdout; docs/BENCHMARKS.md records them with this command.
set -euo pipefail
cd "$(dirname "$0")/.."
samples="${SAMPLES:-10000}"
size="${SIZE:-100KB}"
shard_size="${SHARD_SIZE:-100MB}"
latency="${LATENCY:-50ms}"
runs="${RUNS:-1}"
file_workers="${FILE_WORKERS:-2,8,16}"
shard_workers="${SHARD_WORKERS:-0,2,4}"
peers="${PEERS:-1}"
port0="${PORT:-9331}"
port1=$((port0 + 1))

cargo build --release --locked -p bucketload-cli
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload"
python=""
[ "$peers" = 1 ] && python="$(benchmarks/peers/setup.sh | tail -n 1)"

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
fast="http://127.0.0.1:$port0"   # no latency
slow="http://127.0.0.1:$port1"   # LATENCY
# One root, two servers: the dataset is written through the fast one before the slow one starts.
"$bin" serve --root "$work/root" --addr "127.0.0.1:$port0" >"$work/serve0.log" 2>&1 & pids+=($!)
wait_port "$port0"
AWS_ENDPOINT_URL="$fast" "$bin" gen s3://bench/train --samples "$samples" --classes 10 --size "$size" \
    --concurrency 256 >/dev/null
# Shards in their own bucket (as scripts/bench-verify.sh): a listing of one never holds the other.
AWS_ENDPOINT_URL="$fast" "$bin" shard s3://bench/train s3://bench-shards/train --shard-size "$shard_size" >/dev/null
"$bin" serve --root "$work/root" --addr "127.0.0.1:$port1" --latency "$latency" >"$work/serve1.log" 2>&1 & pids+=($!)
wait_port "$port1"

echo "machine: $(machine)"
echo "dataset: $samples samples of $size in s3://bench/train; shards of $shard_size in s3://bench-shards/train"
echo "servers: bucketload serve at $slow (--latency $latency) and $fast (no latency)"

peer() {  # peer SCRIPT ENDPOINT LABEL WORKERS URI
    echo "-- peer $1 at $3 (load $(load))"
    "$python" "benchmarks/peers/$1" --endpoint "$2" --label "$3" --workers "$4" --uri "$5"
}

read_once() {  # read_once LABEL ENDPOINT ARGS...
    local label="$1" endpoint="$2"
    shift 2
    echo "-- bucketload read $* at $label (load $(load))"
    AWS_ENDPOINT_URL="$endpoint" /usr/bin/time -f "cpu: %U s user, %S s system, max RSS %M KiB, wall %e s" \
        "$bin" read "$@" || echo "bucketload read $* failed (exit $?)"
}

for run in $(seq "$runs"); do
    echo "== run $run"
    if [ "$peers" = 1 ]; then
        peer s3torch_files.py "$slow" "latency $latency" "$file_workers" s3://bench/train/
        peer s3torch_shards.py "$slow" "latency $latency" "$shard_workers" s3://bench-shards/train/
        peer s3torch_shards.py "$fast" "latency 0ms" "$shard_workers" s3://bench-shards/train/
    fi
    if ! "$bin" read --help >/dev/null 2>&1; then
        echo "bucketload read not built yet"
        continue
    fi
    read_once "latency $latency" "$slow" s3://bench/train --format files --json
    read_once "latency $latency" "$slow" s3://bench-shards/train --format shards --json
    read_once "latency 0ms" "$fast" s3://bench-shards/train --format shards --json
    read_once "latency $latency" "$slow" s3://bench-shards/train --format indexed --json
    read_once "latency $latency" "$slow" s3://bench/train --format files --epochs 2 \
        --cache "$work/cache-$run" --cache-size 20GiB --json
done
echo "load at the end: $(load)"
