#!/usr/bin/env bash
# Measures `bucketload verify` throughput (MB/s and objects/s) against `bucketload serve
# --latency 50ms` on loopback, for the same samples stored two ways:
#   - files:  `bucketload gen` (SAMPLES JPEGs of SIZE) + `bucketload manifest`;
#   - shards: the same dataset cut by `bucketload shard --shard-size SHARD_SIZE` (tar shards,
#             indexes and manifest), or, where `shard` is missing, tar shards written by
#             Python's tarfile and indexed by `bucketload index`.
# Each verify runs RUNS times; the wall time of the whole command (start-up, manifest, listing
# and every read) gives the rates. Results go to stdout; docs/BENCHMARKS.md records them.
set -euo pipefail
cd "$(dirname "$0")/.."
samples="${SAMPLES:-2000}"
size="${SIZE:-100KB}"
shard_size="${SHARD_SIZE:-32MB}"
runs="${RUNS:-3}"
port="${PORT:-9311}"
cargo build --release --locked -p bucketload-cli
bin="$PWD/target/release/bucketload"

. scripts/bench-lib.sh

"$bin" serve --root "$work/root" --addr "127.0.0.1:$port" --latency 50ms >"$work/serve.log" 2>&1 & pids+=($!)
wait_port "$port"
export AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ACCESS_KEY_ID=bucketload \
    AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1

echo "machine: $(machine)"
echo "server: bucketload serve --latency 50ms; dataset: $samples samples of $size, shards of $shard_size"
"$bin" gen s3://bench-files/train --samples "$samples" --classes 10 --size "$size" >/dev/null
"$bin" manifest s3://bench-files/train >/dev/null

if "$bin" shard --help >/dev/null 2>&1; then
    "$bin" shard s3://bench-files/train s3://bench-shards/train --shard-size "$shard_size" >/dev/null
    made="bucketload shard --shard-size $shard_size"
else
    # Without `bucketload shard`: the same files in tar shards of about SHARD_SIZE, key order.
    "$bin" cp -r s3://bench-files/train "$work/files" >/dev/null
    limit="$(python3 -c "import re,sys; n,u=re.fullmatch(r'(\d+)([KMG]?B)','$shard_size').groups(); print(int(n)*{'B':1,'KB':10**3,'MB':10**6,'GB':10**9}[u])")"
    python3 - "$work/files" "$work/shards" "$limit" <<'PY'
import os, sys, tarfile
src, dst, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst)
keys = sorted(os.path.relpath(os.path.join(d, f), src) for d, _, fs in os.walk(src) for f in fs
              if not os.path.relpath(os.path.join(d, f), src).startswith("_bucketload"))
shard, used, n = None, 0, 0
for key in keys:
    size = os.path.getsize(os.path.join(src, key))
    if shard is None or used + size + 512 > limit:
        if shard:
            shard.close()
        shard, used = tarfile.open(os.path.join(dst, f"shard-{n:06d}.tar"), "w", format=tarfile.PAX_FORMAT), 0
        n += 1
    shard.add(os.path.join(src, key), arcname=key)
    used += size + 1024
shard.close()
PY
    "$bin" cp -r "$work/shards" s3://bench-shards/train >/dev/null
    "$bin" index s3://bench-shards/train >/dev/null
    made="Python tarfile + bucketload index"
fi
echo "shards made by: $made"

# verify_once URI: prints "objects bytes seconds peak_rss_kb cpu_seconds" of one run.
verify_once() {
    local start end out
    start="$(date +%s.%N)"
    out="$(/usr/bin/time -f 'rss %M %U %S' "$bin" verify "$1" 2>&1)"
    end="$(date +%s.%N)"
    echo "$out" | awk -v s="$start" -v e="$end" '
        /^verified / { gsub(/[()]/, ""); objects = $2; bytes = $4 }
        /^rss / { rss = $2; cpu = $3 + $4 }
        END { printf "%d %d %.3f %d %.2f\n", objects, bytes, e - s, rss, cpu }'
}

# Two buckets: the files and their shards never share a prefix.
for name in files shards; do
    echo "== verify s3://bench-$name/train"
    for run in $(seq "$runs"); do
        read -r objects bytes secs rss cpu < <(verify_once "s3://bench-$name/train")
        awk -v o="$objects" -v b="$bytes" -v t="$secs" -v r="$rss" -v n="$samples" -v c="$cpu" -v run="$run" 'BEGIN {
            printf "run %d: %d objects, %.1f MB in %.2f s: %.1f MB/s, %.1f objects/s, %.0f samples/s; CPU %.2f s, peak RSS %.0f MB\n",
                run, o, b / 1e6, t, b / 1e6 / t, o / t, n / t, c, r / 1024 }'
    done
done
