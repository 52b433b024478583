"""The buffers a compiled CPU kernel reads and writes, and its loads, stores and atomics as gathers and scatters.

Every pointer of the kernel is a `Pointer`: the buffer it was derived from (known when the kernel is traced,
since a pointer can only come from a pointer argument) and its offset in elements, an integer array. Buffers the
kernel may write (its outputs, and inputs aliased to them) are carried through the grid's loop in the
`State`; inputs it only reads are constants of the loop.

Unless the bounds check is off, every masked-in lane of every access is compared with its buffer's size (a lane
that strays is dropped: a load reads its ``other`` value, or zero, and a store writes nothing), and the state's flag
says whether any strayed;
after the kernel ran, a set flag makes the interpreter run the call again to name the access
(`jt_core.cpu.compiled.checking` on the CPU). A store into an input that is not an output sets it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.errors import UnsupportedKernelError
from jt_core.translation import parts, row_moves
from jt_core.translation.analysis.affine import Affine
from jt_core.translation.analysis.rows import Rows
from jt_core.translation.lang import dtype_of, is_static
from jt_core.translation.row_moves import RowsStore

__all__ = ["Choice", "SPINS", "STRAYED", "BufferSpec", "Memory", "Pointer", "State", "merged_faults", "no_error"]


@dataclasses.dataclass(frozen=True)
class BufferSpec:
    """One array a kernel reaches through its pointer arguments.

    Attributes:
        name: The kernel parameter it is passed as (the first, when several share it).
        dtype: The array's element type, as XLA holds it.
        shape: The array's shape.
        writable: Whether the kernel may write it (an output, or an input aliased to one).
        output: The output it is (its index in ``out_shape``), or ``None`` for an input.
    """

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    writable: bool
    output: int | None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclasses.dataclass(frozen=True)
class Pointer:
    """A pointer value: the buffer it points into, the offset (in elements of the buffer) of each lane, the type it
    points to, the offset's affine form where it is known (`jt_core.translation.analysis.affine`), and the lowest
    and highest offset its lanes take over every program and trip, where the analyses know them (``reach``); for
    offsets without a form, how they run along the block's rows (``rows``), where known."""

    buffer: int
    offset: Any
    pointee: str
    affine: Affine | None = dataclasses.field(default=None, compare=False)
    reach: tuple[int, int] | None = dataclasses.field(default=None, compare=False)
    rows: Rows | None = dataclasses.field(default=None, compare=False)


@dataclasses.dataclass(frozen=True)
class Choice:
    """A pointer into one of several buffers, chosen lane by lane: lane ``i`` is ``pointers[which[i]]``'s (what
    ``tl.where`` makes of pointers into two arguments, or a branch that points one at another argument)."""

    pointers: tuple[Pointer, ...]
    which: Any


class State(NamedTuple):
    """What the grid's loop carries: the writable buffers (flattened, in buffer order), and the faults found so far,
    bits of an int8 (`STRAYED`, `SPINS`) combined with ``|`` (a boolean combined in sets `STRAYED`)."""

    buffers: tuple[jax.Array, ...]
    faults: jax.Array


#: A fault: an access strayed outside its buffer (or stored into an input).
STRAYED = 1
#: A fault: a program waits in a loop that can never end (`jt_core.translation.control`), and left it.
SPINS = 2


def no_error() -> jax.Array:
    """The faults of a run in which nothing went wrong (yet)."""
    return jnp.zeros((), jnp.int8)


def merged_faults(faults: jax.Array) -> jax.Array:
    """The faults of many programs (an array of them) as one."""
    faults = jnp.asarray(faults).astype(jnp.int8)
    return lax.reduce_or(faults, tuple(range(faults.ndim))) if faults.ndim else faults


def _storage(spec: BufferSpec) -> np.dtype:
    # Boolean arrays are held as bytes: Triton reads and writes them through int8 pointers.
    return np.dtype(np.int8) if spec.dtype == np.bool_ else spec.dtype


def _flat(array: jax.Array, storage: np.dtype) -> jax.Array:
    """``array`` flattened, as its buffer holds it (a kernel with thousands of outputs flattens each)."""
    if array.ndim != 1:
        array = lax.reshape(array, (array.size,))
    return array if array.dtype == storage else lax.convert_element_type(array, storage)


def _to_value(array: jax.Array, storage: np.dtype, value: np.dtype) -> jax.Array:
    if storage == value:
        return array
    if storage.itemsize != value.itemsize:
        raise UnsupportedKernelError(f"a {value} access to a buffer of {storage}")
    if value == np.bool_:
        return array != 0
    return lax.bitcast_convert_type(array, value)


def _to_storage(array: jax.Array, storage: np.dtype) -> jax.Array:
    if array.dtype == storage:
        return array
    if array.dtype == jnp.bool_:
        return array.astype(storage)
    if array.dtype.itemsize != storage.itemsize:
        raise UnsupportedKernelError(f"a {array.dtype} store to a buffer of {storage}")
    return lax.bitcast_convert_type(array, storage)


class Memory:
    """The buffers of one traced kernel, and the accesses it makes to them.

    Args:
        specs: The buffers, by index.
        constants: The arrays of the read-only buffers, in their own shapes (``None`` for writable ones).
        bounds_check: Whether accesses are checked against their buffer.
        loads_fault: Whether a load's lane that strays outside its buffer sets the faults (a store's always does).
        row_stores: Whether stores of rows at starts known only when they run may scatter whole rows
            (`jt_core.translation.strategy.Strategy.row_stores`).
    """

    def __init__(
        self,
        specs: Sequence[BufferSpec],
        constants: Sequence[jax.Array | None],
        bounds_check: bool,
        loads_fault: bool = True,
        row_stores: bool = True,
    ) -> None:
        self.specs = tuple(specs)
        self.constants = tuple(constants)
        self.bounds_check = bounds_check
        #: Whether a load's lane outside its buffer is a fault (else it reads zero, unreported).
        self.loads_fault = loads_fault
        self.row_stores = row_stores
        self.writable = tuple(i for i, spec in enumerate(specs) if spec.writable)
        #: Each writable buffer's place in the state (a kernel with thousands of outputs stores into each).
        self._slots = {buffer: slot for slot, buffer in enumerate(self.writable)}
        #: In a vectorised run: the stores recorded, as (buffer, indices, values), instead of made.
        self.deferred: list[tuple[int | parts.PartsStore | RowsStore, jax.Array, jax.Array]] | None = None
        #: The buffers loaded from (a vectorised run may not load what it stores).
        self.loaded: set[int] = set()

    # -- state -------------------------------------------------------------------------------------------------

    def initial(self, arrays: Sequence[jax.Array]) -> tuple[jax.Array, ...]:
        """The writable buffers as the state holds them, from the arrays of `writable`: in their own shapes (each
        access takes its buffer flat, `_array`; a shape kept between accesses spares a TPU laying a large array out
        again for each: flat and two-dimensional arrays are tiled differently there)."""
        return tuple(
            _flat(a, _storage(self.specs[i])).reshape(self.specs[i].shape)
            for i, a in zip(self.writable, arrays, strict=True)
        )

    def final(self, state: State) -> list[jax.Array]:
        """The writable buffers' arrays (their shapes and types) after the kernel ran."""
        out = []
        for i, held in zip(self.writable, state.buffers, strict=True):
            spec = self.specs[i]
            array = held != 0 if spec.dtype == np.bool_ else held
            out.append(array if array.shape == spec.shape else lax.reshape(array, spec.shape))
        return out

    def _array(self, state: State, buffer: int) -> jax.Array:
        """A buffer, flat."""
        constant = self.constants[buffer]
        held = constant if constant is not None else state.buffers[self._slots[buffer]]
        return held if held.ndim == 1 else lax.reshape(held, (held.size,))

    def _ratio(self, pointer: Pointer) -> int:
        """How many of the pointer's elements one element of its buffer holds (more than one through a pointer cast
        to smaller elements, whose offsets count parts: `jt_core.translation.parts`)."""
        size = dtype_of(pointer.pointee).itemsize
        storage = _storage(self.specs[pointer.buffer]).itemsize
        return storage // size if size < storage else 1

    def _replace(self, state: State, buffer: int, array: jax.Array) -> State:
        """``state`` with a buffer's new contents (given flat), held in the buffer's own shape."""
        buffers = list(state.buffers)
        shape = self.specs[buffer].shape
        buffers[self._slots[buffer]] = array if array.shape == shape else lax.reshape(array, shape)
        return State(tuple(buffers), state.faults)

    def _inside(self, pointer: Pointer, shape: tuple[int, ...]) -> tuple[int, int] | None:
        """``(first, last)`` offsets of an access whose lanes are known, when the kernel is traced, to lie inside
        its buffer: its affine form has a known base that does not depend on the program id (each lane's offset is
        then a number), else ``None``."""
        known = pointer.affine
        if known is None or known.shape != shape or not known.base_known or any(known.pids):
            return None
        low, high = known.spread()
        first, last = known.const + low, known.const + high
        # Below 2**31 the offsets are what the kernel's int32 arithmetic gives too (it wraps only past that).
        limit = min(self.specs[pointer.buffer].size, np.iinfo(np.int32).max + 1)
        return (first, last) if first >= 0 and last < limit else None

    def _contiguous(self, pointer: Pointer, shape: tuple[int, ...]) -> int | None:
        """The first offset of an access to consecutive elements (one axis, step one) known to lie inside its
        buffer: a slice of it, not a gather or scatter."""
        known = pointer.affine
        if len(shape) != 1 or known is None or known.lanes != (1,):
            return None
        inside = self._inside(pointer, shape)
        return None if inside is None else inside[0]

    # -- checks ------------------------------------------------------------------------------------------------

    def _record(self, state: State, bad: jax.Array) -> State:
        return State(state.buffers, state.faults | jnp.any(bad))

    def merge_sides(self, branch: int, taken: jax.Array, outer: Any) -> None:
        """Where both sides of a branch stored to one place: nothing to merge where stores are made as they come."""

    def _lanes(
        self, state: State, op: str, pointer: Pointer, mask: Any, shape: tuple[int, ...]
    ) -> tuple[jax.Array, jax.Array | None, State]:
        """The offsets of an access and which of its lanes are made (``None``: every lane, an unmasked access, whose
        lanes outside the buffer are clamped or dropped), recording the lanes that stray."""
        spec = self.specs[pointer.buffer]
        extent = spec.size * self._ratio(pointer)
        offsets = jnp.broadcast_to(jnp.asarray(pointer.offset), shape)
        large = extent > np.iinfo(np.int32).max
        if large:
            offsets = offsets.astype(jnp.int64)
        wanted = None if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), shape)
        if op != "load" and not spec.writable:
            refused = jnp.ones(shape, bool) if wanted is None else wanted
            return offsets, jnp.zeros(shape, bool), self._record(state, refused)
        checked = self.bounds_check and (op != "load" or self.loads_fault)
        if wanted is None and not checked:
            return offsets, None, state
        if wanted is None and self._inside(pointer, shape) is not None:
            return offsets, None, state  # every lane is known to lie inside: nothing to check
        # The affine form is exact where the kernel's int32 arithmetic may wrap; the offsets it predicts are the
        # actual ones modulo 2**32, so inside a buffer of fewer than 2**31 elements they are the actual ones.
        affine = pointer.affine
        spread = affine.spread() if affine is not None and affine.shape == shape and not large else None
        if wanted is None and spread is not None and checked:
            # The lanes lie within a known spread of the first: two comparisons check the whole block.
            first = (offsets[(0,) * len(shape)] if shape else offsets).astype(jnp.int64)
            strayed = (first + spread[0] < 0) | (first + spread[1] >= extent)
            return offsets, None, State(state.buffers, state.faults | strayed)
        inside = (offsets >= 0) & (offsets < extent)
        if checked:
            state = self._record(state, ~inside if wanted is None else wanted & ~inside)
        return offsets, None if wanted is None else wanted & inside, state

    # -- accesses ----------------------------------------------------------------------------------------------

    def load(
        self, state: State, pointer: Pointer, mask: Any, other: Any, shape: tuple[int, ...]
    ) -> tuple[jax.Array, State]:
        """``tt.load``: the values at ``pointer`` where ``mask`` is on, ``other`` (or zero) elsewhere."""
        spec = self.specs[pointer.buffer]
        value_type = dtype_of(pointer.pointee)
        offsets, active, state = self._lanes(state, "load", pointer, mask, shape)
        self.loaded.add(pointer.buffer)
        fill = jnp.zeros((), value_type) if other is None else jnp.asarray(other).astype(value_type)
        if spec.size == 0:  # nothing to read: every lane is masked off or out of bounds
            return jnp.broadcast_to(fill, shape), state
        array = self._array(state, pointer.buffer)
        if self._ratio(pointer) > 1:
            pieces = parts.split(array, parts.part_type(value_type.itemsize))
            index = jnp.clip(offsets, 0, pieces.shape[0] - 1) if active is None else jnp.where(active, offsets, 0)
            value = parts.to_value(_gather(pieces, index, lax.GatherScatterMode.PROMISE_IN_BOUNDS), value_type)
            return (value if active is None else jnp.where(active, value, fill)), state
        start = self._contiguous(pointer, shape) if active is None else None
        if start is not None:
            piece = array if shape[0] == array.shape[0] else lax.slice(array, (start,), (start + shape[0],))
            return _to_value(piece, _storage(spec), value_type), state
        rows = self._row_gather(pointer, shape)
        if rows is not None:
            gathered = rows(state, offsets)
            if active is None:
                return _to_value(gathered, _storage(spec), value_type), state
            return jnp.where(active, _to_value(gathered, _storage(spec), value_type), fill), state
        if active is None:  # a lane outside the buffer reads its nearest element (the bounds check reports it)
            gathered = self._gathered(state, pointer.buffer, jnp.clip(offsets, 0, spec.size - 1))
            return _to_value(gathered, _storage(spec), value_type), state
        gathered = self._gathered(state, pointer.buffer, jnp.where(active, offsets, 0))
        return jnp.where(active, _to_value(gathered, _storage(spec), value_type), fill), state

    def _held(self, state: State, buffer: int) -> jax.Array:
        """A buffer in its own shape."""
        constant = self.constants[buffer]
        held = constant if constant is not None else state.buffers[self._slots[buffer]]
        shape = self.specs[buffer].shape
        return held if held.shape == shape else lax.reshape(held, shape)

    def _row_gather(self, pointer: Pointer, shape: tuple[int, ...]) -> Callable[[State, jax.Array], jax.Array] | None:
        """The gather of whole rows where an access's rows each lie within a row of its buffer
        (`jt_core.translation.row_moves`)."""
        at = row_moves.column(self.specs[pointer.buffer].shape, shape, pointer.affine, pointer.rows)
        if at is None:
            return None
        return lambda state, offsets: row_moves.gathered(self._held(state, pointer.buffer), offsets, at, shape[-1])

    def _gathered(self, state: State, buffer: int, offsets: jax.Array) -> jax.Array:
        """The elements at ``offsets`` (inside the buffer) of a buffer, gathered from the buffer in its own shape, its
        offsets unravelled: a TPU lays a large array out again to read it flat, for however few elements."""
        constant = self.constants[buffer]
        held = constant if constant is not None else state.buffers[self._slots[buffer]]
        shape = self.specs[buffer].shape
        if held.ndim < 2 or held.shape != shape or held.size >= 2**31:
            flat = held if held.ndim == 1 else lax.reshape(held, (held.size,))
            return _gather(flat, offsets, lax.GatherScatterMode.PROMISE_IN_BOUNDS)
        index = offsets.astype(jnp.int32)
        coordinates = []
        for extent in reversed(shape):
            coordinates.append(index % extent)
            index = index // extent
        starts = jnp.stack(coordinates[::-1], axis=-1)
        dims = lax.GatherDimensionNumbers(
            offset_dims=(), collapsed_slice_dims=tuple(range(len(shape))), start_index_map=tuple(range(len(shape)))
        )
        return lax.gather(
            held, starts, dims, slice_sizes=(1,) * len(shape), mode=lax.GatherScatterMode.PROMISE_IN_BOUNDS
        )

    def store(
        self, state: State, pointer: Pointer, value: Any, mask: Any, shape: tuple[int, ...], guard: Any = None
    ) -> State:
        """``tt.store``: writes ``value`` at ``pointer`` where ``mask`` is on (and ``guard``, the condition of the
        branch side the store runs on where both sides run, `jt_core.translation.control`)."""
        if guard is not None:
            guard = jnp.broadcast_to(guard, shape)
            mask = guard if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), shape) & guard
        spec = self.specs[pointer.buffer]
        offsets, active, state = self._lanes(state, "store", pointer, mask, shape)
        if not spec.writable or spec.size == 0:
            return state
        array = self._array(state, pointer.buffer)
        value = jnp.asarray(value)
        pointee = dtype_of(pointer.pointee)
        value = value if value.dtype == pointee else value.astype(pointee)
        ratio = self._ratio(pointer)
        index = offsets if active is None else jnp.where(active, offsets, spec.size * ratio)
        record: int | parts.PartsStore | RowsStore = pointer.buffer
        if ratio > 1:
            part = parts.part_type(pointee.itemsize)
            record, values = parts.PartsStore(pointer.buffer, part), jnp.broadcast_to(parts.to_part(value, part), shape)
        else:
            values = _to_storage(value, array.dtype)
            values = values if values.shape == shape else jnp.broadcast_to(values, shape)
            start = self._contiguous(pointer, shape) if active is None and self.deferred is None else None
            if start is not None:
                return self._replace(state, pointer.buffer, _updated(array, values, start))
            rows = (
                row_moves.store_record(pointer.buffer, spec.shape, offsets, pointer.affine, pointer.rows)
                if active is None and self.row_stores
                else None
            )
            if rows is not None:
                record, index = rows
        if self.deferred is not None:
            self.deferred.append((record, index, values))  # type: ignore[arg-type]
            return state
        return self.apply(state, record, index, values)

    def apply(
        self, state: State, record: int | parts.PartsStore | RowsStore, index: jax.Array, values: jax.Array
    ) -> State:
        """``state`` with a recorded store made (indices outside the buffer write nothing); a `parts.PartsStore`
        is made in parts of its buffer."""
        if isinstance(record, RowsStore):
            return self._replace(
                state, record.buffer, row_moves.written(self._held(state, record.buffer), record, index, values)
            )
        if isinstance(record, parts.PartsStore):
            storage = _storage(self.specs[record.buffer])
            pieces = parts.split(self._array(state, record.buffer), record.part)
            written = _scatter(lax.scatter, pieces, jnp.ravel(index), jnp.ravel(values))
            return self._replace(state, record.buffer, parts.joined(written, storage))
        array = self._array(state, record)
        return self._replace(state, record, _scatter(lax.scatter, array, jnp.ravel(index), jnp.ravel(values)))

    def apply_atomic(self, state: State, buffer: int, kind: str, index: jax.Array, values: jax.Array) -> State:
        """``state`` with a deferred atomic made: ``values`` combined by ``kind`` at ``index`` (indices outside the
        buffer combine nothing), as the pointer's type holds them."""
        spec = self.specs[buffer]
        storage = _storage(spec)
        array = _to_value(self._array(state, buffer), storage, np.dtype(values.dtype))
        combine = _SCATTER.get(kind) or _FLOAT_SUM
        updated = combine(array, jnp.ravel(index), jnp.ravel(values))
        return self._replace(state, buffer, _to_storage(updated, storage))

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
        """An atomic read-modify-write (``kind`` as Triton names it: ``FADD``, ``MAX``, ..., or ``CAS``), made lane
        after lane in order, as the interpreter makes it; returns the values the lanes found."""
        spec = self.specs[pointer.buffer]
        value_type = dtype_of(pointer.pointee)
        if self._ratio(pointer) > 1:
            raise UnsupportedKernelError("an atomic through a pointer cast to smaller elements")
        offsets, active, state = self._lanes(state, "atomic", pointer, mask, shape)
        if not spec.writable or spec.size == 0:
            return jnp.zeros(shape, value_type), state
        storage = _storage(spec)
        array = self._array(state, pointer.buffer)
        operands = [jnp.broadcast_to(jnp.asarray(v).astype(value_type), shape) for v in values]
        if active is None:
            active = (offsets >= 0) & (offsets < spec.size)
        scatter = _SCATTER.get(kind)
        if not result_used and scatter is not None:
            # Combined as the pointer's type reads the memory (a signed maximum through an int32 pointer to
            # uint32 memory, an integer sum of a float's bits), whatever the buffer holds.
            index = jnp.where(active, offsets, spec.size)
            updated = scatter(_to_value(array, storage, value_type), index, operands[0])
            return jnp.zeros(shape, value_type), self._replace(state, pointer.buffer, _to_storage(updated, storage))
        combine = _COMBINE[kind]
        flat_offsets = jnp.ravel(offsets)
        flat_active = jnp.ravel(active)
        flat_operands = [jnp.ravel(v) for v in operands]

        def lane(i: Any, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            memory, found = carry
            where = jnp.clip(flat_offsets[i], 0, max(spec.size - 1, 0))
            old = _to_value(memory[where], storage, value_type)
            new = combine(old, *(v[i] for v in flat_operands))
            stored = jnp.where(flat_active[i], _to_storage(new, storage), memory[where])
            return memory.at[where].set(stored), found.at[i].set(
                jnp.where(flat_active[i], old, jnp.zeros((), value_type))
            )

        count = int(np.prod(shape, dtype=np.int64))
        memory, found = lax.fori_loop(0, count, lane, (array, jnp.zeros((count,), value_type)))
        return found.reshape(shape), self._replace(state, pointer.buffer, memory)


_GATHER = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(0,), start_index_map=(0,))
_SCATTER_DIMS = lax.ScatterDimensionNumbers(
    update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
)


def _updated(array: jax.Array, values: jax.Array, start: int) -> jax.Array:
    """``array`` with ``values`` written from element ``start`` on (known to fit): the values themselves where they
    cover it, else one update of a slice at a constant index (`lax.dynamic_update_slice` would first check the
    index's sign and type, as for one given at run time)."""
    if start == 0 and values.shape == array.shape:
        return values
    index = np.asarray(start, np.int32 if array.size < 2**31 else np.int64)
    return lax.dynamic_update_slice_p.bind(array, values, index)


def _gather(array: jax.Array, index: jax.Array, mode: lax.GatherScatterMode) -> jax.Array:
    """``array[index]`` (one flat dimension): ``mode`` says what an index outside ``array`` reads (``CLIP``: the
    nearest element; ``PROMISE_IN_BOUNDS``: indices known to lie inside)."""
    return lax.gather(array, index[..., None], _GATHER, slice_sizes=(1,), mode=mode)


def _scatter(op: Any, array: jax.Array, index: jax.Array, values: jax.Array) -> jax.Array:
    """``array`` with ``values`` written (or combined by ``op``: ``lax.scatter_add``, ...) at ``index``; an index
    outside ``array`` (negative or past its end) writes nothing."""
    return op(array, index[..., None], values, _SCATTER_DIMS, mode=lax.GatherScatterMode.FILL_OR_DROP)


_ELEMENTS = {"i1", "i8", "i16", "i32", "i64", "f16", "bf16", "f32", "f64"} | {
    "f8E4M3FN",
    "f8E5M2",
    "f8E4M3FNUZ",
    "f8E5M2FNUZ",
    "f8E4M3B11FNUZ",
}


def _unsigned(x: jax.Array) -> jax.Array:
    return lax.bitcast_convert_type(x, {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[x.dtype.itemsize])


def _umax(old: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.where(_unsigned(old) >= _unsigned(value), old, value)


def _umin(old: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.where(_unsigned(old) <= _unsigned(value), old, value)


def _cas(old: jax.Array, compare: jax.Array, value: jax.Array) -> jax.Array:
    # A GPU compares the bits (atom.cas.b32): -0.0 is not +0.0, and a NaN matches the same NaN.
    same = _unsigned(old) == _unsigned(compare) if jnp.issubdtype(old.dtype, jnp.floating) else old == compare
    return jnp.where(same, value, old)


_COMBINE: dict[str, Callable[..., jax.Array]] = {
    "ADD": lambda old, v: old + v,
    "FADD": lambda old, v: old + v,
    "AND": lambda old, v: old & v,
    "OR": lambda old, v: old | v,
    "XOR": lambda old, v: old ^ v,
    "XCHG": lambda old, v: v,
    "MAX": jnp.maximum,
    "MIN": jnp.minimum,
    "UMAX": _umax,
    "UMIN": _umin,
    "CAS": _cas,
}


def _flip_sign(x: jax.Array) -> jax.Array:
    """Integers with their sign bit flipped: unsigned order becomes signed order (and back)."""
    return x ^ jnp.asarray(np.iinfo(x.dtype).min, x.dtype)


def _unsigned_scatter(op: Any) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
    def apply(array: jax.Array, index: jax.Array, v: jax.Array) -> jax.Array:
        return _flip_sign(_scatter(op, _flip_sign(array), index, _flip_sign(v)))

    return apply


#: Atomics whose final memory does not depend on the order of their lanes, when nobody reads what they return, on
#: the buffer and the values as the pointer's type holds them (integers signed).
_SCATTER: dict[str, Callable[[jax.Array, jax.Array, jax.Array], jax.Array]] = {
    "ADD": lambda array, index, v: _scatter(lax.scatter_add, array, index, v),
    "MAX": lambda array, index, v: _scatter(lax.scatter_max, array, index, v),
    "MIN": lambda array, index, v: _scatter(lax.scatter_min, array, index, v),
    "UMAX": _unsigned_scatter(lax.scatter_max),
    "UMIN": _unsigned_scatter(lax.scatter_min),
}


def static_offset(value: Any) -> bool:
    """Whether a pointer's offset is known when the kernel is traced."""
    return is_static(value)


def _float_sum(array: jax.Array, index: jax.Array, v: jax.Array) -> jax.Array:
    """Float atomic sums of many lanes as one scatter, summed in XLA's order (where the strategy allows it)."""
    return _scatter(lax.scatter_add, array, index, v)


_FLOAT_SUM = _float_sum
