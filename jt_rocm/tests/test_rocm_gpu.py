"""On an AMD GPU: kernels compiled by jt-rocm run through jaxlib's ROCm Triton handler."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from rocm_testlib import use_launcher

import jt_core as jt
from jt_core.testing import half_write_kernel, out_first_kernel, sample_add_kernel

pytestmark = pytest.mark.rocm


@pytest.fixture(autouse=True)
def _jaxlib_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    use_launcher(monkeypatch, "jaxlib")  # jt's own handler runs the same kernels in test_rocm_ffi_gpu.py


@pytest.mark.parametrize("size", [1, 40, 500, 16385])
def test_add_matches_numpy(size: int) -> None:
    rng = np.random.default_rng(size)
    x = rng.standard_normal(size).astype(np.float32)
    y = rng.standard_normal(size).astype(np.float32)

    @jax.jit
    def f(a: Any, b: Any) -> Any:
        return jt.triton_call(
            a, b, kernel=sample_add_kernel, out_shape=a, grid=(triton.cdiv(size, 256),), n=size, BLOCK=256
        )

    np.testing.assert_array_equal(np.asarray(f(x, y)), x + y)


def test_zeroed_output_is_zero_where_the_kernel_does_not_write() -> None:
    out = jax.jit(
        lambda: jt.triton_call(
            kernel=half_write_kernel,
            out_shape=jax.ShapeDtypeStruct((64,), jnp.float32),
            grid=1,
            n=64,
            BLOCK=64,
            zeroed_outputs=(0,),
        )
    )()
    np.testing.assert_array_equal(np.asarray(out), np.r_[np.full(32, 7.0), np.zeros(32)].astype(np.float32))


def test_output_parameter_before_input_gets_the_right_buffers() -> None:
    x = np.random.default_rng(1).standard_normal(300).astype(np.float32)
    out = jax.jit(
        lambda a: jt.triton_call(kernel=out_first_kernel, x_ptr=a, scale=2.0, n=300, out_shape=a, grid=3, BLOCK=128)
    )(x)
    np.testing.assert_array_equal(np.asarray(out), x * 2)
