#!/usr/bin/env bash
# What the loader's disk cache costs on a cold epoch and gives on a warm one (`bucketload read`,
# release build), for one object per sample (`--format files`) and streamed tar shards
# (`--format shards`), at each of LATENCIES first-byte latency:
#   - none: no `--cache`;
#   - cold: `--cache DIR` on an empty DIR (every sample fetched and written to the cache; the
#           epoch ends once the cache holds it all);
#   - warm: a second process on the same DIR (every sample from the cache).
# The rows run in turn (none, cold, warm) RUNS times; each line is the median and the range of
# the runs. "cold/none" is the median cold rate over the median uncached one. First batch:
# seconds until the loader had delivered --batch-size (64) samples.
# CACHE_ROOT is where the cache directories go (default: the scratch directory under /tmp).
# The reader's CPU (user + system, GNU time) is in every row, and each round's cold/none with the
# cold run's system time after the table.
# Every read starts after `sync` (no writes of an earlier run pending), and one untimed cold and
# warm epoch of each format runs first: on a virtual machine, memory the guest has not touched
# for a while costs a fault in the host on first use, which would land on the first cold run.
# Usage: [SAMPLES=4000] [SIZE=100KB] [SHARD_SIZE=64MB] [LATENCIES="0ms 50ms"] [RUNS=3]
#        [CACHE_ROOT=DIR] [BIN=path/to/bucketload] scripts/bench-cache.sh
set -euo pipefail
cd "$(dirname "$0")/.."
samples="${SAMPLES:-4000}"
size="${SIZE:-100KB}"
shard_size="${SHARD_SIZE:-64MB}"
latencies="${LATENCIES:-0ms 50ms}"
runs="${RUNS:-3}"
port="${PORT:-9481}"
cache_root="${CACHE_ROOT:-}"

if [ -n "${BIN:-}" ]; then
    bin="$BIN"  # another build, e.g. an older commit's, to compare
else
    cargo build --release --locked -p bucketload-cli
    bin="${CARGO_TARGET_DIR:-$PWD/target}/release/bucketload"
fi

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
serve() {
    "$bin" serve --root "$work/root" --addr "127.0.0.1:$port" "$@" >"$work/serve.log" 2>&1 &
    pids=($!)
    wait_port "$port"
}
stop() { kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true; pids=(); }

serve
"$bin" gen s3://cache/files --samples "$samples" --classes 10 --size "$size" --seed 7 >/dev/null
"$bin" shard s3://cache/files s3://cache-shards/train --shard-size "$shard_size" >/dev/null
stop

echo "machine: $(machine); $(free -m | awk '/Mem:/{print $4}') MiB free"
echo "dataset: $samples samples of $size, one object each (s3://cache/files) and in shards of $shard_size"
results="$work/results.jsonl"
cache="$(mktemp -d -p "${cache_root:-$work}")/cache"
echo "cache: $cache ($(df -T "$(dirname "$cache")" | awk 'NR==2{print $2}'))"
serve
for uri in s3://cache/files s3://cache-shards/train; do
    rm -rf "$cache"
    for _ in cold warm; do
        "$bin" read "$uri" --epochs 1 --cache "$cache" --cache-size 20GiB --json >/dev/null
    done
done
stop
for latency in $latencies; do
    serve --latency "$latency"
    for run in $(seq "$runs"); do
        for format in files shards; do
            uri=s3://cache/files
            [ "$format" = shards ] && uri=s3://cache-shards/train
            rm -rf "$cache"
            for mode in none cold warm; do
                args=()
                [ "$mode" != none ] && args=(--cache "$cache" --cache-size 20GiB)
                # The previous run's cache writes are flushed first, not during this run.
                sync
                /usr/bin/time -f "%U %S" -o "$work/cpu" \
                    "$bin" read "$uri" --format "$format" --epochs 1 "${args[@]}" --json >"$work/out.json"
                python3 - "$work/out.json" "$latency" "$format" "$mode" "$run" "$samples" "$work/cpu" >>"$results" <<'PY'
import json, sys
path, latency, fmt, mode, run, samples, cpu = sys.argv[1:]
user, system = map(float, open(cpu).read().split()[-2:])
report = json.load(open(path))
epoch = report["epochs"][0]
assert epoch["samples"] == int(samples), f"read {epoch['samples']} samples of {samples}"
if mode == "warm":
    assert epoch["cache_hits"] > 0 and epoch["cache_misses"] == 0, epoch
print(json.dumps({"latency": latency, "format": fmt, "mode": mode, "run": int(run),
                  "samples_per_s": epoch["samples_per_s"], "seconds": epoch["seconds"],
                  "first_batch_s": epoch["first_batch_s"], "hits": epoch["cache_hits"],
                  "misses": epoch["cache_misses"], "user_s": user, "system_s": system}))
PY
            done
        done
    done
    stop
done
du -sh "$cache" | awk '{print "cache after the last warm epoch: " $1}'
rm -rf "$(dirname "$cache")"
python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("| latency | format | cache | samples/s (median, min–max) | first batch s (median) "
      "| reader's CPU s, user + system (median) | cold/none |")
print("|---|---|---|---|---|---|---|")
keys = []
for r in rows:
    k = (r["latency"], r["format"], r["mode"])
    if k not in keys:
        keys.append(k)
def rates(k):
    return [r["samples_per_s"] for r in rows if (r["latency"], r["format"], r["mode"]) == k]
for k in keys:
    rs = rates(k)
    fb = statistics.median(r["first_batch_s"] for r in rows if (r["latency"], r["format"], r["mode"]) == k)
    ratio = ""
    if k[2] == "cold":
        ratio = f"{statistics.median(rs) / statistics.median(rates((k[0], k[1], 'none'))):.2f}"
    cpu = [(r["user_s"], r["system_s"]) for r in rows if (r["latency"], r["format"], r["mode"]) == k]
    user = statistics.median(u for u, _ in cpu)
    system = statistics.median(s for _, s in cpu)
    print(f"| {k[0]} | {k[1]} | {k[2]} | {statistics.median(rs):,.0f} ({min(rs):,.0f}–{max(rs):,.0f}) "
          f"| {fb:.3f} | {user:.2f} + {system:.2f} | {ratio} |")
# Each cold run against the uncached run of the same round, with the system time the cold run
# spent: on a virtual machine whose host takes freed memory back, new page cache costs a host
# fault per page, which shows as system time (benchmarks/new_memory.py measures it alone).
print()
print("| latency | format | round | cold/none | cold run's system CPU s |")
print("|---|---|---|---|---|")
for r in rows:
    if r["mode"] != "cold":
        continue
    none = [n for n in rows if (n["latency"], n["format"], n["run"], n["mode"])
            == (r["latency"], r["format"], r["run"], "none")]
    if none:
        print(f"| {r['latency']} | {r['format']} | {r['run']} | "
              f"{r['samples_per_s'] / none[0]['samples_per_s']:.2f} | {r['system_s']:.2f} |")
PY
