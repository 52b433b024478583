"""Tensor descriptors: ``tl.make_tensor_descriptor`` in a kernel and host-side ``jt.TensorDescriptor`` arguments,
with their loads, stores, reductions, gathers and scatters.

A descriptor is a strided tensor in one of the kernel's buffers and the shape of the block one access moves. An
access at some offsets reaches the block's elements that lie inside the tensor: a load reads the padding value (zero,
or NaN with ``padding_option="nan"``) for the others, as a TMA copy does, and a store or a reduction skips them.

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

from jt_core.translation import lang
from jt_core.translation.memory import Pointer, State
from jt_core.translation.program import Operation, parse_type
from jt_core.translation.tracer import Handler, Tracer
from jt_core.translation.values import NotVectorizable, Unsupported

__all__ = ["HANDLERS", "Descriptor", "block_of"]

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
    it, or ``!tt.tensordesc<tensor<16x32xf32>>``, as Triton 3.6 does).

    Raises:
        Unsupported: For a type that is not a descriptor's.
    """
    match = _DESCRIPTOR.match(type_text.strip())
    if not match:
        raise Unsupported(f"a tensor descriptor of type {type_text}")
    parsed = parse_type(f"tensor<{match.group(1)}>")
    return parsed.shape, parsed.element


def _make(k: Tracer, op: Operation, state: State) -> State:
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
    k.env[op.results[0]] = desc
    size = lang.dtype_of(element).itemsize
    broken = _unaligned(desc.base, size) | (jnp.asarray(desc.strides[-1], jnp.int64) != 1)
    for stride in desc.strides[:-1]:
        broken = broken | _unaligned(stride, size)
    return _flagged(state, broken)


def _unaligned(elements: Any, size: int) -> Any:
    return (jnp.asarray(elements, jnp.int64) * size) % 16 != 0


def _flagged(state: State, broken: Any) -> State:
    return State(state.buffers, state.faults | broken)


def _descriptor(k: Tracer, op: Operation) -> Descriptor:
    found = k.get(op.operands[0])
    if not isinstance(found, Descriptor):
        raise Unsupported(f"{op.name} through something that is not a tensor descriptor", op.line)
    return found


def _lanes(desc: Descriptor, offsets: Sequence[Any]) -> tuple[Pointer, Any]:
    """One pointer per element of the block at ``offsets``, and the mask of those inside the tensor."""
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
    return Pointer(desc.buffer, jnp.broadcast_to(offset, desc.block), desc.pointee), jnp.broadcast_to(
        inside, desc.block
    )


def _round_to_tf32(values: Any) -> Any:
    """float32 values rounded to TF32 (10 mantissa bits), to nearest with ties to even; infinities and NaNs kept."""
    bits = lax.bitcast_convert_type(values, jnp.uint32)
    odd = (bits >> np.uint32(13)) & np.uint32(1)
    rounded = (bits + np.uint32(0xFFF) + odd) & np.uint32(0xFFFFE000)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    return lax.bitcast_convert_type(jnp.where(finite, rounded, bits), jnp.float32)


def _access(k: Tracer, desc: Descriptor, offsets: Sequence[Any], state: State) -> tuple[Pointer, Any, State]:
    """The lanes of an access (`_lanes`), and the state flagged where its last offset is not 16-byte aligned."""
    pointer, inside = _lanes(desc, offsets)
    return pointer, inside, _flagged(state, _unaligned(offsets[-1], lang.dtype_of(desc.pointee).itemsize))


def _load(k: Tracer, op: Operation, state: State) -> State:
    desc = _descriptor(k, op)
    ty = k.type(op.results[0])
    pointer, inside, state = _access(k, desc, [k.get(v) for v in op.operands[1:]], state)
    other = jnp.nan if desc.nan_padding else 0
    value, state = k.memory.load(state, pointer, inside, other, desc.block)
    if desc.round_to_tf32 and value.dtype == jnp.float32:
        value = _round_to_tf32(value)
    k.env[op.results[0]] = jnp.reshape(value, ty.shape).astype(lang.dtype_of(ty.element))
    return state


def _store(k: Tracer, op: Operation, state: State) -> State:
    if k.vector:
        raise NotVectorizable("a store through a tensor descriptor")
    desc = _descriptor(k, op)  # operands: the descriptor, the block, the offsets
    pointer, inside, state = _access(k, desc, [k.get(v) for v in op.operands[2:]], state)
    value = jnp.reshape(k.array(op.operands[1]), desc.block)
    return k.memory.store(state, pointer, value, inside, desc.block)


def _rows(k: Tracer, op: Operation, state: State) -> tuple[Descriptor, Pointer, Any, State]:
    """The lanes of ``desc.gather(rows, column)`` / ``desc.scatter(block, rows, column)``: for each row of the 2-d
    tensor the operands name, the block's width of columns from ``column`` on."""
    desc = _descriptor(k, op)
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


def _gather(k: Tracer, op: Operation, state: State) -> State:
    desc, pointer, inside, state = _rows(k, op, state)
    ty = k.type(op.results[0])
    value, state = k.memory.load(state, pointer, inside, jnp.nan if desc.nan_padding else 0, ty.shape)
    k.env[op.results[0]] = value.astype(lang.dtype_of(ty.element))
    return state


def _scatter(k: Tracer, op: Operation, state: State) -> State:
    if k.vector:
        raise NotVectorizable("a scatter through a tensor descriptor")
    _, pointer, inside, state = _rows(k, op, state)
    shape = tuple(inside.shape)
    return k.memory.store(state, pointer, jnp.reshape(k.array(op.operands[3]), shape), inside, shape)


#: ``tt.descriptor_reduce``'s kinds as the atomics name them, for integers and floats.
_REDUCTIONS = {"add": ("ADD", "FADD"), "max": ("MAX", "MAX"), "min": ("MIN", "MIN"), "and": ("AND", None)}
_REDUCTIONS |= {"or": ("OR", None), "xor": ("XOR", None)}


def _reduce(k: Tracer, op: Operation, state: State) -> State:
    if k.vector:
        raise NotVectorizable("a reduction through a tensor descriptor")
    desc = _descriptor(k, op)
    kinds = _REDUCTIONS.get(str(op.attr("reduce_kind", "")).lower())
    floating = desc.pointee.startswith(("f", "bf"))
    kind = None if kinds is None else kinds[1] if floating else kinds[0]
    if kind is None:
        raise Unsupported(f"a {op.attr('reduce_kind')} reduction through a tensor descriptor", op.line)
    pointer, inside, state = _access(k, desc, [k.get(v) for v in op.operands[2:]], state)  # as a store's
    value = jnp.reshape(k.array(op.operands[1]), desc.block)
    _, state = k.memory.atomic(state, kind, pointer, [value], inside, desc.block, False)
    return state


HANDLERS: dict[str, Handler] = {
    "tt.make_tensor_descriptor": _make,
    "tt.descriptor_load": _load,
    "tt.descriptor_store": _store,
    "tt.descriptor_reduce": _reduce,
    "tt.descriptor_gather": _gather,
    "tt.descriptor_scatter": _scatter,
}
