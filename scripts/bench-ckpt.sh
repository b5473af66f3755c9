#!/usr/bin/env bash
# Checkpoints of SIZE (default 1GiB) against `bucketload serve` on loopback, bucketload next to
# its peer in the same run, ROUNDS times alternating (default 2):
#   bucketload ckpt-bench: save and load (sync), background save (stall, copy, durable),
#                          to the server and to a local directory;
#   benchmarks/peers/s3torch_ckpt.py: torch.save into the Amazon S3 Connector for PyTorch's
#                          S3Checkpoint writer and torch.load from its reader, and the same
#                          through a local file.
# The server keeps its objects under SERVER_ROOT (default: a temporary directory on /tmp).
# Logs go to OUT/logs (default bench-ckpt-out) and the charts to OUT/report.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${SIZE:-1GiB}"
runs="${RUNS:-3}"
rounds="${ROUNDS:-2}"
port="${PORT:-9351}"
out="$(realpath -m "${OUT:-bench-ckpt-out}")"

cargo build --release --locked -p bucketload-cli
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload"
python="$(benchmarks/peers/setup.sh | tail -n 1)"
. scripts/bench-lib.sh
root="${SERVER_ROOT:-$work/root}"
mkdir -p "$root"

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
"$bin" serve --root "$root" --addr "127.0.0.1:$port" >"$work/serve.log" 2>&1 & pids+=($!)
wait_port "$port"
rm -rf "$out/logs"
mkdir -p "$out/logs"
echo "machine: $(machine)"
echo "server: bucketload serve at $AWS_ENDPOINT_URL, root $root ($(df -T "$root" | awk 'NR==2{print $2}')); checkpoints of $size, $runs runs x $rounds rounds"
for round in $(seq "$rounds"); do
    echo "== round $round: bucketload ckpt-bench (load $(load))"
    "$bin" ckpt-bench --size "$size" --to s3://ckpt/bucketload --vs "$work/disk" --runs "$runs" \
        --log-dir "$out/logs" --name "bucketload-r$round"
    echo "== round $round: s3torchconnector S3Checkpoint (load $(load))"
    "$python" benchmarks/peers/s3torch_ckpt.py --uri s3://ckpt/peer/ --size "$size" --runs "$runs" \
        --vs "$work/disk-peer" --log-dir "$out/logs" --name "s3torch-r$round"
done
"$bin" report "$out/logs" --out "$out/report"
