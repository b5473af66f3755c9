#!/usr/bin/env bash
# The training benchmark of the workshop story, bucketload next to its peers, against the same
# embedded server (LATENCY to first byte) in the same run, drawn by `bucketload report`:
#   bucketload bench: files (no cache), files (cache), shards, indexed — each raw (--no-decode)
#                     and decoded into 224x224 batches;
#   peers (benchmarks/peers/train_peer.py, PyTorch DataLoader with WORKERS workers):
#     the Amazon S3 Connector for PyTorch (S3MapDataset over the files, S3IterableDataset +
#     WebDataset over the shards), boto3 get_object (files) and WebDataset alone over curl
#     (shards), each raw and decoded with PIL + torchvision.transforms.v2.
# Every run trains EPOCHS epochs with COMPUTE_MS of emulated compute per batch of 64.
# Logs go to OUT/logs, the charts to OUT/report (OUT defaults to bench-train-out).
# PEERS=0 skips the peers (their environment, .venv-bench, is made by
# benchmarks/peers/setup.sh when missing: about 4 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
samples="${SAMPLES:-10000}"
size="${SIZE:-100KB}"
shard_size="${SHARD_SIZE:-100MB}"
latency="${LATENCY:-50ms}"
epochs="${EPOCHS:-3}"
compute="${COMPUTE_MS:-0}"
workers="${WORKERS:-8}"
peers="${PEERS:-1}"
port="${PORT:-9341}"
out="$(realpath -m "${OUT:-bench-train-out}")"

cargo build --release --locked -p bucketload-cli
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload"
python=""
[ "$peers" = 1 ] && python="$(benchmarks/peers/setup.sh | tail -n 1)"

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
"$bin" serve --root "$work/root" --addr "127.0.0.1:$port" --latency "$latency" >"$work/serve.log" 2>&1 & pids+=($!)
wait_port "$port"
"$bin" gen s3://train/files --samples "$samples" --classes 10 --size "$size" --seed 7 >/dev/null
"$bin" shard s3://train/files s3://train-shards/wds --shard-size "$shard_size" >/dev/null
rm -rf "$out/logs" "$out/cache"
mkdir -p "$out/logs"

echo "machine: $(machine)"
echo "dataset: $samples samples of $size; shards of $shard_size; server latency $latency; $epochs epochs, compute $compute ms per batch"

bench() {  # bench NAME ARGS...
    local name="$1"
    shift
    echo "-- bucketload bench $name (load $(load))"
    "$bin" bench --epochs "$epochs" --compute-ms "$compute" --log-dir "$out/logs" --name "$name" "$@" \
        | grep -v '^log:'
}
peer() {  # peer NAME ARGS...
    local name="$1"
    shift
    echo "-- peer $name (load $(load))"
    "$python" benchmarks/peers/train_peer.py --epochs "$epochs" --compute-ms "$compute" \
        --workers "$workers" --log-dir "$out/logs" --name "$name" "$@" | grep -v '^log:'
}

bench files-raw --dataset s3://train/files --format files --no-decode
bench files-cached-raw --dataset s3://train/files --format files --no-decode --cache "$out/cache"
bench shards-raw --dataset s3://train-shards/wds --format shards --no-decode
bench indexed-raw --dataset s3://train-shards/wds --format indexed --no-decode
bench files --dataset s3://train/files --format files
bench shards --dataset s3://train-shards/wds --format shards
if [ "$peers" = 1 ]; then
    peer s3map-raw --loader s3map --uri s3://train/files/ --no-decode
    peer s3iter-raw --loader s3iter --uri s3://train-shards/wds/ --no-decode
    peer wds-raw --loader wds --uri s3://train-shards/wds/ --no-decode
    peer s3map --loader s3map --uri s3://train/files/
    peer boto3 --loader boto3 --uri s3://train/files/
    peer s3iter --loader s3iter --uri s3://train-shards/wds/
    peer wds --loader wds --uri s3://train-shards/wds/
fi
"$bin" report "$out/logs" --out "$out/report"
