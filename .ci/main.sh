#!/usr/bin/env bash
# Sets up jt and runs its main job: real Triton kernels through jt.triton_call (on the CPU interpreter, or on the
# GPU where one is present), checked against jax.numpy, with a table of results.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
venv="$(make_venv latest latest | tail -n 1)"
"$venv/bin/python" -m jt_core plugins
exec "$venv/bin/python" examples/run_all.py
