"""``tl.map_elementwise``: a scalar function, the region of a ``tt.map_elementwise`` operation, mapped over the
elements of blocks.

The region's block takes one scalar per operand and packed element (``pack`` consecutive elements of each operand,
operand after operand) and returns, through ``tt.map_elementwise.return``, one scalar per result and packed element
(result after result). Its body is traced once, under ``jax.vmap`` over the groups of ``pack`` elements of the
row-major blocks: a branch on an element (``if x > 0:``) becomes a choice per element, as each GPU thread takes its
own. A GPU packs the elements one thread holds, which its layout decides; a function that only combines the
elements of one position in the pack gives the same whatever the grouping.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jt_core.translation import lang
from jt_core.translation.analysis.facts import Fact
from jt_core.translation.memory import State, no_error
from jt_core.translation.program import Block, Operation, Program, TensorType
from jt_core.translation.rules import RuleContext, rule, rule_of

__all__ = ["RETURN"]

#: The terminator of the mapped function's region.
RETURN = "tt.map_elementwise.return"


def _effect(program: Program, blocks: Sequence[Block], seen: frozenset[str] = frozenset()) -> str | None:
    """The first operation with an effect that running ``blocks`` reaches (through the functions it calls too): what
    a mapped function cannot do, since it runs once per element and its effects would be made once per element."""
    for block in blocks:
        for op in block.operations:
            found = rule_of(op.name)
            if found is not None and found.effect and not found.calls:
                return op.name
            if found is not None and found.calls:
                callee = str(op.attr("callee"))
                function = program.functions.get(callee)
                if function is not None and callee not in seen:
                    inner = _effect(program, function.body, seen | {callee})
                    if inner:
                        return inner
            for region in op.regions:
                inner = _effect(program, region, seen)
                if inner:
                    return inner
    return None


def _scalar(ty: TensorType) -> TensorType:
    return TensorType((), ty.element, None, ty.element)


def _analyse(walk: Any, op: Operation) -> None:
    effect = _effect(walk.ir, op.regions[0])
    if effect is not None:
        walk.refuse(f"{effect} inside the function tl.map_elementwise maps", op.line)
    pack = int(op.attr("pack") or 1)
    size = math.prod(walk.type(op.results[0]).shape)
    if size % pack:
        walk.refuse(f"tl.map_elementwise with pack={pack}, which does not divide its {size} elements", op.line)
    varies = walk.varies(*op.operands)
    for value in op.results:
        walk.set(value, Fact(varies=varies))


@rule("tt.map_elementwise", analyse=_analyse)
def _map_elementwise(ctx: RuleContext, state: State) -> State:
    """``tt.map_elementwise``: its region's function on each group of ``pack`` elements of the operands."""
    k, op = ctx.kernel, ctx.op
    region = op.regions[0]
    pack = int(op.attr("pack") or 1)
    shape = k.type(op.results[0]).shape
    size = math.prod(shape)
    groups = [jnp.reshape(jnp.broadcast_to(k.array(v), shape), (size // pack, pack)) for v in op.operands]
    argument_types = [_scalar(k.type(v)) for v in op.operands]
    result_types = [_scalar(k.type(v)) for v in op.results]

    def one(*group: jax.Array) -> list[jax.Array]:
        arguments = [lang.as_array(g[j], t) for g, t in zip(group, argument_types, strict=True) for j in range(pack)]
        # Nothing in the region touches memory: it runs on a state of no buffers, which the choices per element
        # (a batched lax.cond) would otherwise copy for every element.
        returned, _ = k.run_block(region[0], arguments, State((), no_error()))
        return [lang.as_array(value, result_types[i // pack]) for i, value in enumerate(returned)]

    mapped = jax.vmap(one)(*groups)
    for index, value in enumerate(op.results):
        packed = jnp.stack(mapped[index * pack : (index + 1) * pack], axis=1)
        k.set(value, jnp.reshape(packed, shape))
    return state
