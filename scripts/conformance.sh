#!/usr/bin/env bash
# S3 conformance measurement: runs the same selection of Ceph's S3 conformance suite
# (s3-tests, vendored in tests/conformance/s3-tests, selection in tests/conformance/selection.txt)
# against `bucketload serve` and moto's server, each on a free loopback port, and prints
# passed/failed/error/skipped per server. Writes JUnit XML per server to $CONFORMANCE_OUT and the
# per-test comparison to docs/conformance/ (results.csv, comparison.md; with extra pytest
# arguments, to $CONFORMANCE_OUT instead). Not part of
# scripts/test.sh: it is a measurement (about 10 minutes), not a check; see docs/SERVER.md.
#
#   scripts/conformance.sh [extra pytest arguments, e.g. -k multipart]
#
# Environment:
#   BUCKETLOAD_BIN            the binary to serve with [target/debug/bucketload, built with
#                             `cargo build -p bucketload-cli` when missing]
#   CONFORMANCE_OUT           JUnit XML, server logs, s3tests.conf files [target/conformance]
#   CONFORMANCE_TEST_TIMEOUT  seconds one test may take before it is failed [60]
#   CONFORMANCE_SERVERS       which servers to run, of "bucketload moto" [both]
# Exit status: 0 when both runs completed (whatever tests failed), 1 when a server could not be
# started or died during its run.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CONF_DIR=$ROOT/tests/conformance
SUITE=$CONF_DIR/s3-tests
VENV=$ROOT/.venv-conformance
BIN=${BUCKETLOAD_BIN:-$ROOT/target/debug/bucketload}
OUT=${CONFORMANCE_OUT:-$ROOT/target/conformance}
TIMEOUT=${CONFORMANCE_TEST_TIMEOUT:-60}
SERVERS=${CONFORMANCE_SERVERS:-bucketload moto}
SUITE_COMMIT=$(sed -n 's/^Commit: `\([0-9a-f]*\)`.*/\1/p' "$CONF_DIR/s3-tests/README.md")

if [ ! -x "$BIN" ]; then
    if [ -n "${BUCKETLOAD_BIN:-}" ]; then
        echo "conformance: BUCKETLOAD_BIN=$BIN is not an executable" >&2
        exit 1
    fi
    echo "conformance: building bucketload (cargo build -p bucketload-cli)" >&2
    cargo build --locked -p bucketload-cli
fi

# The suite's dependencies and moto's server, pinned, in a venv of their own.
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    echo "conformance: python3 cannot make a venv; run scripts/setup.sh --python first" >&2
    exit 1
fi
stamp=$VENV/.requirements.txt
if [ ! -x "$VENV/bin/python" ] || ! cmp -s "$CONF_DIR/requirements.txt" "$stamp"; then
    echo "conformance: installing the suite's Python dependencies into .venv-conformance" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        -r "$CONF_DIR/requirements.txt"
    cp "$CONF_DIR/requirements.txt" "$stamp"
fi
PY=$VENV/bin/python

# Nothing from the user's AWS set-up may reach the suite's clients.
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE AWS_ENDPOINT_URL \
    AWS_ENDPOINT_URL_S3 AWS_REGION
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
export AWS_DEFAULT_REGION=us-east-1

mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/bucketload-conformance.XXXXXX")
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_listening() { # port pid name
    "$PY" - "$1" <<'EOF' || { echo "conformance: $3 did not start, log:" >&2; cat "$OUT/$3.log" >&2; exit 1; }
import socket, sys, time
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.2).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
EOF
    kill -0 "$2"
}

# The selection: pytest arguments, one a line, without comments.
mapfile -t SELECTION < <(grep -v -e '^#' -e '^[[:space:]]*$' "$CONF_DIR/selection.txt")

MAIN_KEY=AKIACONFORMANCEMAIN0 MAIN_SECRET=conformance-main-secret
failed_server=false
for server in $SERVERS; do
    port=$(free_port)
    case $server in
    bucketload)
        # --allow-sigv2: the suite signs POST forms and some presigned URLs with Signature
        # Version 2, which S3 still accepts on buckets made before 2020.
        "$BIN" serve --root "$WORK/bucketload-root" --addr "127.0.0.1:$port" --allow-sigv2 \
            --access-key "$MAIN_KEY" --secret-key "$MAIN_SECRET" >"$OUT/$server.log" 2>&1 &
        # One key pair only: the alt and tenant users are the main user.
        alt=$MAIN_KEY:$MAIN_SECRET tenant=$MAIN_KEY:$MAIN_SECRET
        ;;
    moto)
        "$VENV/bin/moto_server" -H 127.0.0.1 -p "$port" >"$OUT/$server.log" 2>&1 &
        # moto accepts any key (all in one account).
        alt=AKIACONFORMANCEALT00:conformance-alt-secret
        tenant=AKIACONFORMANCETNT00:conformance-tenant-secret
        ;;
    *) echo "conformance: unknown server $server" >&2; exit 1 ;;
    esac
    pid=$!
    pids+=("$pid")
    wait_listening "$port" "$pid" "$server"
    conf=$OUT/$server.s3tests.conf
    "$PY" "$CONF_DIR/harness.py" conf --endpoint "http://127.0.0.1:$port" \
        --main "$MAIN_KEY:$MAIN_SECRET" --alt "$alt" --tenant "$tenant" --out "$conf"
    echo "== $server on 127.0.0.1:$port: ${#SELECTION[@]} selection arguments, $TIMEOUT s per test" >&2
    status=0
    (cd "$SUITE" && S3TEST_CONF=$conf PYTHONPATH=$CONF_DIR "$PY" -m pytest -p conformance_plugin \
        -p no:cacheprovider -q --no-header -rN --tb=line --timeout="$TIMEOUT" \
        --junitxml="$OUT/$server.xml" "${SELECTION[@]}" "$@" >"$OUT/$server.pytest.txt" 2>&1) ||
        status=$?
    tail -n 1 "$OUT/$server.pytest.txt" >&2
    # pytest: 0 all passed, 1 some failed; anything else is a harness failure.
    if [ "$status" -gt 1 ]; then
        echo "conformance: pytest exited $status on $server, see $OUT/$server.pytest.txt" >&2
        exit 1
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "conformance: $server DIED during the run; last lines of its log:" >&2
        tail -n 40 "$OUT/$server.log" >&2
        failed_server=true
    fi
    kill "$pid"
    wait "$pid" 2>/dev/null || true
done

if [ "$SERVERS" = "bucketload moto" ]; then
    # The recorded comparison is of the whole selection; a run narrowed by pytest arguments
    # writes its own beside its JUnit files.
    report=docs/conformance
    [ $# -eq 0 ] || report=$OUT
    mkdir -p "$report"
    "$PY" "$CONF_DIR/harness.py" compare --junit "bucketload=$OUT/bucketload.xml" \
        --junit "moto=$OUT/moto.xml" --csv "$report/results.csv" \
        --markdown "$report/comparison.md" --suite-commit "$SUITE_COMMIT"
fi
! $failed_server
