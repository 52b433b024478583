"""``tl.dot``, reductions and scans: the common combining functions as XLA's own reductions and cumulative
operations, any other as a pairwise tree (reductions) or an associative scan, with the kernel's combining region
applied element by element.

A reduction whose result depends on the order it combines in (a floating-point sum or product, any combining
region) combines in one fixed order: the halves of the block pairwise, first half on the left, until one element is
left (`tree_reduce`). XLA's own reductions would pick their order by the shape they see, which changes with the
number of programs run side by side (`jax.vmap` of a call, a larger grid). The interpreter combines in the same
order (`jt_core.interpreter.numerics`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.translation import lang, numerics
from jt_core.translation.analysis.facts import Fact
from jt_core.translation.memory import State
from jt_core.translation.numerics import Numerics
from jt_core.translation.program import Operation
from jt_core.translation.rules import RuleContext, rule

__all__ = ["accumulated", "product", "tree_reduce"]


_REDUCERS: dict[str, Callable[[jax.Array, int], jax.Array]] = {
    "arith.addi": lambda x, axis: jnp.sum(x, axis=axis, dtype=x.dtype),
    "arith.muli": lambda x, axis: jnp.prod(x, axis=axis, dtype=x.dtype),
    "arith.maximumf": lambda x, axis: jnp.max(x, axis=axis),
    "arith.minimumf": lambda x, axis: jnp.min(x, axis=axis),
    "arith.maxsi": lambda x, axis: jnp.max(x, axis=axis),
    "arith.minsi": lambda x, axis: jnp.min(x, axis=axis),
    "arith.andi": lambda x, axis: jnp.all(x, axis=axis) if x.dtype == jnp.bool_ else _bitwise(lax.bitwise_and, x, axis),
    "arith.ori": lambda x, axis: jnp.any(x, axis=axis) if x.dtype == jnp.bool_ else _bitwise(lax.bitwise_or, x, axis),
    "arith.xori": lambda x, axis: _bitwise(lax.bitwise_xor, x, axis),
    "arith.maxnumf": lambda x, axis: _ignoring_nan(lax.max, x, axis),
    "arith.minnumf": lambda x, axis: _ignoring_nan(lax.min, x, axis),
}

#: Float sums and products in a fixed order: the halves pairwise (`tree_reduce`), each result rounded.
_ORDERED = {"arith.addf": lax.add, "arith.mulf": lax.mul}


def _rounded(op: Callable[[jax.Array, jax.Array], jax.Array], numbers: Numerics) -> Callable[..., tuple[jax.Array]]:
    """A float operation as a combining function, its bfloat16 results rounded as the numerics say."""

    def combine(a: jax.Array, b: jax.Array) -> tuple[jax.Array]:
        return (numbers.round_bfloat16(op(a, b)),)

    return combine


_SCANNERS: dict[str, Callable[[jax.Array, int, bool], jax.Array]] = {
    # Not float sums (the numerics' `cumsum`): XLA's cumulative sum starts from +0.0, so a prefix of -0.0s would sum
    # to +0.0.
    "arith.addi": lambda x, axis, reverse: lax.cumsum(x, axis=axis, reverse=reverse),
    "arith.mulf": lambda x, axis, reverse: lax.cumprod(x, axis=axis, reverse=reverse),
    "arith.muli": lambda x, axis, reverse: lax.cumprod(x, axis=axis, reverse=reverse),
    "arith.maximumf": lambda x, axis, reverse: lax.cummax(x, axis=axis, reverse=reverse),
    "arith.maxsi": lambda x, axis, reverse: lax.cummax(x, axis=axis, reverse=reverse),
    "arith.minimumf": lambda x, axis, reverse: lax.cummin(x, axis=axis, reverse=reverse),
    "arith.minsi": lambda x, axis, reverse: lax.cummin(x, axis=axis, reverse=reverse),
}


def _bitwise(op: Callable[[jax.Array, jax.Array], jax.Array], x: jax.Array, axis: int) -> jax.Array:
    return lax.reduce(x, np.zeros((), x.dtype) if op is not lax.bitwise_and else np.array(-1, x.dtype), op, (axis,))


def _ignoring_nan(op: Callable[[jax.Array, jax.Array], jax.Array], x: jax.Array, axis: int) -> jax.Array:
    """``maxnum``/``minnum`` over ``axis``: NaN only where every element is NaN. One reduction whose combination
    passes a NaN over (NaN is its identity), where masking the NaNs and counting them took three passes."""

    def combine(a: jax.Array, b: jax.Array) -> jax.Array:
        return lax.select(a != a, b, lax.select(b != b, a, op(a, b)))

    return lax.reduce(x, np.array(np.nan, x.dtype), combine, (axis,))


def _analyse_varied(walk: Any, op: Operation) -> None:
    varies = walk.varies(*op.operands)
    for value in op.results:
        walk.set(value, Fact(varies=varies))


@rule("tt.dot", analyse=_analyse_varied, sums=True)
def _dot(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    if k.outside_loop(op):  # a loop's accumulation, computed as one product around the loop (`control`)
        ctx.set(op.results[0], ctx.get(op.operands[2]))
        return state
    a, b, acc = (k.array(v) for v in op.operands[:3])
    a, b = lang.widen_for_dot(a), lang.widen_for_dot(b)
    precision = op.attr("inputPrecision", "IEEE")
    numbers = ctx.strategy.numerics
    if precision == "TF32x3" and a.dtype == b.dtype == jnp.float32 and numbers.splits_tf32x3():
        # As Triton's GPU compiler rewrites it: the operands split into a TF32 part and the rest, three TF32
        # products summed smallest first.
        a_big, b_big = numerics.round_to_tf32(a), numerics.round_to_tf32(b)
        a_small, b_small = a - a_big, b - b_big
        acc = product(a_small, b_big, acc, "TF32", numbers)
        acc = product(a_big, b_small, acc, "TF32", numbers)
        ctx.set(op.results[0], product(a_big, b_big, acc, "TF32", numbers))
        return state
    ctx.set(op.results[0], product(a, b, acc, precision, numbers))
    return state


def product(a: jax.Array, b: jax.Array, acc: jax.Array, precision: str, numbers: Numerics) -> jax.Array:
    """``a @ b + acc`` (batched over leading axes), as the numerics compute a product at ``precision``."""
    return numbers.dot(a, b, acc.dtype, precision) + acc


def accumulated(
    acc: jax.Array, a: jax.Array, b: jax.Array, precision: str, numbers: Numerics, ordered: bool = True
) -> jax.Array:
    """``acc`` plus the products of the steps of a K-loop, ``a[t] @ b[t]`` for each step ``t`` (``a``: ``(steps, M,
    K)``, ``b``: ``(steps, K, N)``), added one after another in their order, as a loop of ``acc = tl.dot(a, b,
    acc)`` adds them: the same bits as that loop run step by step, but the products are one batched ``dot_general``,
    which XLA runs faster than as many small ones. Unless ``ordered``: then the steps are one product over their
    concatenated reduction axes, which XLA sums in its own order (`jt_core.translation.strategy.Strategy`'s
    ``ordered_accumulation`` off: one large product is what a TPU runs fast)."""
    steps = a.shape[0]
    if not ordered:
        whole_a = jnp.transpose(a, (1, 0, 2)).reshape(a.shape[1], steps * a.shape[2])
        whole_b = b.reshape(steps * b.shape[1], b.shape[2])
        return product(whole_a, whole_b, acc, precision, numbers)
    products = numbers.dot(a, b, acc.dtype, precision)
    for index in range(steps):
        acc = products[index] + acc
    return acc


def _combiner(k: Any, op: Operation) -> str | None:
    """The single element-wise operation a reduction's or scan's combining region applies, or ``None``."""
    block = op.regions[0][0]
    body = block.operations
    if len(body) == 2 and body[0].name == "tt.call" and body[0].operands == block.arguments:
        callee = k.ir.functions.get(str(body[0].attr("callee")))
        if callee is None or body[1].operands != body[0].results:
            return None
        inner = callee.body[0]
        body, block = inner.operations, inner
    if len(body) != 2 or len(block.arguments) != 2:
        return None
    first, last = body
    if first.operands != block.arguments or last.operands != first.results:
        return None
    return first.name


def _region_function(k: Any, op: Operation) -> Callable[..., Any]:
    """A reduction's or scan's combining region as a function of arrays (applied element by element)."""

    def combine(*args: Any) -> Any:
        values, _ = k.run_block(op.regions[0][0], list(args), _NO_STATE)
        return tuple(values)

    return combine


_NO_STATE = State((), np.zeros((), np.int8))  # type: ignore[arg-type]


@rule("tt.reduce", analyse=_analyse_varied, sums=True)
def _reduce(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    axis = int(op.attr("axis"))
    inputs = [k.array(v) for v in op.operands]
    combiner = _combiner(k, op) if len(inputs) == 1 else None
    numbers = ctx.strategy.numerics
    own = numbers.reducer(combiner) if combiner is not None else None
    if own is not None:
        out = [own(inputs[0], axis).astype(inputs[0].dtype)]
    elif combiner in _ORDERED:
        out = tree_reduce(_rounded(_ORDERED[combiner], numbers), inputs, axis)
    elif combiner in _REDUCERS:
        out = [_REDUCERS[combiner](inputs[0], axis).astype(inputs[0].dtype)]
    else:
        out = tree_reduce(_region_function(k, op), inputs, axis)
    for value, array in zip(op.results, out, strict=True):
        ctx.set(value, array)
    return state


def tree_reduce(combine: Callable[..., Any], inputs: list[jax.Array], axis: int) -> list[jax.Array]:
    """Reduces ``inputs`` along ``axis`` with ``combine``: element ``i`` of the first half combined with element ``i``
    of the second (first half on the left), until one element is left. Triton's blocks have power-of-two sizes;
    another size keeps its odd last element aside for a level."""
    values = inputs
    while values[0].shape[axis] > 1:
        size = values[0].shape[axis]
        half = size // 2
        left = [lax.slice_in_dim(v, 0, half, axis=axis) for v in values]
        right = [lax.slice_in_dim(v, half, 2 * half, axis=axis) for v in values]
        combined = [jnp.asarray(v) for v in combine(*left, *right)]
        if size % 2:
            combined = [
                jnp.concatenate([c, lax.slice_in_dim(v, size - 1, size, axis=axis)], axis=axis)
                for c, v in zip(combined, values, strict=True)
            ]
        values = combined
    return [jnp.squeeze(v, axis=axis) for v in values]


@rule("tt.scan", analyse=_analyse_varied, sums=True)
def _scan(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    axis = int(op.attr("axis"))
    reverse = bool(op.attr("reverse", False))
    inputs = [k.array(v) for v in op.operands]
    combiner = _combiner(k, op) if len(inputs) == 1 else None
    summed = None
    if combiner == "arith.addf":
        summed = ctx.strategy.numerics.cumsum(inputs[0], axis, reverse)
    if summed is not None:
        out = [summed]
    elif combiner in _SCANNERS and inputs[0].dtype != jnp.bfloat16:
        out = [_SCANNERS[combiner](inputs[0], axis, reverse)]
    else:
        # ``lax.associative_scan`` with ``reverse`` runs the combination from the end, the running value (of the
        # elements after) on the left: element ``i`` is ``combine(result[i + 1], x[i])``, as Triton has it.
        out = _bitwise_scan(_region_function(k, op), inputs, axis, reverse)
    for value, array in zip(op.results, out, strict=True):
        ctx.set(value, array)
    return state


def _bitwise_scan(fn: Callable[..., Any], inputs: list[jax.Array], axis: int, reverse: bool) -> list[jax.Array]:
    """``lax.associative_scan`` of ``fn`` over ``inputs``, the floats carried as their bits: the scan interleaves its
    partial results by adding zeros, which would turn a -0.0 the combine returns into +0.0."""
    types = [x.dtype for x in inputs]

    def bits(x: jax.Array) -> jax.Array:
        return _as_bits(x) if jnp.issubdtype(x.dtype, jnp.floating) else x

    def combine(a: tuple[jax.Array, ...], b: tuple[jax.Array, ...]) -> tuple[jax.Array, ...]:
        values = [
            lax.bitcast_convert_type(v, t) if v.dtype != t else v for v, t in zip((*a, *b), types * 2, strict=True)
        ]
        return tuple(bits(jnp.asarray(r)) for r in fn(*values))

    scanned = lax.associative_scan(combine, tuple(bits(x) for x in inputs), reverse=reverse, axis=axis)
    return [lax.bitcast_convert_type(v, t) if v.dtype != t else v for v, t in zip(scanned, types, strict=True)]


def _as_bits(x: jax.Array) -> jax.Array:
    return lax.bitcast_convert_type(x, {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}[x.dtype.itemsize])
