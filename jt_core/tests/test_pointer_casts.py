"""Pointer casts that reinterpret a buffer's elements as smaller ones (``x_ptr.to(tl.pointer_type(tl.uint8))`` over
float32): offsets then count the parts, read and written little-endian as a GPU's memory holds them, on both CPU
paths (jt-tpu's tests refuse a cast to larger elements, which the CPU hands to Triton's interpreter)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt

PATHS = ["compiled", "interpreter"]
pytestmark = pytest.mark.usefixtures("jt_cpu_paths_by_name")  # the path a call names is the one that runs it


@triton.jit
def bytes_of_kernel(x_ptr, out_ptr, n_bytes, BLOCK: tl.constexpr):
    # The bytes of a float32 buffer, read through a uint8 pointer.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    raw = x_ptr.to(tl.pointer_type(tl.uint8))
    tl.store(out_ptr + offs, tl.load(raw + offs, mask=offs < n_bytes), mask=offs < n_bytes)


@triton.jit
def halves_kernel(lo_ptr, hi_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # An int32 output written as its int16 halves, the low and high ones by different lanes.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    halves = out_ptr.to(tl.pointer_type(tl.int16))
    tl.store(halves + 2 * offs, tl.load(lo_ptr + offs, mask=live), mask=live)
    tl.store(halves + 2 * offs + 1, tl.load(hi_ptr + offs, mask=live), mask=live)


@triton.jit
def truncated_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # Each float32's high half read as a bfloat16 (the float truncated), doubled.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offs < n
    high = tl.load(x_ptr.to(tl.pointer_type(tl.bfloat16)) + 2 * offs + 1, mask=live)
    tl.store(out_ptr + offs, high.to(tl.float32) * 2.0, mask=live)


@pytest.mark.parametrize("launcher", PATHS)
def test_a_buffer_read_through_a_pointer_to_its_bytes(launcher: str) -> None:
    x = np.random.default_rng(0).standard_normal(37).astype(np.float32)

    def bytes_of(v: Any) -> Any:
        return jt.triton_call(
            v,
            kernel=bytes_of_kernel,
            out_shape=jax.ShapeDtypeStruct((v.size * 4,), jnp.uint8),
            grid=(triton.cdiv(v.size * 4, 64),),
            n_bytes=v.size * 4,
            BLOCK=64,
            launcher=launcher,
        )

    np.testing.assert_array_equal(np.asarray(jax.jit(bytes_of)(x)), x.view(np.uint8))


@pytest.mark.parametrize("launcher", PATHS)
def test_a_buffer_written_through_a_pointer_to_its_halves(launcher: str) -> None:
    rng = np.random.default_rng(1)
    lo, hi = (rng.integers(-(2**15), 2**15, 50).astype(np.int16) for _ in range(2))

    def joined(a: Any, b: Any) -> Any:
        return jt.triton_call(
            a,
            b,
            kernel=halves_kernel,
            out_shape=jax.ShapeDtypeStruct((50,), jnp.int32),
            grid=(triton.cdiv(50, 16),),
            n=50,
            BLOCK=16,
            launcher=launcher,
        )

    expected = np.stack([lo, hi], axis=1).reshape(-1).view(np.int32)
    np.testing.assert_array_equal(np.asarray(jax.jit(joined)(lo, hi)), expected)


@pytest.mark.parametrize("launcher", PATHS)
def test_a_floats_high_half_read_as_a_bfloat16(launcher: str) -> None:
    x = np.random.default_rng(2).standard_normal(40).astype(np.float32)

    def truncated(v: Any) -> Any:
        return jt.triton_call(v, kernel=truncated_kernel, out_shape=v, grid=(3,), n=v.size, BLOCK=16, launcher=launcher)

    expected = (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32) * 2
    np.testing.assert_array_equal(np.asarray(jax.jit(truncated)(x)), expected)
