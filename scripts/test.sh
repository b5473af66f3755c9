#!/usr/bin/env bash
# README command 2: install what is needed, then run every check CI runs:
# formatting, clippy with warnings as errors, the Rust tests (against mem://, file://,
# the embedded S3 server and moto's server), the Python tests (boto3 and the AWS CLI
# against `bucketload serve`), then each cargo-fuzz target for a bounded time
# (BUCKETLOAD_FUZZ_SECONDS per target, default 20; 0 skips fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python

export BUCKETLOAD_VENV="$PWD/.venv"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== pytest"
cargo build --locked -p bucketload-cli
BUCKETLOAD_BIN="$PWD/target/debug/bucketload" .venv/bin/python -m pytest -q tests/python
echo "== cargo fuzz"
scripts/fuzz.sh "${BUCKETLOAD_FUZZ_SECONDS:-20}"
