"""``scf.for``, ``scf.if`` and ``scf.while`` as JAX's ``fori_loop``, ``cond`` and ``while_loop``; the branches of an
early ``return`` (``cf.br``, ``cf.cond_br``) as ``cond``.

What a loop or branch carries must be arrays of fixed types: numbers are carried as their TTIR type, pointers as
their offsets (int64) with the buffer they point into kept aside, since it cannot change from one iteration to the
next (a loop that moves a pointer to another argument is refused).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.translation import lang, reductions
from jt_core.translation.affine import Affine
from jt_core.translation.descriptors import Descriptor
from jt_core.translation.memory import SPINS, Pointer, State
from jt_core.translation.program import Block, Operation, TensorType
from jt_core.translation.tracer import Tracer
from jt_core.translation.values import BlockPointer, Unsupported

__all__ = ["BRANCHES", "cf_branch", "scf_for", "scf_if", "scf_while"]

_WRITES = {"tt.store", "tt.atomic_rmw", "tt.atomic_cas"}


def _pack(value: Any, ty: TensorType) -> Any:
    """A value as the arrays a loop carries."""

    if isinstance(value, Pointer):
        return jnp.asarray(value.offset, jnp.int64)
    if isinstance(value, BlockPointer):
        fields = (value.base, *value.shape, *value.strides, *value.offsets)
        return tuple(jnp.asarray(f, jnp.int64) for f in fields)
    if isinstance(value, Descriptor):
        return tuple(jnp.asarray(f, jnp.int64) for f in (value.base, *value.shape, *value.strides))
    return lang.as_array(value, ty)


def _unpack(template: Any, carried: Any) -> Any:
    """The value a loop's carried arrays hold, shaped like ``template`` (its value before the loop)."""

    if isinstance(template, Pointer):
        return Pointer(template.buffer, carried, template.pointee)
    if isinstance(template, BlockPointer):
        rank = len(template.block)
        base, rest = carried[0], carried[1:]
        return dataclasses.replace(
            template,
            base=base,
            shape=tuple(rest[:rank]),
            strides=tuple(rest[rank : 2 * rank]),
            offsets=tuple(rest[2 * rank :]),
        )
    if isinstance(template, Descriptor):
        rank = len(template.block)
        rest = carried[1:]
        return dataclasses.replace(template, base=carried[0], shape=tuple(rest[:rank]), strides=tuple(rest[rank:]))
    return carried


def _same_target(template: Any, value: Any, line: str | None) -> None:

    for kind in (Pointer, BlockPointer, Descriptor):
        if isinstance(template, kind) != isinstance(value, kind):
            raise Unsupported("a loop or branch value that is a pointer on one path only", line)
    if isinstance(template, (Pointer, BlockPointer, Descriptor)) and template.buffer != value.buffer:
        raise Unsupported("a pointer moved to another argument inside a loop or branch", line)
    if isinstance(template, Descriptor) and (template.block, template.nan_padding) != (value.block, value.nan_padding):
        raise Unsupported("tensor descriptors of different blocks or paddings on two paths", line)


def _packed(
    values: Sequence[Any], types: Sequence[TensorType], templates: Sequence[Any], line: str | None
) -> list[Any]:
    out = []
    for value, ty, template in zip(values, types, templates, strict=True):
        _same_target(template, value, line)
        out.append(_pack(value, ty))
    return out


def _nested(k: Tracer, block: Block, args: Sequence[Any], state: State) -> tuple[list[Any], State]:
    """Runs a block of a loop or branch that JAX's control flow runs (a vectorised run makes no store there)."""
    k.region_depth += 1
    try:
        return k.run_block(block, args, state)
    finally:
        k.region_depth -= 1


def scf_for(k: Tracer, op: Operation, state: State) -> State:
    """``scf.for``: a ``fori_loop`` over the iterations, with the trip count XLA sees when the bounds are known."""
    lower, upper, step = (k.get(v) for v in op.operands[:3])
    inits = [k.get(v) for v in op.operands[3:]]
    types = [k.type(v) for v in op.results]
    body = op.regions[0][0]
    iv_type = k.type(body.arguments[0])
    static = all(lang.is_static(v) for v in (lower, upper, step))
    if static:
        count = max(0, lang.ceil_div(int(upper) - int(lower), int(step))) if int(step) > 0 else None
        if count is None:
            raise Unsupported("a loop whose step is not positive", op.line)
        if count == 0:
            for value, init in zip(op.results, inits, strict=True):
                k.env[value] = init
            return state
        if k.vector and _size(body, k.used) * count <= k.strategy.unrolled_operations:
            return _unrolled(k, op, [int(lower) + i * int(step) for i in range(count)], state)
    elif k.vector:
        uniform = _uniform_trips(k, op)
        if uniform is not None and _size(body, k.used) * len(uniform) <= k.strategy.unrolled_operations:
            return _unrolled(k, op, uniform, state)
    iv_dtype = lang.dtype_of(iv_type.element)

    def iteration(i: Any, carry: tuple[list[Any], State]) -> tuple[list[Any], State]:
        arrays, st = carry
        if static:
            iv = (jnp.asarray(lower, jnp.int64) + i.astype(jnp.int64) * int(step)).astype(iv_dtype)
        else:
            iv = (lang.as_array(lower, iv_type).astype(jnp.int64) + i.astype(jnp.int64) * step_array).astype(iv_dtype)
        values = [_unpack(t, a) for t, a in zip(inits, arrays, strict=True)]
        yields, st = _nested(k, body, [iv, *values], st)
        return _packed(yields, types, inits, op.line), st

    initial = _packed(inits, types, inits, op.line)
    if static:
        arrays, state = lax.fori_loop(0, count, iteration, (initial, state))
    else:
        lower_array = lang.as_array(lower, iv_type).astype(jnp.int64)
        upper_array = lang.as_array(upper, iv_type).astype(jnp.int64)
        step_array = lang.as_array(step, iv_type).astype(jnp.int64)
        trips = jnp.maximum(0, (upper_array - lower_array + step_array - 1) // jnp.maximum(step_array, 1))
        arrays, state = lax.fori_loop(jnp.int64(0), trips, iteration, (initial, state))
    for value, template, array in zip(op.results, inits, arrays, strict=True):
        k.env[value] = _unpack(template, array)
    return state


def _uniform_trips(k: Tracer, op: Operation) -> list[tuple[Any, Affine]] | None:
    """The counters of a loop whose start depends on the program id (``for row in tl.range(pid, n_rows,
    num_programs)``, a persistent kernel's) but whose trip count is the same in every program of the grid: each
    counter's value and affine form, else ``None``."""
    lower, upper, step = (k.affine_of(v) for v in op.operands[:3])
    if lower is None or upper is None or step is None or not (upper.is_constant and step.is_constant):
        return None
    bounds = lower.bounds(k.grid)
    if bounds is None or lower.shape or step.const <= 0:
        return None
    trips = {max(0, lang.ceil_div(upper.const - start, step.const)) for start in bounds}
    if len(trips) != 1:
        return None
    start = k.array(op.operands[0]).astype(jnp.int64)
    iv_dtype = lang.dtype_of(k.type(op.regions[0][0].arguments[0]).element)
    return [
        ((start + i * step.const).astype(iv_dtype), lower.plus(Affine.constant(i * step.const)))
        for i in range(trips.pop())
    ]


def _unrolled(k: Tracer, op: Operation, counters: Sequence[Any], state: State) -> State:
    """``scf.for`` traced once per iteration, the counter a known int in each (or a value the same in every program
    but for a term in the program id: `_uniform_trips`, with its affine form); the products the loop accumulates
    (`_accumulating_dots`) are computed together after it."""
    body = op.regions[0][0]
    iv_dtype = lang.dtype_of(k.type(body.arguments[0]).element)
    defined = _defined(body)
    values = [k.get(v) for v in op.operands[3:]]
    dots = _accumulating_dots(k, body) if len(counters) > 1 else {}
    for dot in dots.values():
        k.deferred_dots[dot.results[0]] = []
        k.dot_sources[dot.results[0]] = []
    try:
        for counter in counters:
            for value in defined:  # what an earlier iteration knew of the affine form of a value is not this one's
                k.affine.pop(value, None)
                k.limits.pop(value, None)
            if isinstance(counter, tuple):
                iv, form = counter
                k.affine[body.arguments[0]] = form
            else:
                iv = int(np.asarray(counter).astype(iv_dtype))
            # Straight-line code: the counter is known, so a store in the body is a store like any other.
            values, state = k.run_block(body, [iv, *values], state)
        for index, dot in dots.items():
            acc = lang.as_array(values[index], k.type(op.results[index]))
            operands = k.deferred_dots[dot.results[0]]
            precision = dot.attr("inputPrecision", "IEEE")
            if not k.strategy.ordered_accumulation:
                whole, state = _whole_operands(k, k.dot_sources[dot.results[0]], state)
                if whole is not None:
                    operands = [whole]
            values[index] = reductions.accumulated(acc, operands, precision, k.strategy.ordered_accumulation)
    finally:
        for dot in dots.values():
            k.deferred_dots.pop(dot.results[0], None)
            k.dot_sources.pop(dot.results[0], None)
    for value, result in zip(op.results, values, strict=True):
        k.env[value] = result
    return state


def _stepped(pointers: Sequence[Pointer | None]) -> Pointer | None:
    """The pointer to every step's block at once, where each step loaded a whole block through the same pointer
    moved by the same distance: its affine form has a new first axis, the steps (``a_ptrs += BLOCK_K`` in a K-loop)."""
    if len(pointers) < 2 or any(p is None or p.affine is None or not p.affine.base_known for p in pointers):
        return None
    forms = [p.affine for p in pointers]  # type: ignore[union-attr]
    first = forms[0]
    assert first is not None
    step = forms[1].const - first.const  # type: ignore[union-attr]
    for index, form in enumerate(forms):
        assert form is not None
        same = (form.pids, form.lanes, form.shape) == (first.pids, first.lanes, first.shape)
        if not same or form.const != first.const + index * step or pointers[index].buffer != pointers[0].buffer:  # type: ignore[union-attr]
            return None
    whole = Affine(first.const, first.pids, (step, *first.lanes), (len(forms), *first.shape))
    offsets = jnp.stack([jnp.broadcast_to(jnp.asarray(p.offset), first.shape) for p in pointers])  # type: ignore[union-attr]
    head = pointers[0]
    assert head is not None
    return Pointer(head.buffer, offsets, head.pointee, whole)


def _whole_operands(
    k: Tracer, sources: Sequence[tuple[Pointer | None, Pointer | None]], state: State
) -> tuple[tuple[jax.Array, jax.Array] | None, State]:
    """The operands of a K-loop's products as one pair, read as one block each where every step loaded its
    operands whole through pointers moved alike (`_stepped`): ``(M, K)`` and ``(K, N)``, ready for one product."""
    a_pointer, b_pointer = _stepped([a for a, _ in sources]), _stepped([b for _, b in sources])
    if a_pointer is None or b_pointer is None or a_pointer.affine is None or b_pointer.affine is None:
        return None, state
    a_shape, b_shape = a_pointer.affine.shape, b_pointer.affine.shape
    if len(a_shape) != 3 or len(b_shape) != 3:
        return None, state
    a, state = k.memory.load(state, a_pointer, None, None, a_shape)
    b, state = k.memory.load(state, b_pointer, None, None, b_shape)
    steps, m, kk = a_shape
    _, _, n = b_shape
    a = lang.widen_for_dot(jnp.transpose(a, (1, 0, 2)).reshape(m, steps * kk))
    b = lang.widen_for_dot(b.reshape(steps * b_shape[1], n))
    return (a, b), state


def _accumulating_dots(k: Tracer, body: Block) -> dict[int, Operation]:
    """The ``tl.dot`` operations of a loop's body that only accumulate into what the loop carries (``acc =
    tl.dot(a, b, acc)``, ``acc`` used by nothing else), by the index of the carried value."""
    users = k.ir.users
    carried = {value: index for index, value in enumerate(body.arguments[1:])}
    yielded = body.operations[-1].operands
    found = {}
    for dot in body.operations:
        if dot.name != "tt.dot" or dot.attr("inputPrecision", "IEEE") not in reductions.BATCHED_PRECISIONS:
            continue
        index = carried.get(dot.operands[2])
        result = dot.results[0]
        if index is not None and yielded[index] == result and len(users[dot.operands[2]]) == len(users[result]) == 1:
            found[index] = dot
    return found


def _defined(block: Block) -> list[int]:
    """The values a block defines: its arguments and its operations' results, nested ones included."""
    found = list(block.arguments)
    for op in block.operations:
        found.extend(op.results)
        for region in op.regions:
            for inner in region:
                found.extend(_defined(inner))
    return found


def _size(block: Block, used: set[int]) -> int:
    """How many operations a block holds that compute what something uses, nested ones included."""
    return sum(
        (not op.results or any(r in used for r in op.results)) + sum(_size(b, used) for r in op.regions for b in r)
        for op in block.operations
    )


def _loops(k: Tracer, block: Block, seen: frozenset[str] = frozenset()) -> bool:
    """Whether running ``block`` may run a ``while`` loop (through the functions it calls too)."""
    for op in block.operations:
        if op.name == "scf.while":
            return True
        if op.name == "tt.call":
            callee = str(op.attr("callee"))
            function = k.ir.functions.get(callee)
            if function is None or callee in seen or _loops(k, function.body[0], seen | {callee}):
                return True
        if any(_loops(k, b, seen) for region in op.regions for b in region):
            return True
    return False


def _both_sides(
    k: Tracer, condition: jax.Array, sides: Sequence[tuple[Block | None, list[Any]]], state: State, line: str | None
) -> tuple[list[Any], State]:
    """A branch of programs side by side whose condition is known only when they run, run on both sides, each
    side's loads, stores and atomics masked with its condition (`k.predicate`), its results chosen by it: the
    programs then stay side by side where a branch would have made them run in order."""
    outer, outer_path = k.predicate, k.path
    taken = jnp.asarray(condition).astype(bool)
    results: list[list[Any]] = []
    branch = len(k.env) + id(sides)  # one number per branch traced
    try:
        for (block, arguments), on, side in zip(sides, (taken, ~taken), (True, False), strict=True):
            k.predicate = on if outer is None else outer & on
            k.path = (*outer_path, (branch, side))
            if block is None:
                results.append([])
                continue
            values, state = k.run_block(block, arguments, state)
            results.append(values)
    finally:
        k.predicate, k.path = outer, outer_path
    merge = getattr(k.memory, "merge_sides", None)
    if merge is not None:
        merge(branch, taken, outer)
    if not results[1]:
        return results[0], state
    chosen: list[Any] = []
    for mine, theirs in zip(results[0], results[1], strict=True):
        _same_target(mine, theirs, line)
        if isinstance(mine, Pointer):
            offset = jnp.where(taken, jnp.asarray(mine.offset), jnp.asarray(theirs.offset))
            chosen.append(Pointer(mine.buffer, offset, mine.pointee))
        elif isinstance(mine, (BlockPointer, Descriptor)):
            raise Unsupported("a block pointer or descriptor chosen by a branch", line)
        else:
            chosen.append(jnp.where(taken, jnp.asarray(mine), jnp.asarray(theirs)))
    return chosen, state


def scf_if(k: Tracer, op: Operation, state: State) -> State:
    """``scf.if``: the branch itself when its condition is known at trace time; for programs side by side, both
    sides masked (`_both_sides`) where neither runs a ``while`` loop; else a ``lax.cond``."""
    condition = k.get(op.operands[0])
    then_block = op.regions[0][0]
    else_block = op.regions[1][0] if len(op.regions) > 1 and op.regions[1] else None
    if lang.is_static(condition):
        chosen = then_block if condition else else_block
        if chosen is None:
            return state
        results, state = k.run_block(chosen, [], state)
        for value, result in zip(op.results, results, strict=True):
            k.env[value] = result
        return state
    if k.vector and not any(b is not None and _loops(k, b) for b in (then_block, else_block)):
        results, state = _both_sides(k, k.array(op.operands[0]), [(then_block, []), (else_block, [])], state, op.line)
        for value, result in zip(op.results, results, strict=True):
            k.env[value] = result
        return state
    types = [k.type(v) for v in op.results]
    templates: dict[str, list[Any]] = {}

    def branch(name: str, block: Block | None) -> Any:
        def run(st: State) -> tuple[list[Any], State]:
            if block is None:
                return [], st
            results, st = _nested(k, block, [], st)
            templates[name] = results
            return _packed(results, types, results, op.line), st

        return run

    arrays, state = lax.cond(
        jnp.asarray(k.array(op.operands[0])).astype(bool), branch("then", then_block), branch("else", else_block), state
    )
    taken = templates.get("then", [])
    for mine, theirs in zip(taken, templates.get("else", taken), strict=True):
        _same_target(mine, theirs, op.line)
    for value, template, array in zip(op.results, taken, arrays, strict=False):
        k.env[value] = _unpack(template, array)
    return state


def _writes(k: Tracer, block: Block, seen: frozenset[str] = frozenset()) -> bool:
    """Whether running ``block`` may store (through the functions it calls too)."""
    for op in block.operations:
        if op.name in _WRITES:
            return True
        if op.name == "tt.call":
            callee = str(op.attr("callee"))
            function = k.ir.functions.get(callee)
            if function is None or callee in seen or _writes(k, function.body[0], seen | {callee}):
                return True
        if any(_writes(k, b, seen) for region in op.regions for b in region):
            return True
    return False


def scf_while(k: Tracer, op: Operation, state: State) -> State:
    """``scf.while``: a ``lax.while_loop`` whose condition runs the ``before`` region."""

    before, after = op.regions[0][0], op.regions[1][0]
    if _writes(k, before):
        return _storing_while(k, op, state)
    inits = [k.get(v) for v in op.operands]
    arg_types = [k.type(v) for v in before.arguments]

    def forwarded(arrays: list[Any], st: State) -> tuple[Any, list[Any], State]:
        values = [_unpack(t, a) for t, a in zip(inits, arrays, strict=True)]
        handed, st = _nested(k, before, values, st)
        return handed[0], handed[1:], st

    def condition(carry: tuple[list[Any], State]) -> jax.Array:
        arrays, st = carry
        cond, _, _ = forwarded(arrays, st)
        return jnp.asarray(cond).astype(bool)

    def body(carry: tuple[list[Any], State]) -> tuple[list[Any], State]:
        arrays, st = carry
        _, values, st = forwarded(arrays, st)
        yields, st = _nested(k, after, values, st)
        return _packed(yields, arg_types, inits, op.line), st

    # The carried values start behind a barrier: XLA's loop analysis of jaxlib 0.11.2 counts the trips of a loop
    # whose start, bound and step it sees as constants by rounding down, and removed the one trip of `i = 0;
    # while i < 1: i += 2`.
    start = lax.optimization_barrier(_packed(inits, arg_types, inits, op.line))
    arrays, state = lax.while_loop(condition, body, (start, state))
    _, values, state = forwarded(arrays, state)
    for value, result in zip(op.results, values, strict=True):
        k.env[value] = result
    return state


def _storing_while(k: Tracer, op: Operation, state: State) -> State:
    """``scf.while`` whose condition stores: a spin lock's ``while tl.atomic_cas(lock, 0, 1) == 1: pass``, a ticket
    taken with ``tl.atomic_add``. The condition runs once before the loop and once after each trip of the body,
    its stores kept (a ``lax.while_loop`` would run it again, and drop what it stores, to test it).

    The programs run one after another here (an atomic keeps them out of the side-by-side run), so a program never
    sees another's store while it waits: a trip that leaves everything as it found it, what the loop carries and
    every buffer, bit for bit, would be repeated forever, a lock that a program holds at its end, or that starts
    taken. The loop leaves then, and the state says so (`SPINS`): the check after the kernel fails the call with
    that instead of hanging the process.
    """
    before, after = op.regions[0][0], op.regions[1][0]
    inits = [k.get(v) for v in op.operands]
    arg_types = [k.type(v) for v in before.arguments]
    handed_types = [k.type(v) for v in after.arguments]
    handed, state = _nested(k, before, inits, state)
    templates = handed[1:]

    def trip(carry: tuple[jax.Array, list[Any], State]) -> tuple[jax.Array, list[Any], State]:
        _, arrays, st = carry
        values = [_unpack(t, a) for t, a in zip(templates, arrays, strict=True)]
        yields, moved = _nested(k, after, values, st)
        yields = [_unpack(t, a) for t, a in zip(inits, _packed(yields, arg_types, inits, op.line), strict=True)]
        again, moved = _nested(k, before, yields, moved)
        next_arrays = _packed(again[1:], handed_types, templates, op.line)
        still = _same_bits([*next_arrays, *moved.buffers], [*arrays, *st.buffers])
        running = jnp.asarray(lang.as_array(again[0], k.type(before.operations[-1].operands[0]))).astype(bool)
        spins = running & still
        faults = moved.faults | jnp.where(spins, jnp.int8(SPINS), jnp.int8(0))
        return running & ~spins, next_arrays, State(moved.buffers, faults)

    condition = jnp.asarray(lang.as_array(handed[0], k.type(before.operations[-1].operands[0]))).astype(bool)
    start = (condition, _packed(templates, handed_types, templates, op.line), state)
    _, arrays, state = lax.while_loop(lambda carry: carry[0], trip, start)
    for value, template, array in zip(op.results, templates, arrays, strict=True):
        k.env[value] = _unpack(template, array)
    return state


def _same_bits(new: Sequence[Any], old: Sequence[Any]) -> jax.Array:
    """Whether every array of ``new`` holds the bits of its counterpart in ``old`` (NaNs alike)."""
    same = jnp.asarray(True)
    for a, b in zip(jax.tree_util.tree_leaves(new), jax.tree_util.tree_leaves(old), strict=True):
        a, b = jnp.asarray(a), jnp.asarray(b)
        if jnp.issubdtype(a.dtype, jnp.floating):
            bits = jnp.dtype(f"uint{a.dtype.itemsize * 8}")
            a, b = lax.bitcast_convert_type(a, bits), lax.bitcast_convert_type(b, bits)
        same = same & jnp.all(a == b)
    return same


#: The terminators of a block that continue in another block of its region (what an early ``return`` makes).
BRANCHES = ("cf.br", "cf.cond_br")

#: How many blocks the branches of one function may run, counting each time a block is traced: an early ``return``
#: inside an ``if`` traces what follows that ``if`` on both of its sides.
_MAX_BRANCHED_BLOCKS = 256


def cf_branch(k: Tracer, op: Operation, region: Sequence[Block], state: State) -> tuple[list[Any], State]:
    """``cf.br`` and ``cf.cond_br``, which Triton makes of an early ``return`` (never of a loop: Triton refuses a
    ``return`` inside one, so the blocks of a function branch forward only): the target block runs on to the
    function's ``tt.return``, whose values it returns. A condition known when traced picks its side; else both sides
    run to the end inside a ``lax.cond``.
    """
    targets = op.attr("successors")
    if not targets or any(t >= len(region) for t in targets):
        raise Unsupported("a branch whose target blocks cannot be read", op.line)
    k.branched_blocks += 1
    if k.branched_blocks > _MAX_BRANCHED_BLOCKS:
        raise Unsupported(f"more than {_MAX_BRANCHED_BLOCKS} blocks reached through early returns", op.line)
    if op.name == "cf.br":
        return k.run_block(region[targets[0]], [k.get(v) for v in op.operands], state)
    sides = [region[t] for t in targets]
    split = 1 + len(sides[0].arguments)
    arguments = [[k.get(v) for v in op.operands[1:split]], [k.get(v) for v in op.operands[split:]]]
    condition = k.get(op.operands[0])
    if lang.is_static(condition):
        chosen = 0 if condition else 1
        return k.run_block(sides[chosen], arguments[chosen], state)
    if k.vector and not any(_loops(k, side) for side in sides):
        return _both_sides(k, k.array(op.operands[0]), list(zip(sides, arguments, strict=True)), state, op.line)
    returned = next((o for b in region for o in b.operations if o.name == "tt.return"), None)
    types = [k.type(v) for v in returned.operands] if returned is not None else []
    templates: dict[int, list[Any]] = {}

    def side(index: int) -> Any:
        def run(st: State) -> tuple[list[Any], State]:
            results, st = _nested(k, sides[index], arguments[index], st)
            templates[index] = results
            return _packed(results, types, results, op.line), st

        return run

    arrays, state = lax.cond(jnp.asarray(k.array(op.operands[0])).astype(bool), side(0), side(1), state)
    for mine, theirs in zip(templates[0], templates[1], strict=True):
        _same_target(mine, theirs, op.line)
    return [_unpack(t, a) for t, a in zip(templates[0], arrays, strict=True)], state
