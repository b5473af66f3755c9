# Shared by benchmarks/peers/setup.sh and setup-streaming.sh (sourced from the repository root,
# after `set -euo pipefail`). `make_venv VENV REQUIREMENTS WHAT` makes VENV from the pinned
# REQUIREMENTS with `pip install --no-deps` (the file lists every dependency), and again only
# when REQUIREMENTS changed since (a copy is kept in VENV as the stamp).
make_venv() {
    local venv="$1" reqs="$2" what="$3"
    local stamp="$venv/.$(basename "$reqs")"
    local pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
    if [ ! -x "$venv/bin/python" ] || ! cmp -s "$reqs" "$stamp"; then
        echo "peers setup: installing $what into $venv (about 4 GB, a few minutes)" >&2
        python3 -m venv "$venv"
        "${pip[@]}" install --upgrade pip
        "${pip[@]}" install --no-deps -r "$reqs"
        cp "$reqs" "$stamp"
    fi
}
