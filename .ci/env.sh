# Sourced by the other scripts: finds Python 3.12 and builds a virtualenv with one version set.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

find_python() {
    local candidate
    for candidate in "${JT_PYTHON:-}" python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 /usr/local/bin/python3.12 /usr/bin/python3.12; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    if command -v pyenv >/dev/null 2>&1; then
        local version
        version="$(pyenv versions --bare 2>/dev/null | grep -E '^3\.12' | tail -n 1 || true)"
        if [ -n "$version" ]; then
            PYENV_VERSION="$version" pyenv which python3.12
            return 0
        fi
    fi
    echo "error: Python 3.12 not found (install it, or set JT_PYTHON=/path/to/python3.12)" >&2
    return 1
}

# make_venv NAME SET: creates $ROOT/.ci-venv-NAME with the "latest" or "pinned" version set and jt installed.
make_venv() {
    local name="$1" set="$2" venv="$ROOT/.ci-venv-$1" python
    python="$(find_python)"
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -m venv "$venv"
    fi
    local pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
    "${pip[@]}" -U pip
    local extra=""
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        extra="[cuda13]"
    fi
    case "$set" in
        latest) "${pip[@]}" -U "jax$extra" triton pluggy numpy ml_dtypes ;;
        pinned) "${pip[@]}" "jax$extra==0.11.2" jaxlib==0.11.2 triton==3.6.0 pluggy numpy ml_dtypes ;;
        *) echo "unknown version set $set" >&2; return 1 ;;
    esac
    "${pip[@]}" pytest ruff mypy import-linter flatbuffers mkdocs "mkdocstrings[python]"
    "${pip[@]}" --no-deps --force-reinstall "$ROOT/jt_core" "$ROOT/jt_cuda" "$ROOT/jt_rocm" "$ROOT/jt_gluon"
    if [ -d "$ROOT/docs/examples/jt_example_backend" ]; then
        "${pip[@]}" --no-deps --force-reinstall "$ROOT/docs/examples/jt_example_backend"
    fi
    echo "$venv"
}
