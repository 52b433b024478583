"""Running a grid's programs side by side in a box: one ``jax.vmap`` per grid axis, block accesses as slices.

The programs of a box (every program along the grid's last two axes, as many along the first as the plan's chunk
allows at a time) are traced once, under nested ``jax.vmap``\\ s, one per grid axis; a value that does not depend on
a grid axis is not mapped over it (a matmul's tile of ``A`` depends on the row of tiles only), so a ``tl.dot`` of the
programs side by side is one matrix product, not a batch of them. Loads and stores whose offsets are affine in the
program ids and the lanes read and write the box's whole block at once as slices of the buffer
(`jt_core.translation.blocks`); the others gather and scatter as `jt_core.translation.memory` does. Stores are
recorded and made after the programs ran; order-free atomics are combined in one scatter after them.

The plan chose this where it gives what the programs in order give (`jt_core.translation.analysis.independence`):
nothing here proves it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.translation import blocks
from jt_core.translation.analysis.affine import Affine
from jt_core.translation.analysis.independence import BufferMode
from jt_core.translation.kernel import Job, Kernel
from jt_core.translation.lang import dtype_of
from jt_core.translation.memory import (
    Memory,
    Pointer,
    State,
    _storage,
    _to_storage,
    _to_value,
    merged_faults,
    no_error,
)
from jt_core.translation.plan import Plan
from jt_core.translation.windows import Windows

__all__ = ["fits", "run"]


@dataclasses.dataclass(frozen=True)
class _BlockCheck:
    """The bounds check of a load outside loops and branches whose lanes may stray, made on its mask after the
    programs ran, where only the lanes that may stray are looked at."""

    size: int
    view: blocks.View
    begin: int


@dataclasses.dataclass(frozen=True)
class _BlockStore:
    """A store recorded as a view of the box: made by `blocks.write` after the programs ran. Its entry holds the
    values, then the mask and the guard (the condition of the branch side it ran on), each ``None`` where absent."""

    buffer: int
    view: blocks.View
    begin: Any
    path: tuple[tuple[int, bool], ...] = ()


@dataclasses.dataclass(frozen=True)
class _BlockAtomic:
    """An atomic whose result nobody reads, with an order-independent combiner: recorded, and made by one scatter
    that combines every program's lanes after the programs ran."""

    buffer: int
    kind: str


def _elements_of(view: blocks.View, span: int) -> bool:
    """Whether slicing for ``view`` reads few enough elements besides its lanes to be worth it (at most ``span``
    times its own: the strategy's `Strategy.slice_span`)."""
    return view.nest is not None and view.extent <= span * view.size + 64


class _BoxMemory(Memory):
    """The buffers as the programs of a box see them: block accesses through views where their offsets allow it."""

    def __init__(
        self, memory: Memory, box: blocks.Box, chunks: int, kernel: Kernel, windows: Windows | None = None
    ) -> None:
        super().__init__(memory.specs, memory.constants, memory.bounds_check, memory.loads_fault, memory.row_stores)
        self.kernel = kernel
        self.box = box
        self.chunks = chunks
        self.deferred = []
        #: The buffers each program writes through a window of its own.
        self.windows = windows

    def _view(self, pointer: Pointer, shape: tuple[int, ...]) -> tuple[blocks.View, int, int] | None:
        """The access's view over the box, and the lowest and highest offsets it reaches over every box of the
        grid; ``None`` where its offsets are not known affine forms, or the view does not nest."""
        a = pointer.affine
        if a is None or a.shape != shape or not self.specs[pointer.buffer].size:
            return None
        if not a.base_known and a.dynamic is None:
            return None
        view = blocks.box_view(self.box, a.pids, a.lanes, shape)
        if not _elements_of(view, self.kernel.strategy.slice_span):
            return None
        last_first = (self.chunks - 1) * self.box.counts[0]
        low = a.const + view.low + min(0, a.pids[0] * last_first)
        high = a.const + view.low + view.needed - 1 + max(0, a.pids[0] * last_first)
        if max(abs(low), abs(high)) >= 2**31:
            return None  # offsets that would wrap around in 32 bits: the gather computes them as the kernel does
        return view, low, high

    def _reach(self, pointer: Pointer) -> tuple[int, int] | None:
        """The offsets the box's lanes of an access may take: its reach over the grid, and over the programs past
        the grid's end that a last box of a loop of boxes holds."""
        if pointer.reach is None or pointer.affine is None:
            return pointer.reach
        past = self.chunks * self.box.counts[0] - self.kernel.facts.grid[0]
        step = pointer.affine.pids[0] * max(0, past)
        return pointer.reach[0] + min(0, step), pointer.reach[1] + max(0, step)

    def _base(self, a: Affine) -> Any:
        """The offset of the box's first program's first lane (an int where it is known when tracing)."""
        first = self.box.first
        base = a.const if isinstance(first, int) and not a.pids[0] * first else a.const + a.pids[0] * first
        return base if a.base_known else a.dynamic + base

    def _alignment(self, a: Affine) -> tuple[int, int]:
        """What `_base` is known to be modulo what, where it is known only when it runs: its run-time scalar is a
        multiple of that scalar's step (a loop's trip times its coefficient), a later box's first program a multiple
        of the box's programs."""
        first = self.box.first
        static = a.const + (a.pids[0] * first if isinstance(first, int) else 0)
        moduli = [] if a.base_known else [a.dynamic_step]
        if not isinstance(first, int):
            moduli.append(a.pids[0] * self.box.counts[0])
        modulus = math.gcd(*moduli) if moduli else 0
        return (modulus, static % modulus) if modulus else (1, 0)

    def load(
        self, state: State, pointer: Pointer, mask: Any, other: Any, shape: tuple[int, ...]
    ) -> tuple[jax.Array, State]:
        if self.windows is not None and self.windows.holds(pointer.buffer):
            return self.windows.load(state, pointer, mask, other, shape)
        found = self._view(pointer, shape)
        spec = self.specs[pointer.buffer]
        if found is None:
            return super().load(state, pointer, mask, other, shape)
        view, low, high = found
        a = pointer.affine
        assert a is not None
        if not a.base_known and not shape:
            # One element per program at an offset known only when it runs (a label's logit): one gather of them all.
            return super().load(state, pointer, mask, other, shape)
        strays = not a.base_known or low < 0 or high >= spec.size
        if strays and not self.bounds_check:
            return super().load(state, pointer, mask, other, shape)  # a stray lane reads what the gather reads
        value_type = dtype_of(pointer.pointee)
        self.loaded.add(pointer.buffer)
        flat = self._array(state, pointer.buffer)
        base = self._base(a)
        index_type = jnp.asarray(pointer.offset).dtype
        reach = self._reach(pointer)
        block = blocks.load(flat, self.box, a.pids, a.lanes, shape, base, index_type, reach, self._alignment(a))
        value = _to_value(block, _storage(spec), value_type)
        wanted = None if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), shape)
        if not strays:
            pass
        elif wanted is None:
            _, _, state = self._lanes(state, "load", pointer, None, shape)  # two comparisons per program
        elif isinstance(base, int) and not self.kernel.region_depth:
            assert self.deferred is not None
            self.deferred.append((_BlockCheck(spec.size, view, base + view.low), wanted, None))  # type: ignore[arg-type]
        else:
            offsets = jnp.broadcast_to(jnp.asarray(pointer.offset), shape)
            state = self._record(state, wanted & ((offsets < 0) | (offsets >= spec.size)))
        if wanted is not None:
            fill = jnp.zeros((), value_type) if other is None else jnp.asarray(other).astype(value_type)
            value = jnp.where(wanted, value, fill)
        return value, state

    def defers_atomic(self, buffer: int) -> bool:
        """Whether an atomic is made after the programs ran (the plan found its buffer's atomics order-free)."""
        return self.kernel.plan.buffers.get(buffer) is BufferMode.ATOMIC

    def atomic(
        self,
        state: State,
        kind: str,
        pointer: Pointer,
        values: Sequence[Any],
        mask: Any,
        shape: tuple[int, ...],
        result_used: bool,
    ) -> tuple[jax.Array, State]:
        value_type = dtype_of(pointer.pointee)
        if not self.defers_atomic(pointer.buffer):
            return super().atomic(state, kind, pointer, values, mask, shape, result_used)
        spec = self.specs[pointer.buffer]
        offsets, active, state = self._lanes(state, "atomic", pointer, mask, shape)
        if active is None:
            active = (offsets >= 0) & (offsets < spec.size)
        index = jnp.where(active, offsets, spec.size)
        operand = jnp.broadcast_to(jnp.asarray(values[0]).astype(value_type), shape)
        assert self.deferred is not None
        self.deferred.append((_BlockAtomic(pointer.buffer, kind), index, operand))  # type: ignore[arg-type]
        return jnp.zeros(shape, value_type), state

    def merge_sides(self, branch: int, taken: jax.Array, outer: Any) -> None:
        """Where both sides of branch ``branch`` stored a whole block to one place (``if ignored: store zeros else:
        store values``), one store of the values each program's side chose: written without reading what was
        there, where the two guarded stores would each have read it."""
        entries = self.deferred
        assert entries is not None
        removed: set[int] = set()
        for i, (first, then_values, then_masks) in enumerate(entries):
            if not isinstance(first, _BlockStore) or first.path[-1:] != ((branch, True),) or then_masks[0] is not None:
                continue
            for j in range(i + 1, len(entries)):
                second, else_values, else_masks = entries[j]
                if not isinstance(second, _BlockStore) or j in removed:
                    continue
                else_mask = else_masks[0]
                same = (second.buffer, second.view, second.begin) == (first.buffer, first.view, first.begin)
                if not same or second.path[-1:] != ((branch, False),) or else_mask is not None:
                    continue
                if any(_overlaps(entries[m][0], first) for m in range(i + 1, j) if m not in removed):
                    break
                merged = dataclasses.replace(first, path=first.path[:-1])
                guard = None if outer is None else jnp.broadcast_to(outer, first.view.counts[3:])
                chosen = jnp.where(taken, then_values, else_values)
                entries[j] = (merged, chosen, (None, guard))  # type: ignore[call-overload]
                removed.add(i)
                break
        self.deferred = [entry for index, entry in enumerate(entries) if index not in removed]

    def store(
        self, state: State, pointer: Pointer, value: Any, mask: Any, shape: tuple[int, ...], guard: Any = None
    ) -> State:
        if self.windows is not None and self.windows.holds(pointer.buffer):
            if guard is not None:
                guard = jnp.broadcast_to(guard, shape)
                mask = guard if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), shape) & guard
            return self.windows.store(state, pointer, value, mask, shape)
        spec = self.specs[pointer.buffer]
        found = self._view(pointer, shape) if spec.writable else None
        if found is not None and pointer.affine is not None and pointer.affine.base_known:
            view, low, high = found
            fits = isinstance(self.box.first, int) or (low >= 0 and high < spec.size)
            varies = all(s or n == 1 for s, n in zip(view.steps, view.counts, strict=True))
            if fits and varies:
                a = pointer.affine
                assert a is not None and self.deferred is not None
                values = jnp.asarray(value).astype(dtype_of(pointer.pointee))
                values = jnp.broadcast_to(_to_storage(values, _storage(spec)), shape)
                wanted = None if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), shape)
                fence = None if guard is None else jnp.broadcast_to(guard, shape)
                begin = self._base(a)
                begin = begin + view.low if isinstance(begin, int) else jnp.asarray(begin, jnp.int64) + view.low
                record = _BlockStore(pointer.buffer, view, begin, self.kernel.branch_path)
                self.deferred.append((record, values, (wanted, fence)))  # type: ignore[arg-type]
                return state
        return super().store(state, pointer, value, mask, shape, guard)


def _overlaps(record: Any, store: _BlockStore) -> bool:
    """Whether a recorded access may reach what ``store`` writes (any record of another kind to its buffer may)."""
    if isinstance(record, (_BlockCheck,)):
        return False
    if not isinstance(record, _BlockStore):
        return getattr(record, "buffer", record) == store.buffer
    if record.buffer != store.buffer:
        return False
    steps = record.view.steps
    if not (isinstance(record.begin, int) and isinstance(store.begin, int)) or steps != store.view.steps:
        return True
    if any(s < 0 for s in steps) or record.view.nest is None:
        return True
    # An element of each: record.begin + sum(s * i) = store.begin + sum(s * j), so the distance between the
    # beginnings is sum(s * (j - i)) with j - i between -(record's count - 1) and store's count - 1 per axis.
    axes = sorted(
        (s, 1 - m, n - 1)
        for s, m, n in zip(steps, record.view.counts, store.view.counts, strict=True)
        if s and (m > 1 or n > 1)
    )
    return _reachable(record.begin - store.begin, axes[::-1])


def _reachable(distance: int, axes: Sequence[tuple[int, int, int]]) -> bool:
    """Whether ``distance = sum(step * d)`` for some ``low <= d <= high`` per axis (``axes``: (step, low, high),
    largest step first, steps nested as a view's are: each beyond what the smaller ones reach together)."""
    if not axes:
        return distance == 0
    (step, low, high), rest = axes[0], axes[1:]
    for digit in {distance // step, -(-distance // step)}:
        if low <= digit <= high and _reachable(distance - digit * step, rest):
            return True
    return False


def fits(plan: Plan) -> bool:
    """Whether a box of whole planes of the grid's last two axes fits in the plan's chunk of programs."""
    grid = plan.facts.grid
    return plan.chunk >= grid[1] * grid[2]


def run(job: Job, state: State) -> State:
    """Runs every program of the plan's grid side by side, in boxes of up to the plan's chunk of programs (which
    `fits` a box of whole planes), from ``state``."""
    plan, memory, arguments = job.plan, job.memory, job.arguments
    grid = plan.facts.grid
    chunk = plan.chunk
    plane = grid[1] * grid[2]
    along = min(grid[0], chunk // plane)
    chunks = -(-grid[0] // along)
    counts = (along, grid[1], grid[2])
    mapped = tuple(k for k in range(3) if counts[k] > 1)
    kernel = job.kernel(vector=True)
    entry = job.entry
    windows = Windows(memory, plan.windows, counts, job.strategy.ordered_window_reads) if plan.windows else None
    recorded: list[Any] = []
    #: Whether no access of the programs could stray (their faults are the ones they started with, untouched).
    clean = [True]

    def programs(first: Any, state: State) -> tuple[list[Any], jax.Array, list[jax.Array]]:
        copies = windows.read(state) if windows is not None else []

        def one(*given: Any) -> tuple[list[Any], jax.Array, list[jax.Array]]:
            positions, own = given[: len(mapped)], list(given[len(mapped) :])
            where = [None, None, None]
            for k, position in zip(mapped, positions, strict=True):
                where[k] = position
            box = blocks.Box(counts, first, (where[0], where[1], where[2]))
            local = _BoxMemory(memory, box, chunks, kernel, windows)
            kernel.memory = local
            kernel.start_program()
            pid_x = first if where[0] is None else first + where[0]
            kernel.pids = (pid_x, 0 if where[1] is None else where[1], 0 if where[2] is None else where[2])
            start = no_error()
            begun = State(state.buffers, start)
            if windows is not None:
                begun = windows.enter(begun, own, kernel.pids)
            _, after = kernel.run_block(entry, list(arguments), begun)
            clean[0] = after.faults is start
            assert local.deferred is not None
            recorded[:] = [record for record, _, _ in local.deferred]
            left = windows.leave(after) if windows is not None else []
            return [(i, v) for _, i, v in local.deferred], after.faults, left

        fn: Any = one
        for k in reversed(range(len(mapped))):
            positions = tuple(0 if j == k else None for j in range(len(mapped)))
            fn = jax.vmap(fn, in_axes=positions + (0,) * len(copies))
        return fn(*(lax.iota(jnp.int32, counts[k]) for k in mapped), *copies)

    def box_of(index: Any, carried: State) -> State:
        first = 0 if chunks == 1 else index * along
        arrays, faults, copies = programs(first, carried)
        if windows is not None:
            carried = windows.write(carried, copies)
        valid = None
        if chunks > 1 and grid[0] % along:
            valid = (first + lax.iota(jnp.int32, along)) < grid[0]
        state = carried
        for record, (index_or_values, values_or_mask) in zip(recorded, arrays, strict=True):
            state = _apply(memory, state, record, index_or_values, values_or_mask, counts, valid)
        if clean[0]:
            return state  # no access could stray: the flag stays what it was, a constant XLA and jt see
        if valid is not None and counts[0] > 1:
            faults = jnp.where(valid.reshape((-1,) + (1,) * (faults.ndim - 1)), faults, 0)
        return State(state.buffers, state.faults | merged_faults(faults))

    if chunks == 1:
        return box_of(0, state)
    return lax.fori_loop(0, chunks, lambda c, s: box_of(c.astype(jnp.int32), s), state)


def _apply(
    memory: Memory,
    state: State,
    record: Any,
    first: jax.Array,
    second: jax.Array | None,
    counts: tuple[int, int, int],
    valid: jax.Array | None,
) -> State:
    """Makes one recorded store of the box's programs."""
    if isinstance(record, _BlockCheck):
        wanted = first.reshape(record.view.counts)
        if valid is not None:
            wanted = wanted & valid.reshape((-1,) + (1,) * (len(record.view.counts) - 1))
        return State(state.buffers, state.faults | blocks.strays(record.size, record.view, record.begin, wanted))
    if isinstance(record, _BlockAtomic):
        index = first
        if valid is not None and counts[0] > 1:
            keep = valid.reshape((-1,) + (1,) * (index.ndim - 1))
            index = jnp.where(keep, index, np.iinfo(index.dtype).max)
        assert second is not None
        return memory.apply_atomic(state, record.buffer, record.kind, index, second)
    if isinstance(record, _BlockStore):
        view = record.view
        assert isinstance(second, tuple)
        wanted, fence = second
        mask = wanted if fence is None else fence if wanted is None else wanted & fence
        values = first.reshape(view.counts)
        if mask is not None:
            mask = mask.reshape(view.counts)
        if valid is not None:
            keep = jnp.broadcast_to(valid.reshape((-1,) + (1,) * (len(view.counts) - 1)), view.counts)
            mask = keep if mask is None else mask & keep
        flat, strayed = blocks.write(memory._array(state, record.buffer), view, record.begin, values, mask)
        state = memory._replace(state, record.buffer, flat)
        if strayed is False or not memory.bounds_check:
            return state
        return State(state.buffers, state.faults | strayed)
    index = first
    assert second is not None
    if valid is not None and counts[0] > 1:
        keep = valid.reshape((-1,) + (1,) * (index.ndim - 1))
        index = jnp.where(keep, index, np.iinfo(index.dtype).max)
    return memory.apply(state, record, index, second)
