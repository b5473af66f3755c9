#!/usr/bin/env bash
# Checkpoints of SIZE (default 1GiB) against `bucketload serve` on loopback, bucketload next to
# its peer in the same run, ROUNDS times alternating (default 2):
#   bucketload ckpt-bench: save and load (sync), background save (stall, copy, durable),
#                          to the server and to a local directory (skipped with RUST=0);
#   benchmarks/peers/s3torch_ckpt.py --tool bucketload: bucketload.checkpoint.save/load of a
#                          state dict of TENSORS (default 32) float32 tensors, from Python;
#   benchmarks/peers/s3torch_ckpt.py: torch.save of the same state into the Amazon S3
#                          Connector for PyTorch's S3Checkpoint writer and torch.load from its
#                          reader, and the same through a local file.
# Both Python rows run in .venv-bench (benchmarks/peers/setup.sh), where this script installs
# the package (release build), and report wall time and CPU time per save and load.
# The server emulates LATENCY to first byte and a BANDWIDTH cap per connection when given
# (e.g. LATENCY=20ms BANDWIDTH=100MB, S3-like per-connection throughput).
# The server keeps its objects under SERVER_ROOT (default: a temporary directory on /tmp).
# Logs go to OUT/logs (default bench-ckpt-out) and the charts to OUT/report.
set -euo pipefail
cd "$(dirname "$0")/.."
size="${SIZE:-1GiB}"
runs="${RUNS:-3}"
rounds="${ROUNDS:-2}"
tensors="${TENSORS:-32}"
serve_args=()
[ -n "${LATENCY:-}" ] && serve_args+=(--latency "$LATENCY")
[ -n "${BANDWIDTH:-}" ] && serve_args+=(--bandwidth "$BANDWIDTH")
port="${PORT:-9351}"
out="$(realpath -m "${OUT:-bench-ckpt-out}")"

cargo build --release --locked -p bucketload-cli
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload"
python="$(benchmarks/peers/setup.sh | tail -n 1)"
"$python" -m pip install --quiet --disable-pip-version-check --no-deps .
. scripts/bench-lib.sh
root="${SERVER_ROOT:-$work/root}"
mkdir -p "$root"

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
"$bin" serve --root "$root" --addr "127.0.0.1:$port" ${serve_args[@]+"${serve_args[@]}"} \
    >"$work/serve.log" 2>&1 & pids+=($!)
wait_port "$port"
rm -rf "$out/logs"
mkdir -p "$out/logs"
echo "machine: $(machine)"
echo "server: bucketload serve at $AWS_ENDPOINT_URL ${serve_args[*]:-}, root $root ($(df -T "$root" | awk 'NR==2{print $2}')); checkpoints of $size, $runs runs x $rounds rounds"
# An empty checkpoint, to create the bucket (`ckpt save` does on a loopback endpoint).
"$bin" ckpt save /dev/null s3://ckpt/created >/dev/null
for round in $(seq "$rounds"); do
    if [ "${RUST:-1}" != 0 ]; then
        echo "== round $round: bucketload ckpt-bench (load $(load))"
        "$bin" ckpt-bench --size "$size" --to s3://ckpt/bucketload --vs "$work/disk" --runs "$runs" \
            --log-dir "$out/logs" --name "bucketload-r$round"
    fi
    echo "== round $round: bucketload.checkpoint from Python, $tensors tensors (load $(load))"
    "$python" benchmarks/peers/s3torch_ckpt.py --tool bucketload --uri s3://ckpt/python/ \
        --size "$size" --tensors "$tensors" --runs "$runs" --log-dir "$out/logs" \
        --name "bucketload-python-r$round"
    echo "== round $round: s3torchconnector S3Checkpoint, $tensors tensors (load $(load))"
    "$python" benchmarks/peers/s3torch_ckpt.py --uri s3://ckpt/peer/ --size "$size" --runs "$runs" \
        --tensors "$tensors" --vs "$work/disk-peer" --log-dir "$out/logs" --name "s3torch-r$round"
done
"$bin" report "$out/logs" --out "$out/report"
