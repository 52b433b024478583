"""The CPU backend's race check: data races between the program instances of one launch, and outputs no program
wrote. Racy kernels must be reported with both program ids; correct kernels (masked tails, atomics, in-place
kernels on their own blocks) must run clean."""

from __future__ import annotations

import contextlib
import re
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import DataRaceError, UnwrittenOutputError, UnwrittenOutputWarning

sys.path.insert(0, str(Path(__file__).parent))
import core_kernels as k

from jt_core.testing import scale_inplace_kernel


def rand(n: int, seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(n), dtype=jnp.float32)


def race_message(run, switch: bool = True) -> str:
    """The DataRaceError a call raises (it arrives inside JaxRuntimeError, as out-of-bounds errors do), with the
    race check switched on for it (``switch``) or left as the environment says."""
    with (
        jt.cpu_checks(races=True) if switch else contextlib.nullcontext(),
        pytest.raises(jax.errors.JaxRuntimeError) as raised,
    ):
        jax.block_until_ready(run())
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, DataRaceError), raised.value
    return str(error)


# -- racy kernels ---------------------------------------------------------------------------------------------


@triton.jit
def same_block_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # Every program writes out[0:BLOCK]: the store forgets program_id.
    offsets = tl.arange(0, BLOCK)
    values = tl.load(x_ptr + tl.program_id(0) * BLOCK + offsets)
    tl.store(out_ptr + offsets, values)


@triton.jit
def sum_without_atomic_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    partial = tl.sum(tl.load(x_ptr + offsets), axis=0)
    total = tl.load(out_ptr)
    tl.store(out_ptr, total + partial)


@triton.jit
def chunk_kernel(x_ptr, n, out_ptr, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    # Each program owns CHUNK elements but runs BLOCK >= CHUNK lanes; the mask should also say lanes < CHUNK.
    lanes = tl.arange(0, BLOCK)
    offsets = tl.program_id(0) * CHUNK + lanes
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)


@triton.jit
def neighbour_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    # Writes its own block, then reads the next program's block of the same output.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)
    following = offsets + BLOCK
    later = tl.load(out_ptr + following, mask=following < n, other=0.0)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + later, mask=mask)


@triton.jit
def inplace_shift_kernel(x_ptr, n, BLOCK: tl.constexpr):
    # In place: x[i] = x[i - 1] + x[i]. Each block reads the last element of the block before it.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = (offsets < n) & (offsets > 0)
    previous = tl.load(x_ptr + offsets - 1, mask=mask, other=0.0)
    current = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    tl.store(x_ptr + offsets, previous + current, mask=offsets < n)


@triton.jit
def atomic_then_plain_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offsets), axis=0))
    if tl.program_id(0) == 1:
        tl.store(out_ptr, 0.0)


def total_of(kernel, x: jax.Array) -> jax.Array:
    """A call adding two blocks of ``x`` into one zeroed element."""
    return jt.triton_call(
        x, kernel=kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.float32), grid=2, BLOCK=16, zeroed_outputs=(0,)
    )


def test_two_programs_storing_to_the_same_elements_is_a_race() -> None:
    x = rand(64)
    message = race_message(
        lambda: jt.triton_call(
            x, kernel=same_block_kernel, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=4, BLOCK=16
        )
    )
    assert message.startswith("kernel 'same_block_kernel': data race (write-write) on argument 'out_ptr', ")
    assert "elements 0-15 (16 elements)" in message
    assert "program (1, 0, 0) stores to them and program (0, 0, 0) stores to them too" in message
    assert "both at test_cpu_race_check.py:" in message and "tl.store(out_ptr + offsets, values)" in message


def test_reduction_without_atomic_is_a_read_write_race() -> None:
    x = rand(32)
    message = race_message(lambda: total_of(sum_without_atomic_kernel, x))
    assert "data race (read-write) on argument 'out_ptr', element 0:" in message
    assert "program (1, 0, 0) loads it at" in message and "total = tl.load(out_ptr)" in message
    assert "program (0, 0, 0) stores to it at" in message and "tl.store(out_ptr, total + partial)" in message
    assert "split the work into two launches, or make both accesses atomic" in message


def test_tail_lanes_spilling_into_the_next_chunk_are_a_race() -> None:
    x = rand(48)
    message = race_message(lambda: jt.triton_call(x, 48, kernel=chunk_kernel, out_shape=x, grid=4, CHUNK=12, BLOCK=16))
    # Program 0 writes 0..15, program 1 starts at 12: elements 12..15 are written by both.
    assert "data race (write-write) on argument 'out_ptr', elements 12-15 (4 elements)" in message
    assert "program (1, 0, 0)" in message and "program (0, 0, 0)" in message


def test_reading_the_next_programs_output_block_is_a_race() -> None:
    x = rand(48)
    message = race_message(lambda: jt.triton_call(x, 48, kernel=neighbour_kernel, out_shape=x, grid=3, BLOCK=16))
    # Program 0 reads 16..31 (not yet written: no race yet); program 1 then stores to 16..31 that program 0 loaded.
    assert "data race (read-write) on argument 'out_ptr', elements 16-31 (16 elements)" in message
    assert re.search(r"program \(1, 0, 0\) stores to them at .*, and program \(0, 0, 0\) loads them at", message)


def test_in_place_kernel_reading_the_previous_block_is_a_race() -> None:
    x = rand(48)
    message = race_message(
        lambda: jt.triton_call(
            x, 48, kernel=inplace_shift_kernel, out_shape=x, input_output_aliases={0: 0}, grid=3, BLOCK=16
        )
    )
    assert "data race (read-write) on argument 'x_ptr', element 15:" in message
    assert "program (1, 0, 0) loads it" in message and "program (0, 0, 0) stores to it" in message


def test_plain_store_to_an_atomically_updated_element_is_a_race() -> None:
    x = rand(32)
    message = race_message(lambda: total_of(atomic_then_plain_kernel, x))
    assert "data race (write-write) on argument 'out_ptr', element 0:" in message
    assert "program (1, 0, 0) stores to it at" in message
    assert "program (0, 0, 0) atomically updates it at" in message


@triton.jit
def locked_sum_kernel(x_ptr, out_ptr, lock_ptr, BLOCK: tl.constexpr, SEM: tl.constexpr, EARLY: tl.constexpr):
    """Each program adds its block's sum to ``out`` with a plain load and store while it holds a spin lock (or,
    with ``EARLY``, after giving the lock back)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    partial = tl.sum(tl.load(x_ptr + offsets), axis=0)
    while tl.atomic_cas(lock_ptr, 0, 1, sem=SEM) == 1:
        pass
    if EARLY:
        tl.atomic_xchg(lock_ptr, 0, sem=SEM)
    total = tl.load(out_ptr)
    tl.store(out_ptr, total + partial)
    if not EARLY:
        tl.atomic_xchg(lock_ptr, 0, sem=SEM)


def locked_sum(x: jax.Array, sem: str = "acq_rel", early: bool = False) -> jax.Array:
    out = jax.ShapeDtypeStruct((1,), jnp.float32)
    lock = jax.ShapeDtypeStruct((1,), jnp.int32)
    total, _ = jt.triton_call(
        x, kernel=locked_sum_kernel, out_shape=(out, lock), grid=4, BLOCK=16, SEM=sem, EARLY=early,
        zeroed_outputs=(0, 1),
    )  # fmt: skip
    return total


def test_accesses_made_while_holding_a_spin_lock_do_not_race() -> None:
    x = rand(64)
    with jt.cpu_checks(races=True, unwritten="error"):
        total = jax.block_until_ready(locked_sum(x))
    np.testing.assert_allclose(np.asarray(total), [np.asarray(x, np.float64).sum()], rtol=1e-5)


@triton.jit
def nested_locks_kernel(x_ptr, out_ptr, locks_ptr, BLOCK: tl.constexpr):
    """Even programs add under two locks (the outer one, then an inner one), odd ones under the outer one alone."""
    pid = tl.program_id(0)
    partial = tl.sum(tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK)), axis=0)
    inner = pid % 2 == 0
    while tl.atomic_cas(locks_ptr, 0, 1) == 1:
        pass
    if inner:
        while tl.atomic_cas(locks_ptr + 1, 0, 1) == 1:
            pass
    tl.store(out_ptr, tl.load(out_ptr) + partial)
    if inner:
        tl.atomic_xchg(locks_ptr + 1, 0)
    tl.atomic_xchg(locks_ptr, 0)


def test_accesses_under_nested_locks_are_ordered_by_the_lock_they_share() -> None:
    x = rand(64)
    shapes = (jax.ShapeDtypeStruct((1,), jnp.float32), jax.ShapeDtypeStruct((2,), jnp.int32))
    with jt.cpu_checks(races=True, unwritten="error"):
        total, _ = jax.block_until_ready(
            jt.triton_call(x, kernel=nested_locks_kernel, out_shape=shapes, grid=4, BLOCK=16, zeroed_outputs=(0, 1))
        )
    np.testing.assert_allclose(np.asarray(total), [np.asarray(x, np.float64).sum()], rtol=1e-5)


@pytest.mark.parametrize(
    ("options", "why"), [({"early": True}, "the lock given back first"), ({"sem": "relaxed"}, "relaxed atomics")]
)
def test_accesses_outside_the_lock_or_under_relaxed_atomics_race(options: dict, why: str) -> None:
    message = race_message(lambda: locked_sum(rand(64), **options))
    assert "data race (read-write) on argument 'out_ptr', element 0:" in message, why
    assert "total = tl.load(out_ptr)" in message and "tl.store(out_ptr, total + partial)" in message


def test_environment_variable_switches_the_check_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CPU_RACE_CHECK", "1")
    x = rand(64)
    message = race_message(
        lambda: jt.triton_call(
            x, kernel=same_block_kernel, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=4, BLOCK=16
        ),
        switch=False,
    )
    assert "same_block_kernel" in message


def test_without_the_check_a_racy_kernel_runs_as_the_interpreter_orders_it() -> None:
    x = rand(64)
    with jt.cpu_checks(races=False):
        out = jt.triton_call(
            x, kernel=same_block_kernel, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=4, BLOCK=16
        )
    np.testing.assert_array_equal(out, np.asarray(x)[48:])  # the last program wins on the CPU


def test_a_jitted_function_is_traced_again_inside_the_block() -> None:
    x = rand(64)
    racy = jax.jit(
        lambda x: jt.triton_call(
            x, kernel=same_block_kernel, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32), grid=4, BLOCK=16
        )
    )
    with jt.cpu_checks(races=False):
        jax.block_until_ready(racy(x))  # compiled without the check
        assert "data race" in race_message(lambda: racy(x))
        jax.block_until_ready(racy(x))  # and without it again


# -- correct kernels run clean --------------------------------------------------------------------------------


@triton.jit
def atomic_sum_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(x_ptr + offsets, mask=offsets < n, other=0.0)
    tl.atomic_add(out_ptr, tl.sum(values, axis=0))


@triton.jit
def histogram_kernel(x_ptr, n, out_ptr, BINS: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    bins = tl.load(x_ptr + offsets, mask=mask, other=0)
    tl.atomic_add(out_ptr + bins, tl.full((BLOCK,), 1, tl.int32), mask=mask)


@triton.jit
def rows_sum_2d_kernel(x_ptr, out_ptr, COLS: tl.constexpr):
    # A 2-D grid: program (row, col-block) reads its own tile and adds it into its row's atomically.
    row, part = tl.program_id(0), tl.program_id(1)
    cols = part * COLS + tl.arange(0, COLS)
    tile = tl.load(x_ptr + row * 2 * COLS + cols)
    tl.atomic_add(out_ptr + row, tl.sum(tile, axis=0))


def test_correct_kernels_run_clean_and_right() -> None:
    x, y = rand(100, 1), rand(100, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with jt.cpu_checks(races=True, unwritten="error"):
            added = jt.triton_call(x, y, 100, kernel=k.add_kernel, out_shape=x, grid=7, BLOCK=16)
            total = jt.triton_call(
                x,
                100,
                kernel=atomic_sum_kernel,
                out_shape=jax.ShapeDtypeStruct((1,), jnp.float32),
                grid=7,
                BLOCK=16,
                zeroed_outputs=(0,),
            )
            bins = jnp.asarray(np.random.default_rng(3).integers(0, 8, 100), dtype=jnp.int32)
            counts = jt.triton_call(
                bins,
                100,
                kernel=histogram_kernel,
                out_shape=jax.ShapeDtypeStruct((8,), jnp.int32),
                grid=7,
                BINS=8,
                BLOCK=16,
                zeroed_outputs=(0,),
            )
            scaled = jax.jit(
                lambda x: jt.triton_call(
                    x,
                    100,
                    3.0,
                    kernel=scale_inplace_kernel,
                    out_shape=x,
                    input_output_aliases={0: 0},
                    grid=7,
                    BLOCK=16,
                ),
                donate_argnums=0,
            )(jnp.array(x))
            matrix = rand(4 * 32, 4).reshape(4, 32)
            rows = jt.triton_call(
                matrix,
                kernel=rows_sum_2d_kernel,
                out_shape=jax.ShapeDtypeStruct((4,), jnp.float32),
                grid=(4, 2),
                COLS=16,
                zeroed_outputs=(0,),
            )
            jax.block_until_ready((added, total, counts, scaled, rows))
    np.testing.assert_allclose(added, np.asarray(x) + np.asarray(y), rtol=1e-6)
    np.testing.assert_allclose(total[0], np.asarray(x, dtype=np.float64).sum(), rtol=1e-4)
    np.testing.assert_array_equal(counts, np.bincount(np.asarray(bins), minlength=8))
    np.testing.assert_allclose(scaled, np.asarray(x) * 3.0, rtol=1e-6)
    np.testing.assert_allclose(rows, np.asarray(matrix, dtype=np.float64).sum(axis=1), rtol=1e-4)


# -- unwritten outputs ----------------------------------------------------------------------------------------


def test_unwritten_output_elements_warn_with_their_ranges() -> None:
    x, y = rand(64, 1), rand(64, 2)
    with jt.cpu_checks(races=True, unwritten="warn"), pytest.warns(UnwrittenOutputWarning) as caught:
        # n=60 leaves the last four elements to nobody.
        jax.block_until_ready(jt.triton_call(x, y, 60, kernel=k.add_kernel, out_shape=x, grid=4, BLOCK=16))
    message = str(caught[0].message)
    assert message.startswith("kernel 'add_kernel': output 'out_ptr' (float32[64]) has elements 60-63 (4 of")
    assert "zeroed_outputs" in message and "input_output_aliases" in message


def test_unwritten_output_can_be_an_error() -> None:
    x, y = rand(64, 1), rand(64, 2)
    with jt.cpu_checks(races=True, unwritten="error"), pytest.raises(jax.errors.JaxRuntimeError) as raised:
        jax.block_until_ready(jt.triton_call(x, y, 60, kernel=k.add_kernel, out_shape=x, grid=4, BLOCK=16))
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, UnwrittenOutputError)
    assert "has elements 60-63 (4 of 64 elements) that no program wrote" in str(error)


def test_zeroed_and_aliased_outputs_are_not_unwritten() -> None:
    x = rand(64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with jt.cpu_checks(races=True, unwritten="error"):
            out = jt.triton_call(x, x, 60, kernel=k.add_kernel, out_shape=x, grid=4, BLOCK=16, zeroed_outputs=(0,))
            jax.block_until_ready(out)
    np.testing.assert_array_equal(np.asarray(out)[60:], 0)


def test_unwritten_choice_is_checked() -> None:
    with (
        pytest.raises(ValueError, match=r"unwritten= must be one of \['warn', 'error', 'ignore'\], got 'loud'"),
        jt.cpu_checks(unwritten="loud"),
    ):
        pass
