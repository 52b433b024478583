"""Where the elements of a block of many programs lie in a flat buffer (`View`: a step and a count per axis), and
the reshapes of the buffer that hold them as one slice (`View.nest`, `aligned_nest` for a start known when tracing,
`traced_nest` for one known only when it runs). Arithmetic on shapes only: `jt_core.translation.blocks` reads and
writes through them."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

__all__ = ["Nest", "View", "aligned_nest", "flipped_axes", "traced_nest"]


@dataclasses.dataclass(frozen=True)
class View:
    """Where the elements of an array of shape ``counts`` lie in a flat buffer, relative to its element 0: element
    ``index`` at ``sum(steps[a] * index[a])``.

    Attributes:
        steps: The distance between neighbours along each axis (negative, zero: backwards, the same element).
        counts: The array's shape.
    """

    steps: tuple[int, ...]
    counts: tuple[int, ...]

    @functools.cached_property
    def low(self) -> int:
        """The offset of the lowest element."""
        return sum(min(0, s * (n - 1)) for s, n in zip(self.steps, self.counts, strict=True))

    @functools.cached_property
    def needed(self) -> int:
        """How many elements, from the lowest to the highest, the view spans."""
        return sum(abs(s) * (n - 1) for s, n in zip(self.steps, self.counts, strict=True)) + 1

    @functools.cached_property
    def size(self) -> int:
        return math.prod(self.counts)

    @functools.cached_property
    def nest(self) -> Nest | None:
        """How the spanned elements reshape into an array that holds the view's as a slice, or ``None`` when the
        steps do not nest."""
        if self.size == 0:
            return None
        varying = sorted(
            (abs(s), a) for a, (s, n) in enumerate(zip(self.steps, self.counts, strict=True)) if s and n > 1
        )
        for (step, axis), (above, _) in itertools.pairwise(varying):
            if above % step or above < step * self.counts[axis]:
                return None
        order = tuple(a for _, a in reversed(varying))  # the outermost (largest step) first
        if not varying:
            return Nest(order, (1,))
        inner = [above // step for (step, _), (above, _) in itertools.pairwise(varying)]
        dims = (self.counts[order[0]], *reversed(inner), varying[0][0])
        return Nest(order, dims)

    @property
    def extent(self) -> int:
        nest = self.nest
        assert nest is not None
        return math.prod(nest.dims)


@dataclasses.dataclass(frozen=True)
class Nest:
    """The reshape that makes a view a slice: the varying axes, outermost first, and the dimensions the spanned
    elements reshape to (the outermost axis's count, then each step's ratio to the one below, then the smallest
    step)."""

    order: tuple[int, ...]
    dims: tuple[int, ...]


def flipped_axes(view: View) -> tuple[int, ...]:
    return tuple(a for a, (s, n) in enumerate(zip(view.steps, view.counts, strict=True)) if s < 0 and n > 1)


def _in_rows(size: int, view: View) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
    """A buffer of ``size`` elements seen as the view's nest's dimensions under a first axis of rows (each as long
    as the view's largest step): a row's length, that shape, and the lengths of the slice that holds the view (its
    counts, outermost axis first, then one); ``None`` where the buffer is no whole number of rows."""
    nest = view.nest
    assert nest is not None
    row = math.prod(nest.dims[1:])
    if row <= 0 or size % row:
        return None
    return row, (size // row, *nest.dims[1:]), (*(view.counts[a] for a in nest.order), 1)


def aligned_nest(size: int, view: View, begin: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Where the view's elements lie in the whole buffer (of ``size`` elements) reshaped as its nest's dimensions
    under a first axis of rows (each as long as the view's largest step): the shape to reshape the buffer to, and the
    start of the slice, one index per dimension, that holds the view; ``None`` where the buffer is no whole number
    of rows, or the view does not fit in the rows it starts in without wrapping.

    A block of a matrix's row read as ``(rows, row length)`` is then a slice of the matrix itself, which XLA reads
    in place, where a slice of the flat buffer starting mid-row would have to be laid out again first."""
    rows = _in_rows(size, view)
    if rows is None or begin < 0:
        return None
    row, shape, lengths = rows
    start = [begin // row]
    rest = begin % row
    for dim in shape[1:]:
        row //= dim
        start.append(rest // row)
        rest %= row
    if any(s + n > d for s, n, d in zip(start, lengths, shape, strict=True)):
        return None
    return shape, tuple(start)


def traced_nest(
    size: int, view: View, reach: tuple[int, int], alignment: tuple[int, int]
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """For a view whose lowest element lies at a start known only when it runs, but within ``reach`` (the lowest and
    highest offsets its elements take) and at ``alignment[1]`` modulo ``alignment[0]``: the shape of the buffer (of
    ``size`` elements) as the view's nest's dimensions under a first axis of rows, and the slice's lengths, where
    every start the two allow puts the view in one slice of that shape (no coordinate but the first carries into the
    next); else ``None``.

    Such a view (a block of key rows a loop's trip moves along a tensor) is then a dynamic slice of the buffer in
    that shape, not a slice of the flat buffer as long as the view's span (on a TPU, whose arrays are laid out in
    tiles of their last two axes, a copy of the whole buffer laid out flat, each trip)."""
    rows = _in_rows(size, view)
    modulus, residue = alignment
    low, high = reach[0], reach[1] - view.needed + 1  # where the lowest element may lie
    if rows is None or high < low or low < 0 or modulus <= 0:
        return None
    row, shape, lengths = rows
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    if high // row + lengths[0] > shape[0]:
        return None
    for axis in range(1, len(shape)):
        block, stride = strides[axis - 1], strides[axis]
        if modulus % block == 0:
            most = residue % modulus % block // stride  # the same for every start
        elif low // block == high // block:
            most = high % block // stride  # every start in one block: the coordinate grows with it
        else:
            return None
        if most + lengths[axis] > shape[axis]:
            return None
    if len(shape) > 1 and shape[-1] == 1:
        # A last axis of one element dropped: the buffer keeps its last two axes, as a TPU lays them out.
        shape, lengths = shape[:-1], lengths[:-1]
    return shape, lengths
