#!/usr/bin/env bash
# Builds jt's wheelhouse in dist/: an sdist and a pure wheel of jt-core, jt-cuda, jt-rocm and jt-gluon, and a
# platform wheel (py3-none-manylinux_*) of each distribution with native libraries, which carries them prebuilt.
# Then, by name: pip install --find-links dist jt-core jt-cuda   (or "jt-core[cuda]")
#
# `bash .ci/wheels.sh [PYTHON]` builds with PYTHON (default: the virtualenv $JT_CI_HOME/venv-build, made on first use), into
# whose environment it installs the build tools and the oldest jax and jaxlib jt supports (install_build_tools).
source "$(dirname "$0")/env.sh"
cd "$ROOT"
python="${1:-}"
if [ -z "$python" ]; then
    python="$JT_CI_HOME/venv-build/bin/python"
    if [ ! -x "$python" ]; then
        step "creating the virtualenv $JT_CI_HOME/venv-build"
        mkdir -p "$JT_CI_HOME"
        "$(find_python)" -m venv "$JT_CI_HOME/venv-build"
    fi
fi
step "installing the build tools into $("$python" -c 'import sys; print(sys.prefix)')"
install_build_tools "$python"
build_wheelhouse "$python"
step "dist/ holds:"
ls -l dist
