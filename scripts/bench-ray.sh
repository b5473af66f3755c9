#!/usr/bin/env bash
# Ray Data rows/s: Ray's own readers (read_binary_files; read_images + the workshop's
# torchvision transform) against bucketload.ray (read_dataset; read_images, and read_dataset +
# map_batches(decode_batch)), raw and decoded, over the same SAMPLES `gen` JPEGs of SIZE, one object each, from `bucketload serve
# --latency LATENCY`, in the same run (benchmarks/peers/ray_read.py, one process and one local
# Ray per reader and mode, EPOCHS epochs each: the first starts Ray's workers).
#   SKIP_BUILD=1 BENCH_PYTHON=/path/to/python scripts/bench-ray.sh
# BENCH_PYTHON needs ray[data], pyarrow, torch, torchvision and bucketload (a release build for
# numbers; default .venv/bin/python). Knobs: SAMPLES (2000), SIZE (100KB), LATENCY (20ms),
# EPOCHS (2), PORT (9617), MODES ("raw decoded decoded-u8": decoded-u8 leaves the crops uint8
# on both sides, normalised later on the accelerator).
set -euo pipefail
cd "$(dirname "$0")/.."
samples="${SAMPLES:-2000}"
size="${SIZE:-100KB}"
latency="${LATENCY:-20ms}"
epochs="${EPOCHS:-2}"
port="${PORT:-9617}"
python="${BENCH_PYTHON:-$PWD/.venv/bin/python}"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release --locked -p bucketload-cli
fi
bin="${BUCKETLOAD_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload}"

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
"$bin" serve --root "$work/root" --addr "127.0.0.1:$port" --latency "$latency" >"$work/serve.log" 2>&1 &
pids+=($!)
wait_port "$port" 60
"$bin" gen s3://raybench/train --samples "$samples" --classes 10 --size "$size" --seed 7 >/dev/null

echo "machine: $(machine)"
echo "dataset: $samples × $size, one object each; server at $latency to first byte; $epochs epochs per run"
printf '| mode | epoch | Ray rows/s | bucketload rows/s | ratio | read_dataset + decode_batch rows/s | ratio |\n'
printf '|---|---|---|---|---|---|---|\n'
for mode in ${MODES:-raw decoded decoded-u8}; do
    readers="ray bucketload"
    [ "$mode" = raw ] || readers="$readers bucketload-map"
    for reader in $readers; do
        "$python" benchmarks/peers/ray_read.py --reader "$reader" --mode "$mode" --bucket raybench \
            --prefix train --epochs "$epochs" 2>/dev/null | grep '^{' >"$work/$reader.json"
    done
    [ "$mode" != raw ] || : >"$work/bucketload-map.json"
    python3 - "$work/ray.json" "$work/bucketload.json" "$work/bucketload-map.json" "$mode" <<'EOF'
import json, sys
theirs, ours, mapped = ([json.loads(line) for line in open(path)] for path in sys.argv[1:4])
for i, (t, o) in enumerate(zip(theirs, ours, strict=True)):
    assert t["rows"] == o["rows"], (t, o)
    row = f"| {sys.argv[4]} | {t['epoch']} | {t['rows_per_s']:.0f} | {o['rows_per_s']:.0f} | " \
          f"{o['rows_per_s'] / t['rows_per_s']:.1f}× |"
    if mapped:
        m = mapped[i]
        assert m["rows"] == t["rows"], (t, m)
        row += f" {m['rows_per_s']:.0f} | {m['rows_per_s'] / t['rows_per_s']:.1f}× |"
    else:
        row += " — | — |"
    print(row)
EOF
done
echo "load at the end: $(load)"
