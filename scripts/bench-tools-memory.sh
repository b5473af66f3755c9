#!/usr/bin/env bash
# Peak RSS of the dataset tools as the dataset grows (docs/BENCHMARKS.md, "The tools in bounded
# memory"): `ls -r`, `stats`, `shard`, `manifest`, `verify` and `cp -r` against an embedded
# server whose root holds the `tools` bucket of scripts/bench-listing-build.py (hard links).
#
#   scripts/bench-listing-build.py target/release/bucketload ROOT tools
#   target/release/bucketload serve --root ROOT --addr 127.0.0.1:9377 --access-key k --secret-key s &
#   scripts/bench-tools-memory.sh BUCKETLOAD_BIN LABEL "t5 t50 t1m t2m" "ls stats shard manifest verify cp"
#
# One line per run: label, command, prefix, peak RSS (KiB), wall time. `shard` plans the whole
# dataset but writes one slice of 1,000 samples (`--part 0/N`), so it shows what the plan and
# the listing cost, not the data; `cp -r` copies to a local folder that is removed afterwards.
set -euo pipefail
bin=$1 label=$2 prefixes=${3:-"t5 t50 t1m t2m"} commands=${4:-"ls stats shard manifest verify cp"}
export AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=${AWS_ENDPOINT_URL:-http://127.0.0.1:9377}
out=$(mktemp -d)
declare -A objects=([t5]=100000 [t50]=500000 [t1m]=1000000 [t2m]=2000000)
for p in $prefixes; do
  for c in $commands; do
    case $c in
      ls) args=(ls -r "s3://tools/$p/") ;;
      stats) args=(stats --json --no-manifest "s3://tools/$p") ;;
      shard) args=(shard --no-manifest --samples-per-shard 1000 --part "0/$((objects[$p] / 1000))"
                   "s3://tools/$p" "s3://shards/$label-$p" --json) ;;
      manifest) args=(manifest "s3://tools/$p") ;;
      verify) args=(verify "s3://tools/$p") ;;
      cp) args=(cp -r "s3://tools/$p" "$out/cp") ;;
    esac
    /usr/bin/time -v -o "$out/time" "$bin" "${args[@]}" >"$out/stdout" 2>"$out/stderr" || {
      echo "$label $c $p FAILED: $(tail -1 "$out/stderr")"; continue; }
    rss=$(awk -F': ' '/Maximum resident/ {print $2}' "$out/time")
    wall=$(awk -F': ' '/Elapsed \(wall/ {print $2}' "$out/time")
    echo "$label $c $p rss_kib=$rss wall=$wall"
    rm -rf "$out/cp"
  done
done
rm -rf "$out"
