#!/usr/bin/env bash
# README command 1: install what is needed, build bucketload, and run the main job,
# `bucketload demo`, against the embedded default: an S3 server on loopback with 50 ms to
# first byte, a dataset of 100 KB JPEGs, small files with and without the cache, tar shards
# streamed and indexed, decoding, checkpoints to the store against the disk, and the report
# in bucketload-demo/report/.
# Extra arguments go to `bucketload demo` (e.g. --samples 100000 for the full dataset).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked -p bucketload-cli
exec target/release/bucketload demo "$@"
