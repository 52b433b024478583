"""The CPU backend's address checks: which argument an out-of-bounds access is blamed on, and what is said."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import OutOfBoundsAccessError
from jt_core.interpreter.access import AccessChecker, Buffer, addresses

# Two arguments side by side in memory, as XLA may place them: x = [1000, 1040), y = [1040, 1104) (4-byte elements).
BUFFERS = [Buffer("x_ptr", 1000, 1040, False), Buffer("y_ptr", 1040, 1104, True)]
X, Y = addresses(BUFFERS)  # what the kernel's pointers hold in a checked run


def _message(addresses: list[int], op: str = "load", buffers: list[Buffer] = BUFFERS) -> str:
    checker = AccessChecker("k", buffers)
    with pytest.raises(OutOfBoundsAccessError) as raised:
        checker.check(np.array(addresses, dtype=np.uint64), None, 4, op)
    return str(raised.value)


def test_an_access_inside_its_argument_reaches_the_real_buffer() -> None:
    checker = AccessChecker("k", BUFFERS)
    mask = np.arange(8) % 2 == 0
    real, located = checker.check(np.array([Y + 4 * i for i in range(8)], np.uint64), mask, 4, "store")
    np.testing.assert_array_equal(real, np.where(mask, [1040 + 4 * i for i in range(8)], 0))
    assert located is not None and located.slots == 1
    np.testing.assert_array_equal(located.addrs, [1040 + 8 * i for i in range(4)])


def test_access_starting_just_before_an_argument_blames_that_argument() -> None:
    message = _message([Y + 4 * i for i in range(-1, 15)])
    assert "from argument 'y_ptr' at element -1 (4 bytes before its start;" in message
    assert "x_ptr" not in message
    assert "1 offending addresses" in message


def test_an_access_past_an_argument_is_blamed_on_it_even_where_a_neighbour_lies() -> None:
    """x's element 10 is where y starts in memory: the access came through x, so it is x's, and out of bounds (a
    check of the real addresses would find it inside y and let it read y)."""
    message = _message([X + 4 * i for i in range(8, 16)])
    assert "from argument 'x_ptr' at element 10 (past its end; it holds 10 elements, 40 bytes)" in message
    assert "y_ptr" not in message


def test_an_address_far_from_its_argument_still_names_it() -> None:
    assert "from argument 'y_ptr' at element 100000 (past its end;" in _message([Y + 400_000])
    message = _message([12345])  # from no argument's region: a pointer made from an integer
    assert "from an address outside every argument" in message


def test_arguments_that_hold_no_element_are_named() -> None:
    empty = [Buffer("x_ptr", 1000, 1000, False), Buffer("out_ptr", 1000, 1000, True, 4, 0, (0,))]
    x, out = addresses(empty)
    assert x != out  # arguments without elements share no region, wherever their (empty) memory is
    message = _message([out, out + 4], buffers=empty)
    assert "from argument 'out_ptr' (output 0) at element 0 (past its end; it holds 0 elements, 0 bytes)" in message
    assert "Arguments 'x_ptr', 'out_ptr' hold no elements (zero-size)" in message
    assert "out_shape" not in message


def test_access_past_the_end_names_the_element_and_the_size() -> None:
    message = _message([X + 4 * i for i in range(12)], op="store")
    assert "out-of-bounds store of 4 bytes from argument 'x_ptr' at element 10 (past its end;" in message
    assert "it holds 10 elements, 40 bytes)" in message
    assert "Mask the store (tl.store(pointers, values, mask=...))" in message


def test_arguments_sharing_their_memory_share_their_pointer() -> None:
    """An input aliased to an output and passed as both: one region, named as the first, writable."""
    shared = [Buffer("x_ptr", 1000, 1040, True, 4, 0, (10,)), Buffer("out_ptr", 1000, 1040, True, 4, 0, (10,))]
    first, second = addresses(shared)
    assert first == second
    real, _ = AccessChecker("k", shared).check(np.array([second + 36], np.uint64), None, 4, "store")
    assert real.tolist() == [1036]


@pytest.mark.parametrize("launcher", ["compiled", "ffi"])
def test_a_kernel_reading_a_zero_size_input_is_stopped_and_told_why(launcher: str) -> None:
    """The access is blamed on the empty argument it went through, not on a neighbour, and out_shape is not said to
    be too small."""
    empty = jnp.zeros((0,), jnp.float32)
    out = jax.ShapeDtypeStruct((16,), jnp.float32)
    for spec in (out, empty):  # the output holds elements, or nothing at all holds one
        with pytest.raises(Exception) as raised:
            jax.block_until_ready(
                jax.jit(
                    lambda x, spec=spec: jt.triton_call(
                        x,
                        kernel=shifted_load_kernel,
                        out_shape=spec,
                        grid=1,
                        BLOCK=16,
                        has_side_effect=True,
                        launcher=launcher,
                    )
                )(empty)
            )
        error = jt.errors.from_runtime_error(raised.value)
        assert isinstance(error, OutOfBoundsAccessError), raised.value
        message = str(error)
        assert "load of 4 bytes from argument 'x_ptr' at element -1 (4 bytes before its start;" in message
        assert "no elements (zero-size)" in message and "out_shape" not in message


@triton.jit
def shifted_load_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets - 1))


def test_load_of_element_minus_one_blames_its_argument_in_a_real_call() -> None:
    x = jnp.asarray(np.random.default_rng(0).standard_normal(16), dtype=jnp.float32)
    with pytest.raises(Exception) as raised:
        jax.block_until_ready(jt.triton_call(x, kernel=shifted_load_kernel, out_shape=x, grid=1, BLOCK=16))
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, OutOfBoundsAccessError)
    assert "from argument 'x_ptr' at element -1 (4 bytes before its start;" in str(error)


def test_access_past_the_end_of_an_output_points_at_out_shape() -> None:
    buffers = [Buffer("x_ptr", 1000, 1160, False), Buffer("out_ptr", 2000, 2080, True, output=0, shape=(4, 5))]
    _, out = addresses(buffers)
    with pytest.raises(OutOfBoundsAccessError) as raised:
        AccessChecker("k", buffers).check(np.array([out + 4 * i for i in range(16, 32)], np.uint64), None, 4, "store")
    message = str(raised.value)
    assert "from argument 'out_ptr' (output 0) at element 20 (past its end;" in message
    assert "up to element 31" in message and "out_shape gives output 0 the shape (4, 5), 20 elements" in message
    assert "out_shape is too small" in message and "at least 32 elements" in message


@triton.jit
def masked_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


def test_store_past_a_too_small_out_shape_blames_out_shape_in_a_real_call() -> None:
    x = jnp.asarray(np.random.default_rng(1).standard_normal(40), dtype=jnp.float32)
    small = jax.ShapeDtypeStruct((20,), jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError) as raised:
        jax.block_until_ready(jt.triton_call(x, kernel=masked_copy_kernel, out_shape=small, grid=3, n=40, BLOCK=16))
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, OutOfBoundsAccessError)
    message = str(error)
    assert "store of 4 bytes from argument 'out_ptr' (output 0) at element 20" in message
    assert "up to element 31" in message and "out_shape gives output 0 the shape (20,)" in message
    assert "out_shape is too small" in message
    out = jt.triton_call(x, kernel=masked_copy_kernel, out_shape=x, grid=3, n=40, BLOCK=16)
    np.testing.assert_array_equal(out, x)


# -- the source line of the access ----------------------------------------------------------------------------------


@triton.jit
def _store_tile(out_ptr, offsets, values):
    tl.store(out_ptr + offsets, values)  # no mask: this line is the one that strays


@triton.jit
def copy_through_helper_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    _store_tile(out_ptr, offsets, tl.load(x_ptr + offsets, mask=offsets < n, other=0.0))


@triton.jit
def write_input_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    values = tl.load(x_ptr + offsets)
    tl.store(x_ptr + offsets, values * 2)
    tl.store(out_ptr + offsets, values)


def _kernel_line(kernel: object, text: str) -> str:
    """``FILE:LINE: TEXT`` of the line of ``kernel``'s source (a ``@triton.jit`` function) that holds ``text``."""
    fn = getattr(kernel, "fn", kernel)
    lines, first = inspect.getsourcelines(fn)
    index = next(i for i, line in enumerate(lines) if text in line)
    return f"{fn.__code__.co_filename}:{first + index}: {lines[index].strip()}"


@pytest.mark.parametrize("launcher", ["compiled", "ffi", "interpreter"])
def test_an_out_of_bounds_store_names_the_source_line_of_the_store_in_a_helper(launcher: str) -> None:
    x = jnp.asarray(np.random.default_rng(2).standard_normal(40), dtype=jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError) as raised:
        jax.block_until_ready(
            jt.triton_call(x, kernel=copy_through_helper_kernel, out_shape=x, grid=3, n=40, BLOCK=16, launcher=launcher)
        )
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, OutOfBoundsAccessError), raised.value
    message = str(error)
    assert "out-of-bounds store of 4 bytes from argument 'out_ptr' (output 0) at element 40" in message
    assert message.endswith(f"[program_id (2, 0, 0) at {_kernel_line(_store_tile, 'tl.store(')}]")


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_a_store_into_an_input_names_the_source_line_of_the_store(launcher: str) -> None:
    x = jnp.asarray(np.random.default_rng(3).standard_normal(16), dtype=jnp.float32)
    with pytest.raises(jax.errors.JaxRuntimeError) as raised:
        jax.block_until_ready(
            jt.triton_call(x, kernel=write_input_kernel, out_shape=x, grid=1, BLOCK=16, launcher=launcher)
        )
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, OutOfBoundsAccessError), raised.value
    assert "stores into input 'x_ptr', which is not an output" in str(error)
    assert str(error).endswith(f"[program_id (0, 0, 0) at {_kernel_line(write_input_kernel, 'tl.store(x_ptr')}]")
