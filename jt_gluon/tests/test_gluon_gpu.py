"""On an NVIDIA GPU: Gluon kernels run through jt.triton_call and match NumPy."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from gluon_kernels import (
    add_one_inplace_kernel,
    blocked_1d,
    blocked_cols,
    blocked_rows,
    copy_scalar_kernel,
    memcpy_kernel,
    row_sum_kernel,
    tile_axpy_kernel,
    tma_copy_kernel,
)
from triton.experimental.gluon import language as gl

import jt_core as jt

pytestmark = [pytest.mark.cuda, pytest.mark.requires_plugin("cuda")]

BLOCK = 256


@pytest.mark.parametrize("size", [40, 500, 16385])
def test_memcpy_copies_every_element(size: int) -> None:
    x = np.random.default_rng(size).standard_normal(size).astype(np.float32)
    out = jax.jit(
        lambda a: jt.triton_call(
            a,
            kernel=memcpy_kernel,
            out_shape=a,
            grid=(triton.cdiv(size, BLOCK),),
            n=size,
            BLOCK=BLOCK,
            layout=blocked_1d(32, 4),
            num_warps=4,
        )
    )(x)
    np.testing.assert_array_equal(np.asarray(out), x)


DTYPES = [
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]


@pytest.fixture
def x64() -> Any:
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_zero_dimensional_copy_keeps_the_value_and_dtype(dtype: Any, x64: Any) -> None:
    info = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else np.finfo(dtype)
    value = np.asarray(info.max // 3 if np.issubdtype(dtype, np.integer) else info.max / 3, dtype=dtype)
    out = jax.jit(lambda a: jt.triton_call(a, kernel=copy_scalar_kernel, out_shape=a, grid=1, num_warps=1))(value)
    result = np.asarray(out)
    assert result.shape == () and result.dtype == np.dtype(dtype)
    assert result == value


def test_in_place_through_an_alias() -> None:
    x = np.random.default_rng(3).integers(-100, 100, 1000).astype(np.int32)

    @jax.jit
    def f(a: Any) -> Any:
        return jt.triton_call(
            a,
            kernel=add_one_inplace_kernel,
            out_shape=a,
            grid=(triton.cdiv(1000, BLOCK),),
            n=1000,
            BLOCK=BLOCK,
            layout=blocked_1d(32, 4),
            input_output_aliases={0: 0},
        )

    np.testing.assert_array_equal(np.asarray(f(x)), x + 1)


def test_in_place_through_a_ref() -> None:
    x = np.random.default_rng(4).standard_normal(700).astype(np.float32)

    @jax.jit
    def f(a: Any) -> Any:
        ref = jax.new_ref(a)
        jt.triton_call(
            ref,
            kernel=add_one_inplace_kernel,
            out_shape=(),
            grid=(triton.cdiv(700, BLOCK),),
            n=700,
            BLOCK=BLOCK,
            layout=blocked_1d(32, 4),
        )
        return ref[...]

    np.testing.assert_allclose(np.asarray(f(x)), x + 1, rtol=0, atol=0)


def test_tile_axpy_with_a_layout_conversion() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((100, 70)).astype(np.float32)
    y = rng.standard_normal((100, 70)).astype(np.float32)
    out = jax.jit(
        lambda a, b: jt.triton_call(
            a,
            b,
            kernel=tile_axpy_kernel,
            out_shape=a,
            grid=(4, 3),
            M=100,
            N=70,
            alpha=1.5,
            BM=32,
            BN=32,
            load_layout=blocked_rows(32),
            store_layout=blocked_cols(32),
        )
    )(x, y)
    np.testing.assert_allclose(np.asarray(out), 1.5 * x + y, rtol=1e-6, atol=1e-6)


def test_row_sum_reduction() -> None:
    x = np.random.default_rng(6).standard_normal((100, 30)).astype(np.float32)
    out = jax.jit(
        lambda a: jt.triton_call(
            a,
            kernel=row_sum_kernel,
            out_shape=jax.ShapeDtypeStruct((100,), jnp.float32),
            grid=(7,),
            M=100,
            N=30,
            BM=16,
            BN=32,
            layout=blocked_rows(32),
        )
    )(x)
    np.testing.assert_allclose(np.asarray(out), x.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-5)


def test_device_side_tma_copy_on_sm90() -> None:
    device = jax.devices("cuda")[0]
    capability = getattr(device, "compute_capability", "0")
    if float(capability) < 9.0:
        pytest.skip(f"device-side TMA needs sm90+, this GPU is sm{capability}")
    x = np.random.default_rng(7).standard_normal((96, 64)).astype(np.float32)
    layout = gl.NVMMASharedLayout.get_default_for([32, 32], gl.float32)
    out = jax.jit(
        lambda a: jt.triton_call(
            a,
            kernel=tma_copy_kernel,
            out_shape=a,
            grid=(3, 2),
            M=96,
            N=64,
            BM=32,
            BN=32,
            smem_layout=layout,
            compute_capability=90,
        )
    )(x)
    np.testing.assert_array_equal(np.asarray(out), x)
