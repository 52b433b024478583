"""The compiled CPU path: a kernel's TTIR run as XLA operations, with compiled Triton's meaning, the interpreter's
checks and errors, and the interpreter where it cannot take a kernel."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from core_rounding import PRODUCTS_CONTRACTED

import jt_core as jt
from jt_core.cpu.compiled import differential
from jt_core.errors import OutOfBoundsAccessError


@pytest.fixture(autouse=True)
def compiled_path_alone(jt_cpu_paths_by_name: None) -> None:
    """These tests are of the compiled path itself: not of a comparison with the interpreter, nor of the race
    check, which sends calls to the interpreter (CI runs the suite a second time with both on)."""


exp = tl.exp  # a module-level alias of a builtin: compiled Triton resolves it when it compiles


def run(kernel: Any, *args: Any, launcher: str = "compiled", **kwargs: Any) -> Any:
    return jax.jit(lambda *a: jt.triton_call(*a, kernel=kernel, launcher=launcher, **kwargs))(*args)


def both(kernel: Any, *args: Any, **kwargs: Any) -> tuple[np.ndarray, np.ndarray]:
    """The results of the compiled path and of the interpreter."""
    compiled = run(kernel, *args, launcher="compiled", **kwargs)
    interpreted = run(kernel, *args, launcher="ffi", **kwargs)
    return np.asarray(compiled), np.asarray(interpreted)


@triton.jit
def bool_ops_kernel(out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    a = i >= 2
    b = i < 6
    tl.store(out_ptr + i, (a and b).to(tl.int32) + 2 * (a or b).to(tl.int32) + 4 * (not_(a)).to(tl.int32))


@triton.jit
def not_(x):
    return x == 0


# Triton 3.9 warns that `and`/`or` on tensors are deprecated; this test uses them on purpose.
@pytest.mark.filterwarnings("ignore:Logical operators 'and' and 'or' are deprecated:UserWarning")
def test_and_or_on_tensors_are_elementwise_as_compiled_triton_makes_them() -> None:
    out = np.asarray(run(bool_ops_kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.int32), grid=1, BLOCK=8))
    i = np.arange(8)
    a, b = i >= 2, i < 6
    np.testing.assert_array_equal(out, (a & b) + 2 * (a | b) + 4 * ~a)
    np.testing.assert_array_equal((a & b).astype(int), [0, 0, 1, 1, 1, 1, 0, 0])


@triton.jit
def alias_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, exp(tl.load(x_ptr + i)))


def test_a_module_level_alias_of_a_builtin_runs() -> None:
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    np.testing.assert_allclose(np.asarray(run(alias_kernel, x, out_shape=x, grid=1, BLOCK=16)), np.exp(x), rtol=1e-6)


@triton.jit
def masked_read_kernel(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i + shift, mask=i < n, other=-1.0), mask=i < n)


@pytest.mark.parametrize("launcher", ["compiled", "ffi"])
def test_an_out_of_bounds_load_names_the_argument_the_element_the_program_and_the_source_line(launcher: str) -> None:
    x = np.arange(40, dtype=np.float32)
    with pytest.raises(Exception) as raised:
        jax.block_until_ready(
            run(masked_read_kernel, x, out_shape=x, grid=3, n=40, shift=3, BLOCK=16, launcher=launcher)
        )
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, OutOfBoundsAccessError), raised.value
    message = str(error)
    assert "out-of-bounds load of 4 bytes from argument 'x_ptr' at element 40 (past its end;" in message
    source = f"{__file__}:{masked_read_kernel.fn.__code__.co_firstlineno + 3}"
    assert message.endswith(f"[program_id (2, 0, 0) at {source}: {KERNEL_LOAD_STORE_LINE}]")


KERNEL_LOAD_STORE_LINE = "tl.store(out_ptr + i, tl.load(x_ptr + i + shift, mask=i < n, other=-1.0), mask=i < n)"


@triton.jit
def unmasked_tile_kernel(x_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, SHIFT: tl.constexpr):
    r = tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, COLS)[None, :]
    tl.store(out_ptr + r * COLS + c, tl.load(x_ptr + r * COLS + c + SHIFT))


@pytest.mark.parametrize("shift", [-1, 1])
def test_an_unmasked_block_reaching_outside_its_argument_is_stopped(shift: int) -> None:
    """An unmasked access through affine offsets is checked by its block's ends: one lane out is found."""
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    with pytest.raises(Exception) as raised:
        jax.block_until_ready(run(unmasked_tile_kernel, x, out_shape=x, grid=1, ROWS=4, COLS=8, SHIFT=shift))
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, OutOfBoundsAccessError), raised.value
    assert f"element {-1 if shift < 0 else 32}" in str(error)
    np.testing.assert_array_equal(
        np.asarray(run(unmasked_tile_kernel, x, out_shape=x, grid=1, ROWS=4, COLS=8, SHIFT=0)), x
    )


def test_the_compiled_path_raises_the_interpreters_error_word_for_word() -> None:
    x = np.arange(40, dtype=np.float32)
    messages = []
    for launcher in ("compiled", "ffi"):
        with pytest.raises(Exception) as raised:
            jax.block_until_ready(
                run(masked_read_kernel, x, out_shape=x, grid=3, n=40, shift=5, BLOCK=16, launcher=launcher)
            )
        messages.append(str(jt.errors.from_runtime_error(raised.value)))
    assert messages[0] == messages[1]


def test_with_the_bounds_check_off_a_stray_lane_reads_the_loads_other_value_and_the_call_runs() -> None:
    x = np.arange(40, dtype=np.float32)
    with jt.cpu_checks(bounds=False):
        out = np.asarray(run(masked_read_kernel, x, out_shape=x, grid=3, n=40, shift=3, BLOCK=16))
    np.testing.assert_array_equal(out[:37], x[3:])
    np.testing.assert_array_equal(out[37:], -1)


@triton.jit
def store_into_input_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i) + 1)
    tl.store(out_ptr + i, tl.load(x_ptr + i))


def test_a_store_into_an_input_is_refused_as_the_interpreter_refuses_it() -> None:
    x = np.arange(16, dtype=np.float32)
    with pytest.raises(Exception) as raised:
        jax.block_until_ready(run(store_into_input_kernel, x, out_shape=x, grid=1, BLOCK=16))
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, OutOfBoundsAccessError) and "stores into input 'x_ptr'" in str(error)


@triton.jit
def printing_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    tl.device_print("x", x)
    tl.store(out_ptr + i, x * 2)


def test_a_kernel_the_compiled_path_cannot_take_runs_in_the_interpreter_with_one_line_saying_why(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    x = np.arange(4, dtype=np.float32)
    with caplog.at_level(logging.INFO, logger="jt_core"):
        out = jax.jit(lambda x: jt.triton_call(x, kernel=printing_kernel, out_shape=x, grid=1, BLOCK=4))(x)
        np.testing.assert_array_equal(np.asarray(out), 2 * x)
    lines = [r.getMessage() for r in caplog.records if "launcher 'compiled'" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "device printing (tl.device_print / print) at " in lines[0] and "test_cpu_compiled.py:" in lines[0]
    assert "using 'ffi'" in lines[0]


@triton.jit
def atomic_kernel(counter_ptr, seen_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    old = tl.atomic_add(counter_ptr + (i % 3), 1)
    tl.store(seen_ptr + i, old)


def test_atomics_keep_the_interpreters_order_and_return_what_each_lane_found() -> None:
    counters = jax.ShapeDtypeStruct((3,), jnp.int32)
    seen = jax.ShapeDtypeStruct((32,), jnp.int32)
    compiled, interpreted = (
        run(atomic_kernel, out_shape=(counters, seen), grid=4, BLOCK=8, zeroed_outputs=(0,), launcher=launcher)
        for launcher in ("compiled", "ffi")
    )
    np.testing.assert_array_equal(np.asarray(compiled[0]), [11, 11, 10])
    for a, b in zip(compiled, interpreted):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # lane after lane, program after program: lane i finds i // 3 earlier lanes on its counter
    np.testing.assert_array_equal(np.asarray(compiled[1]), np.arange(32) // 3)


@triton.jit
def float_atomic_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + (i % 5), tl.load(x_ptr + i))


def test_float_atomic_sums_match_the_interpreter_bit_for_bit() -> None:
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32) * 1e3
    compiled, interpreted = both(
        float_atomic_kernel, x, out_shape=jax.ShapeDtypeStruct((5,), jnp.float32), grid=4, BLOCK=16, zeroed_outputs=(0,)
    )
    np.testing.assert_array_equal(compiled, interpreted)


@triton.jit
def fma_kernel(x_ptr, y_ptr, z_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i) * tl.load(y_ptr + i) + tl.load(z_ptr + i))


@triton.jit
def sqrt_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.sqrt(tl.load(x_ptr + i)))


@pytest.mark.skipif(PRODUCTS_CONTRACTED is not None, reason=PRODUCTS_CONTRACTED or "")
def test_enable_fp_fusion_chooses_between_a_fused_multiply_add_and_two_roundings() -> None:
    rng = np.random.default_rng(1)
    x, y, z = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
    fused = np.asarray(run(fma_kernel, x, y, z, out_shape=x, grid=1, BLOCK=4096))
    unfused = np.asarray(run(fma_kernel, x, y, z, out_shape=x, grid=1, BLOCK=4096, enable_fp_fusion=False))
    np.testing.assert_array_equal(unfused, x * y + z)  # NumPy rounds the product, then the sum
    np.testing.assert_array_equal(fused, (x.astype(np.float64) * y + z).astype(np.float32))
    assert (fused != unfused).any()


@triton.jit
def control_flow_kernel(x_ptr, n_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    i = tl.arange(0, BLOCK)
    count = tl.load(n_ptr + pid)  # a loop bound known only at run time
    acc = tl.zeros((BLOCK,), tl.float32)
    for k in range(count):
        acc += tl.load(x_ptr + pid * BLOCK + i) * k
    j = 0
    while j < count:
        j += 2
    if tl.sum(acc) > 0:  # a branch on loaded values
        acc = acc + j
    else:
        acc = acc - j
    tl.store(out_ptr + pid * BLOCK + i, acc)


def test_loops_and_branches_that_depend_on_loaded_values_run_compiled() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal(32).astype(np.float32)
    n = np.array([3, 0, 5, 2], np.int32)
    compiled, interpreted = both(control_flow_kernel, x, n, out_shape=x, grid=4, BLOCK=8)
    want = []
    for p in range(4):
        acc = sum(x[p * 8 : p * 8 + 8] * k for k in range(n[p])) + np.zeros(8, np.float32)
        j = 2 * ((int(n[p]) + 1) // 2)
        want.append(acc + j if acc.sum() > 0 else acc - j)
    np.testing.assert_allclose(compiled, np.concatenate(want), rtol=1e-5)
    np.testing.assert_allclose(compiled, interpreted, rtol=1e-5)


@triton.jit
def reductions_kernel(x_ptr, out_ptr, idx_ptr, cum_ptr, ROWS: tl.constexpr, COLS: tl.constexpr):
    r = tl.arange(0, ROWS)[:, None]
    c = tl.arange(0, COLS)[None, :]
    x = tl.load(x_ptr + r * COLS + c)
    tl.store(out_ptr + tl.arange(0, ROWS), tl.max(x, axis=1) - tl.sum(x, axis=1))
    tl.store(idx_ptr + tl.arange(0, ROWS), tl.argmax(x, axis=1))
    tl.store(cum_ptr + r * COLS + c, tl.cumsum(x, axis=1))


def test_reductions_and_scans_match_numpy() -> None:
    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    outs = run(
        reductions_kernel,
        x,
        out_shape=(jax.ShapeDtypeStruct((8,), jnp.float32), jax.ShapeDtypeStruct((8,), jnp.int32), x),
        grid=1,
        ROWS=8,
        COLS=16,
    )
    np.testing.assert_allclose(np.asarray(outs[0]), x.max(axis=1) - x.sum(axis=1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(outs[1]), x.argmax(axis=1))
    np.testing.assert_allclose(np.asarray(outs[2]), np.cumsum(x, axis=1), rtol=1e-5, atol=1e-5)


@triton.jit
def dot_kernel(a_ptr, b_ptr, out_ptr, PRECISION: tl.constexpr, N: tl.constexpr):
    i = tl.arange(0, N)
    a = tl.load(a_ptr + i[:, None] * N + i[None, :])
    b = tl.load(b_ptr + i[:, None] * N + i[None, :])
    tl.store(out_ptr + i[:, None] * N + i[None, :], tl.dot(a, b, input_precision=PRECISION))


def test_dot_honours_input_precision() -> None:
    rng = np.random.default_rng(4)
    a, b = (rng.standard_normal((32, 32)).astype(np.float32) for _ in range(2))
    exact = np.asarray(a, np.float64) @ b
    ieee = np.asarray(run(dot_kernel, a, b, out_shape=a, grid=1, PRECISION="ieee", N=32))
    tf32 = np.asarray(run(dot_kernel, a, b, out_shape=a, grid=1, PRECISION="tf32", N=32))
    assert np.abs(ieee - exact).max() < 1e-4
    assert 1e-4 < np.abs(tf32 - exact).max() < 0.1  # 10 mantissa bits, as the device's tf32


@triton.jit
def fp8_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, RTZ: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    if RTZ:
        y = x.to(tl.float8e4nv, fp_downcast_rounding="rtz")
    else:
        y = x.to(tl.float8e4nv)
    tl.store(out_ptr + i, y.to(tl.float32))


@pytest.mark.parametrize("rtz", [False, True])
def test_float8_conversions_round_as_the_interpreter_rounds(rtz: bool) -> None:
    x = np.concatenate(
        [
            np.linspace(-500, 500, 240),
            [np.nan, np.inf, -np.inf, 0, -0.0, 1e-9, 31.3, 448.5, 464, 1e6, -1e6, 0.0019, 240, 241, 239, 250],
        ]
    ).astype(np.float32)[:256]
    compiled, interpreted = both(fp8_kernel, x, out_shape=x, grid=1, BLOCK=256, RTZ=rtz)
    np.testing.assert_array_equal(compiled, interpreted)


def test_every_call_through_both_paths_agrees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CPU_DIFFERENTIAL", "1")
    x = np.random.default_rng(5).standard_normal(64).astype(np.float32)
    out = run(masked_read_kernel, x, out_shape=x, grid=4, n=64, shift=0, BLOCK=16)
    np.testing.assert_array_equal(np.asarray(out), x)


def test_a_difference_between_the_two_paths_fails_the_call(monkeypatch: pytest.MonkeyPatch) -> None:

    from jt_core.translation import rules

    monkeypatch.setenv("JT_CPU_DIFFERENTIAL", "1")
    sqrt = rules.rule_of("math.sqrt")
    assert sqrt is not None

    def wrong(out: Any, attr: Any, numbers: Any, a: Any) -> Any:
        return jnp.sqrt(a) * 1.0000001

    monkeypatch.setitem(rules.all_rules(), "math.sqrt", dataclasses.replace(sqrt, compute=wrong))
    x = np.random.default_rng(6).standard_normal(16).astype(np.float32) + 3
    with pytest.raises(Exception) as raised:
        jax.block_until_ready(run(sqrt_kernel, x, out_shape=x, grid=1, BLOCK=16, name="mul_add"))
    assert "triton_call 'mul_add': the compiled CPU path and Triton's interpreter disagree bit for bit" in str(
        raised.value
    ), raised.value


def test_the_comparison_is_bitwise_unless_the_kernel_sums_or_calls_transcendentals() -> None:
    nan = np.array([np.nan, 1.0], np.float32)
    other_nan = nan.copy()
    other_nan.view(np.uint32)[0] |= 1  # another NaN payload
    differential.compare("k", None, [nan], [other_nan])
    one, next_one = np.array([1.0], np.float32), np.array([np.nextafter(np.float32(1), np.float32(2))])
    with pytest.raises(differential.DifferentialMismatchError, match="bit for bit"):
        differential.compare("k", None, [one], [next_one])
    differential.compare("k", differential.TOLERANCE[4], [one], [next_one])
    with pytest.raises(differential.DifferentialMismatchError, match="rtol=2e-05"):
        differential.compare("k", differential.TOLERANCE[4], [one], [one * 1.001])
    # Scalars (0-d outputs) are compared too.
    differential.compare("k", None, [np.int32(5)], [np.asarray(5, np.int32)])
    with pytest.raises(differential.DifferentialMismatchError, match=r"output 0 \(int32\[\]\), at 1 of 1"):
        differential.compare("k", None, [np.asarray(5, np.int32)], [np.asarray(4, np.int32)])


# -- programs side by side ------------------------------------------------------------------------------------


def _runs_side_by_side(fn: Any, *args: Any) -> bool:
    """Whether the compiled call loops over its programs (in order) or runs them at once (no loop left)."""
    return "while" not in jax.jit(fn).lower(*args).as_text()


@triton.jit
def overlapping_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # Program p stores [p * BLOCK / 2, p * BLOCK / 2 + BLOCK): half of it again by the next program.
    i = tl.program_id(0) * (BLOCK // 2) + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n, other=0.0) + tl.program_id(0), mask=i < n)


@triton.jit
def tiles_kernel(x_ptr, out_ptr, COLS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    r = tl.program_id(0) * BM + tl.arange(0, BM)[:, None]
    c = tl.program_id(1) * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + r * COLS + c, tl.load(x_ptr + r * COLS + c) + tl.program_id(1))


def test_programs_that_store_apart_run_side_by_side_and_give_what_they_give_in_order() -> None:
    x = np.random.default_rng(7).standard_normal((32, 64)).astype(np.float32)

    def tiles(x: jax.Array) -> jax.Array:
        return jt.triton_call(x, kernel=tiles_kernel, out_shape=x, grid=(4, 8), COLS=64, BM=8, BN=8)

    assert _runs_side_by_side(tiles, x)
    want = x + np.repeat(np.arange(8, dtype=np.float32), 8)[None, :]
    np.testing.assert_array_equal(np.asarray(jax.jit(tiles)(x)), want)


def test_programs_whose_stores_overlap_run_in_order_as_the_interpreter_runs_them() -> None:
    x = np.random.default_rng(8).standard_normal(100).astype(np.float32)

    def overlapping(x: jax.Array, launcher: str = "compiled") -> jax.Array:
        return jt.triton_call(x, kernel=overlapping_kernel, out_shape=x, grid=12, n=100, BLOCK=16, launcher=launcher)

    assert not _runs_side_by_side(overlapping, x)
    compiled = np.asarray(jax.jit(overlapping)(x))
    np.testing.assert_array_equal(compiled, np.asarray(jax.jit(lambda x: overlapping(x, "ffi"))(x)))
    np.testing.assert_array_equal(compiled[88:96], x[88:96] + 11)  # the last program to store there wins


def test_programs_run_side_by_side_in_chunks_when_they_are_many(monkeypatch: pytest.MonkeyPatch) -> None:
    from jt_core.cpu.compiled.launcher import CpuCompiledLauncher
    from jt_core.translation.strategy import Strategy

    few = Strategy(side_by_side_bytes=4 * 64 * 7)  # 7 programs of 64 floats at a time
    monkeypatch.setattr(CpuCompiledLauncher, "strategy", lambda self: few)
    x = np.random.default_rng(9).standard_normal(1000).astype(np.float32)
    out = run(masked_read_kernel, x, out_shape=x, grid=16, n=1000, shift=0, BLOCK=64)
    np.testing.assert_array_equal(np.asarray(out), x)


def test_python_m_jt_core_cpu_lists_the_kernels_handed_to_the_interpreter(tmp_path: Any) -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "JT_CACHE_DIR": str(tmp_path / "cache")}
    script = (
        "import jax, numpy as np, jt_core as jt, sys; sys.path.insert(0, sys.argv[1]); import test_cpu_compiled as t;"
        "x = np.arange(4, dtype=np.float32);"
        "jax.block_until_ready(jax.jit(lambda x: jt.triton_call(x, kernel=t.printing_kernel, out_shape=x, grid=1,"
        " BLOCK=4))(x))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", script, os.path.dirname(__file__)], env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr
    listed = subprocess.run([sys.executable, "-m", "jt_core", "cpu"], env=env, capture_output=True, text=True)
    assert "printing_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr)" in listed.stdout, listed
    assert "device printing (tl.device_print / print) at " in listed.stdout and "test_cpu_compiled.py:" in listed.stdout
    forgot = subprocess.run(
        [sys.executable, "-m", "jt_core", "cpu", "--forget"], env=env, capture_output=True, text=True
    )
    assert forgot.stdout.strip() == "forgot 1 kernels"
    again = subprocess.run([sys.executable, "-m", "jt_core", "cpu"], env=env, capture_output=True, text=True)
    assert "has handed no kernel" in again.stdout


@pytest.mark.parametrize("fault", ["corrupt", "folder"])
def test_a_damaged_record_of_handed_over_kernels_fails_no_call(
    fault: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jt_core.cpu.compiled import handed_over

    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "cache"))
    handed_over.remember(f"k_{fault}(x)", "a reason")
    (record,) = (tmp_path / "cache" / "cpu").glob("*.json")
    if fault == "corrupt":
        record.write_bytes(b"{not json")
    else:
        record.unlink()
        record.mkdir()
    with pytest.warns(RuntimeWarning) if fault == "corrupt" else contextlib.nullcontext():
        assert handed_over.recorded() == []
    handed_over.remember(f"k2_{fault}(x)", "another reason")  # made again, or left out: never raises
    x = np.arange(4, dtype=np.float32)
    out = jax.jit(lambda x: jt.triton_call(x, kernel=printing_kernel, out_shape=x, grid=1, BLOCK=4))(x)
    np.testing.assert_array_equal(np.asarray(out), 2 * x)


@triton.jit
def k_loop_matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    K,
    SCALE_EACH_STEP: tl.constexpr,
    PRECISION: tl.constexpr,
    UNROLL_TAG: tl.constexpr,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    N: tl.constexpr,
):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(b_ptr + (k + ks)[:, None] * N + cols[None, :])
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        if SCALE_EACH_STEP:  # the accumulator used by more than the next step's dot
            acc = acc * 0.5
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(c_ptr.dtype.element_ty))


@pytest.mark.parametrize("scale_each_step", [False, True])
@pytest.mark.parametrize(("dtype", "precision"), [(np.float32, "ieee"), (np.float32, "tf32"), (np.float16, "ieee")])
def test_a_k_loop_of_dots_unrolled_gives_the_bits_of_the_loop_run_step_by_step(
    monkeypatch: pytest.MonkeyPatch, dtype: type, precision: str, scale_each_step: bool
) -> None:
    """An unrolled loop of ``acc = tl.dot(a, b, acc)`` computes its products as one batched product and adds them
    in the loop's order: the same bits as the loop traced as a loop (XLA's while), step by step."""
    from jt_core.cpu.compiled.launcher import CpuCompiledLauncher
    from jt_core.translation.strategy import CPU_STRATEGY

    rng = np.random.default_rng(11)
    m, n, k = 64, 48, 128
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)

    def call(tag: int) -> jax.stages.Lowered:
        def f(a: jax.Array, b: jax.Array) -> jax.Array:
            return jt.triton_call(
                a, b, kernel=k_loop_matmul_kernel, out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
                grid=(m // 32, n // 16), K=k, SCALE_EACH_STEP=scale_each_step, PRECISION=precision,
                UNROLL_TAG=tag, BM=32, BN=16, BK=16, N=n, launcher="compiled",
            )  # fmt: skip

        return jax.jit(f).lower(a, b)

    unrolled = call(0)
    looping = dataclasses.replace(CPU_STRATEGY, unrolled_operations=0)
    monkeypatch.setattr(CpuCompiledLauncher, "strategy", lambda self: looping)
    looped = call(1)
    dots = unrolled.as_text().count("stablehlo.dot_general")
    assert dots == (k // 16 if scale_each_step else 1)  # one batched product where the steps only accumulate
    got, want = np.asarray(unrolled.compile()(a, b)), np.asarray(looped.compile()(a, b))
    np.testing.assert_array_equal(got, want)
    reference = np.zeros((m, n))
    for start in range(0, k, 16):
        reference = reference + a[:, start : start + 16].astype(np.float64) @ b[start : start + 16].astype(np.float64)
        reference = reference * 0.5 if scale_each_step else reference
    np.testing.assert_allclose(got, reference, rtol=2e-2 if precision == "tf32" else 1e-4, atol=1e-2)
