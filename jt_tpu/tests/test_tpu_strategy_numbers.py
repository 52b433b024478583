"""The numbers of what jt-tpu lowers: the TPU's strategy run on the CPU (the same translation, lowered for the
``cpu`` platform), and, where JAX sees a TPU, on the TPU itself. Each kernel's outputs are compared with a float64
NumPy reference, within what plain ``jax.numpy`` doing the same work gets.

The kernels are the benchmark's (``tpu_kernels.py``) and those of language models (``tpu_model_kernels.py``:
attention with descriptors, paged decode attention, rotary and cross entropy in place, chunked cumsum, an autotuned
matmul, a state-space decode step), at small sizes. The model kernels also run on the CPU's own path, which the TPU
strategy must agree with."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import tpu_kernels
import tpu_model_cases
from tpu_testlib import TpuStrategyOnCpu, tpu_strategy_on_cpu

from jt_core.testing import record_lowerings


def _small_cases() -> list[tpu_kernels.Case]:
    return tpu_kernels.small_cases() + tpu_model_cases.small_model_cases()


NAMES = [case.name for case in _small_cases()]
MODEL_NAMES = [case.name for case in tpu_model_cases.small_model_cases()]


def _errors(outputs: object, exact: object) -> float:
    outs = jax.tree.leaves(outputs)
    wants = exact if isinstance(exact, tuple) else (exact,)
    worst = 0.0
    for out, want in zip(outs, wants, strict=True):
        got, want = np.asarray(out, np.float64), np.asarray(want, np.float64)
        worst = max(worst, float(np.linalg.norm(got - want)) / (float(np.linalg.norm(want)) or 1.0))
    return worst


def _check(case: tpu_kernels.Case) -> None:
    inputs = case.inputs(np.random.default_rng(7))
    exact = case.exact(*inputs)
    error = _errors(case.kernel(*inputs), exact)
    jnp_error = _errors(case.reference(*inputs), exact)
    assert error <= max(case.tolerance, 4 * jnp_error + 1e-6), (case.name, error, jnp_error)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="calls run on the default device: here not the CPU")
@pytest.mark.parametrize("index", range(len(NAMES)), ids=NAMES)
def test_the_tpu_strategy_computes_each_kernel_right_on_the_cpu(index: int) -> None:
    with tpu_strategy_on_cpu(), record_lowerings(TpuStrategyOnCpu) as lowered:
        _check(_small_cases()[index])
    assert lowered, "the TPU's strategy lowered the call"


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="calls run on the default device: here not the CPU")
@pytest.mark.parametrize("index", range(len(MODEL_NAMES)), ids=MODEL_NAMES)
def test_each_model_kernel_computes_right_on_the_cpus_own_path(index: int) -> None:
    _check(tpu_model_cases.small_model_cases()[index])


@pytest.mark.tpu
@pytest.mark.parametrize("index", range(len(NAMES)), ids=NAMES)
def test_each_kernel_runs_right_on_a_tpu(index: int) -> None:
    _check(_small_cases()[index])
