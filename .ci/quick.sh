#!/usr/bin/env bash
# The quick check of a checkout or an install, for a first hour with jt: a slice of each distribution's tests on the
# newest jax + triton, in under 5 minutes on a 2-core machine once its virtualenv exists (.ci/test.sh runs everything,
# on both version sets). The slice: calls on the CPU's compiled path and in Triton's interpreter, batching, export,
# errors, plugin loading and the plugin surface; CUDA and ROCm compiles and lowerings on a GPU-less host, each
# launcher's conformance; Gluon kernels compiled and lowered; TPU lowerings; the custom calls every launcher emits.
#
# It uses $JT_CI_HOME/venv-latest (by default ~/.cache/jt-ci/venv-latest) as it is, with jt reinstalled from the
# checkout; where that virtualenv is missing or lacks a package, it is built first (the downloads of jax, jaxlib,
# triton and the test tools: a few minutes more, once). Prints each step with the seconds elapsed.
source "$(dirname "$0")/env.sh"
cd "$ROOT"
ready_venv latest latest
# The tests that name a GPU skip here (and fail with --jt-require-gpu); on a GPU machine they run.
tests=(
    jt_core/tests/test_call_behaviour.py
    jt_core/tests/test_cpu_memory_semantics.py
    jt_core/tests/test_vmap_strategies.py
    jt_core/tests/test_export_cpu.py
    jt_core/tests/test_call_errors.py
    jt_core/tests/test_plugins_loading.py
    jt_core/tests/test_plugin_api.py
    jt_cuda/tests/test_cuda_compile.py
    jt_cuda/tests/test_cuda_lowering.py
    jt_cuda/tests/test_cuda_conformance.py
    jt_rocm/tests/test_rocm_compile.py
    jt_rocm/tests/test_rocm_lowering.py
    jt_rocm/tests/test_rocm_conformance.py
    jt_gluon/tests/test_gluon_compile.py
    jt_gluon/tests/test_gluon_dialect.py
    jt_tpu/tests/test_tpu_conformance.py
    jt_tpu/tests/test_tpu_lowering.py
    tests/test_custom_call_names.py
)
workers="${JT_TEST_WORKERS:-2}"
step "pytest, a slice of each distribution's tests (${#tests[@]} files, $workers workers)"
status=0
# -P: the checkout's jt_* folders must not import as (empty) packages; the installed jt is tested.
JT_STRICT_PLUGINS=1 "$VENV/bin/python" -P -m pytest -q -p no:cacheprovider -n "$workers" "${tests[@]}" || status=$?
step "finished"
if [ "$status" -ne 0 ]; then echo "FAILED"; else echo "all checks passed"; fi
exit "$status"
