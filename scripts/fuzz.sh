#!/usr/bin/env bash
# Runs every cargo-fuzz target in fuzz/ for SECONDS each (default 20; 0 skips), on the stable
# toolchain with sanitizers off (see fuzz/README.md). Installs cargo-fuzz if it is missing.
# A crash fails the run; libFuzzer saves the input under fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
if [ "$seconds" = 0 ]; then
    echo "fuzz: skipped (0 seconds per target)"
    exit 0
fi
# Pinned so every machine fuzzes with the same tool; --locked uses its own Cargo.lock.
version=0.13.2
if ! cargo fuzz --version 2>/dev/null | grep -q " $version\$"; then
    echo "fuzz: installing cargo-fuzz $version (1 to 4 min on 2 cores)" >&2
    cargo install cargo-fuzz --version "$version" --locked
fi
cd fuzz
# fuzz/ is its own workspace: its committed Cargo.lock must be current.
cargo fetch --locked
for target in $(cargo fuzz list); do
    echo "fuzz: $target for $seconds s"
    # -s none: no sanitizer (stable toolchain); -O: optimised; -a: debug assertions and
    # overflow checks on. -close_fd_mask=1 silences the target's stdout.
    # The progress lines (NEW, REDUCE, pulse) are dropped to keep CI logs short.
    set +e
    cargo fuzz run -s none -O -a "$target" -- -max_total_time="$seconds" -close_fd_mask=1 \
        -print_final_stats=1 2>&1 | grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)'
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" != 0 ]; then
        echo "fuzz: $target failed (exit $status); the input is in fuzz/artifacts/$target/" >&2
        exit "$status"
    fi
done
