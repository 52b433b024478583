#!/usr/bin/env bash
# Sets up jt and runs its main job: real Triton kernels through jt.triton_call (on the CPU interpreter, or on the
# GPU where one is present), checked against jax.numpy, with a table of results.
#
# If the default python3 already has jax and triton (a prepared GPU machine, possibly without network access), jt
# is installed next to them; otherwise a virtualenv with Python 3.12 and the newest jax + triton is built.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
if python3 -c 'import jax, triton, sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    PY=python3
    SITE="$(mktemp -d)"
    "$PY" -m pip install -q --no-deps --no-build-isolation --target "$SITE" ./jt_core ./jt_cuda ./jt_rocm ./jt_gluon
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
    venv="$(make_venv latest latest | tail -n 1)"
    PY="$venv/bin/python"
fi
"$PY" -m jt_core plugins
exec "$PY" examples/run_all.py
