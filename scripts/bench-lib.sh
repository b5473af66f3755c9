# Shared by the benchmark scripts (sourced from the repository root, after `set -euo pipefail`):
# a scratch directory `$work` and a list `pids` of background processes, both cleaned up on exit;
# `wait_port PORT [SECONDS]` (default 10 s), `load` (the load averages) and `machine` (one line about it).
work="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
wait_port() { for _ in $(seq $((${2:-10} * 20))); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
machine() {
    echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr); load $(load)"
}
