#!/usr/bin/env bash
# Measures `bucketload shard` on 10,000 x 100 KB objects served by the embedded server with
# 50 ms first-byte latency (release build), next to the usual boto3 + tarfile glue
# (benchmarks/peers/shard_boto3.py) against the same server in the same run.
# Results go to stdout; docs/BENCHMARKS.md records them with this command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python
cargo build --release --locked -p bucketload-cli
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload"
runs="${RUNS:-3}"
samples="${SAMPLES:-10000}"
latency="${LATENCY:-50ms}"

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_DEFAULT_REGION=us-east-1
export AWS_REGION=us-east-1 AWS_ENDPOINT_URL=http://127.0.0.1:9311
# Generate without latency, then serve the same root with it.
"$bin" serve --root "$work/root" --addr 127.0.0.1:9311 >/dev/null 2>&1 & pids+=($!)
wait_port 9311
"$bin" gen s3://bench/train --samples "$samples" --classes 10 --size 100KB --concurrency 256
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=()
"$bin" serve --root "$work/root" --addr 127.0.0.1:9311 --latency "$latency" >/dev/null 2>&1 & pids+=($!)
wait_port 9311

echo "machine: $(machine)"
echo "dataset: $samples x 100 KB, server latency $latency"
# Each run starts with the page cache written back and the previous run's output deleted
# (from the server's directory), so no run pays for another's dirty pages.
fresh() { rm -rf "$work/root/bench/shards" "$work/root/bench/peer"; sync; }
for run in $(seq "$runs"); do
    echo "== run $run"
    fresh
    echo "-- bucketload shard (256 GETs in flight, 256 MiB shards)"
    /usr/bin/time -f "cpu: %U s user, %S s system, max RSS %M KiB" \
        "$bin" shard s3://bench/train s3://bench/shards
    fresh
    echo "-- bucketload shard --md5"
    "$bin" shard s3://bench/train s3://bench/shards --md5
    fresh
    echo "-- peer: boto3 + tarfile, 64 threads"
    .venv/bin/python benchmarks/peers/shard_boto3.py --endpoint "$AWS_ENDPOINT_URL" \
        --src s3://bench/train --dst s3://bench/peer --threads 64
done
