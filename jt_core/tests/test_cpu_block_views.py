"""The views through which the compiled CPU path reads and writes the blocks of many programs at once as slices of
their buffer: whatever the steps (negative, zero, nested or not, with gaps), a view that nests reads and writes
exactly the elements a gather and a scatter at the same offsets would, and says when a lane lies outside."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from jt_core.translation import blocks, views
from jt_core.translation.blocks import View, read, strays, write


def _offsets(view: View, begin: int) -> np.ndarray:
    """Every element's offset, enumerated the slow way (the lowest element at ``begin``)."""
    out = np.zeros(view.counts, np.int64)
    for index in itertools.product(*(range(n) for n in view.counts)):
        out[index] = begin - view.low + sum(s * i for s, i in zip(view.steps, index, strict=True))
    return out


step = st.integers(min_value=-40, max_value=40)
axis = st.tuples(step, st.integers(1, 5))


@settings(max_examples=40, deadline=None)
@given(axes=st.lists(axis, min_size=1, max_size=4), size=st.integers(1, 300), shift=st.integers(-30, 30))
@example(axes=[(0, 1)], size=1, shift=-3)  # wholly before the buffer, further than a view's length
@example(axes=[(1, 4), (8, 2)], size=20, shift=-30)
def test_a_view_reads_what_a_gather_reads_and_writes_what_a_scatter_writes(
    axes: list[tuple[int, int]], size: int, shift: int
) -> None:
    view = View(tuple(s for s, _ in axes), tuple(n for _, n in axes))
    if view.nest is None or view.extent > 4000:
        return
    with jax.enable_x64(True):
        _check(view, size, shift)


@settings(max_examples=40, deadline=None)
@given(axes=st.lists(axis, min_size=1, max_size=4), size=st.integers(1, 300), shift=st.integers(-30, 30))
@example(axes=[(0, 1)], size=1, shift=-3)
@example(axes=[(1, 4), (8, 2)], size=20, shift=-30)
@example(axes=[(1, 3), (-20, 3)], size=50, shift=-25)  # rows read backwards, the first partly before the buffer
def test_a_read_from_a_traced_start_in_a_large_buffer_is_a_slice_moved_into_place_or_rows(
    axes: list[tuple[int, int]], size: int, shift: int
) -> None:
    """What a buffer too large to copy padded gives: a slice at the start clamped inside, moved back where the clamp
    moved it; a sparse view's rows each so (here every buffer counts as large, and a row of two elements as long)."""
    view = View(tuple(s for s, _ in axes), tuple(n for _, n in axes))
    if view.nest is None or view.extent > 4000:
        return
    with pytest.MonkeyPatch.context() as patch, jax.enable_x64(True):
        patch.setattr(blocks, "PADDED_READ_ELEMENTS", 0)
        patch.setattr(blocks, "ROW_ELEMENTS", 2)
        _, flat, begin, _, want = _case(view, size, shift)
        np.testing.assert_array_equal(np.asarray(read(jnp.asarray(flat), view, jnp.int64(begin))), want)


@settings(max_examples=60, deadline=None)
@given(
    axes=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 5)), min_size=1, max_size=3),
    size=st.integers(1, 400),
    first=st.integers(0, 60),
    modulus=st.integers(1, 48),
    trips=st.integers(1, 6),
)
@example(axes=[(64, 2), (8, 4), (1, 8)], size=128, first=0, modulus=32, trips=2)  # key blocks of two heads
@example(axes=[(64, 2), (8, 4), (1, 8)], size=128, first=0, modulus=16, trips=4)  # the last crosses a head's rows
def test_a_read_at_starts_a_loop_moves_is_a_slice_of_the_buffer_in_the_views_shape_where_they_allow_it(
    axes: list[tuple[int, int]], size: int, first: int, modulus: int, trips: int
) -> None:
    """A view read from starts ``first + modulus * trip`` (a loop's trips move it), given the reach of those starts
    and what they are modulo what: where every such start keeps the view in one slice of the buffer in the shape of
    its nest, that slice; else the padded region. Either way, what a gather reads."""
    view = View(tuple(s for s, _ in axes), tuple(n for _, n in axes))
    if view.nest is None or view.extent > 4000:
        return
    starts = [first + modulus * trip for trip in range(trips)]
    reach = (min(starts), max(starts) + view.needed - 1)
    rng = np.random.default_rng(size)
    flat = rng.standard_normal(size).astype(np.float32)
    with jax.enable_x64(True):
        for begin in starts:
            offsets = _offsets(view, begin)
            inside = (offsets >= 0) & (offsets < size)
            want = np.where(inside, flat[np.clip(offsets, 0, size - 1)], 0)
            got = read(jnp.asarray(flat), view, jnp.int64(begin), reach=reach, alignment=(modulus, first % modulus))
            np.testing.assert_array_equal(np.asarray(got), want)


def test_key_blocks_a_loop_moves_are_read_as_slices_of_the_tensor_in_rows() -> None:
    """Key blocks of 4 rows of 8 of two heads (rows 8 apart, heads 64), 4 rows further each trip: a slice of the
    tensor as (heads, rows, 8), not of the flat buffer; a start that may leave a head's rows is not one."""
    view = View((64, 8, 1), (2, 4, 8))
    assert views.traced_nest(128, view, (0, 32 + view.needed - 1), (32, 0)) == ((2, 8, 8), (2, 4, 8))
    assert views.traced_nest(128, view, (0, 48 + view.needed - 1), (16, 0)) is None


def _case(view: View, size: int, shift: int) -> tuple[np.random.Generator, np.ndarray, int, np.ndarray, np.ndarray]:
    """A buffer of ``size`` random floats, the view's start ``shift`` from centred, which of its elements lie inside
    the buffer and what a gather reads there (zero outside); and the generator, for more."""
    rng = np.random.default_rng(size)
    flat = rng.standard_normal(size).astype(np.float32)
    begin = shift + (size - view.needed) // 2
    offsets = _offsets(view, begin)
    inside = (offsets >= 0) & (offsets < size)
    return rng, flat, begin, inside, np.where(inside, flat[np.clip(offsets, 0, size - 1)], 0)


def _check(view: View, size: int, shift: int) -> None:
    rng, flat, begin, inside, want = _case(view, size, shift)
    offsets = _offsets(view, begin)
    np.testing.assert_array_equal(np.asarray(read(jnp.asarray(flat), view, begin)), want)
    np.testing.assert_array_equal(np.asarray(read(jnp.asarray(flat), view, jnp.int64(begin))), want)

    if any(s == 0 and n > 1 for s, n in zip(view.steps, view.counts, strict=True)):
        return  # two lanes of one element: not a view one writes through
    values = rng.standard_normal(view.counts).astype(np.float32)
    mask = rng.random(view.counts) < 0.7
    written, strayed = write(jnp.asarray(flat), view, begin, jnp.asarray(values), jnp.asarray(mask))
    expected = flat.copy()
    expected[offsets[mask & inside]] = values[mask & inside]
    np.testing.assert_array_equal(np.asarray(written), expected)
    assert bool(strayed) == bool((mask & ~inside).any())
    assert bool(strays(size, view, begin, jnp.asarray(mask))) == bool((mask & ~inside).any())
    _, unmasked = write(jnp.asarray(flat), view, begin, jnp.asarray(values), None)
    assert bool(unmasked) == bool((~inside).any())


def test_steps_that_do_not_nest_make_no_view() -> None:
    assert View((1, 3), (4, 2)).nest is None  # 3 is no multiple of 1 * 4 lanes' reach
    assert View((2, 3), (2, 2)).nest is None  # 3 is no multiple of 2
    assert View((4, 4), (2, 2)).nest is None  # two axes of one step
    assert View((1024, 0, 0, 1), (977, 1, 1, 1024)).nest is not None  # a block per program
    assert View((64 * 256, 64, 0, 256, 1), (4, 4, 1, 64, 64)).extent == 256 * 256  # tiles of a matrix
