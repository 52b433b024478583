"""Running a grid's programs side by side in a box: one ``jax.vmap`` per grid axis, block accesses as slices.

The programs of a box (every program along the grid's last two axes, as many along the first as `chunk` allows at
a time) are traced once, under nested ``jax.vmap``\\ s, one per grid axis; a value that does not depend on a grid
axis is not mapped over it (a matmul's tile of ``A`` depends on the row of tiles only), so a ``tl.dot`` of the
programs side by side is one matrix product, not a batch of them. Loads and stores whose offsets are affine in
the program ids and the lanes read and write the box's whole block at once as slices of the buffer
(`jt_core.translation.blocks`); the others gather and scatter as `jt_core.translation.grid` does. Stores are
recorded and made after the programs ran.

That gives what the programs in order give when no program can see another's stores and no two programs store to
one element: every store outside loops and branches left to XLA (a loop traced step by step, a branch whose sides
run masked, `jt_core.translation.control`, are straight-line code), through offsets affine in the program ids whose
steps keep the programs' elements apart (`jt_core.translation.affine.disjoint`, several stores a window per
program); a buffer both loaded and stored (an in-place kernel) loaded only in the program's own window and never
after a store that reaches what it loads (`_independent`); atomics only where nobody reads their result and their
combiner is order-free (`_BoxMemory.defers_atomic`). Anything else raises `NotVectorizable`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.translation import affine, blocks
from jt_core.translation.affine import Affine
from jt_core.translation.kernel import Kernel
from jt_core.translation.lang import dtype_of
from jt_core.translation.memory import (
    ORDERLESS,
    Memory,
    Pointer,
    State,
    _storage,
    _to_storage,
    _to_value,
    merged_faults,
    no_error,
)
from jt_core.translation.program import Program
from jt_core.translation.relabeling import Relabeling
from jt_core.translation.strategy import Strategy
from jt_core.translation.values import NotVectorizable

__all__ = ["run"]


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

    def __init__(self, memory: Memory, box: blocks.Box, chunks: int, kernel: Kernel) -> None:
        super().__init__(memory.specs, memory.constants, memory.bounds_check)
        self.kernel = kernel
        self.box = box
        self.chunks = chunks
        self.deferred = []
        #: The accesses in program order.
        self.order: list[_Access] = []
        #: The buffers updated by deferred atomics (`defers_atomic`).
        self.atomics: set[int] = set()

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

    def _base(self, a: Affine) -> Any:
        """The offset of the box's first program's first lane (an int where it is known when tracing)."""
        first = self.box.first
        base = a.const if isinstance(first, int) and not a.pids[0] * first else a.const + a.pids[0] * first
        return base if a.base_known else a.dynamic + base

    def load(
        self, state: State, pointer: Pointer, mask: Any, other: Any, shape: tuple[int, ...]
    ) -> tuple[jax.Array, State]:
        self.order.append(_Access(False, pointer.buffer, pointer.affine, self.kernel.path))
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
        block = blocks.load(flat, self.box, a.pids, a.lanes, shape, base, index_type)
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

    def defers_atomic(self, kind: str, dtype: np.dtype, result_used: bool) -> bool:
        """Whether an atomic is made after the programs ran: nobody reads its result, and its combiner gives the same
        memory whatever order the programs' lanes come in (integer sums, extremes and bit operations; float sums too
        where the strategy leaves rounding to XLA, which sums in its own order)."""
        if result_used or kind not in ORDERLESS:
            return False
        if np.issubdtype(dtype, np.integer):
            return True
        return kind == "FADD" and not self.kernel.strategy.exact_rounding

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
        if not self.defers_atomic(kind, np.dtype(value_type), result_used):
            return super().atomic(state, kind, pointer, values, mask, shape, result_used)
        self.order.append(_Access(True, pointer.buffer, None, self.kernel.path))
        self.atomics.add(pointer.buffer)
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
        self.order.append(_Access(True, pointer.buffer, pointer.affine, self.kernel.path))
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
                record = _BlockStore(pointer.buffer, view, begin, self.kernel.path)
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


class _Access(NamedTuple):
    """An access of a program, as `_independent` weighs it."""

    store: bool
    buffer: int
    form: Affine | None  # the affine form of its offsets, where known
    path: tuple[tuple[int, bool], ...]  # the sides of the branches it runs on (`Tracer.path`)


def _exclusive(a: _Access, b: _Access) -> bool:
    """Whether ``a`` and ``b`` lie on opposite sides of one branch (a program makes at most one of them)."""
    sides = dict(a.path)
    return any(branch in sides and sides[branch] != side for branch, side in b.path)


def _independent(memory: _BoxMemory, grid: tuple[int, int, int]) -> None:
    """Raises `NotVectorizable` unless the programs' stores provably neither meet nor reach what another program
    loads, and no program loads what it stored itself earlier (the stores are made after every program ran).

    A load through offsets known only when it runs (``x_ptr + label``) is let through where its program has stored
    nothing to that buffer before it: it may then reach only what no program writes, what its own program writes
    after it, or what another program writes, a data race whose result is undefined on a GPU (here it reads the
    buffer as it was before the kernel)."""
    order = memory.order
    for buffer in memory.atomics:
        # Atomics combine whatever order the lanes come in; nothing else may touch what they update.
        if any(a.buffer == buffer and a.form is not None for a in order) or buffer in memory.loaded:
            raise NotVectorizable("a buffer updated by atomics and also loaded or stored")
    stored = {a.buffer for a in order if a.store} - memory.atomics
    for buffer in stored:
        # A form whose base is known only when it runs says no more than no form at all.
        accesses = [
            a if a.form is None or a.form.base_known else a._replace(form=None) for a in order if a.buffer == buffer
        ]
        stores = [a.form for a in accesses if a.store]
        if any(form is None for form in stores) or not affine.disjoint(stores, grid):  # type: ignore[arg-type]
            raise NotVectorizable("stores that may reach one element from two programs")
        for index, access in enumerate(accesses):
            if access.store:
                continue
            earlier = [a for a in accesses[:index] if a.store and not _exclusive(a, access)]
            if access.form is None:
                if earlier:
                    raise NotVectorizable("a program loading, through offsets known when it runs, what it stored")
                continue
            low, high = access.form.spread()
            span = (access.form.const + low, access.form.const + high)
            for store in earlier:
                assert store.form is not None
                s_low, s_high = store.form.spread()
                if span[0] <= store.form.const + s_high and store.form.const + s_low <= span[1]:
                    raise NotVectorizable("a program loading what it stored itself")
        known = [a.form for a in accesses if a.form is not None]
        if all(form == stores[0] for form in known):
            continue  # each program loads only the elements it stores
        if not affine.apart_in_windows(known, grid):  # type: ignore[arg-type]
            raise NotVectorizable("a buffer loaded where another program may write it")


def run(
    program: Program,
    memory: Memory,
    grid: tuple[int, int, int],
    arguments: Sequence[Any],
    state: State,
    fuse: bool,
    chunk: int,
    strategy: Strategy,
    relabel: Relabeling | None = None,
) -> State | None:
    """Runs every program of ``grid`` side by side, in boxes of up to ``chunk`` programs; ``None`` (nothing run)
    when a box of whole planes of the last two grid axes would hold more.

    Raises:
        NotVectorizable: When that might not give what the programs in order give.
    """
    launch = grid
    if relabel is not None:
        grid = relabel.grid
    plane = grid[1] * grid[2]
    if chunk < plane:
        return None
    along = min(grid[0], chunk // plane)
    chunks = -(-grid[0] // along)
    counts = (along, grid[1], grid[2])
    mapped = tuple(k for k in range(3) if counts[k] > 1)
    kernel = Kernel(program, memory, grid, fuse, vector=True, strategy=strategy, relabel=relabel, launch=launch)
    entry = program.functions[program.entry].body[0]
    recorded: list[Any] = []
    #: Whether no access of the programs could stray (their faults are the ones they started with, untouched).
    clean = [True]

    def programs(first: Any, buffers: tuple[jax.Array, ...]) -> tuple[list[Any], jax.Array]:
        def one(*positions: Any) -> tuple[list[Any], jax.Array]:
            where = [None, None, None]
            for k, position in zip(mapped, positions, strict=True):
                where[k] = position
            box = blocks.Box(counts, first, (where[0], where[1], where[2]))
            local = _BoxMemory(memory, box, chunks, kernel)
            kernel.memory = local
            kernel.start_program()
            pid_x = first if where[0] is None else first + where[0]
            kernel.pids = (pid_x, 0 if where[1] is None else where[1], 0 if where[2] is None else where[2])
            start = no_error()
            _, after = kernel.run_block(entry, list(arguments), State(buffers, start))
            clean[0] = after.faults is start
            _independent(local, grid)
            assert local.deferred is not None
            recorded[:] = [record for record, _, _ in local.deferred]
            return [(i, v) for _, i, v in local.deferred], after.faults

        fn: Any = one
        for k in reversed(range(len(mapped))):
            fn = jax.vmap(fn, in_axes=tuple(0 if j == k else None for j in range(len(mapped))))
        return fn(*(lax.iota(jnp.int32, counts[k]) for k in mapped))

    def box_of(index: Any, carried: State) -> State:
        first = 0 if chunks == 1 else index * along
        arrays, faults = programs(first, carried.buffers)
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
