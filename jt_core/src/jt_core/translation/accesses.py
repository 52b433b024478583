"""The rules of pointers and memory: pointer arithmetic, loads, stores and atomics through pointers and block
pointers (``tl.make_block_ptr``).

Their analyses give every pointer the buffers it may point into and its offsets' form, and record every access
(`jt_core.translation.analysis.walk.Walk.access`); their lowerings read what the analyses found (a mask that is a box
of lanes loads only the box; an offset's form makes a block access a slice of its buffer where the programs run
side by side, `jt_core.translation.side_by_side`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.translation import elementwise, lang
from jt_core.translation.analysis import masks
from jt_core.translation.analysis.affine import Affine
from jt_core.translation.analysis.facts import Descriptor, Fact
from jt_core.translation.folding import itemsize
from jt_core.translation.memory import Choice, Pointer, State
from jt_core.translation.program import Operation, parse_type
from jt_core.translation.rules import RuleContext, rule
from jt_core.translation.values import Address, BlockPointer, Unsupported

__all__ = ["boxed_load", "describe", "pointer_argument", "pointer_parameter", "static_ints", "tensor_access", "within"]


# -- pointer arithmetic ------------------------------------------------------------------------------------------


def _analyse_addptr(walk: Any, op: Operation) -> None:
    pointer, offset = walk.fact(op.operands[0]), walk.fact(op.operands[1])
    form = None
    if pointer.form is not None and offset.form is not None:
        form = pointer.form.plus(offset.form)
    rows = None if form is not None else pointer.rows_known().plus(offset.rows_known())
    walk.set(op.results[0], Fact(form=form, buffers=pointer.buffers, varies=pointer.varies or offset.varies, rows=rows))


@rule("tt.addptr", analyse=_analyse_addptr)
def _addptr(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    found = k.get(op.operands[0])
    offset = k.get(op.operands[1])

    def moved(pointer: Pointer) -> Pointer:
        if lang.is_static(offset) and lang.is_static(pointer.offset):
            new: Any = int(pointer.offset) + int(offset)
        else:
            step = k.array(op.operands[1])
            if step.dtype.itemsize < 4:
                step = step.astype(jnp.int32)  # sign-extended, as Triton extends an offset
            bounds = k.bounds(op.operands[0])
            size = k.memory.specs[pointer.buffer].size * k.memory._ratio(pointer)
            new = _offset_sum(pointer.offset, step, size, bounds)
        return Pointer(pointer.buffer, new, pointer.pointee, k.form(op.results[0]), rows=k.rows(op.results[0]))

    if isinstance(found, Choice):
        k.set(op.results[0], Choice(tuple(moved(p) for p in found.pointers), found.which))
        return state
    if not isinstance(found, Pointer):
        raise Unsupported("tt.addptr on something that is not a pointer", op.line)
    k.set(op.results[0], moved(found))
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


def _analyse_bitcast(walk: Any, op: Operation) -> None:
    ty = walk.type(op.results[0])
    source = walk.type(op.operands[0])
    if not source.is_pointer:
        elementwise.analyse(walk, op)
        return
    found = walk.fact(op.operands[0])
    pointee = parse_type(ty.pointee or "").element if ty.is_pointer else None
    before = parse_type(source.pointee or "").element
    if pointee is None or not itemsize(pointee) or itemsize(before) % itemsize(pointee):
        walk.refuse(_LARGER, op.line)
    elif itemsize(pointee) < itemsize(before):
        # Its offsets now count parts of the buffer's elements: unknown to the analyses, which count elements.
        found = dataclasses.replace(found, form=None, rows=None)
    walk.set(op.results[0], dataclasses.replace(found))


#: Why a pointer cast is refused: its offsets would count elements that split the buffer's.
_LARGER = "a pointer cast to larger elements (or to elements whose size does not divide its own)"


@rule("tt.bitcast", analyse=_analyse_bitcast, compute=elementwise.typed(lang.bitcast), picks_float8=True)
def _ptr_bitcast(ctx: RuleContext, state: State) -> State:
    value = ctx.operand(0)
    ty = ctx.type(ctx.op.results[0])

    def cast(pointer: Pointer) -> Pointer:
        pointee = parse_type(ty.pointee or "").element if ty.is_pointer else None
        size, before = (0, 0) if pointee is None else (itemsize(pointee), itemsize(pointer.pointee))
        if pointee is None or not size or before % size:
            raise Unsupported(_LARGER)
        if size == before:
            return Pointer(pointer.buffer, pointer.offset, pointee, pointer.affine)
        # Offsets in parts of the buffer's elements (`jt_core.translation.parts`); the pointer's element, as the
        # buffer holds it, may itself be such a part already.
        ratio = before // size
        if lang.is_static(pointer.offset):
            return Pointer(pointer.buffer, int(pointer.offset) * ratio, pointee)
        offset = jnp.asarray(pointer.offset)
        extent = ctx.kernel.memory.specs[pointer.buffer].size * ctx.kernel.memory._ratio(pointer) * ratio
        if extent > _INT32.max:
            offset = offset.astype(jnp.int64)
        return Pointer(pointer.buffer, offset * ratio, pointee)

    if isinstance(value, Pointer):
        ctx.set(ctx.op.results[0], cast(value))
        return state
    if isinstance(value, Choice):
        ctx.set(ctx.op.results[0], Choice(tuple(cast(p) for p in value.pointers), value.which))
        return state
    return elementwise.lower(ctx, state)


def _analyse_ptr_to_int(walk: Any, op: Operation) -> None:
    walk.set(op.results[0], Fact(address=True, varies=walk.varies(op.operands[0])))


@rule("tt.ptr_to_int", analyse=_analyse_ptr_to_int)
def _ptr_to_int(ctx: RuleContext, state: State) -> State:
    pointer = ctx.operand(0)
    if not isinstance(pointer, Pointer):
        raise Unsupported("a pointer turned into an integer", ctx.op.line)
    ctx.set(ctx.op.results[0], Address(pointer))
    return state


# -- loads, stores, atomics --------------------------------------------------------------------------------------


def _mask_fact(walk: Any, op: Operation, index: int) -> tuple[masks.Mask | None, bool]:
    """The mask operand ``index`` of an access, as a box where known, and whether there is one."""
    if len(op.operands) <= index:
        return None, False
    return walk.fact(op.operands[index]).mask, True


def tensor_access(
    found: Descriptor | None, offsets: Sequence[Affine | None], checked: Sequence[int] | None = None
) -> tuple[Affine | None, masks.Mask | None]:
    """The form of the lanes a block pointer's or a tensor descriptor's access reaches at ``offsets`` (its block's
    first element's indices), and the mask of the lanes inside the tensor along the ``checked`` axes (``None``:
    every axis), where the analyses know its base, strides and, for the mask, shape."""
    if found is None or found.base is None or any(s is None for s in found.strides):
        return None, None
    block = found.block
    rank = len(block)
    if len(offsets) != rank or any(o is None for o in offsets):
        return None, None
    form = found.base.broadcast(block)
    atoms = []
    for axis in range(rank):
        lanes = [0] * rank
        lanes[axis] = 1
        index = offsets[axis].broadcast(block).plus(Affine(0, (0, 0, 0), tuple(lanes), block))  # type: ignore[union-attr]
        form = form.plus(index.times(int(found.strides[axis])))  # type: ignore[arg-type]
        if checked is None or axis in checked:
            atoms.append((index.times(-1).shifted(-1), True))  # index >= 0: -index - 1 < 0
            if found.shape[axis] is None:
                return form, None
            atoms.append((index.shifted(-int(found.shape[axis])), True))  # type: ignore[arg-type]
    return form, masks.Mask(block, tuple(atoms))


def _access(walk: Any, op: Operation, kind: str, shape: tuple[int, ...], mask_operand: int) -> Fact:
    """Records a load's or store's access (through a block pointer or descriptor, or through pointers masked by
    operand ``mask_operand``) with the walk; the pointer's fact."""
    target = walk.fact(op.operands[0])
    if target.descriptor is not None:
        checked = tuple(op.attr("boundaryCheck") or ())
        form, inside = tensor_access(target.descriptor, target.descriptor.offsets, checked)
        walk.access(kind, op, target.descriptor.buffers, form, inside if checked else None, bool(checked), shape)
    else:
        mask, masked = _mask_fact(walk, op, mask_operand)
        walk.access(kind, op, target.buffers, target.form, mask, masked, shape)
    return target


def _analyse_load(walk: Any, op: Operation) -> None:
    target = _access(walk, op, "load", walk.type(op.results[0]).shape, 1)
    buffers = target.buffers if target.descriptor is None else target.descriptor.buffers
    varies = target.varies or bool(buffers and buffers & walk.writable)
    walk.set(op.results[0], Fact(varies=varies))


@rule("tt.load", analyse=_analyse_load, effect=True)
def _load(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    target = k.get(op.operands[0])
    ty = k.type(op.results[0])
    if isinstance(target, BlockPointer):
        pointer, mask = _block_lanes(target, op.attr("boundaryCheck") or (), k.access_form(op))
        pointer = dataclasses.replace(pointer, reach=k.access_reach(op))
        other: Any = jnp.nan if op.attr("padding") == 2 else None
        value, state = k.memory.load(state, pointer, k.guarded(mask, ty.shape), other, ty.shape)
        k.set(op.results[0], value)
        return state
    if isinstance(target, Choice):
        return _each_load(ctx, target, state)
    pointer = dataclasses.replace(_pointer_operand(ctx), reach=k.bounds(op.operands[0]))
    lanes = k.limits(op.operands[1]) if len(op.operands) > 1 else None
    if lanes is not None:
        return _load_lanes(ctx, pointer, lanes, state)
    mask = k.array(op.operands[1]) if len(op.operands) > 1 else None
    other = k.array(op.operands[2]) if len(op.operands) > 2 else None
    value, state = k.memory.load(state, pointer, k.guarded(mask, ty.shape), other, ty.shape)
    k.set(op.results[0], value)
    return state


def _picked(choice: Choice, index: int, mask: Any, shape: tuple[int, ...]) -> jax.Array:
    """The lanes of a choice of pointers that take its ``index``-th, within ``mask``."""
    mine = jnp.broadcast_to(jnp.asarray(choice.which) == index, shape)
    return mine if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), shape) & mine


def _each_load(ctx: RuleContext, choice: Choice, state: State) -> State:
    """A load through pointers into several buffers, chosen lane by lane: each buffer's lanes loaded under the
    mask of the lanes that point into it, the values chosen alike."""
    k, op = ctx.kernel, ctx.op
    shape = k.type(op.results[0]).shape
    mask = k.array(op.operands[1]) if len(op.operands) > 1 else None
    other = k.array(op.operands[2]) if len(op.operands) > 2 else None
    value: Any = None
    for index, pointer in enumerate(choice.pointers):
        mine = _picked(choice, index, mask, shape)
        loaded, state = k.memory.load(state, pointer, k.guarded(mine, shape), other, shape)
        value = loaded if value is None else jnp.where(mine, loaded, value)
    k.set(op.results[0], value)
    return state


def _pointer_operand(ctx: RuleContext) -> Pointer:
    pointer = ctx.operand(0)
    if isinstance(pointer, BlockPointer):
        raise Unsupported("a block pointer here", ctx.op.line)
    if not isinstance(pointer, Pointer):
        raise Unsupported(f"{ctx.op.name} through something that is not a pointer", ctx.op.line)
    return pointer


def within(pointer: Pointer, lanes: masks.Limits, shape: tuple[int, ...]) -> Pointer:
    """The pointer to the box ``lanes`` of a block: its offsets and affine form from the box's first lane on."""
    offset = pointer.offset
    if not lang.is_static(offset) and jnp.ndim(offset):
        offset = offset[tuple(slice(low, high) for low, high in lanes)]
    known = pointer.affine
    if known is not None and known.shape == shape:
        shifted = sum(c * low for c, (low, _) in zip(known.lanes, lanes, strict=True))
        box = tuple(high - low for low, high in lanes)
        known = dataclasses.replace(known, const=known.const + shifted, shape=box)
    else:
        known = None
    return Pointer(pointer.buffer, offset, pointer.pointee, known, pointer.reach)


def _load_lanes(ctx: RuleContext, pointer: Pointer, lanes: masks.Limits, state: State) -> State:
    """A load under a mask known to be a box of lanes the same in every program (`boxed_load`)."""
    k, op = ctx.kernel, ctx.op
    ty = k.type(op.results[0])
    other = k.get(op.operands[2]) if len(op.operands) > 2 else None
    array = k.array(op.operands[2]) if other is not None and not lang.is_static(other) else None
    value, state = boxed_load(k, state, pointer, lanes, ty.shape, lang.dtype_of(ty.element), other, array)
    k.set(op.results[0], value)
    return state


def boxed_load(
    k: Any,
    state: State,
    pointer: Pointer,
    lanes: masks.Limits,
    shape: tuple[int, ...],
    dtype: Any,
    other: Any,
    other_array: jax.Array | None,
) -> tuple[jax.Array, State]:
    """A load whose mask is the box ``lanes`` of the block, the same in every program: the box alone is loaded (a
    slice where the whole block's elements would be a gather) and padded to the block with ``other`` (a value known
    when tracing, or ``None`` for zeros) or, where ``other_array`` is given, with its elements."""
    if masks.is_full(lanes, shape):
        return k.memory.load(state, pointer, k.guarded(None, shape), None, shape)
    fill = jnp.zeros((), dtype) if other is None or not lang.is_static(other) else jnp.asarray(other, dtype)
    if masks.is_empty(lanes):
        return jnp.broadcast_to(other_array if other_array is not None else fill, shape), state
    box = tuple(high - low for low, high in lanes)
    value, state = k.memory.load(state, within(pointer, lanes, shape), k.guarded(None, box), None, box)
    padded = lax.pad(value.astype(dtype), fill, [(low, n - high, 0) for (low, high), n in zip(lanes, shape)])
    if other_array is not None:
        padded = jnp.where(_inside(lanes, shape), padded, other_array)
    return padded, state


def _inside(lanes: masks.Limits, shape: tuple[int, ...]) -> jax.Array:
    """The mask of the box ``lanes`` in a block of ``shape``."""
    inside: Any = True
    for axis, (low, high) in enumerate(lanes):
        index = lax.broadcasted_iota(jnp.int32, shape, axis)
        inside = inside & (index >= low) & (index < high)
    return jnp.broadcast_to(inside, shape)


def _analyse_store(walk: Any, op: Operation) -> None:
    _access(walk, op, "store", walk.type(op.operands[1]).shape, 2)


@rule("tt.store", analyse=_analyse_store, effect=True, sign_safe=None)
def _store(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    target = k.get(op.operands[0])
    value = k.array(op.operands[1])
    if isinstance(target, BlockPointer):
        pointer, mask = _block_lanes(target, op.attr("boundaryCheck") or (), k.access_form(op))
        return k.memory.store(state, pointer, value, mask, tuple(target.block), guard=k.predicate)
    if isinstance(target, Choice):
        shape = k.type(op.operands[1]).shape
        mask = k.array(op.operands[2]) if len(op.operands) > 2 else None
        for index, pointer in enumerate(target.pointers):
            state = k.memory.store(state, pointer, value, _picked(target, index, mask, shape), shape, guard=k.predicate)
        return state
    pointer = _pointer_operand(ctx)
    shape = k.type(op.operands[1]).shape
    lanes = k.limits(op.operands[2]) if len(op.operands) > 2 else None
    mask = k.array(op.operands[2]) if len(op.operands) > 2 and lanes is None else None
    if lanes is not None and masks.is_empty(lanes):
        return state  # a mask that is off everywhere stores nothing
    if lanes is not None and not masks.is_full(lanes, shape):
        # Only the box of lanes the mask has on, the same in every program, is stored.
        pointer = within(pointer, lanes, shape)
        value = jnp.broadcast_to(value, shape)[tuple(slice(low, high) for low, high in lanes)]
        shape = tuple(high - low for low, high in lanes)
    return k.memory.store(state, pointer, value, mask, shape, guard=k.predicate)


def _analyse_atomic(walk: Any, op: Operation) -> None:
    target = walk.fact(op.operands[0])
    if target.buffers is not None and len(target.buffers) > 1:
        walk.refuse("an atomic through a pointer into one of several arguments", op.line)
    shape = walk.type(op.results[0]).shape
    used = op.results[0] in walk.used
    if op.name == "tt.atomic_cas":
        walk.access("atomic", op, target.buffers, target.form, None, False, shape, "CAS", True)
    else:
        mask, masked = _mask_fact(walk, op, 2)
        kind = str(op.attr("atomic_rmw_op"))
        walk.access("atomic", op, target.buffers, target.form, mask, masked, shape, kind, used)
    walk.set(op.results[0], Fact())


@rule("tt.atomic_rmw", analyse=_analyse_atomic, effect=True)
def _atomic_rmw(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    pointer = _pointer_operand(ctx)
    shape = k.type(op.results[0]).shape
    value = k.array(op.operands[1])
    mask = k.array(op.operands[2]) if len(op.operands) > 2 else None
    kind = str(op.attr("atomic_rmw_op"))
    used = op.results[0] in k.facts.used
    found, state = k.memory.atomic(state, kind, pointer, [value], k.guarded(mask, shape), shape, used)
    k.set(op.results[0], found)
    return state


@rule("tt.atomic_cas", analyse=_analyse_atomic, effect=True)
def _atomic_cas(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    pointer = _pointer_operand(ctx)
    shape = k.type(op.results[0]).shape
    compare, value = k.array(op.operands[1]), k.array(op.operands[2])
    found, state = k.memory.atomic(state, "CAS", pointer, [compare, value], k.guarded(None, shape), shape, True)
    k.set(op.results[0], found)
    return state


# -- block pointers ----------------------------------------------------------------------------------------------


def static_ints(walk: Any, values: Sequence[int]) -> tuple[int | None, ...]:
    found = []
    for value in values:
        known = walk.static(value)
        found.append(int(known) if known is not None and not isinstance(known, float) else None)
    return tuple(found)


def describe(walk: Any, op: Operation, rank: int, block: tuple[int, ...], offsets: Sequence[int] = ()) -> None:
    """The fact of a block pointer or tensor descriptor made by ``op`` (its base, ``rank`` sizes, ``rank`` strides,
    then ``offsets``, a block pointer's)."""
    base = walk.fact(op.operands[0])
    found = Descriptor(
        base.buffers if base.buffers is not None else frozenset(),
        base.form,
        static_ints(walk, op.operands[1 : 1 + rank]),
        static_ints(walk, op.operands[1 + rank : 1 + 2 * rank]),
        tuple(walk.form(v) for v in offsets),
        block,
    )
    walk.set(op.results[0], Fact(buffers=found.buffers, descriptor=found, varies=walk.varies(*op.operands)))


def _analyse_make_block_ptr(walk: Any, op: Operation) -> None:
    rank = (len(op.operands) - 1) // 3
    pointee = parse_type(walk.type(op.results[0]).pointee or "")
    describe(walk, op, rank, pointee.shape, op.operands[1 + 2 * rank :])


@rule("tt.make_tensor_ptr", analyse=_analyse_make_block_ptr)
def _make_block_ptr(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    base = k.get(op.operands[0])
    if not isinstance(base, Pointer):
        raise Unsupported("a block pointer on something that is not a pointer", op.line)
    rank = (len(op.operands) - 1) // 3
    values = [k.get(v) for v in op.operands[1:]]
    pointee = parse_type(k.type(op.results[0]).pointee or "")
    k.set(
        op.results[0],
        BlockPointer(
            base.buffer,
            base.offset,
            tuple(values[:rank]),
            tuple(values[rank : 2 * rank]),
            tuple(values[2 * rank :]),
            pointee.shape,
            pointee.element,
        ),
    )
    return state


def _analyse_advance(walk: Any, op: Operation) -> None:
    found = walk.fact(op.operands[0])
    descriptor = found.descriptor
    if descriptor is not None:
        steps = [walk.form(v) for v in op.operands[1:]]
        offsets = tuple(
            None if o is None or s is None else o.plus(s) for o, s in zip(descriptor.offsets, steps, strict=True)
        )
        descriptor = dataclasses.replace(descriptor, offsets=offsets)
    walk.set(op.results[0], dataclasses.replace(found, descriptor=descriptor, varies=walk.varies(*op.operands)))


@rule("tt.advance", analyse=_analyse_advance)
def _advance(ctx: RuleContext, state: State) -> State:
    block = ctx.operand(0)
    steps = [ctx.get(v) for v in ctx.op.operands[1:]]
    offsets = tuple(_add(a, b) for a, b in zip(block.offsets, steps, strict=True))
    ctx.set(ctx.op.results[0], dataclasses.replace(block, offsets=offsets))
    return state


def _add(a: Any, b: Any) -> Any:
    if lang.is_static(a) and lang.is_static(b):
        return int(a) + int(b)
    return jnp.asarray(a, jnp.int64) + jnp.asarray(b, jnp.int64)


def _block_lanes(block: BlockPointer, checked: Sequence[int], form: Affine | None) -> tuple[Pointer, Any]:
    """The lanes of a block pointer: one pointer per element of the block (with the access's form, where the
    analyses know it), and the mask of the checked axes."""
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
    return Pointer(block.buffer, offset, block.pointee, form), mask


def pointer_argument(buffer: int, pointee: str) -> Pointer:
    """The pointer a kernel argument holds: the start of buffer ``buffer``."""
    return Pointer(buffer, 0, pointee, Affine.constant(0))


def pointer_parameter(buffer: int) -> Fact:
    """What the analyses know of a pointer argument: it points at the start of buffer ``buffer``."""
    return Fact(form=Affine.constant(0), buffers=frozenset({buffer}), varies=False)
