"""float8 on the CPU backend: conversions are exact or rounded as a GPU rounds them, checked against ml_dtypes, and
arithmetic on float8 values is refused (Triton's GPU compilers cannot compile it either), never silently wrong."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import UnsupportedKernelError

# The float8 types of NVIDIA GPUs; the CPU backend checks kernels with the front end of one (sm90), which refuses
# the AMD-only types (fp8e4b8, fp8e5b16) when the call is lowered.
FLOAT8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]
N = 256


@triton.jit
def widen_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask).to(tl.float32), mask=mask)


@triton.jit
def narrow_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr, TOWARD_ZERO: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if TOWARD_ZERO:
        y = x.to(out_ptr.dtype.element_ty, fp_downcast_rounding="rtz")
    else:
        y = x.to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + offsets, y, mask=mask)


@triton.jit
def widened_add_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
    y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(out_ptr + offsets, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def add_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def maximum_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, y), mask=mask)


@triton.jit
def select_abs_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(offsets % 2 == 0, tl.abs(x), y), mask=mask)


@triton.jit
def dot_kernel(a_ptr, b_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def _float32_out(n: int = N) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((n,), jnp.float32)


def _bits(array: object) -> np.ndarray:
    return np.asarray(array).view(np.uint8)


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: np.dtype(d).name)
def test_every_float8_value_widens_exactly(dtype: type) -> None:
    x = np.arange(N, dtype=np.uint8).view(dtype)
    out = jt.triton_call(jnp.asarray(x), N, kernel=widen_kernel, out_shape=_float32_out(), grid=(4,), BLOCK=64)
    np.testing.assert_array_equal(np.asarray(out), x.astype(np.float32))


def _narrowing_inputs(dtype: type, rng: np.random.Generator) -> np.ndarray:
    top = float(ml_dtypes.finfo(dtype).max)
    tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal)
    values = rng.standard_normal(N).astype(np.float32) * np.float32(top / 16)
    # Rounding that carries into the exponent, halfway cases, subnormals, beyond the range, and specials.
    special = np.array(
        [31.3, -31.3, 7.9, 15.5, 0.5 * tiny, 1.5 * tiny, 3 * tiny, top * 1.001, -top * 4, np.inf, -np.inf, 0.0, -0.0],
        dtype=np.float32,
    )
    values[: special.size] = special
    return values


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: np.dtype(d).name)
def test_narrowing_rounds_to_nearest_even_and_saturates(dtype: type) -> None:
    values = _narrowing_inputs(dtype, np.random.default_rng(1))
    out = jt.triton_call(
        jnp.asarray(values),
        N,
        kernel=narrow_kernel,
        out_shape=jax.ShapeDtypeStruct((N,), dtype),
        grid=(4,),
        BLOCK=64,
        TOWARD_ZERO=False,
    )
    top = float(ml_dtypes.finfo(dtype).max)
    expected = np.clip(values, -top, top).astype(dtype)  # NVIDIA's cvt.rn.satfinite
    np.testing.assert_array_equal(_bits(out), expected.view(np.uint8))


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: np.dtype(d).name)
def test_narrowing_toward_zero_never_grows_the_magnitude(dtype: type) -> None:
    values = _narrowing_inputs(dtype, np.random.default_rng(2))
    finite = np.isfinite(values)
    out = jt.triton_call(
        jnp.asarray(values),
        N,
        kernel=narrow_kernel,
        out_shape=jax.ShapeDtypeStruct((N,), dtype),
        grid=(4,),
        BLOCK=64,
        TOWARD_ZERO=True,
    )
    got = np.asarray(out).astype(np.float64)
    top = float(ml_dtypes.finfo(dtype).max)
    clipped = np.clip(values.astype(np.float64), -top, top)
    # The reference: the largest representable magnitude not above the input's, with the input's sign.
    magnitudes = np.unique(np.abs(np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)))
    magnitudes = magnitudes[np.isfinite(magnitudes)]
    below = magnitudes[np.searchsorted(magnitudes, np.abs(clipped[finite]), side="right") - 1]
    np.testing.assert_array_equal(got[finite], np.copysign(below, clipped[finite]))


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: np.dtype(d).name)
def test_arithmetic_on_widened_values_matches_ml_dtypes(dtype: type) -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(N) * 4).astype(dtype)
    y = (rng.standard_normal(N) * 4).astype(dtype)
    out = jt.triton_call(jnp.asarray(x), jnp.asarray(y), N, kernel=widened_add_kernel, out_shape=x, grid=(4,), BLOCK=64)
    expected = (x.astype(np.float32) + y.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(_bits(out), expected.view(np.uint8))


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: np.dtype(d).name)
def test_where_and_abs_keep_float8_values(dtype: type) -> None:
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(N) * 4).astype(dtype)
    y = (rng.standard_normal(N) * 4).astype(dtype)
    out = jt.triton_call(jnp.asarray(x), jnp.asarray(y), N, kernel=select_abs_kernel, out_shape=x, grid=(4,), BLOCK=64)
    expected = np.where(np.arange(N) % 2 == 0, np.abs(x.astype(np.float32)), y.astype(np.float32)).astype(dtype)
    np.testing.assert_array_equal(_bits(out), expected.view(np.uint8))


@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: np.dtype(d).name)
def test_dot_of_float8_operands_accumulates_in_float32(dtype: type) -> None:
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((16, 32)) * 2).astype(dtype)
    b = (rng.standard_normal((32, 16)) * 2).astype(dtype)
    out = jt.triton_call(
        jnp.asarray(a),
        jnp.asarray(b),
        kernel=dot_kernel,
        out_shape=jax.ShapeDtypeStruct((16, 16), jnp.float32),
        grid=(1,),
        M=16,
        N=16,
        K=32,
    )
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kernel, what", [(add_kernel, "add"), (maximum_kernel, "(maximum|fmax)")])
@pytest.mark.parametrize("dtype", FLOAT8, ids=lambda d: np.dtype(d).name)
def test_arithmetic_on_float8_values_is_refused_with_the_fix(dtype: type, kernel: object, what: str) -> None:
    x = np.arange(8).astype(dtype)
    tl_name = {ml_dtypes.float8_e4m3fn: "float8e4nv", ml_dtypes.float8_e5m2: "float8e5"}[dtype]
    with pytest.raises(Exception) as raised:
        out = jt.triton_call(jnp.asarray(x), jnp.asarray(x), 8, kernel=kernel, out_shape=x, grid=(1,), BLOCK=8)
        np.asarray(out)
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, UnsupportedKernelError)
    message = str(error)
    assert re.search(f"{what} on fp8", message)
    assert "x.to(tl.float32)" in message and f".to(tl.{tl_name})" in message
    assert "program_id (0, 0, 0)" in message
