"""The CPU backend's address checks: which argument an out-of-bounds access is blamed on, and what is said."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import OutOfBoundsAccessError
from jt_core.interpreter.access import AccessChecker, Buffer

# Two arguments with a gap between them: x = [1000, 1040), y = [1064, 1128) (4-byte elements).
BUFFERS = [Buffer("x_ptr", 1000, 1040, False), Buffer("y_ptr", 1064, 1128, True)]


def _message(addresses: list[int], op: str = "load") -> str:
    checker = AccessChecker("k", BUFFERS)
    with pytest.raises(OutOfBoundsAccessError) as raised:
        checker.check(np.array(addresses, dtype=np.uint64), None, 4, op)
    return str(raised.value)


def test_access_starting_just_before_an_argument_blames_that_argument() -> None:
    # y[-1 .. 14]: the other addresses of the access lie in y, which is what the access was meant for.
    message = _message([1064 + 4 * i for i in range(-1, 15)])
    assert "from argument 'y_ptr' at element -1 (4 bytes before its start;" in message
    assert "x_ptr" not in message
    assert "1 offending addresses" in message


def test_lone_access_in_a_gap_blames_the_nearest_argument() -> None:
    assert "argument 'y_ptr' at element -1 (4 bytes before its start;" in _message([1060])
    assert "argument 'x_ptr' at element 11 (past its end;" in _message([1044])


def test_an_address_far_from_every_argument_names_the_nearest_as_only_the_nearest() -> None:
    """From its address alone an access far from every buffer cannot be told apart: it went through some pointer
    whose base is unknown here. The message says it lies far outside and which argument is nearest."""
    message = _message([401_000])  # y_ptr starts at 1064: element (401000 - 1064) / 4
    assert "an address far outside every argument; the nearest is 'y_ptr', at its element 99984 (past its end;" in (
        message
    )


def test_arguments_that_hold_no_element_are_named() -> None:
    only_empty = AccessChecker("k", [Buffer("x_ptr", 1000, 1000, False), Buffer("out_ptr", 1000, 1000, True, 0)])
    with pytest.raises(OutOfBoundsAccessError) as raised:
        only_empty.check(np.array([1000, 1004], dtype=np.uint64), None, 4, "load")
    message = str(raised.value)
    assert "from an address outside every argument (none holds an element); 2 offending addresses" in message
    assert "Arguments 'x_ptr', 'out_ptr' hold no elements (zero-size)" in message
    with_empty = AccessChecker("k", [*BUFFERS, Buffer("z_ptr", 5000, 5000, False)])
    with pytest.raises(OutOfBoundsAccessError, match=r"Argument 'z_ptr' holds no elements \(zero-size\)"):
        with_empty.check(np.array([900_000], dtype=np.uint64), None, 4, "load")


def test_a_kernel_reading_a_zero_size_input_is_stopped_and_told_why() -> None:
    empty = jnp.zeros((0,), jnp.float32)
    out = jax.ShapeDtypeStruct((16,), jnp.float32)
    for spec in (out, empty):  # the output holds elements, or nothing at all holds one
        with pytest.raises(Exception) as raised:
            jax.block_until_ready(
                jax.jit(
                    lambda x, spec=spec: jt.triton_call(
                        x, kernel=shifted_load_kernel, out_shape=spec, grid=1, BLOCK=16, has_side_effect=True
                    )
                )(empty)
            )
        error = jt.errors.from_runtime_error(raised.value)
        assert isinstance(error, OutOfBoundsAccessError), raised.value
        assert "'x_ptr'" in str(error) and "no elements (zero-size)" in str(error)


def test_access_past_the_end_names_the_element_and_the_size() -> None:
    message = _message([1000 + 4 * i for i in range(12)], op="store")
    assert "out-of-bounds store of 4 bytes from argument 'x_ptr' at element 10 (past its end;" in message
    assert "it holds 10 elements, 40 bytes)" in message
    assert "Mask the store (tl.store(pointers, values, mask=...))" in message


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
    with pytest.raises(OutOfBoundsAccessError) as raised:
        AccessChecker("k", buffers).check(np.array([2000 + 4 * i for i in range(16, 32)], np.uint64), None, 4, "store")
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
