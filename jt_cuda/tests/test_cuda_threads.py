"""Lowerings for ``cuda`` (Triton's full compile to cubin) beside CPU interpreter runs on other threads.

The interpreter patches ``triton.language`` for the whole process while it runs; a CUDA compile that reads those
functions meanwhile fails. jt holds one lock over both (``jt_core.frontend``), so neither sees the other.
"""

from __future__ import annotations

import pathlib
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cuda_testlib import lower_for_cuda

import jt_core as jt
from jt_core import cache
from jt_core.testing import custom_calls
from jt_core.testing._concurrency import distinct_kernels, run_threads

LOWERING_THREADS = 3


@pytest.fixture(autouse=True)
def private_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # the kernels are new each run: keep them out
    cache.clear_memory()


@pytest.mark.parametrize("round_", range(3))
def test_cuda_lowerings_beside_cpu_runs(tmp_path: pathlib.Path, round_: int) -> None:
    runner_kernel, *kernels = distinct_kernels(tmp_path, f"cuda{round_}", LOWERING_THREADS + 1)
    x = jnp.asarray(np.random.default_rng(round_).standard_normal(512), dtype=jnp.float32)
    run_on_cpu = jax.jit(lambda v: jt.triton_call(v, v.size, kernel=runner_kernel, out_shape=v, grid=(32,), BLOCK=16))
    run_on_cpu(x).block_until_ready()  # compiled beforehand, so that its runs overlap the lowerings from the start
    lowered_for_cuda = threading.Event()
    remaining = [LOWERING_THREADS]
    lock = threading.Lock()
    runs = [0]

    def work(i: int) -> None:
        if i == 0:
            while not lowered_for_cuda.is_set():
                np.testing.assert_allclose(np.asarray(run_on_cpu(x)), np.asarray(x) * 2 + 1, rtol=1e-6)
                runs[0] += 1
            return
        try:
            spec = jax.ShapeDtypeStruct((4096,), jnp.float32)
            for block in (64, 128, 256, 512):
                lowered = lower_for_cuda(
                    lambda v, kernel=kernels[i - 1], block=block: jt.triton_call(
                        v, v.size, kernel=kernel, out_shape=v, grid=(4096 // block,), BLOCK=block,
                        compute_capability=90,
                    ),
                    spec,
                )  # fmt: skip
                assert len(custom_calls(lowered)) == 1
        finally:
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    lowered_for_cuda.set()

    assert run_threads(work, LOWERING_THREADS + 1) == []
    assert runs[0] >= 1
