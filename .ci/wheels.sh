#!/usr/bin/env bash
# Builds jt's wheelhouse: a wheel and an sdist of jt-core, jt-cuda, jt-rocm and jt-gluon in dist/, with
# `python -m build`. Then, by name: pip install --find-links dist jt-core jt-cuda   (or "jt-core[cuda]")
#
# `bash .ci/wheels.sh [PYTHON]` builds with PYTHON (default: python3 if it has `build`, else a small virtualenv
# .ci-venv-build holding only `build`).
source "$(dirname "$0")/env.sh"
cd "$ROOT"
python="${1:-}"
if [ -z "$python" ]; then
    if python3 -c 'import build' 2>/dev/null; then
        python=python3
    else
        step "creating the virtualenv .ci-venv-build with build"
        [ -x .ci-venv-build/bin/python ] || "$(find_python)" -m venv .ci-venv-build
        .ci-venv-build/bin/python -m pip install "${PIP_QUIET[@]}" build
        python=.ci-venv-build/bin/python
    fi
fi
build_wheelhouse "$python"
step "dist/ holds:"
ls -l dist
