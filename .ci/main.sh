#!/usr/bin/env bash
# Sets up jt and runs its main job: real Triton kernels through jt.triton_call (on the CPU, or on the GPU where one
# is present), checked against jax.numpy, with a table of results. Prints each step as it starts,
# with the seconds elapsed.
#
# If the default python3 (3.11 or newer) already has jax and triton (a prepared GPU or TPU machine, possibly without
# network access), jt is installed next to them; otherwise a virtualenv with the Python the newest set is tested on
# and the newest jax + triton is built ($JT_CI_HOME/venv-latest, by default ~/.cache/jt-ci/venv-latest, without the
# development tools; .ci/test.sh adds them).
source "$(dirname "$0")/env.sh"
cd "$ROOT"
if python3 -c "import jax, triton, sys; assert sys.version_info >= tuple(map(int, '$JT_OLDEST_PYTHON_VERSION'.split('.')))" \
    2>/dev/null; then
    PY=python3
    SITE="$(mktemp -d)"
    step "python3 ($(command -v python3)) has jax and triton: installing jt next to them, in $SITE"
    remove_build_folders
    "$PY" -m pip install "${PIP_QUIET[@]}" --no-deps --no-build-isolation --target "$SITE" \
        ./jt_core ./jt_cuda ./jt_rocm ./jt_gluon ./jt_tpu
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
    step "python3 has no jax and triton: building a virtualenv"
    make_venv latest latest runtime
    PY="$VENV/bin/python"
fi
step "listing jt's plugins: python -m jt_core plugins"
"$PY" -m jt_core plugins
step "running the examples: python examples/run_all.py (vector add, fused softmax, autotuned matmul, layer norm, fused attention)"
"$PY" examples/run_all.py
if [ "$PY" = python3 ]; then
    step "done; to use jt from python3: export PYTHONPATH=$SITE\${PYTHONPATH:+:\$PYTHONPATH}"
else
    step "done; to use jt: source $VENV/bin/activate (then python -c 'import jt_core as jt', python -m jt_core plugins)"
fi
