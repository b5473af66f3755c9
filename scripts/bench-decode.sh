#!/usr/bin/env bash
# Decode + augment per core, on the same images in the same run, at three depths:
#   kernel: the image pipeline alone, one thread, over the images in memory
#           (crates/bucketload-image/examples/profile_pipeline.rs);
#   path:   `bucketload read s3://... --decode --decode-threads 1` against `bucketload serve`
#           (0 ms latency), the whole read path: the loader's GETs, the hand-off of samples to
#           the batch thread, decode, augment, batches; its images/s (epochs after the first,
#           wall clock), and its CPU per image (user + system time of the whole process over
#           every epoch: the decode thread, the loader's runtime, HTTP);
#   peer:   PIL + torchvision v2, the workshop's pipeline, torch on one thread
#           (crates/bucketload-image/benches/peer_torchvision.py) over the same files; at the
#           end the two other ways of writing its transform, once each.
# RandomResizedCrop(224, antialias=False), a flip (not in the peer, where it would only cost),
# ImageNet normalisation, float32 CHW batches
# of 64 everywhere; bucketload's pixels are torchvision's (docs/IMAGE.md). Rounds alternate
# between the three; every round is printed, then the median of each.
#   SKIP_BUILD=1 scripts/bench-decode.sh
# Knobs: CORPUS (noise: `bucketload gen`'s ~100 KB 261x261 4:4:4 JPEGs; photos: 500x375 4:2:0
# photo-like JPEGs of benches/make_corpus.py, ~94 KB), SAMPLES (2000), ROUNDS (3), EPOCHS
# (3 per path run), PEER_IMAGES (512 of the files, each round), PORT (9613), BENCH_PYTHON
# (a Python with torch, torchvision, Pillow and bucketload; default .venv/bin/python),
# LATENCY (50ms, for the second table; empty: no second table).
# Second table: the Python loader on both cores against the two-core decode bound (below).
set -euo pipefail
cd "$(dirname "$0")/.."
corpus="${CORPUS:-noise}"
samples="${SAMPLES:-2000}"
rounds="${ROUNDS:-3}"
epochs="${EPOCHS:-3}"
peer_images="${PEER_IMAGES:-512}"
latency="${LATENCY-50ms}"
port="${PORT:-9613}"
python="${BENCH_PYTHON:-$PWD/.venv/bin/python}"
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    cargo build --release --locked -p bucketload-cli
    cargo build --release --locked -p bucketload-image --example profile_pipeline
fi
target="${CARGO_TARGET_DIR:-$PWD/target}/release"
bin="${BUCKETLOAD_BIN:-$target/bucketload}"
kernel="$target/examples/profile_pipeline"

. scripts/bench-lib.sh

export AWS_ACCESS_KEY_ID=bucketload AWS_SECRET_ACCESS_KEY=bucketload-dev-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL="http://127.0.0.1:$port"
"$bin" serve --root "$work/root" --addr "127.0.0.1:$port" >"$work/serve.log" 2>&1 &
pids+=($!)
wait_port "$port" 60

# The images: uploaded as one object per sample, and the same bytes in one local folder.
mkdir -p "$work/images"
case "$corpus" in
    noise)
        "$bin" gen s3://decode/train --samples "$samples" --classes 10 --size 100KB --seed 7 >/dev/null
        "$bin" cp -r s3://decode/train "$work/download/" >/dev/null
        find "$work/download" -name '*.jpg' -exec mv -t "$work/images" {} +
        ;;
    photos)
        "$python" crates/bucketload-image/benches/make_corpus.py "$work/photos" "$samples" 500 375
        for f in "$work/photos"/*.jpg; do cp "$f" "$work/images/"; done
        "$bin" cp -r "$work/photos/" s3://decode/train/class_000/ --create-bucket >/dev/null
        ;;
    *) echo "CORPUS is noise or photos, not $corpus" >&2; exit 2 ;;
esac
count="$(find "$work/images" -name '*.jpg' | wc -l)"
[ "$count" = "$samples" ] || { echo "expected $samples images, found $count" >&2; exit 1; }
mapfile -t peer_files < <(find "$work/images" -name '*.jpg' | sort | head -n "$peer_images")
kb="$(du -sk "$work/images" | cut -f1)"

echo "machine: $(machine)"
echo "corpus: $corpus, $samples JPEGs, $((kb / samples)) KB on average; RandomResizedCrop(224), flip, normalise, float32 batches of 64"
printf '| round | kernel img/s | path img/s | path CPU ms/img | path img per CPU-s | peer img/s | kernel ÷ peer | path ÷ peer | path per CPU-s ÷ peer |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
: >"$work/rows"
for round in $(seq "$rounds"); do
    # The kernel: $samples images × 2 epochs after its warm-up, one thread.
    k="$("$kernel" "$work/images" 2 | sed -n 's/.* \([0-9.]*\) img\/s.*/\1/p')"
    # The path: every epoch's CPU, the wall rate of the epochs after the first.
    /usr/bin/time -f "%U %S" -o "$work/time" "$bin" read s3://decode/train --decode \
        --decode-threads 1 --epochs "$epochs" --json >"$work/read.json"
    read -r user sys <"$work/time"
    read -r p n < <(python3 -c 'import json,sys
e = json.load(open(sys.argv[1]))["epochs"]
later = e[1:] or e
print(sum(x["samples"] for x in later) / sum(x["seconds"] for x in later), sum(x["samples"] for x in e))' "$work/read.json")
    cpu="$(echo "($user + $sys) * 1000 / $n" | bc -l)"
    # The peer: one uncounted round over the files, then one counted.
    q="$("$python" crates/bucketload-image/benches/peer_torchvision.py 1 "${peer_files[@]}" | cut -d' ' -f1)"
    echo "$round $k $p $cpu $q" >>"$work/rows"
    awk -v r="$round" -v k="$k" -v p="$p" -v c="$cpu" -v q="$q" 'BEGIN {
        printf "| %d | %.0f | %.0f | %.3f | %.0f | %.0f | %.2f× | %.2f× | %.2f× |\n",
            r, k, p, c, 1000 / c, q, k / q, p / q, 1000 / c / q }'
done
python3 - "$work/rows" <<'EOF'
import statistics, sys
rows = [list(map(float, line.split())) for line in open(sys.argv[1])]
k, p, c, q = (statistics.median(r[i] for r in rows) for i in (1, 2, 3, 4))
print(f"| median | {k:.0f} | {p:.0f} | {c:.3f} | {1000 / c:.0f} | {q:.0f} | {k / q:.2f}× | {p / q:.2f}× | {1000 / c / q:.2f}× |")
EOF
# The other ways of writing the peer's transform (PEER_PIPELINE in peer_torchvision.py), once
# each, against the median path: none should be faster than the reference.
for variant in antialias pil; do
    v="$(PEER_PIPELINE=$variant "$python" crates/bucketload-image/benches/peer_torchvision.py 1 "${peer_files[@]}" | cut -d' ' -f1)"
    python3 - "$work/rows" "$variant" "$v" <<'EOF'
import statistics, sys
rows = [list(map(float, line.split())) for line in open(sys.argv[1])]
p, c = (statistics.median(r[i] for r in rows) for i in (2, 3))
v = float(sys.argv[3])
print(f"peer written as {sys.argv[2]}: {v:.0f} img/s; median path ÷ it {p / v:.2f}×, per CPU-s {1000 / c / v:.2f}×")
EOF
done
echo "load at the end: $(load)"
[ -n "$latency" ] || exit 0

# Two cores: the Python loader against the two-core decode bound (2 × the kernel's median rate
# per core above), with the server at LATENCY on the same two cores. Rows per round:
#   kernel, 2 threads: the pipeline alone on both cores (no I/O, no server);
#   read --decode: the Rust path, every core;
#   Python Loader: examples/benchmark.py (bucketload.Loader, its defaults), as a training loop;
#   the same two from a warm cache (--cache / cache_dir, the epochs after the first): the
#   samples' bytes from local disk, no request, no server.
# Rates are of the epochs after the first; CPU per image is the whole process's over every
# epoch (for Python from opening the loader: not the interpreter's start and torch's import),
# and the server's over the same run.
kill "${pids[0]}"
wait "${pids[0]}" 2>/dev/null || true
"$bin" serve --root "$work/root" --addr "127.0.0.1:$port" --latency "$latency" >"$work/serve.log" 2>&1 &
server=$!
pids=("$server")
wait_port "$port" 60
ticks="$(getconf CLK_TCK)"
server_cpu() { awk -v t="$ticks" '{print ($14 + $15) / t}' "/proc/$server/stat"; }
bound="$(python3 -c 'import statistics, sys
print(2 * statistics.median(float(l.split()[1]) for l in open(sys.argv[1])))' "$work/rows")"
echo
echo "two cores, server at $latency; bound: 2 × the kernel's median per core = $(printf %.0f "$bound") img/s"
printf '| round | reader | img/s | share of bound | reader CPU ms/img | server CPU ms/img |\n'
printf '|---|---|---|---|---|---|\n'
row() {  # row ROUND READER RATE CPU_MS SERVER_MS
    awk -v r="$1" -v n="$2" -v x="$3" -v c="$4" -v s="$5" -v b="$bound" 'BEGIN {
        printf "| %d | %s | %.0f | %.0f%% | %s | %s |\n", r, n, x, 100 * x / b, c, s }'
}
# read_rate JSON: images/s of the epochs after the first, and every epoch's samples.
read_rate() { python3 -c 'import json,sys
e = json.load(open(sys.argv[1]))["epochs"]
later = e[1:] or e
print(sum(x["samples"] for x in later) / sum(x["seconds"] for x in later), sum(x["samples"] for x in e))' "$1"; }
# python_rate JSON EPOCHS: the same from examples/benchmark.py's log.
python_rate() { python3 -c 'import json,sys
log, epochs = json.load(open(sys.argv[1])), int(sys.argv[2])
n = log["samples_processed_total"]
later = [log[f"t_epoch_{i}"] for i in range(2, epochs + 1)] or [log["t_epoch_1"]]
print(n / epochs * len(later) / sum(later), n, log["cpu_seconds"])' "$1" "$2"; }
ms() { echo "($1) * 1000 / $2" | bc -l | xargs printf %.3f; }
for round in $(seq "$rounds"); do
    k2="$(THREADS=2 "$kernel" "$work/images" 2 | sed -n 's/.* \([0-9.]*\) img\/s.*/\1/p')"
    row "$round" "kernel alone, 2 threads" "$k2" - -
    for cache in none warm; do
        flags=()
        pyflags=()
        if [ "$cache" = warm ]; then
            rm -rf "$work/cache"
            flags=(--cache "$work/cache")
            pyflags=(--cache-dir "$work/cache")
        fi
        s0="$(server_cpu)"
        /usr/bin/time -f "%U %S" -o "$work/time" "$bin" read s3://decode/train --decode \
            --epochs "$epochs" "${flags[@]}" --json >"$work/read.json"
        s1="$(server_cpu)"
        read -r user sys <"$work/time"
        read -r rate n < <(read_rate "$work/read.json")
        row "$round" "read --decode, cache $cache" "$rate" "$(ms "$user + $sys" "$n")" "$(ms "$s1 - $s0" "$n")"
        rm -rf "$work/cache" "$work/logs"
        s0="$(server_cpu)"
        "$python" examples/benchmark.py --uri s3://decode/train --format files --epochs "$epochs" \
            "${pyflags[@]}" --log-dir "$work/logs" --name py >/dev/null
        s1="$(server_cpu)"
        read -r rate n cpu < <(python_rate "$work/logs/py.json" "$epochs")
        row "$round" "Python Loader, cache $cache" "$rate" "$(ms "$cpu" "$n")" "$(ms "$s1 - $s0" "$n")"
    done
done
echo "load at the end: $(load)"
