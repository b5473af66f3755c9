#!/usr/bin/env bash
# Measures the embedded S3 server (`bucketload serve`) next to moto's server, in one run:
#   - GETs/s and server CPU per request for 100 KB objects, 64 requests in flight,
#     with first-byte latency emulation off and on (50 ms);
#   - MB/s of one streaming GET of a 1 GiB object.
# Each server runs as its own process; CPU per request is read from /proc/PID/stat.
# Results go to stdout; docs/BENCHMARKS.md records them with this command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python
cargo build --release --locked -p bucketload-cli -p bucketload-server --examples --bins
bin=target/release/bucketload
loadgen=target/release/examples/loadgen
runs="${RUNS:-3}"

. scripts/bench-lib.sh

"$bin" serve --root "$work/plain" --addr 127.0.0.1:9301 >/dev/null 2>&1 & pids+=($!); plain=$!
"$bin" serve --root "$work/wan" --addr 127.0.0.1:9302 --latency 50ms >/dev/null 2>&1 & pids+=($!); wan=$!
.venv/bin/moto_server -H 127.0.0.1 -p 9303 >/dev/null 2>&1 & pids+=($!); moto=$!
for p in 9301 9302 9303; do wait_port $p; done
for p in 9301 9302; do
    AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_DEFAULT_REGION=us-east-1 \
        .venv/bin/aws --endpoint-url "http://127.0.0.1:$p" s3 mb s3://bench >/dev/null
done

echo "machine: $(machine)"
for run in $(seq "$runs"); do
    echo "== run $run"
    echo "-- embedded, 100 KB GETs, 64 in flight, no latency"
    "$loadgen" --endpoint http://127.0.0.1:9301 --bucket bench --objects 1000 --size 100KB \
        --concurrency 64 --requests 30000 --server-pid "$plain"
    echo "-- embedded, 100 KB GETs, 64 in flight, latency 50ms"
    "$loadgen" --endpoint http://127.0.0.1:9302 --bucket bench --objects 1000 --size 100KB \
        --concurrency 64 --requests 10000 --server-pid "$wan"
    echo "-- embedded, 100 KB GETs, 256 in flight, latency 50ms"
    "$loadgen" --endpoint http://127.0.0.1:9302 --bucket bench --objects 1000 --size 100KB \
        --concurrency 256 --requests 20000 --server-pid "$wan"
    echo "-- moto, 100 KB GETs, 64 in flight"
    create=""; [ "$run" = 1 ] && create=--create-bucket
    "$loadgen" --endpoint http://127.0.0.1:9303 --bucket bench $create --objects 200 --size 100KB \
        --concurrency 64 --requests 1000 --server-pid "$moto"
    echo "-- embedded, one stream of 1 GiB, no latency"
    "$loadgen" --endpoint http://127.0.0.1:9301 --bucket bench --single-stream 1GiB --server-pid "$plain"
    echo "-- embedded, one stream of 1 GiB, latency 50ms"
    "$loadgen" --endpoint http://127.0.0.1:9302 --bucket bench --single-stream 1GiB --server-pid "$wan"
    echo "-- moto, one stream of 1 GiB"
    "$loadgen" --endpoint http://127.0.0.1:9303 --bucket bench --single-stream 1GiB --server-pid "$moto"
done
