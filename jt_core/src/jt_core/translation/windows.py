"""Buffers that programs side by side write through windows of their own: an in-place kernel (rotary applied to its
input, a gradient written over the logits it read), and stores inside a loop traced as an XLA loop.

The independence pass proved that every access of such a buffer stays in a window of it that moves with the program
id and meets no other program's (`jt_core.translation.analysis.independence.Window`). Before the programs run, the
box's windows are read as one slice of the buffer, each program's its own copy (``jax.vmap`` maps them), held in
rows of the window's row (`Window.row`) where it has one, so that a block of rows is a slice of the copy as it is (a
TPU lays out the last two axes of an array in tiles: a reshape of them is a copy of the whole array); a program
then loads and stores in its copy, where it sees its own stores, and after the programs the part of each copy its
program owns is written back as one slice. A load through offsets known only when it runs, which the pass let
through only before the program stores to that buffer, reads the buffer as it was before the kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap

from jt_core.translation import blocks
from jt_core.translation.analysis.independence import Window
from jt_core.translation.lang import dtype_of
from jt_core.translation.memory import Memory, Pointer, State, _storage, _to_storage, _to_value

__all__ = ["Windows"]


class Windows:
    """The windowed buffers of a box of programs.

    Args:
        memory: The buffers.
        windows: Each windowed buffer's window.
        counts: The programs of the box along each grid axis.
        ordered: Whether a read of a copy is made before the writes after it (`Strategy.ordered_window_reads`).
    """

    def __init__(
        self, memory: Memory, windows: Mapping[int, Window], counts: tuple[int, int, int], ordered: bool
    ) -> None:
        self.memory = memory
        self.ordered = ordered
        self.windows = dict(windows)
        self.counts = counts
        self.mapped = tuple(k for k in range(3) if counts[k] > 1)
        #: The buffers as they were before the programs ran, flat (what an unknown-offset load reads).
        self.originals: dict[int, jax.Array] = {}
        #: The program being traced's first element of each window's copy.
        self.starts: dict[int, Any] = {}

    def _view(self, window: Window, width: int) -> blocks.View:
        return blocks.View((*window.pids, 1), (*self.counts, width))

    def read(self, state: State) -> list[jax.Array]:
        """Each windowed buffer's copies for the box's programs (the box's mapped axes, then the window)."""
        copies = []
        for buffer, window in self.windows.items():
            flat = self.memory._array(state, buffer)
            self.originals[buffer] = flat
            view = self._view(window, window.width)
            owned = (
                blocks.read(flat, view, window.low) if view.nest is not None else blocks.gather(flat, view, window.low)
            )
            owned = owned.reshape((*(self.counts[k] for k in self.mapped), window.width))
            # What lies past the part a program owns only its masked lanes reach: zeros stand for it.
            reach_low, reach_width = window.reach
            before = window.low - reach_low
            after = reach_low + reach_width - window.low - window.width
            after += -reach_width % window.row  # whole rows (`Window.row`)
            pad = [(0, 0)] * (owned.ndim - 1) + [(before, after)]
            copies.append(_in_rows(jnp.pad(owned, pad) if before or after else owned, window))
        return copies

    def enter(self, state: State, copies: list[jax.Array], pids: tuple[Any, Any, Any]) -> State:
        """The state a program of the box starts from: its copies in place of the windowed buffers."""
        buffers = list(state.buffers)
        for (buffer, window), copy in zip(self.windows.items(), copies, strict=True):
            buffers[self.memory._slots[buffer]] = copy
            start: Any = window.reach[0]
            for pid, coefficient in zip(pids, window.pids, strict=True):
                if coefficient:
                    start = start + jnp.asarray(pid, jnp.int64) * coefficient
            self.starts[buffer] = start
        return State(tuple(buffers), state.faults)

    def leave(self, state: State) -> list[jax.Array]:
        """A program's copies of the windowed buffers, after it ran."""
        return [state.buffers[self.memory._slots[buffer]] for buffer in self.windows]

    def write(self, state: State, copies: list[jax.Array]) -> State:
        """``state`` with each program's part of every window written back (after the programs ran)."""
        for (buffer, window), copy in zip(self.windows.items(), copies, strict=True):
            skip = window.low - window.reach[0]
            owned = _flat(copy, window)[..., skip : skip + window.width]
            shape = tuple(self.counts[k] if k in self.mapped else 1 for k in range(3))
            values = owned.reshape((*shape, window.width))
            flat = self.memory._array(state, buffer)
            written, _ = blocks.write(flat, self._view(window, window.width), window.low, values, None)
            state = self.memory._replace(state, buffer, written)
        return state

    def holds(self, buffer: int) -> bool:
        return buffer in self.windows

    def _local(self, pointer: Pointer, shape: tuple[int, ...]) -> tuple[blocks.View, Any] | None:
        """An access's lanes as a view of the program's copy, and the copy's index of its lowest lane, where its
        offsets' form is known."""
        form = pointer.affine
        if form is None or form.shape != shape or (not form.base_known and form.dynamic is None):
            return None
        view = blocks.View(form.lanes, shape)
        if view.nest is None:
            return None
        begin: Any = form.const - self.windows[pointer.buffer].reach[0] + view.low
        if not form.base_known:
            begin = jnp.asarray(form.dynamic, jnp.int64) + begin
        return view, begin

    def _offsets(self, pointer: Pointer, shape: tuple[int, ...]) -> jax.Array:
        return jnp.broadcast_to(jnp.asarray(pointer.offset), shape).astype(jnp.int64) - self.starts[pointer.buffer]

    def load(
        self, state: State, pointer: Pointer, mask: Any, other: Any, shape: tuple[int, ...]
    ) -> tuple[jax.Array, State]:
        """A load of a windowed buffer: from the program's copy (a slice of it where its offsets are an affine
        block), or from the buffer as it was before the kernel where its offsets are known only when it runs."""
        memory = self.memory
        spec = memory.specs[pointer.buffer]
        value_type = dtype_of(pointer.pointee)
        _, _, state = memory._lanes(state, "load", pointer, mask, shape)  # the faults of lanes outside the buffer
        copy = state.buffers[memory._slots[pointer.buffer]]
        local = self._local(pointer, shape)
        if pointer.affine is None:
            original = state._replace(buffers=_replaced(state, memory, pointer.buffer, self.originals))
            value, _ = Memory.load(memory, original, pointer, mask, other, shape)
            return value, state
        if local is not None:
            view, begin = local
            value = _read(copy, view, jnp.asarray(begin, jnp.int64), self.windows[pointer.buffer])
            if self.ordered:
                # Read before what follows writes the copy: XLA then updates it in place rather than copying it
                # whole to keep what this read would otherwise read late (each trip of a loop, on the CPU).
                value, copy = lax.optimization_barrier((value, copy))
                state = state._replace(buffers=_with(state, memory._slots[pointer.buffer], copy))
        else:
            flat = _flat(copy, self.windows[pointer.buffer])
            value = flat[jnp.clip(self._offsets(pointer, shape), 0, flat.shape[0] - 1)]
        value = _to_value(value, _storage(spec), np.dtype(value_type))
        if mask is not None:
            fill = jnp.zeros((), value_type) if other is None else jnp.asarray(other).astype(value_type)
            value = jnp.where(jnp.broadcast_to(jnp.asarray(mask, bool), shape), value, fill)
        return value, state

    def store(self, state: State, pointer: Pointer, value: Any, mask: Any, shape: tuple[int, ...]) -> State:
        """A store into the program's copy of a windowed buffer (lanes outside the buffer are faults, and write
        nothing that is written back)."""
        memory = self.memory
        spec = memory.specs[pointer.buffer]
        _, _, state = memory._lanes(state, "store", pointer, mask, shape)
        slot = memory._slots[pointer.buffer]
        copy = state.buffers[slot]
        values = jnp.asarray(value).astype(dtype_of(pointer.pointee))
        values = jnp.broadcast_to(_to_storage(values, _storage(spec)), shape)
        wanted = None if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), shape)
        local = self._local(pointer, shape)
        if local is not None:
            view, begin = local
            updated = _write(copy, view, jnp.asarray(begin, jnp.int64), values, wanted, self.windows[pointer.buffer])
        else:
            window = self.windows[pointer.buffer]
            flat = _flat(copy, window)
            index = self._offsets(pointer, shape)
            index = jnp.where(wanted, index, flat.shape[0]) if wanted is not None else index
            updated = _in_rows(flat.at[index].set(values, mode="drop"), window)
        return State(_with(state, slot, updated), state.faults)


def _grid(view: blocks.View, row: int) -> tuple[int, int, int] | None:
    """For a view whose lanes are a block of rows of ``row`` elements (lane steps ``(row, 1)``): the axis stepping
    over rows, and the counts of rows and of columns; else ``None``."""
    varying = [(abs(s), a) for a, (s, n) in enumerate(zip(view.steps, view.counts, strict=True)) if s and n > 1]
    if row <= 1 or sorted(step for step, _ in varying) != [1, row] or any(s < 0 for s in view.steps):
        return None
    over = next(a for step, a in varying if step == row)
    inner = next(a for step, a in varying if step == 1)
    return over, view.counts[over], view.counts[inner]


def _read(copy: jax.Array, view: blocks.View, begin: jax.Array, window: Window) -> jax.Array:
    """A view's elements of a program's copy from ``begin``: a block of rows and columns of the copy held in rows,
    where its lanes are one that does not cross a row's end (known when traced where the window is `Window.in_rows`);
    else the region between its first and last lane."""
    row = window.row

    def flat(copy: jax.Array, begin: jax.Array) -> jax.Array:
        return blocks.from_region(_region(_flat(copy, window), begin, view.needed), view)

    found = _grid(view, row)
    if found is None:
        return flat(copy, begin)
    over, rows, cols = found

    def block(lines: jax.Array, begin: jax.Array) -> jax.Array:
        picked = _block_of(rows, cols)(lines, begin // row, begin % row)
        picked = picked if over == min(a for a in range(len(view.counts)) if view.counts[a] > 1) else picked.T
        return picked.reshape(view.counts)

    if window.in_rows:
        return block(copy, begin)
    return lax.cond(begin % row + cols <= row, block, flat, copy, begin)


def _write(
    copy: jax.Array, view: blocks.View, begin: jax.Array, values: jax.Array, wanted: jax.Array | None, window: Window
) -> jax.Array:
    """The copy with ``values`` written at a view's lanes from ``begin`` where ``wanted`` (as `_read` finds them)."""
    row = window.row
    lanes = jnp.ones(view.counts, bool) if wanted is None else wanted

    def flat(copy: jax.Array, begin: jax.Array) -> jax.Array:
        whole = _flat(copy, window)
        region = blocks.to_region(values, view, 0)
        old = _region(whole, begin, view.needed)
        on = blocks.to_region(lanes, view, False)
        return _in_rows(_updated(whole, jnp.where(on, region, old), begin), window)

    found = _grid(view, row)
    if found is None:
        return flat(copy, begin)
    over, rows, cols = found
    first = min(a for a in range(len(view.counts)) if view.counts[a] > 1)

    def block(lines: jax.Array, begin: jax.Array) -> jax.Array:
        new, on = (x.reshape((rows, cols) if over == first else (cols, rows)) for x in (values, lanes))
        if over != first:
            new, on = new.T, on.T
        old = _block_of(rows, cols)(lines, begin // row, begin % row)
        return _placed(lines, jnp.where(on, new, old), begin // row, begin % row)

    if window.in_rows:
        return block(copy, begin)
    return lax.cond(begin % row + cols <= row, block, flat, copy, begin)


@functools.lru_cache(maxsize=64)
def _block_of(rows: int, cols: int) -> Any:
    """``lines[r : r + rows, c : c + cols]`` of a copy held in rows, one slice of all copies under ``jax.vmap``."""

    def direct(lines: jax.Array, r: jax.Array, c: jax.Array) -> jax.Array:
        lead = lines.ndim - 2
        zeros = (jnp.zeros((), r.dtype),) * lead
        return lax.dynamic_slice(lines, (*zeros, r, c), (*lines.shape[:lead], rows, cols))

    fn = custom_vmap(direct)

    @fn.def_vmap
    def _rule(axis_size: int, in_batched: Sequence[bool], lines: jax.Array, r: jax.Array, c: jax.Array) -> Any:
        if in_batched[1] or in_batched[2]:
            return jax.vmap(direct, in_axes=[0 if b else None for b in in_batched])(lines, r, c), True
        if not in_batched[0]:
            return direct(lines, r, c), False
        return fn(lines, r, c), True

    return fn


@custom_vmap
def _placed(lines: jax.Array, block: jax.Array, r: jax.Array, c: jax.Array) -> jax.Array:
    """``lines`` with ``block`` written at row ``r``, column ``c``: one update of all copies under ``jax.vmap``."""
    lead = lines.ndim - 2
    zeros = (jnp.zeros((), r.dtype),) * lead
    return lax.dynamic_update_slice(lines, block, (*zeros, r, c))


@_placed.def_vmap
def _placed_vmap(
    axis_size: int, in_batched: Sequence[bool], lines: jax.Array, block: jax.Array, r: jax.Array, c: jax.Array
) -> Any:
    if in_batched[2] or in_batched[3] or not (in_batched[0] and in_batched[1]):
        lines = lines if in_batched[0] else jnp.broadcast_to(lines, (axis_size, *lines.shape))
        block = block if in_batched[1] else jnp.broadcast_to(block, (axis_size, *block.shape))
        axes = (0, 0, 0 if in_batched[2] else None, 0 if in_batched[3] else None)
        return jax.vmap(_placed.fun, in_axes=axes)(lines, block, r, c), True  # type: ignore[attr-defined]
    return _placed(lines, block, r, c), True


def _in_rows(copy: jax.Array, window: Window) -> jax.Array:
    """A copy (its last axis the window's elements) held in rows of the window's row, where it has one."""
    if window.row <= 1:
        return copy
    return copy.reshape((*copy.shape[:-1], copy.shape[-1] // window.row, window.row))


def _flat(copy: jax.Array, window: Window) -> jax.Array:
    """A copy held as `_in_rows` holds it, its window's elements along one axis again."""
    if window.row <= 1:
        return copy
    return copy.reshape((*copy.shape[:-2], copy.shape[-2] * copy.shape[-1]))


def _with(state: State, slot: int, copy: jax.Array) -> tuple:
    """The state's buffers with a program's copy in ``slot``."""
    buffers = list(state.buffers)
    buffers[slot] = copy
    return tuple(buffers)


def _replaced(state: State, memory: Memory, buffer: int, originals: Mapping[int, jax.Array]) -> tuple:
    buffers = list(state.buffers)
    buffers[memory._slots[buffer]] = originals[buffer].reshape(memory.specs[buffer].shape)
    return tuple(buffers)


@functools.lru_cache(maxsize=64)
def _region_of(size: int) -> Any:
    """``copy[begin : begin + size]`` of a program's copy, whose ``jax.vmap`` over the programs (the copies batched,
    ``begin`` the same for all) is one slice of all the copies, not a gather."""

    def direct(copy: jax.Array, begin: jax.Array) -> jax.Array:
        lead = copy.ndim - 1
        return lax.dynamic_slice(
            copy, (*(jnp.zeros((), begin.dtype) for _ in range(lead)), begin), (*copy.shape[:lead], size)
        )

    fn = custom_vmap(direct)

    @fn.def_vmap
    def _rule(axis_size: int, in_batched: Sequence[bool], copy: jax.Array, begin: jax.Array) -> Any:
        if in_batched[1]:
            return jax.vmap(direct, in_axes=(0 if in_batched[0] else None, 0))(copy, begin), True
        if not in_batched[0]:
            return direct(copy, begin), False
        return fn(copy, begin), True

    return fn


def _region(copy: jax.Array, begin: jax.Array, size: int) -> jax.Array:
    return _region_of(size)(copy, begin)


@custom_vmap
def _updated(copy: jax.Array, region: jax.Array, begin: jax.Array) -> jax.Array:
    """``copy`` with ``region`` written from ``begin`` on: under ``jax.vmap`` over the programs (copy and region
    batched alike, ``begin`` the same for all) one update of all the copies, not a scatter."""
    lead = copy.ndim - 1
    return lax.dynamic_update_slice(copy, region, (*(jnp.zeros((), begin.dtype) for _ in range(lead)), begin))


@_updated.def_vmap
def _updated_vmap(
    axis_size: int, in_batched: Sequence[bool], copy: jax.Array, region: jax.Array, begin: jax.Array
) -> Any:
    if in_batched[2] or not (in_batched[0] and in_batched[1]):
        copy = copy if in_batched[0] else jnp.broadcast_to(copy, (axis_size, *copy.shape))
        region = region if in_batched[1] else jnp.broadcast_to(region, (axis_size, *region.shape))
        axes = (0, 0, 0 if in_batched[2] else None)
        return jax.vmap(_updated.fun, in_axes=axes)(copy, region, begin), True  # type: ignore[attr-defined]
    return _updated(copy, region, begin), True
