#!/usr/bin/env bash
# The Python API against the Amazon S3 Connector for PyTorch, same server, same run: a torch
# training loop that only consumes batches of 224x224 decoded, augmented images from one
# object per sample, at LATENCY to first byte.
#   bucketload: examples/benchmark.py (bucketload.Loader, native decode);
#   peer: benchmarks/peers/train_peer.py --loader s3map (S3MapDataset + PIL +
#         torchvision.transforms.v2 in a DataLoader) with 2, 8 and 16 workers.
# Both run in .venv-bench (benchmarks/peers/setup.sh), where this script installs the package
# (release build). Logs go to OUT/logs, the chart to OUT/report.
set -euo pipefail
cd "$(dirname "$0")/.."
samples="${SAMPLES:-5000}"
size="${SIZE:-100KB}"
latency="${LATENCY:-50ms}"
epochs="${EPOCHS:-2}"
port="${PORT:-9343}"
out="$(realpath -m "${OUT:-bench-python-out}")"

cargo build --release --locked -p bucketload-cli
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload"
python="$(benchmarks/peers/setup.sh | tail -n 1)"
"$python" -m pip install --quiet --disable-pip-version-check --no-deps .

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
"$bin" serve --root "$work/root" --addr "127.0.0.1:$port" >"$work/serve.log" 2>&1 & pids+=($!)
wait_port "$port"
"$bin" gen s3://train/files --samples "$samples" --classes 10 --size "$size" --seed 7 >/dev/null
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=()
"$bin" serve --root "$work/root" --addr "127.0.0.1:$port" --latency "$latency" >"$work/serve.log" 2>&1 & pids+=($!)
wait_port "$port"
rm -rf "$out/logs"
mkdir -p "$out/logs"

echo "machine: $(machine)"
echo "dataset: $samples samples of $size, one object each; server latency $latency; $epochs epochs, decoded to 224x224"
echo "-- bucketload.Loader (load $(load))"
"$python" examples/benchmark.py --uri s3://train/files --format files --epochs "$epochs" \
    --log-dir "$out/logs" --name python-bucketload | grep -v '^log:'
for workers in 2 8 16; do
    echo "-- peer: S3MapDataset + PIL + torchvision, $workers workers (load $(load))"
    "$python" benchmarks/peers/train_peer.py --loader s3map --uri s3://train/files/ \
        --epochs "$epochs" --workers "$workers" --log-dir "$out/logs" \
        --name "s3map-w$workers" | grep -v '^log:'
done
"$bin" report "$out/logs" --out "$out/report" | tail -n 20
