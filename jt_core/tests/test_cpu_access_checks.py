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
