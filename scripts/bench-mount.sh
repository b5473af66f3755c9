#!/usr/bin/env bash
# Measures `bucketload mount` next to s3fs-fuse (Debian package s3fs) on the same embedded
# server, in the same run, at 0 and 50 ms first-byte latency (release build):
#   - small files: 2,000 x 100 KB read with 16 parallel readers (files/s), after a `find`
#   - large file: one 1 GiB object read sequentially with dd bs=1M (MB/s)
#   - ls: the first `ls` of a 10,000-entry directory on a fresh mount (seconds)
#   - first byte: `head -c 1` of 20 files never read before, one after another (ms each)
# Every measurement starts on a fresh mount of each tool. bucketload runs with
# --read-only --metadata-ttl 900s (s3fs caches metadata for 900 s by default); s3fs with its
# defaults plus what the embedded server needs (path-style requests, ListObjectsV2). Needs
# root, /dev/fuse, fuse3 and s3fs. Results go to stdout; docs/BENCHMARKS.md records them with
# this command.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
command -v s3fs >/dev/null || { echo "s3fs is missing: apt-get install s3fs" >&2; exit 1; }
cargo build --release --locked -p bucketload-cli
bin="${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload"
latencies="${LATENCIES:-0ms 50ms}"
small="${SMALL:-2000}"
wide="${WIDE:-10000}"
large_mib="${LARGE_MIB:-1024}"
port=9312

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_DEFAULT_REGION=us-east-1
export AWS_REGION=us-east-1 AWS_ENDPOINT_URL=http://127.0.0.1:$port
echo "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" > "$work/passwd"
chmod 600 "$work/passwd"
mnt="$work/mnt"
mkdir -p "$mnt"
unmount_all() { mountpoint -q "$mnt" && umount "$mnt" || true; }
trap 'unmount_all; cleanup' EXIT

# Generate without latency, then serve the same root with each latency.
serve() {
    "$bin" serve --root "$work/root" --addr 127.0.0.1:$port "$@" >/dev/null 2>&1 & pids=($!)
    wait_port $port
}
stop() { kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=(); }
serve
"$bin" gen s3://bench/small --samples "$small" --classes 10 --size 100KB --concurrency 256 >/dev/null
"$bin" gen s3://bench/wide --samples "$wide" --classes 1 --size 1KB --concurrency 256 >/dev/null
head -c "$((large_mib << 20))" /dev/urandom > "$work/large.bin"
"$bin" cp "$work/large.bin" s3://bench/large/large.bin >/dev/null
rm "$work/large.bin"
stop

now() { date +%s.%N; }
mount_tool() {
    case "$1" in
    bucketload) "$bin" mount s3://bench "$mnt" --read-only --metadata-ttl 900s ;;
    s3fs) s3fs bench "$mnt" -o passwd_file="$work/passwd" -o url="$AWS_ENDPOINT_URL" \
              -o use_path_request_style -o endpoint=us-east-1 -o listobjectsv2 -o ro ;;
    esac
    for _ in $(seq 500); do mountpoint -q "$mnt" && return 0; sleep 0.02; done
    echo "$1 did not mount" >&2; exit 1
}
small_files() {
    find "$mnt/small" -type f > "$work/files"
    local n t0 t1; n=$(wc -l < "$work/files"); t0=$(now)
    xargs -P 16 -n 25 cat < "$work/files" > /dev/null
    t1=$(now)
    awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { printf "small files: %d in %.2f s = %.0f files/s\n", n, b - a, n / (b - a) }'
}
large_file() {
    local t0 t1; t0=$(now)
    dd if="$mnt/large/large.bin" of=/dev/null bs=1M status=none
    t1=$(now)
    awk -v m="$large_mib" -v a="$t0" -v b="$t1" 'BEGIN { printf "large file: %d MiB in %.2f s = %.0f MB/s\n", m, b - a, m * 1.048576 / (b - a) }'
}
list_wide() {
    local n t0 t1; t0=$(now)
    n=$(ls "$mnt/wide/class_000" | wc -l)
    t1=$(now)
    awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { printf "ls: %d entries in %.2f s\n", n, b - a }'
}
first_byte() {
    local t0 t1 f; t0=$(now)
    for i in $(seq 0 19); do
        f=$(printf "%s/small/class_%03d/%06d.jpg" "$mnt" $((i % 10)) "$i")
        head -c 1 "$f" > /dev/null
    done
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "first byte: %.1f ms per file (20 files, open + 1 byte)\n", (b - a) * 1000 / 20 }'
}

echo "machine: $(machine)"
echo "data: $small x 100 KB in 10 folders, $wide x 1 KB in one folder, one ${large_mib} MiB object"
for latency in $latencies; do
    serve --latency "$latency"
    echo "== server latency $latency"
    for tool in bucketload s3fs; do
        for measure in small_files large_file list_wide first_byte; do
            mount_tool "$tool"
            printf "%-10s " "$tool"
            "$measure"
            umount "$mnt"
        done
    done
    stop
done
