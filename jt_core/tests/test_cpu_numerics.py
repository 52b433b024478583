"""The CPU computes what Triton means, on both of its paths: rounding, subnormal floats, conversions, ``tl.dot``'s
precisions, divisions, and the order of reductions and scans. Each result is compared with a NumPy reference."""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl
from core_rounding import rounded_once

import jt_core as jt

PATHS = ["compiled", "ffi"]
BF16 = np.dtype(ml_dtypes.bfloat16)


#: Each test names the path it runs, with the race check and the comparison off: the suite's run with them on would
#: repeat these tests as they are.
pytestmark = pytest.mark.skipif(
    os.environ.get("JT_CPU_DIFFERENTIAL") == "1", reason="runs each path by name; the run without the comparison has it"
)


@pytest.fixture(autouse=True)
def each_path_alone(jt_cpu_paths_by_name: None) -> None:
    """Each test names the path it runs; the race check and the comparison would send both to the interpreter."""


def run(kernel: Any, *args: Any, launcher: str, **kwargs: Any) -> Any:
    out = jax.jit(lambda *a: jt.triton_call(*a, kernel=kernel, launcher=launcher, **kwargs))(*args)
    return [np.asarray(o) for o in out] if isinstance(out, (list, tuple)) else np.asarray(out)


def bits(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def halves(x: np.ndarray, combine: Any) -> np.ndarray:
    """Reduces the last axis by combining its halves, first half on the left: the order both CPU paths keep."""
    while x.shape[-1] > 1:
        half = x.shape[-1] // 2
        x = combine(x[..., :half], x[..., half:])
    return x[..., 0]


# -- rounding narrow floats -------------------------------------------------------------------------------------


@triton.jit
def narrow_arithmetic_kernel(a_ptr, b_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + i)
    b = tl.load(b_ptr + i)
    tl.store(out_ptr + i, (a + b).to(tl.float32))
    tl.store(out_ptr + BLOCK + i, (a - b).to(tl.float32))
    tl.store(out_ptr + 2 * BLOCK + i, (a * b).to(tl.float32))
    tl.store(out_ptr + 3 * BLOCK + i, (a / b).to(tl.float32))
    tl.store(out_ptr + 4 * BLOCK + i, (a * b + a).to(tl.float32))  # fused into one rounding, as Triton fuses it


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)], ids=["bfloat16", "float16"])
def test_narrow_float_arithmetic_rounds_before_widening(launcher: str, dtype: np.dtype) -> None:
    """Each operation on bfloat16 or float16 values rounds to its type, also when its result is converted to
    float32 right after (XLA keeps bfloat16 arithmetic in float32 unless told not to)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal(256).astype(dtype)
    b = (rng.standard_normal(256) * 1e-2).astype(dtype)
    a[0], b[0] = 1.0, 0.00390625  # 1 + 2**-8: bfloat16 rounds it to 1
    out = run(
        narrow_arithmetic_kernel,
        a,
        b,
        launcher=launcher,
        out_shape=jax.ShapeDtypeStruct((5 * 256,), jnp.float32),
        grid=1,
        BLOCK=256,
    )
    wide = [a.astype(np.float32), b.astype(np.float32)]
    sums = (wide[0] + wide[1]).astype(dtype)
    products = (wide[0] * wide[1]).astype(dtype)
    quotients = wide[0] / wide[1]  # Triton divides narrow floats in float32
    want = [sums, (wide[0] - wide[1]).astype(dtype), products, quotients]
    want.append(rounded_once(a, b, a, dtype))
    np.testing.assert_array_equal(bits(out), bits(np.concatenate(want).astype(np.float32)))
    if dtype == BF16:
        assert out[0] == 1.0


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, COLS: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * COLS + tl.arange(0, COLS))
    tl.store(out_ptr + row, tl.sum(x, axis=0).to(tl.float32))


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=["float32", "float16", "bfloat16"])
def test_float_sums_add_in_one_order_on_both_paths(launcher: str, dtype: Any) -> None:
    """A float sum adds the halves of the block pairwise, each addition rounded to the type: bit for bit the same
    on both paths, whatever XLA's own reduction would do."""
    x = (np.random.default_rng(2).standard_normal((16, 128)) * 10).astype(dtype)
    out = run(
        row_sum_kernel, x, launcher=launcher, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=16, COLS=128
    )
    np.testing.assert_array_equal(bits(out), bits(halves(x, np.add).astype(np.float32)))


# -- subnormals --------------------------------------------------------------------------------------------------


@triton.jit
def subnormal_kernel(x_ptr, half_ptr, positive_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.store(half_ptr + i, x * 0.5)
    tl.store(positive_ptr + i, (x > 0).to(tl.int32))


def _subnormals(dtype: Any) -> np.ndarray:
    tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
    return np.array([tiny / 3, tiny / 1000, -tiny / 7, tiny * 2, 0.0, 1.0, tiny / 2, tiny], dtype)


@pytest.mark.parametrize("launcher", ["ffi", "interpreter"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, BF16], ids=["float32", "float64", "bfloat16"])
def test_the_interpreter_keeps_subnormal_floats(launcher: str, dtype: Any) -> None:
    """As a GPU does outside its ftz instructions: subnormal inputs are not zero, subnormal results are not
    flushed (XLA's threads, which run the interpreter, flush both)."""
    x = _subnormals(dtype)
    with jax.enable_x64(True):
        half, positive = run(
            subnormal_kernel,
            x,
            launcher=launcher,
            out_shape=(x, jax.ShapeDtypeStruct((8,), jnp.int32)),
            grid=1,
            BLOCK=8,
        )
    np.testing.assert_array_equal(bits(half), bits((x.astype(np.float64) * 0.5).astype(dtype)))
    np.testing.assert_array_equal(positive, (x > 0).astype(np.int32))
    assert positive[0] == 1 and half[0] != 0


@triton.jit
def subnormal_ops_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.store(out_ptr + i, (x > 0).to(tl.float32))
    tl.store(out_ptr + BLOCK + i, (x + x).to(tl.float32))
    tl.store(out_ptr + 2 * BLOCK + i, x.to(tl.float32))


@pytest.mark.parametrize("launcher", PATHS)
def test_bfloat16_subnormals_behave_as_float32_ones_on_each_path(launcher: str) -> None:
    """Comparisons, sums and conversions treat a subnormal the same whether it is held as bfloat16 or as float32:
    kept on the interpreter, and where the compiled path flushes one it flushes the other."""
    x = _subnormals(BF16)
    out = jax.ShapeDtypeStruct((24,), jnp.float32)
    held_narrow = run(subnormal_ops_kernel, x, launcher=launcher, out_shape=out, grid=1, BLOCK=8)
    held_wide = run(subnormal_ops_kernel, x.astype(np.float32), launcher=launcher, out_shape=out, grid=1, BLOCK=8)
    np.testing.assert_array_equal(bits(held_narrow), bits(held_wide))
    np.testing.assert_array_equal(held_narrow[16:], x.astype(np.float32))  # a conversion keeps every value


def test_the_differential_check_compares_with_subnormals_flushed_on_both_sides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CPU_DIFFERENTIAL", "1")
    x = _subnormals(np.float32)
    half, _ = run(
        subnormal_kernel, x, launcher="compiled", out_shape=(x, jax.ShapeDtypeStruct((8,), jnp.int32)), grid=1, BLOCK=8
    )
    np.testing.assert_array_equal(half[4:6], [0.0, 0.5])


# -- conversions ---------------------------------------------------------------------------------------------------


@triton.jit
def to_integers_kernel(x_ptr, i8_ptr, u8_ptr, i32_ptr, u32_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.store(i8_ptr + i, x.to(tl.int8))
    tl.store(u8_ptr + i, x.to(tl.uint8))
    tl.store(i32_ptr + i, x.to(tl.int32))
    tl.store(u32_ptr + i, x.to(tl.uint32))


@pytest.mark.parametrize("launcher", PATHS)
def test_float_to_integer_conversions_saturate_with_nan_to_zero(launcher: str) -> None:
    """Out of range, a conversion gives the type's nearest limit and NaN gives 0, as PTX's cvt and XLA do."""
    special = [np.nan, np.inf, -np.inf, 1e10, -1e10, 2147483520.0, 2147483648.0, -2147483648.0, 4.3e9, 300.5, -129.7]
    rng = np.random.default_rng(3)
    x = np.concatenate([special, rng.uniform(-300, 300, 32 - len(special))]).astype(np.float32)
    types = [np.int8, np.uint8, np.int32, np.uint32]
    outs = tuple(jax.ShapeDtypeStruct((32,), t) for t in types)
    got = run(to_integers_kernel, x, launcher=launcher, out_shape=outs, grid=1, BLOCK=32)
    for out, dtype in zip(got, types, strict=True):
        info = np.iinfo(dtype)
        want = np.where(np.isnan(x), 0, np.clip(np.trunc(x.astype(np.float64)), info.min, info.max)).astype(dtype)
        np.testing.assert_array_equal(out, want, err_msg=np.dtype(dtype).name)


# -- tl.dot --------------------------------------------------------------------------------------------------------


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, PRECISION: tl.constexpr):
    m = tl.arange(0, M)
    n = tl.arange(0, N)
    k = tl.arange(0, K)
    a = tl.load(a_ptr + m[:, None] * K + k[None, :])
    b = tl.load(b_ptr + k[:, None] * N + n[None, :])
    if PRECISION == "default":
        c = tl.dot(a, b)
    else:
        c = tl.dot(a, b, input_precision=PRECISION)
    tl.store(c_ptr + m[:, None] * N + n[None, :], c)


def _tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to 10 mantissa bits, ties away from zero (computed from frexp, not from the bits)."""
    mantissa, exponent = np.frexp(x.astype(np.float64))
    scaled = np.abs(mantissa) * 2.0**11
    return (np.sign(mantissa) * np.floor(scaled + 0.5) * 2.0 ** (exponent - 11)).astype(np.float32)


def _dot_reference(a: np.ndarray, b: np.ndarray, precision: str) -> np.ndarray:
    wide = np.float64
    if precision in ("default", "ieee"):
        return a.astype(wide) @ b.astype(wide)
    if precision == "tf32":
        return _tf32(a).astype(wide) @ _tf32(b).astype(wide)
    a_big, b_big = _tf32(a), _tf32(b)
    a_small, b_small = _tf32(a - a_big), _tf32(b - b_big)
    return sum(x.astype(wide) @ y.astype(wide) for x, y in ((a_small, b_big), (a_big, b_small), (a_big, b_big)))


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("precision", ["default", "ieee", "tf32", "tf32x3"])
def test_dot_precisions_mean_the_same_on_both_paths(launcher: str, precision: str) -> None:
    """Without an input_precision a float32 dot is exact to float32 on the CPU; "tf32" rounds the operands to 10
    mantissa bits and "tf32x3" sums three such products, as the device's tensor cores do."""
    rng = np.random.default_rng(4)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    out = run(
        dot_kernel,
        a,
        b,
        launcher=launcher,
        out_shape=jax.ShapeDtypeStruct((32, 32), jnp.float32),
        grid=1,
        M=32,
        N=32,
        K=64,
        PRECISION=precision,
    )
    want = _dot_reference(a, b, precision)
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=2e-5)
    if precision == "tf32":
        assert np.abs(want - a.astype(np.float64) @ b.astype(np.float64)).max() > 1e-3  # the rounding is visible


# -- division ------------------------------------------------------------------------------------------------------


@triton.jit
def division_kernel(x_ptr, y_ptr, out_ptr, p, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    i = row * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    y = tl.load(y_ptr + i)
    tl.store(out_ptr + 4 * i, x / (1 - p))  # dropout's rescaling: p is a scalar argument
    tl.store(out_ptr + 4 * i + 1, x / 3.0)
    tl.store(out_ptr + 4 * i + 2, x / tl.sum(y, axis=0))
    tl.store(out_ptr + 4 * i + 3, x / y)


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16, np.float64], ids=["f32", "f16", "bf16", "f64"])
def test_division_is_correctly_rounded_on_both_paths(launcher: str, dtype: Any) -> None:
    """A division by a scalar, a constant, a row's sum or another block is the correctly rounded quotient (XLA
    would multiply by a rounded reciprocal where the divisor is the same across the block)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 64)).astype(dtype)
    y = rng.uniform(0.5, 2.0, (8, 64)).astype(dtype)
    p = 0.3
    with jax.enable_x64(True):
        out = run(
            division_kernel,
            x,
            y,
            launcher=launcher,
            out_shape=jax.ShapeDtypeStruct((8 * 64 * 4,), dtype),
            grid=8,
            p=p,
            BLOCK=64,
        )
    # Triton divides narrow floats in float32; p is a float32 argument and 3.0 a float32 constant.
    wide = np.float64 if dtype == np.float64 else np.float32
    divisor = (np.float32(1) - np.float32(p)).astype(wide)
    sums = halves(y, np.add)[:, None].astype(wide)
    xs, ys = x.astype(wide), y.astype(wide)
    want = np.stack([xs / divisor, xs / wide(np.float32(3.0)), xs / sums, xs / ys], axis=-1).astype(dtype)
    np.testing.assert_array_equal(bits(out), bits(want.reshape(-1)))


@triton.jit
def plus_zero_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.store(out_ptr + i, x + 0.0)
    tl.store(out_ptr + BLOCK + i, x - 0.0)


@pytest.mark.parametrize("launcher", PATHS)
def test_adding_zero_to_a_negative_zero_gives_a_positive_zero(launcher: str) -> None:
    """IEEE arithmetic, not XLA's simplification of ``x + 0.0`` into ``x``."""
    x = np.array([-0.0, 0.0, -1.5, np.inf], np.float32)
    out = run(
        plus_zero_kernel, x, launcher=launcher, out_shape=jax.ShapeDtypeStruct((8,), jnp.float32), grid=1, BLOCK=4
    )
    np.testing.assert_array_equal(bits(out), bits(np.concatenate([x + np.float32(0), x - np.float32(0)])))


@triton.jit
def zero_uses_kernel(x_ptr, out_ptr, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    acc = tl.zeros((BLOCK,), tl.float32)
    for _ in range(STEPS):  # unrolled when traced: the first sum is the zero constant plus x
        acc += x
    tl.store(out_ptr + i, acc)
    tl.store(out_ptr + BLOCK + i, tl.where(x > 0, x, 0.01 * x))
    tl.store(out_ptr + 2 * BLOCK + i, x * 0.0)


@pytest.mark.parametrize("launcher", PATHS)
def test_a_zero_accumulator_gives_positive_zeros_and_compared_zeros_stay_constants(launcher: str) -> None:
    """A ``tl.zeros`` accumulator that sums a ``-0.0`` holds ``+0.0``, as on a device; where a zero constant's sign
    cannot be lost (compared, chosen, multiplied), the compiled path leaves it a constant XLA sees: a kernel with no
    other zero asks for no hidden zero at all."""
    x = np.array([-0.0, 0.0, -1.5, 2.0], np.float32)
    out = run(
        zero_uses_kernel,
        x,
        launcher=launcher,
        out_shape=jax.ShapeDtypeStruct((12,), jnp.float32),
        grid=1,
        STEPS=1,
        BLOCK=4,
    )
    want = np.concatenate([np.float32(0) + x, np.where(x > 0, x, np.float32(0.01) * x), x * np.float32(0)])
    np.testing.assert_array_equal(bits(out), bits(want.astype(np.float32)))

    def only_compared(v: jax.Array) -> jax.Array:
        return jt.triton_call(v, kernel=_leaky_relu_kernel, out_shape=v, grid=1, BLOCK=4, launcher=launcher)

    text = jax.jit(only_compared).lower(jnp.asarray(x)).as_text()
    if launcher == "compiled":
        assert "optimization_barrier" not in text
    hidden = jax.jit(
        lambda v: jt.triton_call(
            v,
            kernel=zero_uses_kernel,
            out_shape=jax.ShapeDtypeStruct((12,), jnp.float32),
            grid=1,
            STEPS=1,
            BLOCK=4,
            launcher="compiled",
        )
    )
    text = hidden.lower(jnp.asarray(x)).as_text()
    # The summed zero is hidden behind an optimisation barrier: plain StableHLO, no custom call.
    assert "optimization_barrier" in text and "custom_call" not in text


@triton.jit
def _leaky_relu_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.store(out_ptr + i, tl.where(x > 0, x, 0.01 * x))


# -- reductions and scans ------------------------------------------------------------------------------------------


@triton.jit
def weigh(a, b):
    return a * 3 + b


@triton.jit
def ordered_reduce_kernel(x_ptr, out_ptr, COLS: tl.constexpr):
    row = tl.program_id(0)
    x = tl.load(x_ptr + row * COLS + tl.arange(0, COLS))
    tl.store(out_ptr + row, tl.reduce(x, 0, weigh))


@pytest.mark.parametrize("launcher", PATHS)
def test_an_order_sensitive_reduction_combines_alike_on_both_paths(launcher: str) -> None:
    """A combining function whose result depends on the order (here not even associative) gets the halves order
    on both paths. A GPU promises no order: such a kernel is only portable across CPU paths."""
    x = np.random.default_rng(6).integers(-1000, 1000, (8, 32)).astype(np.int32)
    out = run(
        ordered_reduce_kernel, x, launcher=launcher, out_shape=jax.ShapeDtypeStruct((8,), jnp.int32), grid=8, COLS=32
    )
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(out, halves(x, lambda a, b: a * np.int32(3) + b))


@triton.jit
def first_of(a, b):
    return a


@triton.jit
def linear_recurrence(a1, b1, a2, b2):
    return a1 * a2, b1 * a2 + b2


@triton.jit
def scans_kernel(x_ptr, y_ptr, first_ptr, rec_ptr, N: tl.constexpr, REVERSE: tl.constexpr):
    i = tl.arange(0, N)
    x = tl.load(x_ptr + i)
    y = tl.load(y_ptr + i)
    tl.store(first_ptr + i, tl.associative_scan(x, 0, first_of, reverse=REVERSE))
    _, z = tl.associative_scan((x, y), 0, linear_recurrence, reverse=REVERSE)
    tl.store(rec_ptr + i, z)


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("reverse", [False, True])
def test_reverse_scan_keeps_operand_order(launcher: str, reverse: bool) -> None:
    """With ``reverse=True`` element i is ``combine(result[i + 1], x[i])``: Triton's own test_scan2d reference (a
    flipped forward scan), for combining functions that are associative but not commutative."""
    rng = np.random.default_rng(7)
    x = rng.integers(-2, 3, 32).astype(np.int32)
    y = rng.integers(-2, 3, 32).astype(np.int32)
    first, rec = run(scans_kernel, x, y, launcher=launcher, out_shape=(x, x), grid=1, N=32, REVERSE=reverse)
    order = slice(None, None, -1) if reverse else slice(None)
    acc, want = np.int64(0), []
    for xi, yi in zip(x[order], y[order], strict=True):
        acc = xi * acc + yi  # x_i = a_i * x_{i-1} + b_i, from the end when reversed
        want.append(acc)
    np.testing.assert_array_equal(rec, np.array(want)[order].astype(np.int32))
    np.testing.assert_array_equal(first, np.full(32, x[-1] if reverse else x[0]))


@triton.jit
def batch_kernel(x_ptr, w_ptr, sum_ptr, dot_ptr, COLS: tl.constexpr):
    rows = tl.arange(0, 16)
    cols = tl.arange(0, COLS)
    x = tl.load(x_ptr + rows[:, None] * COLS + cols[None, :])
    tl.store(sum_ptr + rows, tl.sum(x, axis=1))
    w = tl.load(w_ptr + cols[:, None] * 16 + rows[None, :])
    tl.store(dot_ptr + rows[:, None] * 16 + rows[None, :], tl.dot(x, w))


def test_a_programs_results_do_not_depend_on_the_programs_beside_it() -> None:
    """The same call, alone or under ``jax.vmap`` beside three others (which runs them side by side), gives the
    same bits: a reduction's order is the block's, not XLA's choice for the shape it sees."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 16, 128)).astype(np.float32)
    w = rng.standard_normal((4, 128, 16)).astype(np.float32)

    def call(x: jax.Array, w: jax.Array) -> Any:
        outs = (jax.ShapeDtypeStruct((16,), jnp.float32), jax.ShapeDtypeStruct((16, 16), jnp.float32))
        return jt.triton_call(x, w, kernel=batch_kernel, out_shape=outs, grid=1, COLS=128, launcher="compiled")

    batched = [np.asarray(o) for o in jax.jit(jax.vmap(call))(x, w)]
    alone = jax.jit(call)
    for i in range(4):
        sums, dots = (np.asarray(o) for o in alone(x[i], w[i]))
        np.testing.assert_array_equal(bits(batched[0][i]), bits(sums))
        np.testing.assert_array_equal(bits(batched[1][i]), bits(dots))
        np.testing.assert_array_equal(bits(sums), bits(halves(x[i], np.add)))
