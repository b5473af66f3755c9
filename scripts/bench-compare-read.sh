#!/usr/bin/env bash
# Compares `bucketload read` of two builds on the same embedded servers and data, rounds
# interleaved so that load on the machine falls on both alike:
#   BASE=/path/to/old/bucketload NEW=target/release/bucketload scripts/bench-compare-read.sh
# The dataset: SAMPLES JPEGs of SIZE with a manifest (`gen`, `manifest`), and the same samples
# cut into shards with indexes (`shard`). Each round reads every row once with each build
# (which goes first alternates by round, ABBA): files with the manifest, without it (a LIST),
# indexed and streamed shards at 0 ms (where CPU cost shows); files and streamed shards at
# LATENCY; files at LATENCY through a cache (`--cache`, a fresh directory per round and build:
# cold, then warm, the second read of the same directory); and `--decode` (224 px training
# batches) of files at LATENCY and of streamed shards at 0 ms. ROWS (a regular expression)
# keeps the rows whose names match. The median samples/s of each row is printed with its
# spread (lowest–highest), the ratio of the medians, and every round's. Used to show that a
# change costs no more than noise.
set -euo pipefail
cd "$(dirname "$0")/.."
base="${BASE:?set BASE to the path of the older bucketload binary}"
new="${NEW:-target/release/bucketload}"
samples="${SAMPLES:-10000}"
size="${SIZE:-100KB}"
latency="${LATENCY:-50ms}"
rounds="${ROUNDS:-5}"
port0="${PORT:-9351}"
port1=$((port0 + 1))

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
fast="http://127.0.0.1:$port0"
slow="http://127.0.0.1:$port1"
"$new" serve --root "$work/root" --addr "127.0.0.1:$port0" >"$work/serve0.log" 2>&1 & pids+=($!)
wait_port "$port0" 60
# The older build makes the datasets: the newer reads its manifests, not always the reverse.
AWS_ENDPOINT_URL="$fast" "$base" gen s3://cmp/train --samples "$samples" --classes 10 --size "$size" \
    --concurrency 256 >/dev/null
AWS_ENDPOINT_URL="$fast" "$base" manifest s3://cmp/train >/dev/null
AWS_ENDPOINT_URL="$fast" "$base" shard s3://cmp/train s3://cmp-shards/train --shard-size 100MB >/dev/null
# A server locks its root: the slow one serves a copy made of hard links (the same inodes, so
# the same objects and ETags), without the first server's lock.
cp -al "$work/root" "$work/root1"
rm -f "$work/root1/.bucketload/lock"
"$new" serve --root "$work/root1" --addr "127.0.0.1:$port1" --latency "$latency" >"$work/serve1.log" 2>&1 & pids+=($!)
wait_port "$port1" 60

echo "machine: $(machine)"
echo "dataset: $samples samples of $size with a manifest; shards of 100MB with indexes"
echo "base: $base"
echo "new:  $new"

rate() {  # rate BIN ENDPOINT URI FORMAT [FLAGS...] -> samples/s of the epoch
    local bin=$1 endpoint=$2 uri=$3 format=$4
    shift 4
    AWS_ENDPOINT_URL="$endpoint" "$bin" read "$uri" --format "$format" --json "$@" |
        python3 -c 'import json,sys; print(round(json.load(sys.stdin)["epochs"][0]["samples_per_s"]))'
}

# name|endpoint|uri|format|flags (cold and warm cache rows are read as a pair: see below)
rows=("files 0ms|$fast|s3://cmp/train|files|"
      "files 0ms, no manifest|$fast|s3://cmp/train|files|--no-manifest"
      "indexed 0ms|$fast|s3://cmp-shards/train|indexed|"
      "shards 0ms|$fast|s3://cmp-shards/train|shards|"
      "files $latency|$slow|s3://cmp/train|files|"
      "shards $latency|$slow|s3://cmp-shards/train|shards|"
      "files $latency, cache cold|$slow|s3://cmp/train|files|--cache"
      "files $latency, cache warm|$slow|s3://cmp/train|files|--cache"
      "files $latency --decode|$slow|s3://cmp/train|files|--decode"
      "shards 0ms --decode|$fast|s3://cmp-shards/train|shards|--decode")
keep=()
for row in "${rows[@]}"; do [[ "${row%%|*}" =~ ${ROWS:-.} ]] && keep+=("$row"); done
rows=("${keep[@]}")
declare -A got
for round in $(seq "$rounds"); do
    echo "-- round $round (load $(load))"
    for row in "${rows[@]}"; do
        IFS='|' read -r name endpoint uri format flags <<<"$row"
        [[ "$name" == *"cache warm" ]] && continue   # read right after its cold row
        order="base new"; [ $((round % 2)) = 0 ] && order="new base"   # ABBA: no order bias
        for which in $order; do
            bin=$base; [ "$which" = new ] && bin=$new
            if [ "$flags" = --cache ]; then
                rm -rf "$work/cache-$which"
                got["$name|$which"]+="$(rate "$bin" "$endpoint" "$uri" "$format" --cache "$work/cache-$which") "
                warm="${name%cold}warm"
                got["$warm|$which"]+="$(rate "$bin" "$endpoint" "$uri" "$format" --cache "$work/cache-$which") "
            else
                # shellcheck disable=SC2086 # flags are words
                got["$name|$which"]+="$(rate "$bin" "$endpoint" "$uri" "$format" $flags) "
            fi
        done
    done
    echo "   done (load $(load))"
done

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
spread() { tr ' ' '\n' | grep -v '^$' | sort -n | awk 'NR==1{lo=$1} {hi=$1} END {print lo "–" hi}'; }
echo
echo "| read | base samples/s, median (spread) of $rounds | new | new / base | all rounds (base; new) |"
echo "|---|---|---|---|---|"
for row in "${rows[@]}"; do
    name="${row%%|*}"
    [ -n "${got[$name|base]:-}" ] || continue
    b=$(echo "${got[$name|base]}" | median)
    n=$(echo "${got[$name|new]}" | median)
    ratio=$(python3 -c "print(f'{$n / $b:.3f}')")
    echo "| $name | $b ($(echo "${got[$name|base]}" | spread)) | $n ($(echo "${got[$name|new]}" | spread)) | $ratio | ${got[$name|base]% }; ${got[$name|new]% } |"
done
