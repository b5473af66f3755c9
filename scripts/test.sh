#!/usr/bin/env bash
# README command 2: install what is needed, then run every check CI runs:
# formatting, clippy with warnings as errors, ruff and mypy --strict on python/, the Rust
# tests (against mem://, file://, the embedded S3 server, moto's server and SeaweedFS), the
# Python tests (boto3 and the AWS CLI against `bucketload serve`, and the Python package with
# PyTorch), the fault matrix (tests/faults), then each cargo-fuzz target for a bounded time
# (BUCKETLOAD_FUZZ_SECONDS per target, default 20; 0 skips fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python

export BUCKETLOAD_VENV="$PWD/.venv"
# bucketload-image's comparison against torchvision (tests/image_torchvision.rs): .venv has
# torch and torchvision (requirements-torch.txt).
export BUCKETLOAD_TORCH_PYTHON="$PWD/.venv/bin/python"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

echo "== lock files"
# Both workspaces' committed Cargo.lock must be current (fuzz/ is its own workspace and would
# otherwise only fail at the end, in scripts/fuzz.sh).
cargo metadata --locked --format-version 1 >/dev/null
(cd fuzz && cargo metadata --locked --format-version 1 >/dev/null)
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== ruff and mypy"
.venv/bin/python -m ruff check python/ && .venv/bin/python -m mypy --strict python/bucketload
echo "== cargo test"
cargo test --workspace --locked
echo "== pytest"
cargo build --locked -p bucketload-cli
# The Python package, built by maturin from pyproject.toml like `pip install .`, with the
# dev profile so it reuses the build above.
MATURIN_PEP517_ARGS="--profile dev --locked" .venv/bin/python -m pip install --quiet \
    --disable-pip-version-check --force-reinstall --no-deps .
BUCKETLOAD_BIN="$PWD/target/debug/bucketload" .venv/bin/python -m pytest -q tests/python
echo "== fault matrix"
# Every data path against `bucketload serve` injecting errors, resets and truncations at 0.15
# each, three seeds; fails on any false success, false failure, damage, crash or honest failure
# (docs/SEMANTICS.md).
BUCKETLOAD_BIN="$PWD/target/debug/bucketload" .venv/bin/python tests/faults/fault_matrix.py \
    --seeds 1 2 3 --rate 0.15
echo "== cargo fuzz"
scripts/fuzz.sh "${BUCKETLOAD_FUZZ_SECONDS:-20}"
