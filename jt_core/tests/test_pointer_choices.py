"""A pointer chosen between arguments, lane by lane (``tl.where`` of two pointers) or by a branch that points it at
another argument, reads and writes each lane's own buffer, on both CPU paths."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt

PATHS = ["compiled", "interpreter"]


@pytest.fixture(autouse=True)
def each_path_alone(jt_cpu_paths_by_name: None) -> None:
    """The path a call names is the one that runs it."""


@triton.jit
def interleave_kernel(x_ptr, y_ptr, out_ptr, BLOCK: tl.constexpr):
    # Even lanes read x, odd lanes read y: one pointer per lane, into one of two arguments.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    source = tl.where(offs % 2 == 0, x_ptr + offs, y_ptr + offs)
    tl.store(out_ptr + offs, tl.load(source) * 2.0)


@triton.jit
def split_kernel(x_ptr, even_ptr, odd_ptr, BLOCK: tl.constexpr):
    # Even programs write the first output, odd ones the second: a branch points the store at another argument.
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    if pid % 2 == 0:
        target = even_ptr + (pid // 2) * BLOCK
    else:
        target = odd_ptr + (pid // 2) * BLOCK
    tl.store(target + offs, tl.load(x_ptr + pid * BLOCK + offs) + 1.0)


@pytest.mark.parametrize("launcher", PATHS)
def test_a_pointer_chosen_lane_by_lane_reads_each_lanes_argument(launcher: str) -> None:
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal(64).astype(np.float32) for _ in range(2))
    out = jax.jit(
        lambda a, b: jt.triton_call(a, b, kernel=interleave_kernel, out_shape=a, grid=4, BLOCK=16, launcher=launcher)
    )(jnp.asarray(x), jnp.asarray(y))
    want = np.where(np.arange(64) % 2 == 0, x, y) * 2
    np.testing.assert_array_equal(np.asarray(out), want)


@pytest.mark.parametrize("launcher", PATHS)
def test_a_branch_that_points_a_store_at_another_argument_writes_there(launcher: str) -> None:
    x = np.random.default_rng(5).standard_normal(64).astype(np.float32)
    half = jax.ShapeDtypeStruct((32,), jnp.float32)
    even, odd = jax.jit(
        lambda a: jt.triton_call(a, kernel=split_kernel, out_shape=(half, half), grid=4, BLOCK=16, launcher=launcher)
    )(jnp.asarray(x))
    blocks = (x + 1).reshape(4, 16)
    np.testing.assert_array_equal(np.asarray(even), blocks[0::2].reshape(-1))
    np.testing.assert_array_equal(np.asarray(odd), blocks[1::2].reshape(-1))


def test_the_compiled_path_runs_them_side_by_side() -> None:
    x = jnp.ones(64)
    text = jax.jit(lambda a: jt.triton_call(a, a, kernel=interleave_kernel, out_shape=a, grid=4, BLOCK=16)).lower(x)
    assert "while" not in text.as_text()
