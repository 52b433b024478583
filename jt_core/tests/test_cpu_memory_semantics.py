"""The CPU reaches memory as Triton means it, on both of its paths: atomics through the pointer's type, pointer
arithmetic in 64 bits, grids of 2**31 programs and more, clear errors; and what it does where Triton leaves the
result undefined (what ``docs/pages/cpu.md`` says)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import DifferentialMismatchError, KernelRuntimeError, OutOfBoundsAccessError
from jt_core.translation.analysis.affine import Affine
from jt_core.translation.memory import STRAYED, BufferSpec, Memory, Pointer, State, no_error

PATHS = ["compiled", "ffi"]


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


def failure(kernel: Any, *args: Any, launcher: str, **kwargs: Any) -> tuple[BaseException, Any]:
    """The error a call fails with, and the jt error it carries."""
    with pytest.raises(Exception) as raised:
        jax.block_until_ready(jax.jit(lambda *a: jt.triton_call(*a, kernel=kernel, launcher=launcher, **kwargs))(*args))
    return raised.value, jt.errors.from_runtime_error(raised.value)


# -- atomics -------------------------------------------------------------------------------------------------------


@triton.jit
def _atomic(pointer, values, KIND: tl.constexpr):
    if KIND == "max":
        return tl.atomic_max(pointer, values)
    elif KIND == "min":
        return tl.atomic_min(pointer, values)
    return tl.atomic_add(pointer, values)


@triton.jit
def atomic_kernel(unused_ptr, used_ptr, values_ptr, found_ptr, KIND: tl.constexpr, AS: tl.constexpr):
    """The same atomic on two copies of the memory: one whose result nobody reads, one whose result is stored."""
    i = tl.arange(0, 16)
    unused = unused_ptr + i
    used = used_ptr + i
    if AS == "int32":
        unused = unused_ptr.to(tl.pointer_type(tl.int32)) + i
        used = used_ptr.to(tl.pointer_type(tl.int32)) + i
    values = tl.load(values_ptr + i)
    _atomic(unused, values, KIND)
    tl.store(found_ptr + i, _atomic(used, values, KIND))


def _float_extreme(memory: np.ndarray, values: np.ndarray, kind: str) -> np.ndarray:
    """Triton's float atomic max (min), as its front end builds it from integer atomics on the bits: a value with the
    sign bit clear takes the signed integer maximum (minimum) of the bits, one with it set the unsigned minimum
    (maximum)."""
    signed = memory.view({4: np.int32, 8: np.int64}[memory.itemsize])
    unsigned = memory.view({4: np.uint32, 8: np.uint64}[memory.itemsize])
    v_signed, v_unsigned = values.view(signed.dtype), values.view(unsigned.dtype)
    high, low = (np.maximum, np.minimum) if kind == "max" else (np.minimum, np.maximum)
    negative = np.signbit(values)
    return np.where(negative, low(unsigned, v_unsigned).view(memory.dtype), high(signed, v_signed).view(memory.dtype))


def _atomic_case(case: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str, str, np.ndarray]:
    """Memory, values, the atomic, the pointer's type and the memory after it."""
    if case == "signed max through int32 on uint32 memory":
        memory = rng.integers(0, 2**32, 16, dtype=np.uint64).astype(np.uint32)
        memory[:4] = [0, 1, 2**31, 2**32 - 1]
        values = rng.integers(-(2**31), 2**31, 16, dtype=np.int64).astype(np.int32)
        return memory, values, "max", "int32", np.maximum(memory.view(np.int32), values).view(np.uint32)
    if case == "integer add on float bits":
        memory = rng.standard_normal(16).astype(np.float32)
        values = rng.integers(-1000, 1000, 16).astype(np.int32)
        return memory, values, "add", "int32", (memory.view(np.int32) + values).view(np.float32)
    dtype = np.float32 if case.endswith("32") else np.float64
    kind = "max" if "max" in case else "min"
    memory = rng.standard_normal(16).astype(dtype)
    memory[:8] = [np.nan, -np.nan, 0.0, -0.0, 0.0, -0.0, np.inf, -np.inf]
    values = rng.standard_normal(16).astype(dtype)
    values[:8] = [1.0, 1.0, -0.0, 0.0, 0.0, -0.0, -1.0, 1.0]
    return memory, values, kind, "same", _float_extreme(memory, values, kind)


ATOMIC_CASES = [
    "signed max through int32 on uint32 memory",
    "integer add on float bits",
    "float max with NaNs and signed zeros in memory, float32",
    "float min with NaNs and signed zeros in memory, float32",
    "float max with NaNs and signed zeros in memory, float64",
    "float min with NaNs and signed zeros in memory, float64",
]


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("case", ATOMIC_CASES)
def test_atomics_combine_as_the_pointer_type_reads_memory(launcher: str, case: str) -> None:
    """An atomic combines the memory as its pointer's type reads it, whether or not its result is read, and returns
    what each lane found (float64 included: Triton 3.6's interpreter returned the bits converted as numbers)."""
    memory, values, kind, view, want = _atomic_case(case, np.random.default_rng(ATOMIC_CASES.index(case)))
    found = jax.ShapeDtypeStruct((16,), values.dtype)
    with jax.enable_x64(True):
        unused, used, got = run(
            atomic_kernel,
            memory,
            memory,
            values,
            launcher=launcher,
            out_shape=(memory, memory, found),
            input_output_aliases={0: 0, 1: 1},
            zeroed_outputs=(2,),
            grid=1,
            KIND=kind,
            AS=view,
        )
    np.testing.assert_array_equal(unused.view(np.uint8), want.view(np.uint8))
    np.testing.assert_array_equal(used.view(np.uint8), want.view(np.uint8))
    np.testing.assert_array_equal(got.view(np.uint8), memory.view(values.dtype).view(np.uint8))


# -- pointer arithmetic --------------------------------------------------------------------------------------------


@triton.jit
def two_offsets_kernel(x_ptr, offsets_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    first = tl.load(offsets_ptr + i * 0)
    second = tl.load(offsets_ptr + 1 + i * 0)
    tl.store(out_ptr + i, tl.load(x_ptr + first + second + i))


def test_pointer_offsets_are_added_in_64_bits() -> None:
    """``x_ptr + a + b`` adds each int32 offset to the 64-bit pointer, as Triton does: -2**31 and -2**31 + 3 reach
    4 GiB before the buffer. Added in int32 they would wrap to 3, inside it, and read element 3 unnoticed."""
    x = np.arange(64, dtype=np.float32)
    offsets = np.array([-(2**31), -(2**31) + 3], np.int32)
    out = jax.ShapeDtypeStruct((4,), jnp.float32)
    messages = []
    for launcher in PATHS:
        _, error = failure(two_offsets_kernel, x, offsets, launcher=launcher, out_shape=out, grid=1, BLOCK=4)
        assert isinstance(error, OutOfBoundsAccessError), error
        messages.append(str(error))
    assert f"load of 4 bytes from argument 'x_ptr' at element {-(2**32) + 3} (" in messages[0]
    assert messages[0] == messages[1]


@triton.jit
def int8_wrap_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    wrapped = (i + 120).to(tl.int8)  # 120 .. 127, then -128 .. -121
    tl.store(out_ptr + i, tl.load(x_ptr + wrapped.to(tl.int32) + 128))


@pytest.mark.parametrize("launcher", PATHS)
def test_offsets_wrapped_through_int8_that_land_inside_are_not_refused(launcher: str) -> None:
    x = np.random.default_rng(9).standard_normal(256).astype(np.float32)
    out = run(
        int8_wrap_kernel, x, launcher=launcher, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=1, BLOCK=16
    )
    offsets = (np.arange(16) + 120).astype(np.int8).astype(np.int32) + 128
    np.testing.assert_array_equal(out, x[offsets])


def test_a_block_whose_int32_offsets_wrap_is_out_of_bounds_in_a_buffer_of_2_31_elements() -> None:
    """The bounds check of an unmasked block by its two ends holds for buffers of fewer than 2**31 elements only: in
    a larger one, offsets that wrapped in the kernel's int32 arithmetic (negative) are found lane by lane. No buffer
    is made: the check reads the buffer's size."""
    memory = Memory([BufferSpec("x_ptr", np.dtype(np.int8), (2**31 + 64,), False, None)], [None], True)
    start = 2**31 - 8
    wrapped = ((np.arange(16) + start + 2**31) % 2**32 - 2**31).astype(np.int32)  # ..., 2**31 - 1, -2**31, ...
    predicted = Affine(start, (0, 0, 0), (1,), (16,))  # exact, as the kernel's source says: inside the buffer
    state = State((), no_error())
    with jax.enable_x64(True):  # as the compiled path traces kernels
        _, _, strayed = memory._lanes(state, "load", Pointer(0, jnp.asarray(wrapped), "i8", predicted), None, (16,))
        inside = np.arange(16, dtype=np.int32) + 2**30
        _, _, kept = memory._lanes(
            state, "load", Pointer(0, jnp.asarray(inside), "i8", Affine(2**30, (0, 0, 0), (1,), (16,))), None, (16,)
        )
    assert int(strayed.faults) == STRAYED
    assert not int(kept.faults)


# -- grids ---------------------------------------------------------------------------------------------------------


@triton.jit
def grid_end_kernel(out_ptr, START: tl.constexpr):
    x = tl.program_id(0)
    y = tl.program_id(1)
    from_end = x * tl.num_programs(1) + y - START
    tl.store(out_ptr + from_end, x + y * 2**20, mask=from_end >= 0)


def test_a_grid_of_2_31_programs_runs_every_program() -> None:
    """2**31 programs in all, (2**20, 2048): the last ones run, with their own ids (the programs were numbered in
    int32, which ran none). About 2 ns a program, 4 s on a 2-core host. Only on the compiled path: the interpreter
    takes about half a millisecond per program."""
    grid = (2**20, 2048)
    out = run(
        grid_end_kernel,
        launcher="compiled",
        out_shape=jax.ShapeDtypeStruct((16,), jnp.int32),
        grid=grid,
        START=2**31 - 16,
    )
    np.testing.assert_array_equal(out, (2**20 - 1) + np.arange(2048 - 16, 2048) * 2**20)


# -- errors --------------------------------------------------------------------------------------------------------


@triton.jit
def divide_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i) // tl.load(y_ptr + i))


def test_a_differential_mismatch_is_a_clear_error_that_from_runtime_error_rebuilds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An integer division by zero (undefined; the paths differ) under ``JT_CPU_DIFFERENTIAL=1``: the call fails
    with the comparison's message, no traceback, and the error is rebuilt from it."""
    monkeypatch.setenv("JT_CPU_DIFFERENTIAL", "1")
    x = np.arange(1, 9, dtype=np.int32)
    y = np.array([1, 2, 0, 3, 0, 1, 2, 3], np.int32)
    with pytest.warns(RuntimeWarning):  # NumPy's, in the interpreter
        raw, error = failure(divide_kernel, x, y, launcher="compiled", out_shape=x, grid=1, BLOCK=8)
    assert isinstance(error, DifferentialMismatchError), raw
    assert "DifferentialMismatchError: triton_call 'divide_kernel': the compiled CPU path and Triton's" in str(raw)
    assert "Traceback" not in str(raw)
    assert "at 2 of 8 elements: [2] np.int32(-1) (compiled) != np.int32(0) (interpreter)" in str(error)


# -- undefined behaviour, as docs/pages/cpu.md says -------------------------------------------------------------


@pytest.mark.parametrize("launcher", PATHS)
def test_integer_division_by_zero_is_what_the_cpu_page_says(launcher: str) -> None:
    """Undefined in Triton. The compiled path gives XLA's answer (a quotient of -1, the dividend as remainder),
    the interpreter NumPy's (zeros, with a warning)."""
    x = np.array([7, -7, 0, 2**31 - 1], np.int32)
    with pytest.warns(RuntimeWarning) if launcher == "ffi" else contextlib.nullcontext():
        out = run(divide_kernel, x, np.zeros(4, np.int32), launcher=launcher, out_shape=x, grid=1, BLOCK=4)
    np.testing.assert_array_equal(out, np.full(4, -1 if launcher == "compiled" else 0))


@triton.jit
def gather_kernel(source_ptr, index_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.gather(tl.load(source_ptr + i), tl.load(index_ptr + i), 0))


def test_out_of_range_gather_indices_are_what_the_cpu_page_says() -> None:
    """Undefined in Triton. The compiled path counts a negative index from the end, then clamps into the block;
    the interpreter stops with NumPy's IndexError."""
    source = np.arange(10, 18, dtype=np.float32)
    index = np.array([0, -1, 8, 9, 100, -100, 3, 7], np.int32)
    out = run(gather_kernel, source, index, launcher="compiled", out_shape=source, grid=1, BLOCK=8)
    np.testing.assert_array_equal(out, source[np.clip(np.where(index < 0, index + 8, index), 0, 7)])
    _, error = failure(gather_kernel, source, index, launcher="ffi", out_shape=source, grid=1, BLOCK=8)
    assert isinstance(error, KernelRuntimeError) and "IndexError" in str(error), error


@triton.jit
def nan_order_kernel(x_ptr, argmax_ptr, argmin_ptr, sorted_ptr, extreme_ptr, N: tl.constexpr):
    rows = tl.arange(0, 8)
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + rows[:, None] * N + cols[None, :])
    tl.store(argmax_ptr + rows, tl.argmax(x, axis=1))
    tl.store(argmin_ptr + rows, tl.argmin(x, axis=1))
    tl.store(sorted_ptr + rows[:, None] * N + cols[None, :], tl.sort(x, dim=1))
    tl.store(extreme_ptr + rows, tl.min(x, axis=1))
    tl.store(extreme_ptr + 8 + rows, tl.max(x, axis=1))


@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning")  # NumPy's, in the interpreter
def test_nans_and_signed_zeros_are_what_the_cpu_page_says() -> None:
    """``tl.argmax``/``tl.argmin`` with NaNs and ``tl.sort`` with NaNs are the same on both paths (both run
    Triton's combining function in one order, and its sorting network); ``tl.min``/``tl.max`` ignore NaNs; of two
    zeros, min and max give either sign."""
    nan = np.nan
    x = np.array(
        [
            [1, nan, 3, 2],
            [nan, 1, 5, 5],
            [nan] * 4,
            [2, 2, 1, 1],
            [nan, 1, 0.5, nan],
            [3, 1, nan, 0.5],
            [-0.0, 0.0, 0.0, -0.0],
            [0.0, -0.0, -0.0, 0.0],
        ],
        np.float32,
    )
    outs = (
        jax.ShapeDtypeStruct((8,), jnp.int32),
        jax.ShapeDtypeStruct((8,), jnp.int32),
        x,
        jax.ShapeDtypeStruct((16,), jnp.float32),
    )
    results = [run(nan_order_kernel, x, launcher=launcher, out_shape=outs, grid=1, N=4) for launcher in PATHS]
    for compiled, interpreted in zip(*results, strict=True):
        np.testing.assert_array_equal(compiled[:6].view(np.uint8), interpreted[:6].view(np.uint8))
    for _, _, _, extremes in results:
        np.testing.assert_array_equal(extremes[:6], np.fmin.reduce(x[:6], axis=1))
        np.testing.assert_array_equal(extremes[8:14], np.fmax.reduce(x[:6], axis=1))
        assert (extremes[6:8] == 0).all() and (extremes[14:16] == 0).all()
