"""Integers that wrap around in their width give Triton's numbers on every path: the analyses' affine forms and mask
boxes are exact in the kernel's integer width, or not claimed (a form whose range straddles a wrap is dropped, one
that wraps as a whole is shifted by the multiple of ``2**bits`` it wraps by)."""

from __future__ import annotations

from typing import Any

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


# Each kernel stores ones through a mask into zeros: the lanes it stores are the lanes its mask has on.


@triton.jit
def near_the_top_kernel(start, out_ptr, LIMIT: tl.constexpr):
    # Lanes 5 to 7 wrap past int32's largest value to negative ones: below the limit.
    lanes = tl.arange(0, 8) + start
    tl.store(out_ptr + tl.arange(0, 8), tl.full((8,), 1, tl.int32), mask=lanes < LIMIT)


@triton.jit
def large_product_kernel(factor, out_ptr):
    lanes = tl.arange(0, 8) * factor
    tl.store(out_ptr + tl.arange(0, 8), tl.full((8,), 1, tl.int32), mask=lanes < 100)


@triton.jit
def truncated_kernel(shift, out_ptr):
    wide = tl.arange(0, 8).to(tl.int64) + shift
    tl.store(out_ptr + tl.arange(0, 8), tl.full((8,), 1, tl.int32), mask=wide.to(tl.int32) < 3)


def _lanes(kernel: Any, launcher: str, *scalars: Any, **constants: Any) -> np.ndarray:
    out = jax.ShapeDtypeStruct((8,), jnp.int32)
    return np.asarray(
        jax.jit(
            lambda: jt.triton_call(
                *scalars, kernel=kernel, out_shape=out, grid=1, zeroed_outputs=(0,), launcher=launcher, **constants
            )
        )()
    )


@pytest.mark.parametrize("launcher", PATHS)
def test_a_mask_of_lanes_that_wrap_past_the_top_is_computed_in_int32(launcher: str) -> None:
    lanes = (np.arange(8, dtype=np.int64) + 2**31 - 5 + 2**31) % 2**32 - 2**31
    want = (lanes < 2**31 - 1).astype(np.int32)
    got = _lanes(near_the_top_kernel, launcher, 2**31 - 5, LIMIT=2**31 - 1)
    np.testing.assert_array_equal(got, want)
    assert want.tolist() == [1, 1, 1, 1, 0, 1, 1, 1]


@pytest.mark.parametrize("launcher", PATHS)
def test_a_mask_of_a_product_that_wraps_is_computed_in_int32(launcher: str) -> None:
    lanes = (np.arange(8, dtype=np.int64) * 2**30 + 2**31) % 2**32 - 2**31
    want = (lanes < 100).astype(np.int32)
    np.testing.assert_array_equal(_lanes(large_product_kernel, launcher, 2**30), want)
    assert want.tolist() == [1, 0, 1, 1, 1, 0, 1, 1]


@pytest.mark.parametrize("launcher", PATHS)
def test_an_int64_truncated_to_int32_wraps_as_a_whole(launcher: str) -> None:
    got = _lanes(truncated_kernel, launcher, 2**32 - 2)
    np.testing.assert_array_equal(got, (np.arange(8) - 2 < 3).astype(np.int32))


@triton.jit
def vanishing_offset_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # (lane * 65536) * 65536 is a multiple of 2**32: zero in int32, so the load reads x[offs].
    offs = tl.arange(0, BLOCK)
    far = (offs * 65536) * 65536
    tl.store(out_ptr + offs, tl.load(x_ptr + offs + far))


@pytest.mark.parametrize("launcher", PATHS)
def test_offsets_whose_product_wraps_to_zero_read_what_triton_reads(launcher: str) -> None:
    x = np.random.default_rng(3).standard_normal(16).astype(np.float32)
    out = jax.jit(
        lambda v: jt.triton_call(v, kernel=vanishing_offset_kernel, out_shape=v, grid=1, BLOCK=16, launcher=launcher)
    )(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(out), x)


def test_the_analyses_claim_no_form_for_a_range_that_straddles_a_wrap() -> None:
    from jt_core.translation.analysis.affine import Affine
    from jt_core.translation.analysis.walk import Walk
    from jt_core.translation.program import Program

    walk = Walk(Program("k", {}, {}), [], (1, 1, 1), (1, 1, 1), None)
    lanes = Affine(2**31 - 5, (0, 0, 0), (1,), (8,))
    assert walk.exact(lanes, "i32") is None  # some lanes wrap, some do not
    assert walk.exact(lanes, "i64") == lanes
    whole = Affine(2**32 - 2, (0, 0, 0), (1,), (8,))
    assert walk.exact(whole, "i32") == Affine(-2, (0, 0, 0), (1,), (8,))  # every lane wraps by 2**32
    assert walk.exact(Affine(0, (0, 0, 0), (2**30,), (8,)), "i32") is None
    assert walk.exact(lanes, "i16") is None  # narrower integers get no form
