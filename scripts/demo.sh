#!/usr/bin/env bash
# README command 1: build bucketload and run the main job against the embedded default:
# an embedded S3 server on loopback with 50 ms first-byte latency, a synthetic dataset
# of 100 KB JPEGs generated into it, and the statistics of that dataset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked -p bucketload-cli
bin="$PWD/target/release/bucketload"

root="$(mktemp -d)"
port="${BUCKETLOAD_DEMO_PORT:-9000}"
"$bin" serve --root "$root" --addr "127.0.0.1:$port" --latency 50ms &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; rm -rf "$root"' EXIT

export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
# wait until the server accepts connections (at most 10 s)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

"$bin" gen s3://demo/train --samples 2000 --classes 10 --size 100KB --seed 7
"$bin" stats s3://demo/train
