"""The rules of tensor descriptors: ``tl.make_tensor_descriptor`` in a kernel and host-side ``jt.TensorDescriptor``
arguments, with their loads, stores, reductions, gathers and scatters.

A descriptor is a strided tensor in one of the kernel's buffers and the shape of the block one access moves. An
access at some offsets reaches the block's elements that lie inside the tensor: a load reads the padding value (zero,
or NaN with ``padding_option="nan"``) for the others, as a TMA copy does, and a store or a reduction skips them.
Where the analyses know the access's offsets as forms and the tensor's shape and strides when tracing, its lanes are
an affine block of the buffer and the lanes inside the tensor a box: a slice, as a plain pointer's block access is.

What a TMA copy requires and Triton's interpreter checks (the tensor's start and every stride but the last a multiple
of 16 bytes, the last stride 1, an access's last offset a multiple of 16 bytes) sets the state's error flag when a
descriptor made in the kernel breaks it, so that the interpreter runs the call again and names the broken rule.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.translation import accesses, lang
from jt_core.translation.analysis import facts as analysed
from jt_core.translation.analysis.affine import Affine
from jt_core.translation.analysis.facts import Fact
from jt_core.translation.analysis.masks import Mask
from jt_core.translation.memory import Pointer, State
from jt_core.translation.program import Operation, parse_type
from jt_core.translation.rules import RuleContext, rule
from jt_core.translation.values import Unsupported

__all__ = ["Descriptor", "block_of", "parameter"]

#: ``padding`` of ``tt.make_tensor_descriptor``: Triton's ``PADDING_OPTION`` (1 zero, 2 NaN).
_NAN_PADDING = 2

_DESCRIPTOR = re.compile(r"^!tt\.tensordesc<(?:tensor<)?(.*?)>*$")


@dataclasses.dataclass(frozen=True)
class Descriptor:
    """A tensor descriptor.

    Attributes:
        buffer: The buffer the tensor lies in.
        base: The offset of the tensor's first element in the buffer, in elements.
        shape: The tensor's shape.
        strides: Its strides, in elements.
        block: The shape of the block an access moves.
        pointee: The element type.
        nan_padding: Whether a load reads NaN (rather than zero) outside the tensor.
        round_to_tf32: Whether loads round float32 values to TF32, as a TF32 tensor map does.
    """

    buffer: int
    base: Any
    shape: tuple[Any, ...]
    strides: tuple[Any, ...]
    block: tuple[int, ...]
    pointee: str
    nan_padding: bool = False
    round_to_tf32: bool = False


def block_of(type_text: str) -> tuple[tuple[int, ...], str]:
    """The block shape and element type of a descriptor type (``!tt.tensordesc<16x32xf32>``, as Triton 3.9 prints
    it, or ``!tt.tensordesc<tensor<16x32xf32>>``, as Triton 3.6 does; an integer block's element may print with its
    signedness, ``si32``, which holds what ``i32`` does).

    Raises:
        Unsupported: For a type that is not a descriptor's.
    """
    match = _DESCRIPTOR.match(type_text.strip())
    if not match:
        raise Unsupported(f"a tensor descriptor of type {type_text}")
    parsed = parse_type(f"tensor<{match.group(1)}>")
    element = re.sub(r"^[su]i(\d+)$", r"i\1", parsed.element)
    return parsed.shape, element


def parameter(buffer: int, shape: Sequence[int], strides: Sequence[int], block: tuple[int, ...]) -> Fact:
    """What the analyses know of a host-side descriptor argument: a tensor of ``shape`` and ``strides`` from the
    start of buffer ``buffer``, accessed in blocks of ``block``."""
    found = analysed.Descriptor(
        frozenset({buffer}),
        Affine.constant(0),
        tuple(int(n) for n in shape),
        tuple(int(n) for n in strides),
        (),
        block,
    )
    return Fact(buffers=found.buffers, descriptor=found, varies=False)


def _analyse_make(walk: Any, op: Operation) -> None:
    base = walk.fact(op.operands[0])
    rank = (len(op.operands) - 1) // 2
    try:
        block, element = block_of(walk.type(op.results[0]).text)
    except Unsupported as exc:
        walk.refuse(exc.what, op.line)
        return
    try:
        lang.dtype_of(element)
    except Exception:
        walk.refuse(f"values of type {element}", op.line)
    found = analysed.Descriptor(
        base.buffers if base.buffers is not None else frozenset(),
        base.form,
        accesses.static_ints(walk, op.operands[1 : 1 + rank]),
        accesses.static_ints(walk, op.operands[1 + rank :]),
        (),
        block,
    )
    walk.set(op.results[0], Fact(buffers=found.buffers, descriptor=found, varies=walk.varies(*op.operands)))


@rule("tt.make_tensor_descriptor", analyse=_analyse_make)
def _make(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    base = k.get(op.operands[0])
    if not isinstance(base, Pointer):
        raise Unsupported("a tensor descriptor over something that is not a pointer", op.line)
    rank = (len(op.operands) - 1) // 2
    values = [k.get(v) for v in op.operands[1:]]
    block, element = block_of(k.type(op.results[0]).text)
    desc = Descriptor(
        base.buffer,
        base.offset,
        tuple(values[:rank]),
        tuple(values[rank:]),
        block,
        element,
        nan_padding=op.attr("padding") == _NAN_PADDING,
    )
    k.set(op.results[0], desc)
    size = lang.dtype_of(element).itemsize
    broken = _unaligned(desc.base, size) | _not_one(desc.strides[-1])
    for stride in desc.strides[:-1]:
        broken = broken | _unaligned(stride, size)
    return _flagged(state, broken)


def _unaligned(elements: Any, size: int) -> Any:
    if lang.is_static(elements):
        return (int(elements) * size) % 16 != 0
    return (jnp.asarray(elements, jnp.int64) * size) % 16 != 0


def _not_one(stride: Any) -> Any:
    return int(stride) != 1 if lang.is_static(stride) else jnp.asarray(stride, jnp.int64) != 1


def _flagged(state: State, broken: Any) -> State:
    if broken is False:
        return state
    return State(state.buffers, state.faults | broken)


def _descriptor(ctx: RuleContext) -> Descriptor:
    found = ctx.operand(0)
    if not isinstance(found, Descriptor):
        raise Unsupported(f"{ctx.op.name} through something that is not a tensor descriptor", ctx.op.line)
    return found


def _lanes(desc: Descriptor, offsets: Sequence[Any], form: Affine | None) -> tuple[Pointer, Any]:
    """One pointer per element of the block at ``offsets`` (with the access's form, where the analyses know it),
    and the mask of those inside the tensor."""
    rank = len(desc.block)
    if len(offsets) != rank:
        raise Unsupported(f"a tensor descriptor access with {len(offsets)} offsets into a {rank}-d block")
    offset: Any = jnp.asarray(desc.base, jnp.int64)
    inside: Any = jnp.ones((), bool)
    for axis, size in enumerate(desc.block):
        shape = [1] * rank
        shape[axis] = size
        index = jnp.asarray(offsets[axis], jnp.int64) + lax.iota(jnp.int64, size).reshape(shape)
        offset = offset + index * jnp.asarray(desc.strides[axis], jnp.int64)
        inside = inside & (index >= 0) & (index < jnp.asarray(desc.shape[axis], jnp.int64))
    pointer = Pointer(desc.buffer, jnp.broadcast_to(offset, desc.block), desc.pointee, form)
    return pointer, jnp.broadcast_to(inside, desc.block)


def _round_to_tf32(values: Any) -> Any:
    """float32 values rounded to TF32 (10 mantissa bits), to nearest with ties to even; infinities and NaNs kept."""
    bits = lax.bitcast_convert_type(values, jnp.uint32)
    odd = (bits >> np.uint32(13)) & np.uint32(1)
    rounded = (bits + np.uint32(0xFFF) + odd) & np.uint32(0xFFFFE000)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    return lax.bitcast_convert_type(jnp.where(finite, rounded, bits), jnp.float32)


def _access(ctx: RuleContext, desc: Descriptor, first: int, state: State) -> tuple[Pointer, Any, State]:
    """The lanes of an access whose offsets are operands ``first`` on (`_lanes`), and the state flagged where its
    last offset is not 16-byte aligned."""
    offsets = [ctx.get(v) for v in ctx.op.operands[first:]]
    pointer, inside = _lanes(desc, offsets, ctx.kernel.access_form(ctx.op))
    pointer = dataclasses.replace(pointer, reach=ctx.kernel.access_reach(ctx.op))
    return pointer, inside, _flagged(state, _unaligned(offsets[-1], lang.dtype_of(desc.pointee).itemsize))


def _access_facts(walk: Any, op: Operation, first: int) -> tuple[Affine | None, Mask | None]:
    """The form of a descriptor access's lanes, and the mask of those inside the tensor (`accesses.tensor_access`),
    its offsets operands ``first`` on."""
    found = walk.fact(op.operands[0]).descriptor
    return accesses.tensor_access(found, [walk.form(v) for v in op.operands[first:]])


def _analyse_access(first: int, kind: str) -> Any:
    def analyse(walk: Any, op: Operation) -> None:
        found = walk.fact(op.operands[0]).descriptor
        if found is None:
            walk.refuse(f"{op.name} through something that is not a tensor descriptor", op.line)
            return
        form, inside = _access_facts(walk, op, first)
        walk.access(kind, op, found.buffers, form, inside, True, found.block)
        for value in op.results:
            walk.set(value, Fact(varies=True))

    return analyse


@rule("tt.descriptor_load", analyse=_analyse_access(1, "load"), effect=True)
def _load(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    desc = _descriptor(ctx)
    ty = k.type(op.results[0])
    pointer, inside, state = _access(ctx, desc, 1, state)
    other = jnp.nan if desc.nan_padding else 0
    lanes = k.access_limits(op)
    dtype = lang.dtype_of(desc.pointee)
    if lanes is not None:
        value, state = accesses.boxed_load(k, state, pointer, lanes, desc.block, dtype, other, None)
    else:
        value, state = k.memory.load(state, pointer, k.guarded(inside, desc.block), other, desc.block)
    if desc.round_to_tf32 and value.dtype == jnp.float32:
        value = _round_to_tf32(value)
    k.set(op.results[0], jnp.reshape(value, ty.shape).astype(lang.dtype_of(ty.element)))
    return state


@rule("tt.descriptor_store", analyse=_analyse_access(2, "store"), effect=True, sign_safe=None)
def _store(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    desc = _descriptor(ctx)  # operands: the descriptor, the block, the offsets
    pointer, inside, state = _access(ctx, desc, 2, state)
    value = jnp.reshape(k.array(op.operands[1]), desc.block)
    lanes = k.access_limits(op)
    if lanes is not None:
        if any(high <= low for low, high in lanes):
            return state
        pointer = accesses.within(pointer, lanes, desc.block)
        value = value[tuple(slice(low, high) for low, high in lanes)]
        return k.memory.store(state, pointer, value, None, tuple(h - low for low, h in lanes), guard=k.predicate)
    return k.memory.store(state, pointer, value, inside, desc.block, guard=k.predicate)


def _rows(ctx: RuleContext, state: State) -> tuple[Descriptor, Pointer, Any, State]:
    """The lanes of ``desc.gather(rows, column)`` / ``desc.scatter(block, rows, column)``: for each row of the 2-d
    tensor the operands name, the block's width of columns from ``column`` on."""
    k, op = ctx.kernel, ctx.op
    desc = _descriptor(ctx)
    if len(desc.block) != 2:
        raise Unsupported("a gather or scatter through a tensor descriptor that is not 2-d", op.line)
    rows = jnp.asarray(k.array(op.operands[1]), jnp.int64)[:, None]
    column = k.get(op.operands[2])
    cols = jnp.asarray(column, jnp.int64) + lax.iota(jnp.int64, desc.block[1])[None, :]
    offset = (
        jnp.asarray(desc.base, jnp.int64)
        + rows * jnp.asarray(desc.strides[0], jnp.int64)
        + cols * jnp.asarray(desc.strides[1], jnp.int64)
    )
    inside = (rows >= 0) & (rows < jnp.asarray(desc.shape[0], jnp.int64))
    inside = inside & (cols >= 0) & (cols < jnp.asarray(desc.shape[1], jnp.int64))
    shape = (rows.shape[0], desc.block[1])
    flagged = _flagged(state, _unaligned(column, lang.dtype_of(desc.pointee).itemsize))
    return (
        desc,
        Pointer(desc.buffer, jnp.broadcast_to(offset, shape), desc.pointee),
        jnp.broadcast_to(inside, shape),
        flagged,
    )


def _analyse_rows(kind: str) -> Any:
    def analyse(walk: Any, op: Operation) -> None:
        found = walk.fact(op.operands[0]).descriptor
        if found is None:
            walk.refuse(f"{op.name} through something that is not a tensor descriptor", op.line)
            return
        if len(found.block) != 2:
            walk.refuse("a gather or scatter through a tensor descriptor that is not 2-d", op.line)
        shape = walk.type(op.results[0]).shape if op.results else walk.type(op.operands[1]).shape
        walk.access(kind, op, found.buffers, None, None, True, shape)
        for value in op.results:
            walk.set(value, Fact(varies=True))

    return analyse


@rule("tt.descriptor_gather", analyse=_analyse_rows("load"), effect=True)
def _gather(ctx: RuleContext, state: State) -> State:
    desc, pointer, inside, state = _rows(ctx, state)
    ty = ctx.type(ctx.op.results[0])
    value, state = ctx.kernel.memory.load(
        state, pointer, ctx.kernel.guarded(inside, ty.shape), jnp.nan if desc.nan_padding else 0, ty.shape
    )
    ctx.set(ctx.op.results[0], value.astype(lang.dtype_of(ty.element)))
    return state


@rule("tt.descriptor_scatter", analyse=_analyse_rows("store"), effect=True)
def _scatter(ctx: RuleContext, state: State) -> State:
    _, pointer, inside, state = _rows(ctx, state)
    shape = tuple(inside.shape)
    value = jnp.reshape(ctx.array(ctx.op.operands[3]), shape)
    return ctx.kernel.memory.store(state, pointer, value, inside, shape, guard=ctx.kernel.predicate)


#: ``tt.descriptor_reduce``'s kinds as the atomics name them, for integers and floats.
_REDUCTIONS = {"add": ("ADD", "FADD"), "max": ("MAX", "MAX"), "min": ("MIN", "MIN"), "and": ("AND", None)}
_REDUCTIONS |= {"or": ("OR", None), "xor": ("XOR", None)}


def _reduction_kind(op: Operation, pointee: str) -> str | None:
    kinds = _REDUCTIONS.get(str(op.attr("reduce_kind", "")).lower())
    floating = pointee.startswith(("f", "bf"))
    return None if kinds is None else kinds[1] if floating else kinds[0]


def _analyse_reduce(walk: Any, op: Operation) -> None:
    found = walk.fact(op.operands[0]).descriptor
    if found is None:
        walk.refuse(f"{op.name} through something that is not a tensor descriptor", op.line)
        return
    block, element = block_of(walk.type(op.operands[0]).text)
    kind = _reduction_kind(op, element)
    if kind is None:
        walk.refuse(f"a {op.attr('reduce_kind')} reduction through a tensor descriptor", op.line)
    form, inside = _access_facts(walk, op, 2)
    walk.access("atomic", op, found.buffers, form, inside, True, block, kind, False)


@rule("tt.descriptor_reduce", analyse=_analyse_reduce, effect=True)
def _reduce(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    desc = _descriptor(ctx)
    kind = _reduction_kind(op, desc.pointee)
    if kind is None:
        raise Unsupported(f"a {op.attr('reduce_kind')} reduction through a tensor descriptor", op.line)
    pointer, inside, state = _access(ctx, desc, 2, state)  # as a store's
    value = jnp.reshape(k.array(op.operands[1]), desc.block)
    _, state = k.memory.atomic(state, kind, pointer, [value], k.guarded(inside, desc.block), desc.block, False)
    return state
