"""Numbers as Triton means them under the TPU's strategy (run on the CPU, as the TPU computes them): ``tl.fma`` rounded
once, bfloat16 rounded after each operation, sums and cumulative sums that keep ``-0.0``, and lanes read past an
array but never used that leave the outputs alone. Each is compared bit for bit with a reference computed apart."""

from __future__ import annotations

import itertools
from typing import Any

import jax
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl
from tpu_testlib import tpu_strategy_on_cpu

import jt_core as jt


def _on_the_tpu_strategy(fn: Any, *args: Any) -> Any:
    with tpu_strategy_on_cpu():
        return jax.tree.map(np.asarray, jax.jit(fn)(*args))


def _bits(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(np.uint16 if np.asarray(x).dtype.itemsize == 2 else np.uint32)


@triton.jit
def product_error_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offs)
    b = tl.load(b_ptr + offs)
    tl.store(out_ptr + offs, tl.fma(a, b, -(a * b)))


def test_fma_rounds_once_so_it_gives_a_products_rounding_error() -> None:
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(256).astype(np.float32) * 7 for _ in range(2))
    out = _on_the_tpu_strategy(
        lambda a, b: jt.triton_call(a, b, kernel=product_error_kernel, out_shape=a, grid=1, BLOCK=256), a, b
    )
    # The error of a float32 product is exact in float64 (48 significant bits) and representable in float32.
    want = (a.astype(np.float64) * b.astype(np.float64) - (a * b).astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(_bits(out), _bits(want))
    assert np.count_nonzero(out) > 200  # a twice-rounded fma would give zeros


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x * 3.0 - 3.0)


def test_bfloat16_is_rounded_after_each_operation() -> None:
    x = np.random.default_rng(4).uniform(0.5, 2.0, 128).astype(ml_dtypes.bfloat16)
    x[0] = 1 + 2**-7
    out = _on_the_tpu_strategy(
        lambda v: jt.triton_call(v, kernel=scale_shift_kernel, out_shape=v, grid=1, BLOCK=128), x
    )
    three = ml_dtypes.bfloat16(3.0)
    want = (x * three) - three  # ml_dtypes rounds each operation's result to bfloat16
    np.testing.assert_array_equal(_bits(out), _bits(want))
    assert float(out[0]) == 0.03125  # 0.0234375 where the product is kept in float32


@triton.jit
def signed_zero_sums_kernel(x_ptr, sum_ptr, forward_ptr, backward_ptr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * BLOCK + offs)
    tl.store(sum_ptr + row, tl.sum(x, 0))
    tl.store(forward_ptr + row * BLOCK + offs, tl.cumsum(x, 0))
    tl.store(backward_ptr + row * BLOCK + offs, tl.cumsum(x, 0, reverse=True))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16], ids=["float32", "bfloat16"])
def test_sums_and_cumulative_sums_keep_negative_zero(dtype: Any) -> None:
    x = np.array(
        [
            [-0.0] * 8,
            [-0.0, -0.0, 2.5, -0.0, -2.5, -0.0, -0.0, -0.0],
            [1.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -1.0],
            [-0.0, 0.0, -0.0, -0.0, -0.0, -0.0, -0.0, -0.0],
        ],
        dtype,
    )
    rows = jax.ShapeDtypeStruct((4,), dtype)

    def sums(v: Any) -> Any:
        return jt.triton_call(v, kernel=signed_zero_sums_kernel, out_shape=[rows, v, v], grid=4, BLOCK=8)

    total, forward, backward = _on_the_tpu_strategy(sums, x)
    # Every partial sum here is exact, so any order of adding the elements gives these; a zero's sign follows IEEE's
    # rules (-0.0 + -0.0 is -0.0, any other sum of zeros +0.0). NumPy's reductions start from +0.0: the running
    # sums are made here element by element instead.
    forward_want = np.array([list(itertools.accumulate(map(float, r))) for r in x], dtype)
    backward_want = np.array([list(itertools.accumulate(map(float, r[::-1])))[::-1] for r in x], dtype)
    np.testing.assert_array_equal(_bits(total), _bits(forward_want[:, -1]))
    np.testing.assert_array_equal(_bits(forward), _bits(forward_want))
    np.testing.assert_array_equal(_bits(backward), _bits(backward_want))
    assert np.signbit(total[0]) and np.signbit(forward[1, :2]).all() and np.signbit(backward[1, 5:]).all()


@triton.jit
def stray_lanes_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # Every lane loads (no mask), past the array's end too; only the lanes inside are stored.
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x * 2.0 + 1.0, mask=offs < n)


def test_lanes_read_past_an_array_but_never_used_leave_the_outputs_alone() -> None:
    x = np.linspace(-1.0, 1.0, 10, dtype=np.float32)
    out = _on_the_tpu_strategy(
        lambda v: jt.triton_call(v, n=10, kernel=stray_lanes_kernel, out_shape=v, grid=1, BLOCK=16), x
    )
    np.testing.assert_array_equal(out, x * np.float32(2.0) + np.float32(1.0))


@triton.jit
def float_bytes_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # Each float32's bytes, reversed, written through byte pointers into an output of float32: a float with its
    # bytes swapped.
    offs = tl.arange(0, BLOCK)
    src, dst = x_ptr.to(tl.pointer_type(tl.uint8)), out_ptr.to(tl.pointer_type(tl.uint8))
    tl.store(dst + (offs // 4) * 4 + 3 - offs % 4, tl.load(src + offs))


def test_pointer_casts_to_smaller_elements_move_the_bytes_a_gpu_would() -> None:
    x = np.random.default_rng(8).standard_normal(32).astype(np.float32)
    out = _on_the_tpu_strategy(
        lambda v: jt.triton_call(v, kernel=float_bytes_kernel, out_shape=v, grid=1, BLOCK=4 * v.size), x
    )
    np.testing.assert_array_equal(_bits(out), x.byteswap().view(np.uint32))


@triton.jit
def far_bounds_loop_kernel(lo_ptr, hi_ptr, out_ptr, STEP: tl.constexpr):
    # Each program's own bounds, loaded: programs side by side run the loop to the most trips, each masked past its
    # own end; the bounds' difference does not fit in 32 bits.
    pid = tl.program_id(0)
    lo = tl.load(lo_ptr + pid)
    hi = tl.load(hi_ptr + pid)
    trips = 0
    last = lo - 1
    for i in range(lo, hi, STEP):
        trips += 1
        last = i
    tl.store(out_ptr + 2 * pid, trips)
    tl.store(out_ptr + 2 * pid + 1, last)


@pytest.mark.parametrize("strategy", ["cpu", "tpu"])
def test_a_loop_counts_its_trips_in_32_bits_without_overflow(strategy: str) -> None:
    """The loop's counter and trip count are 32-bit (a TPU emulates 64-bit integers), and bounds two billion apart
    either side of zero count as Python's ``range`` does."""
    step = 1 << 28
    lo = np.array([-2_000_000_000, 5, 7, -(1 << 31), 2_000_000_000], np.int32)
    hi = np.array([2_000_000_000, 5, 1 << 30, (1 << 31) - 1, -5], np.int32)

    def call(lo: Any, hi: Any) -> Any:
        out = jax.ShapeDtypeStruct((2 * lo.size,), np.int32)
        return jt.triton_call(lo, hi, kernel=far_bounds_loop_kernel, out_shape=out, grid=(lo.size,), STEP=step)

    got = _on_the_tpu_strategy(call, lo, hi) if strategy == "tpu" else np.asarray(jax.jit(call)(lo, hi))
    want = [(len(r), r[-1] if len(r) else a - 1) for a, b in zip(lo.tolist(), hi.tolist()) for r in [range(a, b, step)]]
    assert got.reshape(-1, 2).tolist() == [list(w) for w in want]
