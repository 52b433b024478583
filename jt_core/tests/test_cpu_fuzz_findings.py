"""What the CPU paths' differential fuzzer (`test_cpu_fuzz`) found, each reduced to one small kernel: the compiled
path and the interpreter must compute what Triton means, or say clearly why they cannot.

A test marked ``xfail(strict=True)`` shows a divergence not fixed yet: it starts passing (and so failing as an
unexpected pass) once the fix lands; then drop the mark and the matching entry of
`test_cpu_fuzz.KNOWN_DIVERGENCES`.
"""

from __future__ import annotations

import logging
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl
from cpu_fuzz_semantics import fma32
from triton.language.extra import libdevice

import jt_core as jt
from jt_core import _compat

TRITON = tuple(int(p) for p in triton.__version__.split(".")[:2])
TRITON_3_6 = TRITON < (3, 7)


@pytest.fixture(autouse=True)
def each_path_as_asked(jt_cpu_paths_by_name: None) -> None:
    """Each call runs on the path it names (CI's second run turns on switches that would send compiled calls to
    the interpreter)."""


def run(kernel: Any, *args: Any, launcher: str, **kwargs: Any) -> list[np.ndarray]:
    """The call's outputs under ``jax.jit``, its arrays traced and its scalars passed as they are."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]

    def call(*traced: Any) -> Any:
        given = iter(traced)
        operands = [next(given) if isinstance(a, np.ndarray) else a for a in args]
        return jt.triton_call(*operands, kernel=kernel, launcher=launcher, **kwargs)

    with jax.enable_x64(True):
        out = jax.jit(call)(*arrays)
        return [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]


def run_compiled_alone(kernel: Any, *args: Any, **kwargs: Any) -> list[np.ndarray]:
    """The compiled path's results; fails if it handed the kernel to the interpreter."""
    said: list[str] = []

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    logger = logging.getLogger("jt_core.lowering")
    watch = Watch(logging.INFO)
    level = logger.level
    logger.addHandler(watch)
    logger.setLevel(logging.INFO)
    try:
        results = run(kernel, *args, launcher="compiled", **kwargs)
    finally:
        logger.removeHandler(watch)
        logger.setLevel(level)
    handed = [m for m in said if "cannot express" in m]
    assert not handed, handed
    return results


# -- tl.math.exp2 ---------------------------------------------------------------------------------------------------


@triton.jit
def exp2_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.math.exp2(tl.load(x_ptr + offs)))


def test_exp2_is_accurate_to_a_few_units_in_the_last_place_on_the_compiled_path() -> None:
    """On every jaxlib: before 0.12.1, XLA's exp2 was exp(x * ln 2), ~35 ulps off near |x| = 100."""
    x = np.array([-63, 47, 115, -120.5, 100.25, 3.0, 0.5, -1.25] * 2, np.float32)
    (got,) = run_compiled_alone(exp2_kernel, x, out_shape=x, grid=1, BLOCK=16)
    want = np.exp2(x.astype(np.float64)).astype(np.float32)
    ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
    assert ulps.max() <= 2, dict(zip(x.tolist(), ulps.tolist(), strict=True))


# -- 64-bit high halves of products ---------------------------------------------------------------------------------


@triton.jit
def umulhi_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.umulhi(tl.load(x_ptr + offs), tl.load(y_ptr + offs)))


@triton.jit
def libdevice_mulhi_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, libdevice.mulhi(tl.load(x_ptr + offs), tl.load(y_ptr + offs)))


def _high_halves(x: np.ndarray, y: np.ndarray, signed: bool) -> np.ndarray:
    def as_int(v: Any) -> int:
        return int(v) if signed else int(v) % 2**64

    high = [(as_int(a) * as_int(b)) >> 64 for a, b in zip(x, y, strict=True)]
    return np.array([h % 2**64 for h in high], np.uint64).view(x.dtype)


WIDE = np.array([-1, 2**40 + 3, 3, -(2**62), 2**63 - 1, -5, 12345678901, -(2**63)] * 2, np.int64)
OTHER = np.array([-1, 2**30, 5, 7, 2**63 - 1, -(2**40), -3, -(2**63)] * 2, np.int64)


def test_umulhi_of_64_bit_integers_runs_on_the_compiled_path() -> None:
    (got,) = run_compiled_alone(umulhi_kernel, WIDE, OTHER, out_shape=WIDE, grid=1, BLOCK=16)
    np.testing.assert_array_equal(got, _high_halves(WIDE, OTHER, signed=False))


def test_libdevice_mulhi_of_64_bit_integers_runs_on_the_compiled_path() -> None:
    (got,) = run_compiled_alone(libdevice_mulhi_kernel, WIDE, OTHER, out_shape=WIDE, grid=1, BLOCK=16)
    np.testing.assert_array_equal(got, _high_halves(WIDE, OTHER, signed=True))


# -- the interpreter --------------------------------------------------------------------------------------------------


@triton.jit
def libdevice_rint_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, libdevice.rint(tl.load(x_ptr + offs)))


def test_libdevice_functions_run_in_the_interpreter() -> None:
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49999997, 3.7] * 2, np.float32)
    (got,) = run(libdevice_rint_kernel, x, out_shape=x, grid=1, BLOCK=16, launcher="interpreter")
    np.testing.assert_array_equal(got, np.rint(x))


@triton.jit
def scalar_masked_store_kernel(init_ptr, s, n, out_ptr, BLOCK: tl.constexpr, FLOAT: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if FLOAT:
        condition = s.to(tl.float32, bitcast=True) != 0
    else:
        condition = s != 0
    tl.store(out_ptr + offs, offs, mask=(offs < n) & condition)


@pytest.mark.parametrize("compared", ["int", "float"])
@pytest.mark.parametrize("s", [0, 2])
def test_a_mask_combining_block_and_scalar_conditions_runs_in_the_interpreter(s: int, compared: str) -> None:
    """A scalar condition and-ed into a block one: the interpreter's comparisons kept their operands' type on the
    result, which the splat of the scalar condition read (int32 ones: a mask Triton 3.9's store refuses; float32
    ones: a bitwise and Triton 3.6's refuses)."""
    if compared == "float" and s != 0 and _compat.jaxlib_version() < (0, 11):
        pytest.skip(
            "jaxlib 0.10's XLA folds a comparison of a subnormal float32 constant (the bits of 2) as one of zero, as "
            "its CPU code compares subnormals at run time: the compiled path's known flush of subnormals"
        )
    init = np.full(16, -7, np.int32)
    want = np.where((np.arange(16) < 11) & (s != 0), np.arange(16), -7).astype(np.int32)
    for launcher in ("compiled", "interpreter"):
        (got,) = run(
            scalar_masked_store_kernel,
            init,
            s,
            11,
            out_shape=init,
            input_output_aliases={0: 0},
            grid=1,
            BLOCK=16,
            FLOAT=compared == "float",
            launcher=launcher,
        )
        np.testing.assert_array_equal(got, want, err_msg=launcher)


@triton.jit
def pair_combine(a0, a1, b0, b1):
    return a0 + b0, tl.maximum(a1, b1)


@triton.jit
def tuple_reduce_kernel(x_ptr, sum_ptr, max_ptr, R: tl.constexpr, C: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    total, largest = tl.reduce((x, x * 2), None, pair_combine)
    tl.store(sum_ptr, total)
    tl.store(max_ptr, largest)


def test_reducing_a_tuple_over_all_axes_runs_in_the_interpreter() -> None:
    x = np.random.default_rng(0).integers(-50, 50, (4, 8)).astype(np.int32)
    scalar = jax.ShapeDtypeStruct((1,), jnp.int32)
    for launcher in ("compiled", "interpreter"):
        total, largest = run(tuple_reduce_kernel, x, out_shape=[scalar, scalar], grid=1, R=4, C=8, launcher=launcher)
        assert (int(total[0]), int(largest[0])) == (int(x.sum()), int(2 * x.max())), launcher


@triton.jit
def sum_to_scalar_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, BLOCK)), axis=0))


@pytest.mark.parametrize("dtype", [np.uint32, np.int64])
def test_a_zero_dimensional_output_runs_in_the_interpreter(dtype: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The interpreter poisons a 0-d integer output, as the race check fills it, through a 1-d view of its bytes."""
    x = np.arange(8).astype(dtype)
    for launcher in ("compiled", "interpreter", "checked"):
        if launcher == "checked":
            launcher = "interpreter"
            monkeypatch.setenv("JT_CPU_RACE_CHECK", "1")
            monkeypatch.setenv("JT_CPU_UNWRITTEN", "error")
        (got,) = run(
            sum_to_scalar_kernel, x, out_shape=jax.ShapeDtypeStruct((), dtype), grid=1, BLOCK=8, launcher=launcher
        )
        assert got.shape == () and got == 28, launcher


@triton.jit
def int_sum_kernel(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    tl.store(out_ptr, tl.sum(x, axis=None))
    tl.store(out_ptr + 1 + tl.arange(0, C), tl.sum(x, axis=0))


def test_an_integer_sum_wraps_in_its_type_in_the_interpreter() -> None:
    """Triton 3.6's interpreter summed with ``np.sum``, which widens int32, and failed to convert the total."""
    x = np.random.default_rng(2).integers(2**29, 2**31 - 1, (4, 8)).astype(np.int32)
    want = np.array([x.sum(dtype=np.int64), *x.sum(axis=0, dtype=np.int64)]).astype(np.int32)
    for launcher in ("compiled", "interpreter"):
        (got,) = run(
            int_sum_kernel, x, out_shape=jax.ShapeDtypeStruct((9,), jnp.int32), grid=1, R=4, C=8, launcher=launcher
        )
        np.testing.assert_array_equal(got, want, err_msg=launcher)


# -- scans ------------------------------------------------------------------------------------------------------------


@triton.jit
def second(a, b):
    return b


@triton.jit
def scan_second_kernel(x_ptr, out_ptr, sum_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.associative_scan(x, 0, second))
    tl.store(sum_ptr + offs, tl.cumsum(x, 0))


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16])
def test_a_scan_keeps_negative_zeros_on_the_compiled_path(dtype: Any) -> None:
    """A scan combines the elements alone: nothing adds +0.0 to a -0.0 (``lax.associative_scan`` interleaves its
    partial results by adding zeros, and XLA's cumulative sum starts from +0.0)."""
    x = np.array([-0.0, -0.0, -0.0, -0.0, 2.5, -0.0, -2.5, -0.0], dtype)
    sums = np.array([-0.0, -0.0, -0.0, -0.0, 2.5, 2.5, 0.0, 0.0], dtype)
    for launcher in ("interpreter", "compiled"):
        got, summed = run(scan_second_kernel, x, out_shape=[x, x], grid=1, BLOCK=8, launcher=launcher)
        np.testing.assert_array_equal(got.view(np.uint8), x.view(np.uint8), err_msg=launcher)
        np.testing.assert_array_equal(summed.view(np.uint8), sums.view(np.uint8), err_msg=launcher)


@triton.jit
def row_extremes_kernel(x_ptr, max_ptr, min_ptr, COLS: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * COLS + tl.arange(0, COLS))
    tl.store(max_ptr + row, tl.max(x, 0))
    tl.store(min_ptr + row, tl.min(x, 0))


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")  # Triton's interpreter, on a row of NaNs
def test_max_and_min_reductions_pass_over_nans_unless_all_are() -> None:
    """``tl.max``/``tl.min`` combine with ``maxnumf``/``minnumf``: a NaN is passed over, and only a row of NaNs
    gives NaN (NumPy's ``fmax``/``fmin``)."""
    x = np.random.default_rng(7).standard_normal((6, 16)).astype(np.float32)
    x[1, 3] = x[2, 0] = x[2, 15] = np.nan
    x[3] = np.nan
    x[4, :15] = np.nan
    x[5] = -np.inf
    rows = jax.ShapeDtypeStruct((6,), np.float32)
    for launcher in ("interpreter", "compiled"):
        top, bottom = run(row_extremes_kernel, x, out_shape=[rows, rows], grid=6, COLS=16, launcher=launcher)
        np.testing.assert_array_equal(top, np.fmax.reduce(x, axis=1), err_msg=launcher)
        np.testing.assert_array_equal(bottom, np.fmin.reduce(x, axis=1), err_msg=launcher)


# -- atomics ----------------------------------------------------------------------------------------------------------


@triton.jit
def cas_kernel(c_ptr, v_ptr, init_ptr, out_ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    old = tl.atomic_cas(out_ptr + offs, tl.load(c_ptr + offs), tl.load(v_ptr + offs))
    tl.store(old_ptr + offs, old)


def test_atomic_cas_on_floats_compares_bits() -> None:
    memory = np.array([-0.0, 0.0, np.nan, 1.0, 2.0, -0.0, 3.0, np.nan], np.float32)
    compare = np.array([0.0, -0.0, np.nan, 1.0, 2.5, -0.0, 3.0, 1.0], np.float32)
    value = np.arange(5, 13).astype(np.float32)
    swapped = memory.view(np.uint32) == compare.view(np.uint32)
    for launcher in ("interpreter", "compiled"):
        final, old = run(
            cas_kernel,
            compare,
            value,
            memory,
            out_shape=[memory, memory],
            input_output_aliases={2: 0},
            grid=1,
            BLOCK=8,
            launcher=launcher,
        )
        np.testing.assert_array_equal(old.view(np.uint32), memory.view(np.uint32), err_msg=launcher)
        want = np.where(swapped, value, memory)
        np.testing.assert_array_equal(final.view(np.uint32), want.view(np.uint32), err_msg=launcher)


@triton.jit
def xchg_kernel(v_ptr, init_ptr, out_ptr, old_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(old_ptr + offs, tl.atomic_xchg(out_ptr + offs, tl.load(v_ptr + offs)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_atomic_xchg_of_floats_runs_in_the_interpreter(dtype: Any) -> None:
    value = np.array([0.5, -1.0, np.inf, -0.0], dtype)
    memory = np.array([10.0, np.nan, -3.25, 7.0], dtype)
    for launcher in ("compiled", "interpreter"):
        final, old = run(
            xchg_kernel,
            value,
            memory,
            out_shape=[memory, memory],
            input_output_aliases={1: 0},
            grid=1,
            BLOCK=4,
            launcher=launcher,
        )
        np.testing.assert_array_equal(final.view(f"u{final.itemsize}"), value.view(f"u{value.itemsize}"))
        np.testing.assert_array_equal(old.view(f"u{old.itemsize}"), memory.view(f"u{memory.itemsize}"))


# -- rounding -------------------------------------------------------------------------------------------------------


@triton.jit
def fma_then_add_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x + tl.fma(x, x, 0.0))


def test_an_addition_after_fma_rounds_on_its_own_on_the_compiled_path() -> None:
    x = (np.random.default_rng(0).standard_normal(256) * 3e4).astype(np.float32)
    want = (x + (x.astype(np.float64) * x).astype(np.float32)).astype(np.float32)
    for launcher in ("interpreter", "compiled"):
        (got,) = run(fma_then_add_kernel, x, out_shape=x, grid=1, BLOCK=256, enable_fp_fusion=False, launcher=launcher)
        np.testing.assert_array_equal(got, want, err_msg=launcher)


@triton.jit
def add_scalar_kernel(x_ptr, s, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + s)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_adding_a_zero_scalar_to_negative_zero_gives_positive_zero(dtype: Any) -> None:
    x = np.array([-0.0, 1.5, -0.0, -2.0] * 4, dtype)
    for launcher in ("interpreter", "compiled"):
        (got,) = run(add_scalar_kernel, x, 0.0, out_shape=x, grid=1, BLOCK=16, launcher=launcher)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(x + dtype(0.0)), err_msg=launcher)


@triton.jit
def add_program_id_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.program_id(1) + tl.load(x_ptr + offs))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_adding_the_program_id_of_a_one_program_axis_to_negative_zero_gives_positive_zero(dtype: Any) -> None:
    """``tl.program_id(1)`` is 0 for a grid of one axis: the compiled path knows it when tracing, and its
    conversion to a float must not let XLA's simplifier drop the addition as ``x + 0.0``."""
    x = np.array([-0.0, 1.5, -0.0, -2.0] * 8, dtype)
    for launcher in ("interpreter", "compiled"):
        (got,) = run(add_program_id_kernel, x, out_shape=x, grid=(4,), BLOCK=8, launcher=launcher)
        np.testing.assert_array_equal(got.view(f"u{x.itemsize}"), (x + dtype(0.0)).view(f"u{x.itemsize}"), launcher)


@triton.jit
def loop_index_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    for i in range(0, n, 1):
        acc = acc + i.to(tl.int32) + (i == 0).to(tl.int32)
    for j in tl.range(1, n, num_stages=1):  # a pipelining hint, as Triton's tutorials give it
        acc = acc + j.to(tl.int32) * 10
    for k in tl.static_range(2):  # unrolled with constants: k is a Python int to the code generator
        acc = acc + tl.full((BLOCK,), k * 100, tl.int32)
    tl.store(out_ptr + offs, acc)


def test_a_loop_index_is_a_tensor_in_the_interpreter() -> None:
    """Compiled Triton's ``scf.for`` counter is an int32 tensor (``i.to(...)`` works); Triton's interpreter alone
    gave a Python int. ``tl.static_range`` keeps a Python int."""
    x = np.arange(8, dtype=np.int32)
    for launcher in ("compiled", "interpreter"):
        (got,) = run(loop_index_kernel, x, 3, out_shape=x, grid=1, BLOCK=8, launcher=launcher)
        np.testing.assert_array_equal(got, x + 4 + 30 + 100, err_msg=launcher)


@triton.jit
def loop_index_type_kernel(out_ptr, start):
    # The counter's type shows in its arithmetic: a 32-bit counter wraps, a 64-bit one does not.
    for i in range(start, start + 1):
        tl.store(out_ptr, (i + 2_000_000_000).to(tl.int64))


@pytest.mark.parametrize(
    ("start", "expected"),
    [(1_000_000_000, 3_000_000_000 - 2**32), (3_000_000_000, 5_000_000_000 - 2**32), (5_000_000_000, 7_000_000_000)],
    ids=["int32", "uint32", "int64"],
)
def test_a_loop_counter_has_the_type_of_its_bounds_in_both_paths(start: int, expected: int) -> None:
    """The counter has its bounds' type (a scalar argument's: int32, uint32 from 2**31, int64 from 2**32), whose sums
    wrap at its width: the compiled path and the interpreter agree, as the code generator types ``scf.for``."""
    out = jax.ShapeDtypeStruct((1,), jnp.int64)
    for launcher in ("compiled", "interpreter"):
        (got,) = run(loop_index_type_kernel, out_shape=out, grid=1, start=start, launcher=launcher)
        assert int(got[0]) == expected, launcher


# -- Triton's interpreter in older releases -----------------------------------------------------------------------


@triton.jit
def invert_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, ~tl.load(x_ptr + offs))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32])
def test_inverting_unsigned_integers_runs_in_the_interpreter(dtype: Any) -> None:
    """Before 3.9, Triton's interpreter built ``~x``'s all-ones operand as ``np.full(1, -1, uint8)``, which NumPy 2
    refuses; jt's run builds it as the type's largest value."""
    x = np.arange(16).astype(dtype) * 7
    for launcher in ("compiled", "interpreter"):
        (got,) = run(invert_kernel, x, out_shape=x, grid=1, BLOCK=16, launcher=launcher)
        np.testing.assert_array_equal(got, ~x, err_msg=launcher)


@triton.jit
def minimum_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.minimum(tl.load(x_ptr + offs), tl.load(y_ptr + offs)))


@pytest.mark.xfail(
    TRITON_3_6,
    strict=True,
    reason="Triton 3.6's interpreter computes minnumf (tl.minimum's default, propagate_nan=NONE) with np.minimum "
    "and clampf with np.clip, which propagate NaN (Triton's own, fixed in later releases)",
)
def test_minimum_ignores_a_nan_operand_in_the_interpreter() -> None:
    x = np.array([np.nan, 1.0, np.nan, -2.0] * 4, np.float32)
    y = np.array([3.0, np.nan, np.nan, 5.0] * 4, np.float32)
    for launcher in ("compiled", "interpreter"):
        (got,) = run(minimum_kernel, x, y, out_shape=x, grid=1, BLOCK=16, launcher=launcher)
        np.testing.assert_array_equal(got, np.fmin(x, y), err_msg=launcher)
        (clamped,) = run(clamp_kernel, x, out_shape=x, grid=1, BLOCK=16, launcher=launcher)
        np.testing.assert_array_equal(clamped, np.fmin(np.fmax(x, -1.0), 1.0), err_msg=launcher)


@triton.jit
def clamp_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.clamp(tl.load(x_ptr + offs), -1.0, 1.0))


@triton.jit
def unchanged_loop_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    for _ in range(0, n):
        acc = acc
    tl.store(out_ptr + offs, acc)


def test_a_loop_that_keeps_its_carried_value_runs_on_the_compiled_path() -> None:
    x = np.arange(8, dtype=np.int32)
    (got,) = run_compiled_alone(unchanged_loop_kernel, x, 3, out_shape=x, grid=1, BLOCK=8)
    np.testing.assert_array_equal(got, x)


@triton.jit
def while_negate_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.load(x_ptr + offs)
    i = tl.full([], 0, tl.int32)
    while i < n:
        acc = -acc
        i += 2
    tl.store(out_ptr + offs, acc)


def test_a_while_loop_bounded_by_one_runs_once_on_the_compiled_path() -> None:
    """Triton 3.6 makes an argument equal to 1 a constant; XLA's loop analysis in jaxlib 0.11.2 then counted no trip
    of the loop (its start, bound and step all constants) and removed it."""
    x = np.arange(1, 9, dtype=np.int8)
    for n, want in ((1, -x), (3, x), (5, -x)):
        (got,) = run_compiled_alone(while_negate_kernel, x, n, out_shape=x, grid=1, BLOCK=8)
        np.testing.assert_array_equal(got, want, err_msg=f"n = {n}")


@triton.jit
def fma_kernel(x_ptr, y_ptr, z_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.fma(tl.load(x_ptr + offs), tl.load(y_ptr + offs), tl.load(z_ptr + offs)))


def test_fma_rounds_once_in_the_interpreter() -> None:
    """Triton 3.6's interpreter computes ``tl.fma`` as ``x * y + z``, rounding twice; jt's run rounds it once."""
    rng = np.random.default_rng(1)
    x, y, z = ((rng.standard_normal(256) * 3e4).astype(np.float32) for _ in range(3))
    want = fma32(x, y, z)
    assert (want != x * y + z).any()  # the data tell one rounding from two
    (got,) = run(fma_kernel, x, y, z, out_shape=x, grid=1, BLOCK=256, launcher="interpreter")
    np.testing.assert_array_equal(got, want)


@triton.jit
def bf16_plus_literal_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 0.5)


def test_a_literal_meets_a_bfloat16_block_in_the_interpreter() -> None:
    x = np.linspace(-4, 4, 16).astype(ml_dtypes.bfloat16)
    for launcher in ("compiled", "interpreter"):
        (got,) = run(bf16_plus_literal_kernel, x, out_shape=x, grid=1, BLOCK=16, launcher=launcher)
        want = (x.astype(np.float32) + 0.5).astype(ml_dtypes.bfloat16)
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16), err_msg=launcher)


# -- rounding toward zero -------------------------------------------------------------------------------------------


@triton.jit
def toward_zero_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.cast(x, out_ptr.dtype.element_ty, fp_downcast_rounding="rtz"))


#: Each narrowing conversion between the float types, as (source, target).
NARROWING = [
    (np.float32, np.float16),
    (np.float32, ml_dtypes.bfloat16),
    (np.float64, np.float32),
    (np.float64, np.float16),
    (np.float64, ml_dtypes.bfloat16),
]


def _rounded(x: np.ndarray, target: Any, toward_zero: bool) -> np.ndarray:
    """``x`` rounded to ``target`` in float64, by the definition: whole multiples of the spacing of ``target``'s
    values at ``|x|``, truncated (at most the largest finite value) or rounded to the even one (past the largest
    finite value by half a spacing or more: an infinity)."""
    info = ml_dtypes.finfo(target)
    wide = np.abs(x.astype(np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        _, exponent = np.frexp(wide)
        binade = np.maximum(exponent - 1, int(info.minexp))
        spacing = np.ldexp(1.0, binade - int(info.nmant))
        whole = (np.floor if toward_zero else np.rint)(wide / spacing) * spacing
    if toward_zero:
        finite = np.where(np.isfinite(wide), np.minimum(whole, float(info.max)), wide)
    else:
        finite = np.where(np.isfinite(wide) & (whole > float(info.max)), np.inf, whole)
    return np.copysign(finite, x.astype(np.float64)).astype(target)


def _toward_zero(x: np.ndarray, target: Any) -> np.ndarray:
    return _rounded(x, target, toward_zero=True)


def _same_floats(got: np.ndarray, want: np.ndarray) -> bool:
    bits = f"u{want.dtype.itemsize}"
    same = got.view(bits) == want.view(bits)
    return bool((same | (np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64)))).all())


def _downcast(x: np.ndarray, target: Any, launcher: str) -> np.ndarray:
    out = jax.ShapeDtypeStruct(x.shape, target)
    runner = run_compiled_alone if launcher == "compiled" else lambda *a, **k: run(*a, launcher=launcher, **k)
    (got,) = runner(toward_zero_kernel, x, out_shape=out, grid=1, BLOCK=x.size)
    return got


@pytest.mark.parametrize(("source", "target"), NARROWING, ids=lambda t: np.dtype(t).name)
def test_rounding_toward_zero_gives_the_largest_finite_value_beyond_the_range(source: Any, target: Any) -> None:
    """``cvt.rz`` (``fp_downcast_rounding="rtz"``): a finite value beyond the target's range becomes its largest
    finite value, not an infinity or a NaN; infinities and NaN stay what they are."""
    largest = float(ml_dtypes.finfo(target).max)
    beyond = [min(largest * factor, float(np.finfo(source).max)) for factor in (1.0001, 1.5, 16, np.inf)]
    x = np.array([*beyond, *(-b for b in beyond), np.inf, -np.inf, np.nan, largest, -largest, 1.0, -0.0, 0.0], source)
    want = _toward_zero(x, target)
    assert want[0] == largest and want[4] == -largest
    for launcher in ("compiled", "interpreter"):
        got = _downcast(x, target, launcher)
        assert _same_floats(got, want), (launcher, got, want)


@pytest.mark.parametrize(("source", "target"), NARROWING, ids=lambda t: np.dtype(t).name)
def test_rounding_toward_zero_truncates_every_value(source: Any, target: Any) -> None:
    """Toward zero, never to nearest: the target's value next to each, no larger in magnitude, zeros of both signs
    and the target's subnormals included, bit for bit on both paths."""
    rng = np.random.default_rng(11)
    tiny = float(ml_dtypes.finfo(target).smallest_subnormal)
    values = np.concatenate(
        [
            rng.standard_normal(40) * rng.choice([1.0, 1e3, 1e-3], 40),
            rng.integers(-50, 50, 8) + 0.5,
            rng.uniform(1, 2**24, 8) * tiny * rng.choice([-1, 1], 8),  # the target's subnormals and smallest normals
            [0.0, -0.0, 1.0, -1.0, 1 / 3, -2 / 3, 65519.0, -65520.0],
        ]
    )
    x = values.astype(source)
    want = _toward_zero(x, target)
    with np.errstate(over="ignore"):
        nearest = x.astype(np.float64).astype(np.float32).astype(target)
    assert (want.astype(np.float64) != nearest.astype(np.float64)).sum() > 8  # the data tell the two roundings apart
    for launcher in ("compiled", "interpreter"):
        got = _downcast(x, target, launcher)
        assert _same_floats(got, want), (launcher, x[got.view(f"u{got.itemsize}") != want.view(f"u{got.itemsize}")])


@triton.jit
def to_nearest_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(out_ptr.dtype.element_ty))


@pytest.mark.parametrize("target", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_narrowing_float64_rounds_once(target: Any) -> None:
    """``x.to(tl.float16)`` of a float64 rounds to nearest once, as ``cvt.rn.f16.f64`` does: a value a little past
    a midpoint of the target's neighbours goes to the farther one. XLA narrows float64 through float32, where such a
    value becomes the midpoint itself and then goes to the even neighbour."""
    rng = np.random.default_rng(12)
    info = ml_dtypes.finfo(target)
    mantissa = rng.integers(2 ** int(info.nmant), 2 ** (int(info.nmant) + 1), 32).astype(np.float64)
    offset = rng.choice([0.5 + 2.0**-30, 0.5 - 2.0**-30], 32)
    x = np.ldexp(mantissa + offset, rng.integers(-10, 10, 32) - int(info.nmant)) * rng.choice([-1.0, 1.0], 32)
    want = _rounded(x, target, toward_zero=False)
    twice = x.astype(np.float32).astype(target)
    assert (want.view(np.uint16) != twice.view(np.uint16)).sum() >= 8  # rounding twice is wrong for these
    out = jax.ShapeDtypeStruct(x.shape, target)
    (compiled,) = run_compiled_alone(to_nearest_kernel, x, out_shape=out, grid=1, BLOCK=32)
    (interpreted,) = run(to_nearest_kernel, x, out_shape=out, grid=1, BLOCK=32, launcher="interpreter")
    assert _same_floats(compiled, want) and _same_floats(interpreted, want), (compiled, interpreted, want)


# -- arithmetic on int1 ---------------------------------------------------------------------------------------------


@triton.jit
def int1_kernel(a_ptr, b_ptr, c_ptr, d_ptr, out_ptr, BLOCK: tl.constexpr, OP: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = tl.load(a_ptr + offs) > tl.load(b_ptr + offs)
    q = tl.load(c_ptr + offs) > tl.load(d_ptr + offs)
    if OP == "+":
        r = p + q
    elif OP == "-":
        r = p - q
    elif OP == "*":
        r = p * q
    elif OP == "//":
        r = p // q
    elif OP == "%":
        r = p % q
    elif OP == "<<":
        r = p << q
    elif OP == ">>":
        r = p >> q
    else:
        r = -p
    tl.store(out_ptr + offs, r)


@pytest.mark.parametrize("op", ["+", "-", "*", "//", "%", "<<", ">>", "neg"])
def test_int1_arithmetic_wraps_modulo_two_on_both_paths(op: str) -> None:
    """Triton keeps arithmetic on two ``int1`` blocks in ``int1`` (unsigned), where it wraps modulo 2: a sum or a
    difference is an exclusive or, a product an and, ``-p`` is ``p``. A quotient is its dividend, a remainder zero and
    a shift its shifted operand: what dividing by 1 and shifting by 0 (the only defined cases) give, and what LLVM
    folds every ``i1`` division, remainder and shift to, so a GPU gives the same for a false divisor or a true shift."""
    rng = np.random.default_rng(5)
    a, b, c, d = (rng.integers(-3, 4, 64).astype(np.int32) for _ in range(4))
    p, q = a > b, c > d
    want = {"+": p ^ q, "-": p ^ q, "*": p & q, "//": p, "%": np.zeros_like(p), "<<": p, ">>": p, "neg": p}[op]
    out = jax.ShapeDtypeStruct((64,), jnp.bool_)
    (compiled,) = run_compiled_alone(int1_kernel, a, b, c, d, out_shape=out, grid=1, BLOCK=64, OP=op)
    (interpreted,) = run(int1_kernel, a, b, c, d, out_shape=out, grid=1, BLOCK=64, OP=op, launcher="interpreter")
    np.testing.assert_array_equal(compiled, want)
    np.testing.assert_array_equal(interpreted, want)


@triton.jit
def shift_then_compare_kernel(x_ptr, y_ptr, shifted_ptr, same_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    shifted = x >> (tl.load(y_ptr + offs) & 7)
    tl.store(shifted_ptr + offs, shifted)
    tl.store(same_ptr + offs, x == shifted)


def test_an_arithmetic_shift_promoted_to_unsigned_compares_as_unsigned_on_both_paths() -> None:
    """``int8 >> uint8``: Triton picks the arithmetic shift by the left operand and computes it in the promoted type,
    uint8, as are later comparisons with it. Triton's interpreter left its result held as int8 values, which then
    compared as numbers with uint8 ones (-63 against 193)."""
    rng = np.random.default_rng(9)
    x = rng.integers(-128, 128, 32).astype(np.int8)
    y = rng.integers(0, 256, 32).astype(np.uint8)
    shifted = (x >> (y & 7).astype(np.int8)).view(np.uint8)
    same = x.view(np.uint8) == shifted
    assert same.any() and not same.all() and (x < 0).any()
    outs = [jax.ShapeDtypeStruct((32,), jnp.uint8), jax.ShapeDtypeStruct((32,), jnp.bool_)]
    compiled = run_compiled_alone(shift_then_compare_kernel, x, y, out_shape=outs, grid=1, BLOCK=32)
    interpreted = run(shift_then_compare_kernel, x, y, out_shape=outs, grid=1, BLOCK=32, launcher="interpreter")
    for got in (compiled, interpreted):
        np.testing.assert_array_equal(got[0], shifted)
        np.testing.assert_array_equal(got[1], same)


# -- tl.map_elementwise ---------------------------------------------------------------------------------------------


@triton.jit
def _larger_and_rest(x, y, k):
    if x > y:
        larger = x
        rest = y + k
    else:
        larger = y * 2.0
        rest = x - k
    return larger, rest


@triton.jit
def map_elementwise_kernel(x_ptr, y_ptr, k_ptr, larger_ptr, rest_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    y = tl.load(y_ptr + offs)
    k = tl.load(k_ptr + offs)
    larger, rest = tl.map_elementwise(_larger_and_rest, x, y, k)
    tl.store(larger_ptr + offs, larger)
    tl.store(rest_ptr + offs, rest)


def test_map_elementwise_runs_a_branching_function_per_element_on_both_paths() -> None:
    """``tl.map_elementwise`` (Triton 3.5 on) calls a scalar function on each element of its operands; a branch in it
    takes its own side per element, and each of its results is a block."""
    rng = np.random.default_rng(3)
    x, y = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    k = rng.integers(-100, 100, 64).astype(np.int32)
    larger = np.where(x > y, x, y * np.float32(2.0))
    rest = np.where(x > y, y + k.astype(np.float32), x - k.astype(np.float32))
    outs = [x, x]
    compiled = run_compiled_alone(map_elementwise_kernel, x, y, k, out_shape=outs, grid=1, BLOCK=64)
    interpreted = run(map_elementwise_kernel, x, y, k, out_shape=outs, grid=1, BLOCK=64, launcher="interpreter")
    for got in (compiled, interpreted):
        np.testing.assert_array_equal(got[0], larger)
        np.testing.assert_array_equal(got[1], rest)


@triton.jit
def _crossed(x0, x1, y0, y1):
    return x0 - y1, x1 * y0


@triton.jit
def map_packed_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    (out,) = tl.map_elementwise(_crossed, tl.load(x_ptr + offs), tl.load(y_ptr + offs), pack=2)
    tl.store(out_ptr + offs, out)


def test_map_elementwise_packs_consecutive_elements_on_both_paths() -> None:
    """With ``pack=2`` the function takes two consecutive elements of each operand and gives two of each result (a
    GPU packs the elements one thread holds, consecutive ones in a row-major block like this one)."""
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal(32).astype(np.float32) for _ in range(2))
    pairs_x, pairs_y = x.reshape(16, 2), y.reshape(16, 2)
    want = np.stack([pairs_x[:, 0] - pairs_y[:, 1], pairs_x[:, 1] * pairs_y[:, 0]], axis=1).reshape(32)
    (compiled,) = run_compiled_alone(map_packed_kernel, x, y, out_shape=x, grid=1, BLOCK=32)
    (interpreted,) = run(map_packed_kernel, x, y, out_shape=x, grid=1, BLOCK=32, launcher="interpreter")
    np.testing.assert_array_equal(compiled, want)
    np.testing.assert_array_equal(interpreted, want)


# -- subnormal arguments --------------------------------------------------------------------------------------------


@triton.jit
def subnormal_argument_kernel(x_ptr, s, stored_ptr, picked_ptr, summed_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    tl.store(stored_ptr + offs, s)
    tl.store(picked_ptr + offs, tl.where(offs % 2 == 0, s, x))
    tl.store(summed_ptr + offs, x + s)


SUBNORMAL = 1e-40  # a float32 subnormal, passed as a Python float


def _subnormal_argument_run(launcher: str) -> list[np.ndarray]:
    x = (np.random.default_rng(6).integers(-(2**20), 2**20, 16) * 2.0**-149).astype(np.float32)  # subnormals
    outs = [x, x, x]
    if launcher == "compiled":
        return [x, *run_compiled_alone(subnormal_argument_kernel, x, SUBNORMAL, out_shape=outs, grid=1, BLOCK=16)]
    return [x, *run(subnormal_argument_kernel, x, SUBNORMAL, out_shape=outs, grid=1, BLOCK=16, launcher=launcher)]


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_a_subnormal_float_argument_arrives_unflushed(launcher: str) -> None:
    """A float32 parameter given 1e-40 receives the float32 subnormal nearest it, as on a GPU, on both paths: stored
    as it is and picked by ``tl.where``. (The interpreter runs in a callback on XLA's threads, which flush
    subnormals; the argument used to become 0.0 there.)"""
    x, stored, picked, _ = _subnormal_argument_run(launcher)
    s = np.float32(SUBNORMAL)
    assert s != 0 and abs(s) < np.finfo(np.float32).smallest_normal
    np.testing.assert_array_equal(stored.view(np.uint32), np.full(16, s).view(np.uint32))
    np.testing.assert_array_equal(picked.view(np.uint32), np.where(np.arange(16) % 2 == 0, s, x).view(np.uint32))


def test_arithmetic_on_a_subnormal_argument_keeps_subnormals_in_the_interpreter() -> None:
    """The interpreter computes with subnormals as a GPU does (outside its ``ftz`` instructions); the compiled path's
    arithmetic flushes them, as XLA's CPU threads run (docs: where the CPU differs from a GPU)."""
    x, _, _, summed = _subnormal_argument_run("interpreter")
    want = x + np.float32(SUBNORMAL)
    assert (want != 0).all() and (np.abs(want) < np.finfo(np.float32).smallest_normal).any()
    np.testing.assert_array_equal(summed.view(np.uint32), want.view(np.uint32))


# -- float zeros computed from constants ----------------------------------------------------------------------------


@triton.jit
def floor_of_constant_kernel(x_ptr, s, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.floor(tl.full([BLOCK], 0.1, tl.float32)))


@triton.jit
def abs_of_constant_kernel(x_ptr, s, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.abs(tl.full([BLOCK], -0.0, tl.float32)))


@triton.jit
def scalar_times_zero_kernel(x_ptr, s, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + s * 0.0)


@triton.jit
def scalar_floor_kernel(x_ptr, s, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.floor(s))


@pytest.mark.parametrize(
    "kernel",
    [floor_of_constant_kernel, abs_of_constant_kernel, scalar_times_zero_kernel, scalar_floor_kernel],
    ids=["floor(0.1)", "abs(-0.0)", "s * 0.0", "floor(s)"],
)
def test_adding_a_zero_computed_from_constants_to_negative_zero_gives_positive_zero(kernel: Any) -> None:
    """A float zero the compiled path computes from constants and scalar arguments alone is one XLA computes when it
    compiles; its simplifier would then drop ``x + 0.0``, keeping ``x = -0.0`` negative. IEEE addition gives +0.0."""
    x = np.random.default_rng(7).standard_normal(16).astype(np.float32)
    x[::3] = -0.0
    want = x + np.float32(0.0)
    for launcher in ("interpreter", "compiled"):
        runner = run_compiled_alone if launcher == "compiled" else lambda *a, **k: run(*a, launcher="interpreter", **k)
        (got,) = runner(kernel, x, 0.25, out_shape=x, grid=1, BLOCK=16)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=launcher)


@triton.jit
def subtract_negative_zero_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, LITERAL: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if LITERAL:
        negative_zero = -0.0
    else:
        negative_zero = tl.full([BLOCK], -(2**31), tl.int32).to(tl.float32, bitcast=True)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs) - negative_zero)


@pytest.mark.parametrize("spelled", ["literal", "bits"])
def test_subtracting_negative_zero_from_negative_zero_gives_positive_zero(spelled: str) -> None:
    """``x - (-0.0)`` is ``x + 0.0``: ``+0.0`` for ``x = -0.0``. XLA's simplifier turns a difference with a zero
    constant into ``x``, right for ``+0.0`` and wrong for ``-0.0``, so the compiled path hides that zero too. (Triton
    3.6 and 3.8 make the literal ``-0.0`` a ``+0.0`` constant; its bits give ``-0.0`` on every release.)"""
    x = np.random.default_rng(8).standard_normal(16).astype(np.float32)
    x[::3] = -0.0
    zero = np.float32(0.0 if spelled == "literal" and TRITON < (3, 9) else -0.0)
    want = x - zero
    for launcher in ("interpreter", "compiled"):
        runner = run_compiled_alone if launcher == "compiled" else lambda *a, **k: run(*a, launcher="interpreter", **k)
        (got,) = runner(subtract_negative_zero_kernel, x, out_shape=x, grid=1, BLOCK=16, LITERAL=spelled == "literal")
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=launcher)
