"""On an AMD GPU: kernels run through jt's own ROCm FFI handler (launcher ``"jt"``).

Every call names the launcher, so these tests fail rather than silently use jaxlib's handler when jt's cannot be
built or registered.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton

import jt_core as jt
from jt_core.testing import (
    accumulate_kernel,
    autotuned_scale_inplace_kernel,
    half_write_kernel,
    out_first_kernel,
    sample_add_kernel,
)

pytestmark = pytest.mark.rocm


@pytest.mark.parametrize("size", [1, 40, 500, 16385])
def test_add_matches_numpy(size: int) -> None:
    rng = np.random.default_rng(size)
    x = rng.standard_normal(size).astype(np.float32)
    y = rng.standard_normal(size).astype(np.float32)

    @jax.jit
    def f(a: Any, b: Any) -> Any:
        return jt.triton_call(
            a,
            b,
            kernel=sample_add_kernel,
            out_shape=a,
            grid=(triton.cdiv(size, 256),),
            n=size,
            BLOCK=256,
            launcher="jt",
        )

    np.testing.assert_array_equal(np.asarray(f(x, y)), x + y)


@pytest.mark.parametrize("num_warps", [1, 2, 8])
def test_every_wavefront_of_a_program_runs(num_warps: int) -> None:
    # BLOCK spans all threads of the program: an element is only right if the launch had num_warps * wave threads.
    x = np.random.default_rng(num_warps).standard_normal(4096).astype(np.float32)
    out = jax.jit(
        lambda a: jt.triton_call(
            a,
            a,
            kernel=sample_add_kernel,
            out_shape=a,
            grid=4,
            n=4096,
            BLOCK=1024,
            num_warps=num_warps,
            launcher="jt",
        )
    )(x)
    np.testing.assert_array_equal(np.asarray(out), x + x)


def test_autotuning_restores_the_aliased_buffer_before_the_real_run() -> None:
    n = 100_000
    x = np.random.default_rng(7).standard_normal(n).astype(np.float32)

    def f(a: Any) -> Any:
        return jt.triton_call(
            a,
            kernel=autotuned_scale_inplace_kernel,
            out_shape=a,
            grid=lambda m: (triton.cdiv(n, m["BLOCK"]),),
            n=n,
            factor=3.0,
            input_output_aliases={0: 0},
            launcher="jt",
        )

    first = np.asarray(jax.jit(f)(jnp.asarray(x)))
    np.testing.assert_allclose(first, x * 3.0, rtol=1e-6)  # scaled once, although every trial scaled it again
    again = np.asarray(jax.jit(f, donate_argnums=0)(jnp.asarray(x)))
    np.testing.assert_allclose(again, x * 3.0, rtol=1e-6)


def test_zeroed_output_is_zero_where_the_kernel_does_not_write() -> None:
    out = jax.jit(
        lambda: jt.triton_call(
            kernel=half_write_kernel,
            out_shape=jax.ShapeDtypeStruct((64,), jnp.float32),
            grid=1,
            n=64,
            BLOCK=64,
            zeroed_outputs=(0,),
            launcher="jt",
        )
    )()
    np.testing.assert_array_equal(np.asarray(out), np.r_[np.full(32, 7.0), np.zeros(32)].astype(np.float32))


def test_zeroed_accumulator_is_cleared_on_every_execution() -> None:
    x = np.random.default_rng(3).standard_normal(5000).astype(np.float32)
    f = jax.jit(
        lambda a: jt.triton_call(
            a,
            kernel=accumulate_kernel,
            out_shape=jax.ShapeDtypeStruct((1,), jnp.float32),
            grid=20,
            n=5000,
            BLOCK=256,
            zeroed_outputs=(0,),
            launcher="jt",
        )
    )
    for _ in range(3):
        np.testing.assert_allclose(np.asarray(f(x))[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)


def test_output_parameter_before_input_gets_the_right_buffers() -> None:
    x = np.random.default_rng(1).standard_normal(300).astype(np.float32)
    out = jax.jit(
        lambda a: jt.triton_call(
            kernel=out_first_kernel, x_ptr=a, scale=2.0, n=300, out_shape=a, grid=3, BLOCK=128, launcher="jt"
        )
    )(x)
    np.testing.assert_array_equal(np.asarray(out), x * 2)
