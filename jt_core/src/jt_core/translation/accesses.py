"""Pointers and memory: pointer arithmetic, loads, stores and atomics through pointers and block pointers.

In a vectorised run (`jt_core.translation.grid`) a store is only recorded, to be made after every program
ran; a store the vectorised run cannot prove safe (inside a loop or branch, through a pointer whose affine form is
unknown) or an atomic stops it, and the programs run one after the other instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.translation import lang, masks
from jt_core.translation.affine import Affine
from jt_core.translation.memory import Pointer, State
from jt_core.translation.program import Operation, parse_type
from jt_core.translation.tracer import Handler, Tracer
from jt_core.translation.values import BlockPointer, NotVectorizable, Unsupported

__all__ = ["HANDLERS"]


def _addptr(k: Tracer, op: Operation, state: State) -> State:
    pointer = k.get(op.operands[0])
    if not isinstance(pointer, Pointer):
        raise Unsupported("tt.addptr on something that is not a pointer", op.line)
    offset = k.get(op.operands[1])
    step_affine = k.affine_of(op.operands[1])
    affine = None if pointer.affine is None or step_affine is None else pointer.affine.plus(step_affine)
    if lang.is_static(offset) and lang.is_static(pointer.offset):
        new: Any = int(pointer.offset) + int(offset)
    else:
        step = k.array(op.operands[1])
        if step.dtype.itemsize < 4:
            step = step.astype(jnp.int32)  # sign-extended, as Triton extends an offset
        bounds = pointer.affine.bounds(k.grid) if pointer.affine is not None else None
        new = _offset_sum(pointer.offset, step, k.memory.specs[pointer.buffer].size, bounds)
    k.env[op.results[0]] = Pointer(pointer.buffer, new, pointer.pointee, affine)
    return state


_INT32 = np.iinfo(np.int32)


def _offset_sum(base: Any, step: jax.Array, size: int, bounds: tuple[int, int] | None = None) -> jax.Array:
    """A pointer's offset ``base`` moved by ``step``, as Triton moves a pointer: the offset sign-extended and added to
    the 64-bit address, so offsets that are each in range never wrap in their sum (what wrapped in the kernel's own
    int32 arithmetic before stays wrapped).

    Within a buffer of fewer than 2**31 elements the sum is kept in int32 (cheaper to gather with), and a lane whose
    sum leaves int32's range, which lies outside the buffer, is given int32's smallest value: outside it too, where
    the wrapped sum might have come back inside. A base known (``bounds``, over the grid) to lie in ``[0, 2**31)``
    needs no such care: its sum can only wrap past int32's largest value, to a negative offset, outside too.
    """
    if lang.is_static(base) and int(base) == 0:
        return step
    wide = size > _INT32.max or step.dtype == jnp.int64
    if lang.is_static(base):
        wide = wide or not _INT32.min <= int(base) <= _INT32.max
        base = jnp.asarray(base, jnp.int64 if wide else jnp.int32)
    elif base.dtype == jnp.int64:
        wide = True
    if wide:
        return base.astype(jnp.int64) + step.astype(jnp.int64)
    total = base + step
    if bounds is not None and bounds[0] >= 0 and bounds[1] <= _INT32.max:
        return total
    overflow = ((base ^ total) & (step ^ total)) < 0
    return jnp.where(overflow, jnp.int32(_INT32.min), total)


def _ptr_bitcast(k: Tracer, op: Operation, state: State) -> State:
    value = k.get(op.operands[0])
    ty = k.type(op.results[0])
    if isinstance(value, Pointer):
        pointee = parse_type(ty.pointee or "").element if ty.is_pointer else None
        if pointee is None or lang.dtype_of(pointee).itemsize != lang.dtype_of(value.pointee).itemsize:
            raise Unsupported("a pointer cast to elements of another size")
        k.env[op.results[0]] = Pointer(value.buffer, value.offset, pointee, value.affine)
        return state
    k.elementwise(op)
    return state


def _pointer_operand(k: Tracer, op: Operation) -> Pointer:
    pointer = k.get(op.operands[0])
    if isinstance(pointer, BlockPointer):
        raise Unsupported("a block pointer here", op.line)
    if not isinstance(pointer, Pointer):
        raise Unsupported(f"{op.name} through something that is not a pointer", op.line)
    return pointer


def _load(k: Tracer, op: Operation, state: State) -> State:
    target = k.get(op.operands[0])
    ty = k.type(op.results[0])
    if isinstance(target, BlockPointer):
        pointer, mask = _block_lanes(k, target, op.attr("boundaryCheck") or ())
        padding = op.attr("padding")
        other: Any = jnp.nan if padding == 2 else None
        value, state = k.memory.load(state, pointer, guarded(k, mask, ty.shape), other, ty.shape)
        k.env[op.results[0]] = value
        return state
    pointer = _pointer_operand(k, op)
    lanes = k.limits.get(op.operands[1]) if len(op.operands) > 1 else None
    if lanes is not None:
        return _load_lanes(k, op, pointer, lanes, state)
    mask = k.array(op.operands[1]) if len(op.operands) > 1 else None
    other = k.array(op.operands[2]) if len(op.operands) > 2 else None
    value, state = k.memory.load(state, pointer, guarded(k, mask, ty.shape), other, ty.shape)
    k.env[op.results[0]] = value
    if mask is None and k.predicate is None:
        k.loaded_from[op.results[0]] = pointer
    return state


def guarded(k: Tracer, mask: Any, shape: tuple[int, ...]) -> Any:
    """An access's mask, and-ed with the condition of the branch it runs in where branches are run both
    (`jt_core.translation.control`, inside programs run side by side)."""
    if k.predicate is None:
        return mask
    predicate = jnp.broadcast_to(k.predicate, shape)
    return predicate if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), shape) & predicate


def _within(pointer: Pointer, lanes: masks.Limits, shape: tuple[int, ...]) -> Pointer:
    """The pointer to the box ``lanes`` of a block: its offsets and affine form from the box's first lane on."""
    offset = pointer.offset
    if not lang.is_static(offset) and jnp.ndim(offset):
        offset = offset[tuple(slice(low, high) for low, high in lanes)]
    known = pointer.affine
    if known is not None and known.shape == shape:
        shifted = sum(c * low for c, (low, _) in zip(known.lanes, lanes, strict=True))
        shape = tuple(high - low for low, high in lanes)
        known = dataclasses.replace(known, const=known.const + shifted, shape=shape)
    else:
        known = None
    return Pointer(pointer.buffer, offset, pointer.pointee, known)


def _load_lanes(k: Tracer, op: Operation, pointer: Pointer, lanes: masks.Limits, state: State) -> State:
    """A load under a mask known to be a box of lanes the same in every program: the box alone is loaded (a slice
    where the whole block's elements would be a gather) and padded with ``other`` (or zeros) to the block."""
    ty = k.type(op.results[0])
    dtype = lang.dtype_of(ty.element)
    other = k.get(op.operands[2]) if len(op.operands) > 2 else None
    if masks.is_full(lanes, ty.shape):
        value, state = k.memory.load(state, pointer, guarded(k, None, ty.shape), None, ty.shape)
        k.env[op.results[0]] = value
        if k.predicate is None:
            k.loaded_from[op.results[0]] = pointer
        return state
    fill = jnp.zeros((), dtype) if other is None or not lang.is_static(other) else jnp.asarray(other, dtype)
    if masks.is_empty(lanes):
        k.env[op.results[0]] = jnp.broadcast_to(k.array(op.operands[2]) if other is not None else fill, ty.shape)
        return state
    box = tuple(high - low for low, high in lanes)
    value, state = k.memory.load(state, _within(pointer, lanes, ty.shape), guarded(k, None, box), None, box)
    padded = lax.pad(value.astype(dtype), fill, [(low, n - high, 0) for (low, high), n in zip(lanes, ty.shape)])
    if other is not None and not lang.is_static(other):
        padded = jnp.where(_inside(lanes, ty.shape), padded, k.array(op.operands[2]))
    k.env[op.results[0]] = padded
    return state


def _inside(lanes: masks.Limits, shape: tuple[int, ...]) -> jax.Array:
    """The mask of the box ``lanes`` in a block of ``shape``."""
    inside: Any = True
    for axis, (low, high) in enumerate(lanes):
        index = lax.broadcasted_iota(jnp.int32, shape, axis)
        inside = inside & (index >= low) & (index < high)
    return jnp.broadcast_to(inside, shape)


def _store(k: Tracer, op: Operation, state: State) -> State:
    target = k.get(op.operands[0])
    value = k.array(op.operands[1])
    if isinstance(target, BlockPointer):
        if k.vector:
            raise NotVectorizable("a store through a block pointer")
        pointer, mask = _block_lanes(k, target, op.attr("boundaryCheck") or ())
        return k.memory.store(state, pointer, value, mask, tuple(target.block), guard=k.predicate)
    pointer = _pointer_operand(k, op)
    shape = k.type(op.operands[1]).shape
    lanes = k.limits.get(op.operands[2]) if len(op.operands) > 2 else None
    mask = k.array(op.operands[2]) if len(op.operands) > 2 and lanes is None else None
    if lanes is not None and masks.is_empty(lanes):
        return state  # a mask that is off everywhere stores nothing
    if lanes is not None and not masks.is_full(lanes, shape):
        # Only the box of lanes the mask has on, the same in every program, is stored.
        pointer = _within(pointer, lanes, shape)
        value = jnp.broadcast_to(value, shape)[tuple(slice(low, high) for low, high in lanes)]
        shape = tuple(high - low for low, high in lanes)
    if k.vector:
        if k.region_depth:
            raise NotVectorizable("a store inside a loop or a branch")
        if pointer.affine is None:
            raise NotVectorizable("a store through a pointer whose offsets are not affine")
        k.stores.append((pointer.buffer, pointer.affine))
    return k.memory.store(state, pointer, value, mask, shape, guard=k.predicate)


def _atomic_rmw(k: Tracer, op: Operation, state: State) -> State:
    pointer = _pointer_operand(k, op)
    shape = k.type(op.results[0]).shape
    value = k.array(op.operands[1])
    mask = k.array(op.operands[2]) if len(op.operands) > 2 else None
    kind = str(op.attr("atomic_rmw_op"))
    used = op.results[0] in k.used
    if k.vector and (k.region_depth or not k.memory.defers_atomic(kind, lang.dtype_of(pointer.pointee), used)):
        raise NotVectorizable("an atomic")
    found, state = k.memory.atomic(state, kind, pointer, [value], guarded(k, mask, shape), shape, used)
    k.env[op.results[0]] = found
    return state


def _atomic_cas(k: Tracer, op: Operation, state: State) -> State:
    if k.vector:
        raise NotVectorizable("an atomic")
    pointer = _pointer_operand(k, op)
    shape = k.type(op.results[0]).shape
    compare, value = k.array(op.operands[1]), k.array(op.operands[2])
    found, state = k.memory.atomic(state, "CAS", pointer, [compare, value], None, shape, True)
    k.env[op.results[0]] = found
    return state


def _make_block_ptr(k: Tracer, op: Operation, state: State) -> State:
    base = k.get(op.operands[0])
    if not isinstance(base, Pointer):
        raise Unsupported("a block pointer on something that is not a pointer", op.line)
    rank = (len(op.operands) - 1) // 3
    values = [k.get(v) for v in op.operands[1:]]
    pointee = parse_type(k.type(op.results[0]).pointee or "")
    k.env[op.results[0]] = BlockPointer(
        base.buffer,
        base.offset,
        tuple(values[:rank]),
        tuple(values[rank : 2 * rank]),
        tuple(values[2 * rank :]),
        pointee.shape,
        pointee.element,
    )
    return state


def _advance(k: Tracer, op: Operation, state: State) -> State:
    block = k.get(op.operands[0])
    steps = [k.get(v) for v in op.operands[1:]]
    offsets = tuple(_add(a, b) for a, b in zip(block.offsets, steps, strict=True))
    k.env[op.results[0]] = dataclasses.replace(block, offsets=offsets)
    return state


def _add(a: Any, b: Any) -> Any:
    if lang.is_static(a) and lang.is_static(b):
        return int(a) + int(b)
    return jnp.asarray(a, jnp.int64) + jnp.asarray(b, jnp.int64)


def _block_lanes(k: Tracer, block: BlockPointer, checked: Sequence[int]) -> tuple[Pointer, Any]:
    """The lanes of a block pointer: one pointer per element of the block, and the mask of the checked axes."""
    offset: Any = jnp.asarray(block.base, jnp.int64)
    mask: Any = None
    rank = len(block.block)
    for axis, size in enumerate(block.block):
        shape = [1] * rank
        shape[axis] = size
        index = jnp.asarray(block.offsets[axis], jnp.int64) + lax.iota(jnp.int64, size).reshape(shape)
        offset = offset + index * jnp.asarray(block.strides[axis], jnp.int64)
        if axis in checked:
            inside = (index >= 0) & (index < jnp.asarray(block.shape[axis], jnp.int64))
            mask = inside if mask is None else mask & inside
    offset = jnp.broadcast_to(offset, block.block)
    if mask is not None:
        mask = jnp.broadcast_to(mask, block.block)
    return Pointer(block.buffer, offset, block.pointee), mask


def pointer_argument(buffer: int, pointee: str) -> Pointer:
    """The pointer a kernel argument holds: the start of buffer ``buffer``."""
    return Pointer(buffer, 0, pointee, Affine.constant(0))


HANDLERS: dict[str, Handler] = {
    "tt.addptr": _addptr,
    "tt.bitcast": _ptr_bitcast,
    "tt.load": _load,
    "tt.store": _store,
    "tt.atomic_rmw": _atomic_rmw,
    "tt.atomic_cas": _atomic_cas,
    "tt.make_tensor_ptr": _make_block_ptr,
    "tt.advance": _advance,
}
