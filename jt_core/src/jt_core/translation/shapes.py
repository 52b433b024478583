"""Operations that make values or move their elements around: constants, program ids, ranges, splats, broadcasts,
reshapes, transpositions, concatenations, gathers; on numbers and on pointers alike, keeping what is known of an
integer's affine form (`jt_core.translation.affine`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax import lax

from jt_core.translation import lang
from jt_core.translation.affine import Affine
from jt_core.translation.memory import Pointer, State
from jt_core.translation.program import Operation, TensorType
from jt_core.translation.tracer import Handler, Tracer
from jt_core.translation.values import Unsupported

__all__ = ["HANDLERS"]


def _constant(k: Tracer, op: Operation, state: State) -> State:
    ty = k.type(op.results[0])
    value = lang.constant(op.attr("text"), op.attr("value"), ty, op.results[0] not in k.sign_safe)
    k.env[op.results[0]] = value
    if ty.shape and ty.element.startswith("i") and ty.element != "i1":
        scalar = lang.constant(op.attr("text"), op.attr("value"), TensorType((), ty.element, None, ty.element))
        if lang.is_static(scalar):
            k.affine[op.results[0]] = Affine.constant(int(scalar), ty.shape)
    return state


def _poison(k: Tracer, op: Operation, state: State) -> State:
    ty = k.type(op.results[0])
    k.env[op.results[0]] = jnp.zeros(ty.shape, lang.dtype_of(ty.element)) if not ty.is_pointer else None
    return state


def _program_id(k: Tracer, op: Operation, state: State) -> State:
    axis = int(op.attr("axis", 0))
    if k.relabel is not None:
        # Programs run over tiles: the launched id (of a one-axis grid) is the tile's entry in the table.
        launched = jnp.asarray(k.relabel.launched)[k.pids[0], k.pids[1]] if axis == 0 else 0
        k.env[op.results[0]] = launched
        return state
    k.env[op.results[0]] = k.pids[axis]
    pids = [0, 0, 0]
    pids[axis] = 1
    k.affine[op.results[0]] = Affine(0, (pids[0], pids[1], pids[2]))
    return state


def _num_programs(k: Tracer, op: Operation, state: State) -> State:
    k.env[op.results[0]] = k.launch[int(op.attr("axis", 0))]
    return state


def _make_range(k: Tracer, op: Operation, state: State) -> State:
    start, end = int(op.attr("start")), int(op.attr("end"))
    k.env[op.results[0]] = lax.iota(jnp.int32, end - start) + jnp.int32(start)
    k.affine[op.results[0]] = Affine(start, (0, 0, 0), (1,), (end - start,))
    return state


def _splat(k: Tracer, op: Operation, state: State) -> State:
    value = k.get(op.operands[0])
    ty = k.type(op.results[0])
    known = k.affine_of(op.operands[0])
    moved = known.broadcast(ty.shape) if known is not None else None
    if isinstance(value, Pointer):
        offset = value.offset if lang.is_static(value.offset) else jnp.broadcast_to(value.offset, ty.shape)
        k.env[op.results[0]] = Pointer(value.buffer, offset, value.pointee, _moved(value.affine, ty.shape))
    else:
        k.env[op.results[0]] = jnp.broadcast_to(k.array(op.operands[0]), ty.shape)
        if moved is not None:
            k.affine[op.results[0]] = moved
    return state


def _moved(affine: Affine | None, shape: tuple[int, ...]) -> Affine | None:
    return None if affine is None else affine.broadcast(shape)


def _shaped(
    fn: Callable[[jax.Array, Operation, TensorType], jax.Array],
    track: Callable[[Affine, Operation, TensorType], Affine | None],
) -> Handler:
    """A handler for an operation that moves elements around, on numbers and on pointers alike; ``track`` says what
    it does to an affine value."""

    def handle(k: Tracer, op: Operation, state: State) -> State:
        value = k.get(op.operands[0])
        ty = k.type(op.results[0])
        if isinstance(value, Pointer):
            moved = value.offset if lang.is_static(value.offset) else fn(jnp.asarray(value.offset), op, ty)
            affine = None if value.affine is None else track(value.affine, op, ty)
            k.env[op.results[0]] = Pointer(value.buffer, moved, value.pointee, affine)
            return state
        k.env[op.results[0]] = fn(k.array(op.operands[0]), op, ty)
        known = k.affine_of(op.operands[0])
        if known is not None:
            tracked = track(known, op, ty)
            if tracked is not None:
                k.affine[op.results[0]] = tracked
        return state

    return handle


def _broadcast(x: jax.Array, op: Operation, ty: TensorType) -> jax.Array:
    return jnp.broadcast_to(x, ty.shape)


def _expand_dims(x: jax.Array, op: Operation, ty: TensorType) -> jax.Array:
    return jnp.expand_dims(x, int(op.attr("axis")))


def _reshape(x: jax.Array, op: Operation, ty: TensorType) -> jax.Array:
    return jnp.reshape(x, ty.shape)


def _order(op: Operation, rank: int) -> tuple[int, ...]:
    order = op.attr("order")
    if order is None:
        if rank != 2:
            raise Unsupported("a transposition whose order cannot be read", op.line)
        order = (1, 0)
    return tuple(order)


def _trans(x: jax.Array, op: Operation, ty: TensorType) -> jax.Array:
    return jnp.transpose(x, _order(op, x.ndim))


def _trans_affine(a: Affine, op: Operation, ty: TensorType) -> Affine:
    order = _order(op, len(a.shape))
    return dataclasses.replace(a, lanes=tuple(a.lanes[i] for i in order), shape=tuple(a.shape[i] for i in order))


def _cat(k: Tracer, op: Operation, state: State) -> State:
    k.env[op.results[0]] = jnp.concatenate([k.array(v) for v in op.operands], axis=0)
    return state


def _join(k: Tracer, op: Operation, state: State) -> State:
    k.env[op.results[0]] = jnp.stack([k.array(v) for v in op.operands], axis=-1)
    return state


def _split(k: Tracer, op: Operation, state: State) -> State:
    x = k.array(op.operands[0])
    k.env[op.results[0]] = x[..., 0]
    k.env[op.results[1]] = x[..., 1]
    return state


def _gather(k: Tracer, op: Operation, state: State) -> State:
    source, index = k.array(op.operands[0]), k.array(op.operands[1])
    k.env[op.results[0]] = jnp.take_along_axis(source, index, axis=int(op.attr("axis")), mode="clip")
    return state


def _histogram(k: Tracer, op: Operation, state: State) -> State:
    data = jnp.ravel(k.array(op.operands[0]))
    bins = k.type(op.results[0]).shape[0]
    keep = (data >= 0) & (data < bins)
    if len(op.operands) > 1:
        keep = keep & jnp.ravel(jnp.broadcast_to(k.array(op.operands[1]), k.type(op.operands[0]).shape))
    counts = jnp.zeros((bins,), jnp.int32).at[jnp.where(keep, data, bins)].add(1, mode="drop")
    k.env[op.results[0]] = counts.astype(lang.dtype_of(k.type(op.results[0]).element))
    return state


def _unsplat(k: Tracer, op: Operation, state: State) -> State:
    k.env[op.results[0]] = jnp.reshape(k.array(op.operands[0]), ())
    return state


HANDLERS: dict[str, Handler] = {
    "arith.constant": _constant,
    "ub.poison": _poison,
    "tt.get_program_id": _program_id,
    "tt.get_num_programs": _num_programs,
    "tt.make_range": _make_range,
    "tt.splat": _splat,
    "tt.broadcast": _shaped(_broadcast, lambda a, op, ty: a.broadcast(ty.shape)),
    "tt.expand_dims": _shaped(_expand_dims, lambda a, op, ty: a.expand(int(op.attr("axis")))),
    "tt.reshape": _shaped(_reshape, lambda a, op, ty: a.reshaped(ty.shape)),
    "tt.trans": _shaped(_trans, _trans_affine),
    "tt.cat": _cat,
    "tt.join": _join,
    "tt.split": _split,
    "tt.gather": _gather,
    "tt.histogram": _histogram,
    "tt.unsplat": _unsplat,
}
