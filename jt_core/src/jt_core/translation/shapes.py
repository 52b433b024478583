"""The rules of the operations that make values or move their elements around: constants, program ids, ranges,
splats, broadcasts, reshapes, transpositions, concatenations, gathers; on numbers and on pointers alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jt_core.translation import lang
from jt_core.translation.analysis.affine import Affine
from jt_core.translation.analysis.facts import UNKNOWN, Fact
from jt_core.translation.analysis.masks import Mask
from jt_core.translation.memory import Choice, Pointer, State
from jt_core.translation.program import Operation, TensorType
from jt_core.translation.rules import RuleContext, rule
from jt_core.translation.values import Unsupported

__all__: list[str] = []


# -- constants and ids -------------------------------------------------------------------------------------------


def _scalar_type(ty: TensorType) -> TensorType:
    return TensorType((), ty.element, None, ty.element)


def _analyse_constant(walk: Any, op: Operation) -> None:
    ty = walk.type(op.results[0])
    if ty.is_pointer:
        walk.set(op.results[0], Fact(varies=False))
        return
    text = op.attr("text")
    uniform = not (isinstance(text, str) and "[" in text)
    scalar = lang.constant(text, op.attr("value"), _scalar_type(ty)) if uniform else None
    static = scalar if lang.is_static(scalar) else None
    form = None
    mask = None
    if static is not None and ty.element.startswith("i") and ty.element != "i1":
        form = Affine.constant(int(static), ty.shape)
    if static is not None and ty.element == "i1":
        mask = Mask(ty.shape, (), not bool(static))
    walk.set(op.results[0], Fact(form=form, mask=mask, static=static if not ty.shape else None, varies=False))


@rule("arith.constant", analyse=_analyse_constant, keeps_known=True)
def _constant(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    ty = k.type(op.results[0])
    k.set(op.results[0], lang.constant(op.attr("text"), op.attr("value"), ty, op.results[0] not in k.sign_safe))
    text = op.attr("text")
    if ty.shape and isinstance(text, str) and "[" not in text and not ty.is_pointer:
        value = lang.constant(text, op.attr("value"), _scalar_type(ty))
        k.set_known(op.results[0], value if lang.is_static(value) else None)
    return state


def _analyse_poison(walk: Any, op: Operation) -> None:
    pointer = walk.type(op.results[0]).is_pointer
    walk.set(op.results[0], Fact(buffers=frozenset() if pointer else None, varies=False))


@rule("ub.poison", analyse=_analyse_poison)
def _poison(ctx: RuleContext, state: State) -> State:
    ty = ctx.type(ctx.op.results[0])
    ctx.set(ctx.op.results[0], jnp.zeros(ty.shape, lang.dtype_of(ty.element)) if not ty.is_pointer else None)
    return state


def _analyse_program_id(walk: Any, op: Operation) -> None:
    axis = int(op.attr("axis", 0))
    if walk.relabel is not None:  # the launched id, looked up in the table of tiles
        walk.set(op.results[0], UNKNOWN)
        return
    unit = [0, 0, 0]
    unit[axis] = 1
    walk.set(op.results[0], Fact(form=Affine(0, (unit[0], unit[1], unit[2]))))


@rule("tt.get_program_id", analyse=_analyse_program_id)
def _program_id(ctx: RuleContext, state: State) -> State:
    k = ctx.kernel
    axis = int(ctx.op.attr("axis", 0))
    if k.relabel is not None:
        # Programs run over tiles: the launched id (of a one-axis grid) is the tile's entry in the table.
        launched = jnp.asarray(k.relabel.launched)[k.pids[0], k.pids[1]] if axis == 0 else 0
        ctx.set(ctx.op.results[0], launched)
        return state
    ctx.set(ctx.op.results[0], k.pids[axis])
    return state


def _analyse_num_programs(walk: Any, op: Operation) -> None:
    count = walk.launch[int(op.attr("axis", 0))]
    walk.set(op.results[0], Fact(form=Affine.constant(count), static=count, varies=False))


@rule("tt.get_num_programs", analyse=_analyse_num_programs)
def _num_programs(ctx: RuleContext, state: State) -> State:
    ctx.set(ctx.op.results[0], ctx.kernel.launch[int(ctx.op.attr("axis", 0))])
    return state


def _analyse_range(walk: Any, op: Operation) -> None:
    start, end = int(op.attr("start")), int(op.attr("end"))
    walk.set(op.results[0], Fact(form=Affine(start, (0, 0, 0), (1,), (end - start,)), varies=False))


@rule("tt.make_range", analyse=_analyse_range)
def _make_range(ctx: RuleContext, state: State) -> State:
    start, end = int(ctx.op.attr("start")), int(ctx.op.attr("end"))
    ctx.set(ctx.op.results[0], lax.iota(jnp.int32, end - start) + jnp.int32(start))
    return state


# -- moving elements around --------------------------------------------------------------------------------------


def _moving(move: Callable[[Affine, Operation, TensorType], Affine | None]) -> Callable[[Any, Operation], None]:
    """The analysis of an operation that moves elements around: forms, masks and pointers moved alike."""

    def analyse(walk: Any, op: Operation) -> None:
        found = walk.fact(op.operands[0])
        ty = walk.type(op.results[0])
        form = None if found.form is None else move(found.form, op, ty)
        mask = None
        if found.mask is not None:
            mask = found.mask.moved(lambda f: move(f, op, ty), ty.shape)
        elif found.static is not None and ty.element == "i1":
            mask = Mask(ty.shape, (), not bool(found.static))
        walk.set(op.results[0], Fact(form=form, mask=mask, buffers=found.buffers, varies=found.varies))

    return analyse


def _splat_form(a: Affine, op: Operation, ty: TensorType) -> Affine:
    return a.broadcast(ty.shape)


def _broadcast_form(a: Affine, op: Operation, ty: TensorType) -> Affine:
    return a.broadcast(ty.shape)


def _expand_form(a: Affine, op: Operation, ty: TensorType) -> Affine:
    return a.expand(int(op.attr("axis")))


def _reshape_form(a: Affine, op: Operation, ty: TensorType) -> Affine | None:
    return a.reshaped(ty.shape)


def _order(op: Operation, rank: int) -> tuple[int, ...]:
    order = op.attr("order")
    if order is None:
        if rank != 2:
            raise Unsupported("a transposition whose order cannot be read", op.line)
        order = (1, 0)
    return tuple(order)


def _trans_form(a: Affine, op: Operation, ty: TensorType) -> Affine | None:
    if op.attr("order") is None and len(a.shape) != 2:
        return None
    return a.transposed(_order(op, len(a.shape)))


def _analyse_trans(walk: Any, op: Operation) -> None:
    if op.attr("order") is None and len(walk.type(op.operands[0]).shape) != 2:
        walk.refuse("a transposition whose order cannot be read", op.line)
    _moving(_trans_form)(walk, op)


def _shaped(fn: Callable[[jax.Array, Operation, TensorType], jax.Array]) -> Callable[[RuleContext, State], State]:
    """The lowering of an operation that moves elements around, on numbers and on pointers alike."""

    def lower(ctx: RuleContext, state: State) -> State:
        k, op = ctx.kernel, ctx.op
        value = k.get(op.operands[0])
        ty = k.type(op.results[0])
        form = k.form(op.results[0])

        def moved(pointer: Pointer) -> Pointer:
            offset = pointer.offset if lang.is_static(pointer.offset) else fn(jnp.asarray(pointer.offset), op, ty)
            return Pointer(pointer.buffer, offset, pointer.pointee, form)

        if isinstance(value, Pointer):
            k.set(op.results[0], moved(value))
            return state
        if isinstance(value, Choice):
            which = fn(jnp.broadcast_to(jnp.asarray(value.which), k.type(op.operands[0]).shape), op, ty)
            k.set(op.results[0], Choice(tuple(moved(p) for p in value.pointers), which))
            return state
        k.set(op.results[0], fn(k.array(op.operands[0]), op, ty))
        return state

    return lower


_MOVES = {"keeps_known": True, "passes_value": True}

rule("tt.splat", analyse=_moving(_splat_form), passes_product=True, **_MOVES)(
    _shaped(lambda x, op, ty: jnp.broadcast_to(x, ty.shape))
)
rule("tt.broadcast", analyse=_moving(_broadcast_form), passes_product=True, **_MOVES)(
    _shaped(lambda x, op, ty: jnp.broadcast_to(x, ty.shape))
)
rule("tt.expand_dims", analyse=_moving(_expand_form), passes_product=True, **_MOVES)(
    _shaped(lambda x, op, ty: jnp.expand_dims(x, int(op.attr("axis"))))
)
rule("tt.reshape", analyse=_moving(_reshape_form), **_MOVES)(_shaped(lambda x, op, ty: jnp.reshape(x, ty.shape)))
rule("tt.trans", analyse=_analyse_trans, **_MOVES)(_shaped(lambda x, op, ty: jnp.transpose(x, _order(op, x.ndim))))


def _analyse_unsplat(walk: Any, op: Operation) -> None:
    found = walk.fact(op.operands[0])
    form = None if found.form is None else found.form.reshaped(())
    walk.set(op.results[0], Fact(form=form, buffers=found.buffers, varies=found.varies))


@rule("tt.unsplat", analyse=_analyse_unsplat)
def _unsplat(ctx: RuleContext, state: State) -> State:
    ctx.set(ctx.op.results[0], jnp.reshape(ctx.array(ctx.op.operands[0]), ()))
    return state


def _analyse_combined(walk: Any, op: Operation) -> None:
    varies = walk.varies(*op.operands)
    for value in op.results:
        walk.set(value, Fact(varies=varies))


@rule("tt.cat", analyse=_analyse_combined)
def _cat(ctx: RuleContext, state: State) -> State:
    ctx.set(ctx.op.results[0], jnp.concatenate([ctx.array(v) for v in ctx.op.operands], axis=0))
    return state


@rule("tt.join", analyse=_analyse_combined)
def _join(ctx: RuleContext, state: State) -> State:
    ctx.set(ctx.op.results[0], jnp.stack([ctx.array(v) for v in ctx.op.operands], axis=-1))
    return state


@rule("tt.split", analyse=_analyse_combined)
def _split(ctx: RuleContext, state: State) -> State:
    x = ctx.array(ctx.op.operands[0])
    ctx.set(ctx.op.results[0], x[..., 0])
    ctx.set(ctx.op.results[1], x[..., 1])
    return state


@rule("tt.gather", analyse=_analyse_combined)
def _gather(ctx: RuleContext, state: State) -> State:
    source, index = ctx.array(ctx.op.operands[0]), ctx.array(ctx.op.operands[1])
    ctx.set(ctx.op.results[0], jnp.take_along_axis(source, index, axis=int(ctx.op.attr("axis")), mode="clip"))
    return state


@rule("tt.histogram", analyse=_analyse_combined)
def _histogram(ctx: RuleContext, state: State) -> State:
    op = ctx.op
    data = jnp.ravel(ctx.array(op.operands[0]))
    bins = ctx.type(op.results[0]).shape[0]
    keep = (data >= 0) & (data < bins)
    if len(op.operands) > 1:
        keep = keep & jnp.ravel(jnp.broadcast_to(ctx.array(op.operands[1]), ctx.type(op.operands[0]).shape))
    counts = jnp.zeros((bins,), jnp.int32).at[jnp.where(keep, data, bins)].add(1, mode="drop")
    ctx.set(op.results[0], counts.astype(lang.dtype_of(ctx.type(op.results[0]).element)))
    return state
