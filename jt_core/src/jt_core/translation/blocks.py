"""The block accesses of many programs at once as slices of their buffer, instead of gathers and scatters.

A block access whose offsets are affine in the program ids and the block's lanes
(`jt_core.translation.affine`) reaches, over a box of programs, the elements ``begin + sum(steps[a] * index[a])``
of its buffer, one axis ``a`` per grid axis and per block axis. When the steps, sorted by size, nest (each a multiple
of the one below it, and at least as large as what that one spans), those elements are a reshaped slice of the
flat buffer: ``x[p * 1024 + arange(1024)]`` over 977 programs is the buffer's first 1,000,448 elements as a 977 x
1024 array, a 64 x 64 tile of a row-major matrix per program is the matrix seen as ``(4, 64, 4, 64)``. A `View`
holds that; `read` takes its elements out of a flat buffer (zero where they lie outside it) and `write` puts values
back where a mask is on, saying whether a lane that is on lies outside the buffer.

`load` is how `jt_core.translation.memory.Memory` loads a block inside programs run side by side
(`jt_core.translation.side_by_side`): the box's whole block is read once, outside the programs' ``jax.vmap``, and
each program takes its own part; the ``vmap`` of that taking is the whole block again (`_peeled`), so what
XLA compiles is one slice, not a gather.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap

from jt_core.translation.views import View, aligned_nest, flipped_axes, traced_nest

__all__ = ["Box", "View", "from_region", "gather", "read", "strided", "to_region", "write"]


def _from_region(region: jax.Array, view: View) -> jax.Array:
    """The view's elements from its region (its `View.extent` elements from the lowest one)."""
    nest = view.nest
    assert nest is not None
    limits = (*(view.counts[a] for a in nest.order), 1)
    return _from_nested(lax.slice(region.reshape(nest.dims), (0,) * len(nest.dims), limits), view)


def _from_nested(picked: jax.Array, view: View) -> jax.Array:
    """The view's elements from the slice of its nest's dimensions that holds them (lengths: its counts, outermost
    axis first, then one)."""
    nest = view.nest
    assert nest is not None
    picked = picked.reshape(tuple(view.counts[a] for a in nest.order))
    ascending = sorted(nest.order)
    picked = jnp.transpose(picked, tuple(nest.order.index(a) for a in ascending))
    varying = set(nest.order)
    picked = picked.reshape(tuple(n if a in varying else 1 for a, n in enumerate(view.counts)))
    picked = jnp.broadcast_to(picked, view.counts)
    flipped = flipped_axes(view)
    return lax.rev(picked, flipped) if flipped else picked


def _to_nested(values: jax.Array, view: View) -> jax.Array:
    """``values`` (of the view's shape) as the slice of its nest's dimensions that holds them (`_from_nested`'s
    inverse). Every axis of more than one element must vary (two lanes of one element have no single value)."""
    nest = view.nest
    assert nest is not None
    flipped = flipped_axes(view)
    if flipped:
        values = lax.rev(values, flipped)
    ascending = sorted(nest.order)
    values = values.reshape(tuple(view.counts[a] for a in ascending))
    values = jnp.transpose(values, tuple(ascending.index(a) for a in nest.order))
    return values.reshape((*(view.counts[a] for a in nest.order), 1))


def _to_region(values: jax.Array, view: View, fill: Any) -> jax.Array:
    """``values`` (of the view's shape) laid out as the view's region, ``fill`` between them. Every axis of more than
    one element must vary (two lanes of one element have no single value)."""
    nest = view.nest
    assert nest is not None
    values = _to_nested(values, view)
    config = [(0, d - n, 0) for d, n in zip(nest.dims, values.shape, strict=True)]
    return lax.pad(values, jnp.asarray(fill, values.dtype), config).reshape(-1)


def _slice_region(flat: jax.Array, begin: int, length: int, fill: Any = 0) -> jax.Array:
    """``flat[begin : begin + length]``, ``fill`` where that lies outside ``flat``."""
    size = flat.shape[0]
    low, high = max(0, begin), min(size, begin + length)
    if high <= low:
        return jnp.full((length,), fill, flat.dtype)
    part = lax.slice(flat, (low,), (high,))
    if low == begin and high == begin + length:
        return part
    return lax.pad(part, jnp.asarray(fill, flat.dtype), [(low - begin, begin + length - high, 0)])


def _offsets(view: View, begin: Any) -> jax.Array:
    """Every element's offset in the buffer (int64), the view's lowest element at ``begin``."""
    return strided(jnp.asarray(begin, jnp.int64) - view.low, view.steps, view.counts)


def strided(first: jax.Array, steps: Sequence[int], counts: Sequence[int]) -> jax.Array:
    """The offsets (int64) of a block of ``counts`` elements whose axes advance by ``steps``, its element at index
    zero at ``first`` (an int64 scalar, or an array that broadcasts to the block)."""
    offsets = first
    for axis, (step, count) in enumerate(zip(steps, counts, strict=True)):
        if step and count > 1:
            shape = [1] * len(counts)
            shape[axis] = count
            offsets = offsets + lax.iota(jnp.int64, count).reshape(shape) * step
    return jnp.broadcast_to(offsets, tuple(counts))


def from_region(region: jax.Array, view: View) -> jax.Array:
    """The view's elements from its region (its `View.needed` elements from the lowest one)."""
    return _from_region(_padded(region, view.extent), view)


def to_region(values: jax.Array, view: View, fill: Any) -> jax.Array:
    """``values`` (of the view's shape) laid out as the view's `View.needed` elements from the lowest one, ``fill``
    between them."""
    return _to_region(values, view, fill)[: view.needed]


def gather(flat: jax.Array, view: View, begin: Any) -> jax.Array:
    """The view's elements by a gather (a view that does not nest), zero outside ``flat``."""
    return _gathered(flat, view, begin)


def _gathered(flat: jax.Array, view: View, begin: Any, index_type: Any = jnp.int64) -> jax.Array:
    """The view's elements by a gather; its offsets wrap around in ``index_type`` as the kernel's would."""
    index = _offsets(view, begin).astype(index_type)
    dims = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
    return lax.gather(
        flat, index[..., None], dims, slice_sizes=(1,), mode=lax.GatherScatterMode.FILL_OR_DROP, fill_value=0
    )


def read(
    flat: jax.Array,
    view: View,
    begin: Any,
    index_type: Any = jnp.int64,
    inside: bool = False,
    reach: tuple[int, int] | None = None,
    alignment: tuple[int, int] = (1, 0),
) -> jax.Array:
    """The view's elements of ``flat``, its lowest element at ``begin`` (an int, or a traced integer scalar); an
    element outside ``flat`` reads zero. A traced ``begin`` reads a slice wherever it is (`_shifted_region`) unless
    ``inside`` says the view is always inside ``flat``, or ``reach`` says which offsets the view's elements may take
    at most (the buffer is then padded with zeros to hold them, and read as one slice; or, where with ``alignment``,
    what ``begin`` is known to be modulo what, they prove the view a slice of the buffer in its nest's shape, that
    slice: `traced_nest`); a view longer than ``flat`` is gathered, its offsets held in ``index_type`` (as the
    kernel holds them).

    The view must nest (`View.nest`)."""
    if isinstance(begin, int):
        aligned = aligned_nest(flat.shape[0], view, begin)
        if aligned is not None:
            shape, start = aligned
            lengths = (*(view.counts[a] for a in view.nest.order), 1)  # type: ignore[union-attr]
            limits = tuple(s + n for s, n in zip(start, lengths, strict=True))
            return _from_nested(lax.slice(flat.reshape(shape), start, limits), view)
        region = _slice_region(flat, begin, view.needed)
        return _from_region(_padded(region, view.extent), view)
    if view.needed > flat.shape[0]:
        return _gathered(flat, view, begin, index_type)

    def sliced(begin: jax.Array) -> jax.Array:
        region = _region_at(view.needed)(flat, begin)
        return _from_region(_padded(region, view.extent), view)

    begin = jnp.asarray(begin, jnp.int64)
    if inside:
        return sliced(begin)
    if reach is None and flat.shape[0] <= PADDED_READ_ELEMENTS:
        # A view wherever its start may be: zeros a view long on each side hold every view that is partly inside,
        # and one wholly outside reads zeros where the slice's start is clamped (a gather of every element, seconds
        # on a TPU for a table read by each program at a place loaded from memory, costs more than the copy).
        reach = (-view.needed, flat.shape[0] - 1 + view.needed)
    if reach is not None:
        nested = traced_nest(flat.shape[0], view, reach, alignment)
        if nested is not None:
            return _from_nested(_nested_at(*nested)(flat, begin), view)
        front, back = max(0, -reach[0]), max(0, reach[1] + 1 - flat.shape[0])
        padded = lax.pad(flat, jnp.zeros((), flat.dtype), [(front, back, 0)]) if front or back else flat
        # Clamped at zero: a negative start would count from the buffer's end, as an index does in NumPy.
        region = _region_at(view.needed)(padded, jnp.maximum(begin + front, 0))
        return _from_region(_padded(region, view.extent), view)
    rows = _sparse_rows(view)
    if rows is not None:
        return _rows_read(flat, view, begin, *rows)
    return from_region(_shifted_region(flat, begin, view.needed), view)


@functools.lru_cache(maxsize=256)
def _nested_at(shape: tuple[int, ...], lengths: tuple[int, ...]) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """The slice of ``lengths`` of a flat buffer reshaped to ``shape``, from the element at ``begin`` (its
    coordinates: `traced_nest` proved the slice fits), kept one slice where ``jax.vmap`` batches neither."""
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]

    def direct(flat: jax.Array, begin: jax.Array) -> jax.Array:
        start = [begin // strides[0]] + [begin % strides[i - 1] // strides[i] for i in range(1, len(shape))]
        return lax.dynamic_slice(flat.reshape(shape), start, lengths)

    return _kept_one(direct)


#: The fewest elements a row of a sparse view holds for it to be read a row at a time (a gather of rows).
ROW_ELEMENTS = 128


def _sparse_rows(view: View) -> tuple[int, View] | None:
    """Where a view's outermost axis leaves most of what it spans unread and its rows (the view along the other axes)
    are long, that axis and a row's view: the view is then read a row at a time rather than as one region."""
    nest = view.nest
    if nest is None or not nest.order or view.needed <= 2 * view.size:
        return None
    outer = nest.order[0]
    row = View(view.steps, tuple(1 if a == outer else n for a, n in enumerate(view.counts)))
    return (outer, row) if row.needed >= ROW_ELEMENTS else None


def _rows_read(flat: jax.Array, view: View, begin: jax.Array, outer: int, row: View) -> jax.Array:
    """A sparse view's elements (`_sparse_rows`), its lowest element at ``begin``: each row read where it starts,
    by a ``jax.vmap`` of `read` (one gather of rows)."""
    step, count = view.steps[outer], view.counts[outer]
    first = begin - min(0, step * (count - 1))  # where row 0's lowest element lies
    starts = first + lax.iota(jnp.int64, count) * step
    taken = jax.vmap(lambda start: read(flat, row, start))(starts)
    return jnp.moveaxis(jnp.squeeze(taken, 1 + outer), 0, outer)


def _shifted_region(flat: jax.Array, begin: jax.Array, size: int) -> jax.Array:
    """``flat[begin : begin + size]`` where ``begin`` (traced, int64) may put it partly or wholly outside ``flat``,
    zeros there: a slice of ``flat`` at the start clamped inside, rotated by what the clamp took off, then masked
    (what the rotation brings round lies outside ``flat``: an element inside is in the clamped slice).

    Neither a gather of each element nor a choice between a slice and a gather (``lax.cond``, which ``jax.vmap``
    turns into both, and a copy of ``flat`` for each program)."""
    start = jnp.clip(begin, 0, flat.shape[0] - size)
    region = _region_at(size)(flat, start)
    twice = lax.concatenate([region, region], 0)
    moved = _region_at(size)(twice, jnp.remainder(begin - start, size))
    positions = begin + lax.iota(jnp.int64, size)
    return jnp.where((positions >= 0) & (positions < flat.shape[0]), moved, jnp.zeros((), flat.dtype))


@functools.lru_cache(maxsize=256)
def _region_at(size: int) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """``flat[begin : begin + size]`` (a dynamic slice), kept one where ``jax.vmap`` batches neither (JAX makes a
    dynamic slice it meets under ``vmap`` a gather, whether or not its operands are batched)."""

    def direct(flat: jax.Array, begin: jax.Array) -> jax.Array:
        return lax.dynamic_slice_in_dim(flat, begin, size)

    return _kept_one(direct)


def _kept_one(direct: Callable[[jax.Array, jax.Array], jax.Array]) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """``direct`` (a dynamic slice of a buffer at ``begin``) as a ``custom_vmap``: called as it is where ``jax.vmap``
    batches neither operand (JAX makes a dynamic slice it meets under ``vmap`` a gather, whether or not its operands
    are batched), mapped over whichever is batched otherwise."""
    fn = custom_vmap(direct)

    @fn.def_vmap
    def _rule(axis_size: int, in_batched: Sequence[bool], flat: jax.Array, begin: jax.Array) -> Any:
        axes = [0 if b else None for b in in_batched]
        return jax.vmap(direct, in_axes=axes)(flat, begin), True

    return fn


#: The most elements of a buffer that a read at a start known only when the kernel runs copies, padded, to read
#: one slice (larger ones are read by a slice where the view fits, a gather where not).
PADDED_READ_ELEMENTS = 1 << 22


def _padded(region: jax.Array, length: int) -> jax.Array:
    extra = length - region.shape[0]
    return lax.pad(region, jnp.zeros((), region.dtype), [(0, extra, 0)]) if extra else region


def write(
    flat: jax.Array, view: View, begin: Any, values: jax.Array, mask: jax.Array | None
) -> tuple[jax.Array, jax.Array | bool]:
    """``flat`` with ``values`` (of the view's shape) written at the view's elements where ``mask`` is on (``None``:
    everywhere), the view's lowest element at ``begin``; and whether a lane that is on lies outside ``flat`` (it
    writes nothing).

    The view must nest, and each of its axes of more than one element vary. A traced ``begin`` must keep the view
    inside ``flat``."""
    if not isinstance(begin, int):
        lanes = None if mask is None else _to_region(mask, view, False)[: view.needed]
        region = _to_region(values.astype(flat.dtype), view, 0)[: view.needed]
        begin = jnp.asarray(begin, jnp.int64)
        old = lax.dynamic_slice_in_dim(flat, begin, view.needed)
        if lanes is not None:
            region = jnp.where(lanes, region, old)
        elif view.extent != view.size:
            region = jnp.where(_to_region(jnp.ones(view.counts, bool), view, False)[: view.needed], region, old)
        return lax.dynamic_update_slice_in_dim(flat, region, begin, 0), False
    size, needed = flat.shape[0], view.needed
    aligned = aligned_nest(size, view, begin)
    if aligned is not None:  # every lane inside the buffer: none strays
        shape, start = aligned
        whole = flat.reshape(shape)
        new = _to_nested(values.astype(flat.dtype), view)
        if mask is not None:
            old = lax.dynamic_slice(whole, start, new.shape)
            new = jnp.where(_to_nested(jnp.broadcast_to(mask, view.counts), view), new, old)
        return lax.dynamic_update_slice(whole, new, start).reshape(-1), False
    low, high = max(0, begin), min(size, begin + needed)
    before, after = max(0, min(needed, low - begin)), max(0, high - begin)
    lanes = None if mask is None else _to_region(mask, view, False)[:needed]
    strayed = _outside(lanes, view, before, after)
    if high <= low:
        return flat, strayed
    region = _to_region(values.astype(flat.dtype), view, 0)[before:after]
    old = lax.slice(flat, (low,), (high,))
    if lanes is not None:
        new = jnp.where(lanes[before:after], region, old)
    elif view.extent == view.size:
        new = region  # the lanes fill their span: nothing of the old remains
    else:
        new = jnp.where(_to_region(jnp.ones(view.counts, bool), view, False)[before:after], region, old)
    return lax.dynamic_update_slice(flat, new, (low,)), strayed


def strays(size: int, view: View, begin: int, mask: jax.Array | None) -> jax.Array | bool:
    """Whether a lane of the view that ``mask`` has on (``None``: every lane) lies outside a buffer of ``size``
    elements, the view's lowest element at ``begin``."""
    needed = view.needed
    low, high = max(0, begin), min(size, begin + needed)
    before, after = max(0, min(needed, low - begin)), max(0, high - begin)
    if not before and after >= needed:
        return False
    if mask is not None:
        view, mask = _merged_repeats(view, mask)
    return _outside(None if mask is None else _to_region(mask, view, False)[:needed], view, before, after)


def _merged_repeats(view: View, mask: jax.Array) -> tuple[View, jax.Array]:
    """The view less its axes that repeat one element (step 0: programs along a grid axis the offsets do not
    depend on), and the mask on where any of the repeats is on: the lanes of one element as one lane."""
    repeats = tuple(a for a, (s, n) in enumerate(zip(view.steps, view.counts, strict=True)) if not s and n > 1)
    if not repeats:
        return view, mask
    counts = tuple(1 if a in repeats else n for a, n in enumerate(view.counts))
    return View(view.steps, counts), jnp.any(mask, axis=repeats, keepdims=True)


def _outside(lanes: jax.Array | None, view: View, before: int, after: int) -> jax.Array | bool:
    """Whether a lane that is on lies in the first ``before`` or from the ``after``-th element of the view's span."""
    if not before and after >= view.needed:
        return False
    if lanes is None:
        spots = _static_lanes(view)
        return bool(spots[:before].any() or spots[after:].any())
    return jnp.any(lanes[:before]) | jnp.any(lanes[after:])


@functools.lru_cache(maxsize=8)
def _static_lanes(view: View) -> np.ndarray:
    """Which elements of the view's span are lanes of it (the others lie between them)."""
    offsets = np.zeros(view.counts, np.int64) - view.low
    for axis, (step, count) in enumerate(zip(view.steps, view.counts, strict=True)):
        shape = [1] * len(view.counts)
        shape[axis] = count
        offsets = offsets + np.arange(count, dtype=np.int64).reshape(shape) * step
    lanes = np.zeros(view.needed, bool)
    lanes[offsets.reshape(-1)] = True
    return lanes


# -- the box of programs side by side ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Box:
    """The programs run side by side: ``counts[k]`` along grid axis ``k``, the first at program id
    ``(first, 0, 0)``, each program's position in the box along the axes it varies over (``positions[k]``, the
    index a ``jax.vmap`` maps, or ``None`` where the box has one program along axis ``k``).

    Attributes:
        counts: Programs per grid axis.
        first: The program id along axis 0 of the box's first program (an int, or traced).
        positions: Per grid axis, the mapped position, or ``None``.
    """

    counts: tuple[int, int, int]
    first: Any
    positions: tuple[Any, Any, Any]


def box_view(box: Box, pids: Sequence[int], lanes: Sequence[int], shape: tuple[int, ...]) -> View:
    """The view of an access whose offsets are ``c + pids . program_id + lanes . lane``, over the whole box."""
    return View((*pids, *lanes), (*box.counts, *shape))


def load(
    flat: jax.Array,
    box: Box,
    pids: Sequence[int],
    lanes: Sequence[int],
    shape: tuple[int, ...],
    base: Any,
    index_type: Any = jnp.int64,
    reach: tuple[int, int] | None = None,
    alignment: tuple[int, int] = (1, 0),
) -> jax.Array:
    """One program's block of ``flat``, inside the ``jax.vmap`` of the box's programs: element ``i`` at ``base +
    pids . (program's position in the box) + lanes . i`` (``base`` the offset at the box's first program's first
    lane: an int or an unmapped traced scalar, known to be ``alignment[1]`` modulo ``alignment[0]``).

    The ``vmap`` of it over the box is one read of the box's view (`read`): each mapped axis's position is taken
    to be the ``vmap``'s index, as `jt_core.translation.side_by_side` maps it."""
    view = box_view(box, pids, lanes, shape)
    pending = tuple(k for k in range(3) if box.positions[k] is not None and pids[k] and box.counts[k] > 1)
    positions = [box.positions[k] for k in pending]
    if isinstance(base, int):  # kept out of the custom_vmap's operands, which would make it a traced value
        return _peeled(view, base + view.low, (), pending, index_type, reach)(flat, *positions)
    begin = jnp.asarray(base, jnp.int64) + view.low
    aligned = (alignment[0], (alignment[1] + view.low) % alignment[0])
    return _peeled(view, None, (), pending, index_type, reach, aligned)(flat, begin, *positions)


def _peeled(
    view: View,
    begin: int | None,
    peeled: tuple[int, ...],
    pending: tuple[int, ...],
    index_type: Any,
    reach: tuple[int, int] | None = None,
    alignment: tuple[int, int] = (1, 0),
) -> Callable[..., Any]:
    """The block of the programs at ``positions`` (one per ``pending`` axis), for every program of the box along the
    ``peeled`` axes (the leading axes of the result, the last peeled first), the box's lowest element at ``begin``
    (or, where that is ``None``, at a traced operand after the buffer): a ``custom_vmap`` whose ``vmap`` along one
    of the pending axes peels that one too, so that the programs' ``vmap`` reads the whole box at once."""
    given = 1 if begin is None else 0  # how many operands the traced begin takes

    def direct(flat: jax.Array, *operands: Any) -> jax.Array:
        offset: Any = operands[0] if begin is None else begin
        counts = list(view.counts)
        for k, position in zip(pending, operands[given:], strict=True):
            counts[k] = 1
            offset = offset + jnp.asarray(position, jnp.int64) * view.steps[k]
        for k in range(3):
            if k not in peeled and k not in pending:
                counts[k] = 1
        part = View(view.steps, tuple(counts))
        offset = offset + (part.low - view.low)
        modulus = math.gcd(alignment[0], *(view.steps[k] for k in pending))
        aligned = (modulus, (alignment[1] + part.low - view.low) % modulus) if modulus else (1, 0)
        # With programs still to peel, this is only what a program alone reads (what a ``vmap`` that does not
        # peel batches, as where each program's block starts at a place loaded from memory): its own slice, or a
        # gather where its view does not nest; the box's whole view is read once all are peeled.
        if pending and part.nest is None:
            block = _gathered(flat, part, offset, index_type)
        else:
            block = read(flat, part, offset, index_type, reach=reach, alignment=aligned)
        # The box's axes: the peeled ones first, the last peeled outermost; the others (one program each) dropped.
        others = tuple(k for k in range(3) if k not in peeled)
        block = jnp.transpose(block, (*peeled, *others, *range(3, block.ndim)))
        return block.reshape((*(view.counts[k] for k in peeled), *view.counts[3:]))

    if not pending:
        return direct  # nothing left to peel: the whole box's view, read as it is

    fn = custom_vmap(direct)

    @fn.def_vmap
    def _rule(axis_size: int, in_batched: Sequence[bool], flat: jax.Array, *operands: Any) -> Any:
        mapped = [i for i, b in enumerate(in_batched[1 + given :]) if b]
        if any(in_batched[: 1 + given]) or len(mapped) != 1 or axis_size != view.counts[pending[mapped[0]]]:
            axes = [0 if b else None for b in in_batched]
            return jax.vmap(direct, in_axes=axes)(flat, *operands), True
        k = pending[mapped[0]]
        rest = tuple(p for i, p in enumerate(operands[given:]) if i != mapped[0])
        taker = _peeled(view, begin, (k, *peeled), tuple(a for a in pending if a != k), index_type, reach, alignment)
        return taker(flat, *operands[:given], *rest), True

    return fn
