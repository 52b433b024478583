"""The rules of loops, branches and calls: ``scf.for``, ``scf.if`` and ``scf.while`` as JAX's loops and ``cond`` (or
as straight-line code, where the plan says so), the branches of an early ``return`` (``cf.br``, ``cf.cond_br``), and
``tt.call``.

A ``scf.for`` is lowered as the plan chose from its trip count (`jt_core.translation.plan.LoopMode`):

* **unrolled**: traced once per trip, its trip a number (a short loop of known trips);
* **rolled**: a ``fori_loop`` whose trip is a traced scalar the same in every program;
* **predicated**: programs side by side whose trip counts differ (a causal block range from the program id) run
  one ``fori_loop`` to the most trips any program makes, each program's loads, stores and carried values masked
  past its own end;
* **per program**: a ``fori_loop`` whose trip count each program computes (a length loaded from memory).

A loop that only accumulates products of whole blocks (``acc = tl.dot(a, b, acc)``, a K-loop) has them computed as
one product around the loop (`_whole_products`), or, traced step by step, as one batched product added in order.

What a loop or branch carries must be arrays of fixed types (`jt_core.translation.carried`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.translation import carried, elementwise, lang, mapped, reductions
from jt_core.translation.analysis import loops
from jt_core.translation.analysis.facts import Loop
from jt_core.translation.descriptors import Descriptor
from jt_core.translation.memory import SPINS, Choice, Pointer, State
from jt_core.translation.plan import LoopMode
from jt_core.translation.program import Block, Operation
from jt_core.translation.rules import RuleContext, rule
from jt_core.translation.values import BlockPointer, Unsupported

__all__ = ["branch"]


# -- scf.for -----------------------------------------------------------------------------------------------------


@rule("scf.for", analyse=loops.analyse_for)
def _for(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    inits = [k.get(v) for v in op.operands[3:]]
    loop = k.loop_fact(op)
    if loop is None or loop.most == 0:
        for value, init in zip(op.results, inits, strict=True):
            k.set(value, init)
        return state
    mode = k.loop_mode(loop)
    outside = _outside(k, loop, mode)
    for dot, _, _ in outside:
        k.outside.add(id(dot))
    try:
        whole, state = _whole_products(k, loop, outside, state)
        values = _left_over(k, op, loop, outside, inits)
        if values is not None:
            pass  # nothing but the products and the inductions: the loop need not run
        elif mode is LoopMode.UNROLLED:
            values, state = _unrolled(k, op, loop, inits, state)
        else:
            values, state = _rolled(k, op, loop, mode, inits, state)
        for dot, index, _ in outside:
            acc = lang.as_array(values[index], k.type(op.results[index]))
            precision = dot.attr("inputPrecision", "IEEE")
            operands = whole.get(id(dot))
            if operands is None:
                values[index] = _collected_products(acc, k.collected[id(dot)], precision, ctx.strategy)
                continue
            a, b = operands
            ordered = ctx.strategy.ordered_accumulation
            values[index] = reductions.accumulated(acc, a, b, precision, ctx.strategy.numerics, ordered)
    finally:
        for dot, _, _ in outside:
            k.outside.discard(id(dot))
            k.collected.pop(id(dot), None)
    for value, result in zip(op.results, values, strict=True):
        k.set(value, result)
    return state


def _outside(k: Any, loop: Loop, mode: LoopMode) -> list[tuple[Operation, int, Any]]:
    """The loop's accumulated products computed around it: of whole blocks loaded once (`_whole_products`), or, in
    a loop traced step by step, of the operands each step collects (one batched product after it)."""
    if loop.most is None or loop.most < 2 or loop.trips.value != "static":
        return []
    found: list[tuple[Operation, int, Any]] = []
    for dot, index, loads in loop.dots:
        facts = [k.access_fact(load) for load in loads] if loads is not None else []
        if loads is not None and all(f is not None and f.form is not None for f in facts):
            found.append((dot, index, loads))
            continue
        if mode is LoopMode.UNROLLED:
            found.append((dot, index, None))
            k.collected[id(dot)] = []
    return found


def _whole_products(
    k: Any, loop: Loop, outside: Sequence[tuple[Operation, int, Any]], state: State
) -> tuple[dict[int, tuple[jax.Array, jax.Array]], State]:
    """The operands of each product computed around the loop, ``(steps, M, K)`` and ``(steps, K, N)``: two whole
    blocks loaded once where each step's operands are unmasked loads whose offsets move by the same distance each
    step (a K-loop's ``a_ptrs += BLOCK_K``), else the operands each unrolled step collected (`k.collected`), read
    after the loop by `collected_products`."""
    found: dict[int, tuple[jax.Array, jax.Array]] = {}
    for dot, _, loads in outside:
        if loads is None:
            continue
        operands = []
        for load in loads:
            access = k.access_fact(load)
            pointer = k.stepped_pointer(access, loop)
            value, state = k.memory.load(state, pointer, None, None, pointer.affine.shape)
            operands.append(lang.widen_for_dot(value))
        found[id(dot)] = (operands[0], operands[1])
    return found, state


def _left_over(
    k: Any, op: Operation, loop: Loop, outside: Sequence[tuple[Operation, int, Any]], inits: list[Any]
) -> list[Any] | None:
    """The loop's results where its products are computed around it of whole blocks and nothing else is left of
    it: its body makes no access but those products' loads, and every other value it carries is either unused after
    it or an induction, whose last value is known (a K-loop's pointers). ``None`` where the loop must run."""
    if not outside or any(loads is None for _, _, loads in outside) or loop.most is None:
        return None
    body = op.regions[0][0]
    loads = {id(load) for _, _, pair in outside for load in pair}
    if any(id(access.op) not in loads for access in k.accesses_within(body)):
        return None
    products = {index for _, index, _ in outside}
    results = []
    for index, (value, init) in enumerate(zip(op.results, inits, strict=True)):
        step = loop.carried[index] if index < len(loop.carried) else None
        if index in products or value not in k.facts.used:
            results.append(init)
        elif step is None:
            return None
        else:
            results.append(_moved(init, step.const * loop.most))
    return results


def _moved(value: Any, amount: int) -> Any:
    """A carried value moved by ``amount`` (an induction's last value)."""
    if isinstance(value, Pointer):
        offset = int(value.offset) + amount if lang.is_static(value.offset) else jnp.asarray(value.offset) + amount
        return Pointer(value.buffer, offset, value.pointee)
    if lang.is_static(value):
        return int(value) + amount
    return value + jnp.asarray(amount, jnp.asarray(value).dtype)


def _unrolled(k: Any, op: Operation, loop: Loop, inits: list[Any], state: State) -> tuple[list[Any], State]:
    """``scf.for`` traced once per trip: straight-line code, each trip's counter a number (or a traced scalar the
    same in every program plus it)."""
    body = op.regions[0][0]
    lower, step = k.get(op.operands[0]), k.get(op.operands[2])
    iv_dtype = lang.dtype_of(k.type(body.arguments[0]).element)
    values = inits
    assert loop.most is not None
    trips = None if loop.trips.value == "static" else _trips(k, op)
    types = [k.type(v) for v in op.results]
    for trip in range(loop.most):
        k.trips[loop.symbol] = trip
        if lang.is_static(lower):
            iv: Any = int(np.asarray(int(lower) + trip * int(step)).astype(iv_dtype))
        else:
            iv = (jnp.asarray(lower).astype(jnp.int64) + trip * int(step)).astype(iv_dtype)
        if trips is None:
            values, state = k.run_block(body, [iv, *values], state)
            continue
        # Programs whose own trips are fewer leave this one masked, their values as they were.
        active = trip < trips
        with k.guard(active):
            moved, state = k.run_block(body, [iv, *values], state)
        old = carried.packed(values, types, inits, op.line)
        new = carried.packed(moved, types, inits, op.line)
        chosen = [_chosen(active, n, o) for n, o in zip(new, old, strict=True)]
        values = carried.unpacked(k, inits, chosen, body.arguments[1:])
    k.trips.pop(loop.symbol, None)
    return list(values), state


def _counter_dtype(iv_dtype: Any) -> Any:
    """What a loop's trips are counted in: its counter's width, at least 32 bits (64-bit integers are emulated on a
    TPU, and a loop's arithmetic runs in every program on every trip)."""
    return jnp.int64 if np.dtype(iv_dtype).itemsize > 4 else jnp.int32


def _trips(k: Any, op: Operation) -> jax.Array:
    """How many trips a ``scf.for`` makes in the program being traced, in `_counter_dtype`: the bounds' difference
    taken unsigned, so that it cannot overflow."""
    iv_type = k.type(op.regions[0][0].arguments[0])
    counter = _counter_dtype(lang.dtype_of(iv_type.element))
    unsigned = jnp.uint64 if counter == jnp.int64 else jnp.uint32
    lower, upper, step = (lang.as_array(k.get(v), iv_type).astype(counter) for v in op.operands[:3])
    span = upper.astype(unsigned) - lower.astype(unsigned)
    count = (span - 1) // jnp.maximum(step, 1).astype(unsigned) + 1
    return jnp.where(upper > lower, count.astype(counter), counter(0))


def _collected_products(
    acc: jax.Array, collected: Sequence[tuple[jax.Array, jax.Array]], precision: str, strategy: Any
) -> jax.Array:
    """``acc`` plus the products of the operands each unrolled step of a loop collected: one batched product where
    the steps' blocks are alike, else one product after another."""
    if len({(a.shape, b.shape) for a, b in collected}) == 1:
        a = jnp.stack([a for a, _ in collected])
        b = jnp.stack([b for _, b in collected])
        return reductions.accumulated(acc, a, b, precision, strategy.numerics, strategy.ordered_accumulation)
    for a, b in collected:
        acc = reductions.product(a, b, acc, precision, strategy.numerics)
    return acc


def _rolled(
    k: Any, op: Operation, loop: Loop, mode: LoopMode, inits: list[Any], state: State
) -> tuple[list[Any], State]:
    """``scf.for`` as a ``fori_loop``: over its trips (the same in every program, or each program's own), or, for
    programs side by side whose trip counts differ, over the most trips any makes, each program masked past its
    own end (``predicated``)."""
    body = op.regions[0][0]
    types = [k.type(v) for v in op.results]
    iv_type = k.type(body.arguments[0])
    iv_dtype = lang.dtype_of(iv_type.element)
    counter = _counter_dtype(iv_dtype)
    lower = lang.as_array(k.get(op.operands[0]), iv_type).astype(counter)
    step = lang.as_array(k.get(op.operands[2]), iv_type).astype(counter)
    trips = _trips(k, op)
    predicated = mode is LoopMode.PREDICATED

    def iteration(t: Any, carry: tuple[list[Any], State]) -> tuple[list[Any], State]:
        arrays, st = carry
        trip = t.astype(counter)
        k.trips[loop.symbol] = trip
        iv = (lower + trip * step).astype(iv_dtype)
        values = carried.unpacked(k, inits, arrays, body.arguments[1:])
        if not predicated:
            yields, st = k.nested(body, [iv, *values], st)
            return carried.packed(yields, types, inits, op.line), st
        active = trip < trips
        with k.guard(active):
            yields, st = k.nested(body, [iv, *values], st)
        moved = carried.packed(yields, types, inits, op.line)
        return [_chosen(active, new, old) for new, old in zip(moved, arrays, strict=True)], st

    initial = carried.packed(inits, types, inits, op.line)
    if predicated:
        count: Any = loop.most
    elif loop.trips.value == "static":
        count = loop.most
    else:
        count = trips
    try:
        stop = counter(count) if isinstance(count, int) else count
        arrays, state = lax.fori_loop(counter(0), stop, iteration, (initial, state))
    finally:
        k.trips.pop(loop.symbol, None)
    return carried.unpacked(k, inits, arrays, op.results), state


def _chosen(active: Any, new: Any, old: Any) -> Any:
    if isinstance(new, tuple):
        return tuple(_chosen(active, n, o) for n, o in zip(new, old, strict=True))
    return jnp.where(active, new, old)


# -- branches ----------------------------------------------------------------------------------------------------


def _both_sides(
    k: Any, condition: jax.Array, sides: Sequence[tuple[Block | None, list[Any]]], state: State, line: str | None
) -> tuple[list[Any], State]:
    """A branch of programs side by side whose condition is known only when they run, run on both sides, each
    side's loads, stores and atomics masked with its condition (`k.guard`), its results chosen by it: the programs
    then stay side by side where a branch would have made them run in order."""
    taken = jnp.asarray(condition).astype(bool)
    results: list[list[Any]] = []
    branch_id = k.new_branch()
    for (block, arguments), on, side in zip(sides, (taken, ~taken), (True, False), strict=True):
        if block is None:
            results.append([])
            continue
        with k.guard(on, (branch_id, side)):
            values, state = k.run_block(block, arguments, state)
        results.append(values)
    k.memory.merge_sides(branch_id, taken, k.predicate)
    if not results[1]:
        return results[0], state
    chosen: list[Any] = []
    for mine, theirs in zip(results[0], results[1], strict=True):
        if isinstance(mine, (Pointer, Choice)) and isinstance(theirs, (Pointer, Choice)):
            if isinstance(mine, Pointer) and isinstance(theirs, Pointer) and mine.buffer == theirs.buffer:
                offset = jnp.where(taken, jnp.asarray(mine.offset), jnp.asarray(theirs.offset))
                chosen.append(Pointer(mine.buffer, offset, mine.pointee))
            else:  # a branch that points one value at another argument: each lane's side chooses
                chosen.append(elementwise.chosen(taken, mine, theirs))
            continue
        carried.same_target(mine, theirs, line)
        if isinstance(mine, Pointer):
            offset = jnp.where(taken, jnp.asarray(mine.offset), jnp.asarray(theirs.offset))
            chosen.append(Pointer(mine.buffer, offset, mine.pointee))
        elif isinstance(mine, (BlockPointer, Descriptor)):
            raise Unsupported("a block pointer or descriptor chosen by a branch", line)
        else:
            chosen.append(jnp.where(taken, jnp.asarray(mine), jnp.asarray(theirs)))
    return chosen, state


@rule("scf.if", analyse=loops.analyse_if)
def _if(ctx: RuleContext, state: State) -> State:
    """``scf.if``: the side a condition known when tracing picks; for programs side by side, both sides masked
    (`_both_sides`) where neither runs a ``while`` loop; else a ``lax.cond``."""
    k, op = ctx.kernel, ctx.op
    condition = k.get(op.operands[0])
    then_block = op.regions[0][0]
    else_block = op.regions[1][0] if len(op.regions) > 1 and op.regions[1] else None
    if lang.is_static(condition):
        chosen = then_block if condition else else_block
        if chosen is None:
            return state
        results, state = k.run_block(chosen, [], state)
        for value, result in zip(op.results, results, strict=True):
            k.set(value, result)
        return state
    # Programs side by side run both sides masked; so does a branch that points a value at another argument (a
    # value in one of two buffers is a choice of pointers, which no XLA branch can hand on).
    repointed = any(len(k.facts.fact(k.path, v).buffers or ()) > 1 for v in op.results)
    if (k.vector or repointed) and not any(b is not None and _waits(k, b) for b in (then_block, else_block)):
        results, state = _both_sides(k, k.array(op.operands[0]), [(then_block, []), (else_block, [])], state, op.line)
        for value, result in zip(op.results, results, strict=True):
            k.set(value, result)
        return state
    types = [k.type(v) for v in op.results]
    templates: dict[str, list[Any]] = {}

    def side(name: str, block: Block | None) -> Any:
        def run(st: State) -> tuple[list[Any], State]:
            if block is None:
                return [], st
            results, st = k.nested(block, [], st)
            templates[name] = results
            return carried.packed(results, types, results, op.line), st

        return run

    arrays, state = lax.cond(
        jnp.asarray(k.array(op.operands[0])).astype(bool), side("then", then_block), side("else", else_block), state
    )
    taken = templates.get("then", [])
    for mine, theirs in zip(taken, templates.get("else", taken), strict=True):
        carried.same_target(mine, theirs, op.line)
    for value, template, array in zip(op.results, taken, arrays, strict=False):
        k.set(value, carried.unpack(template, array, k.form(value)))
    return state


def _waits(k: Any, block: Block) -> bool:
    """Whether running ``block`` may run a ``while`` loop (through the functions it calls too)."""
    return any(loop.is_while for loop in k.loops_within(block))


def branch(k: Any, op: Operation, region: Sequence[Block], state: State) -> tuple[list[Any], State]:
    """``cf.br`` and ``cf.cond_br``, which Triton makes of an early ``return`` (never of a loop: Triton refuses a
    ``return`` inside one, so the blocks of a function branch forward only): the target block runs on to the
    function's ``tt.return``, whose values it returns. A condition known when traced picks its side; else both sides
    run to the end inside a ``lax.cond``, or masked where the programs run side by side."""
    targets = op.attr("successors")
    if op.name == "cf.br":
        return k.run_block(region[targets[0]], [k.get(v) for v in op.operands], state)
    sides = [region[t] for t in targets]
    split = 1 + len(sides[0].arguments)
    arguments = [[k.get(v) for v in op.operands[1:split]], [k.get(v) for v in op.operands[split:]]]
    condition = k.get(op.operands[0])
    if lang.is_static(condition):
        chosen = 0 if condition else 1
        return k.run_block(sides[chosen], arguments[chosen], state)
    if k.vector and not any(_waits(k, side) for side in sides):
        return _both_sides(k, k.array(op.operands[0]), list(zip(sides, arguments, strict=True)), state, op.line)
    # A function's blocks end in its return, those of the function tl.map_elementwise maps in the region's.
    returned = next((o for b in region for o in b.operations if o.name in ("tt.return", mapped.RETURN)), None)
    types = [k.type(v) for v in returned.operands] if returned is not None else []
    templates: dict[int, list[Any]] = {}

    def side(index: int) -> Any:
        def run(st: State) -> tuple[list[Any], State]:
            results, st = k.nested(sides[index], arguments[index], st)
            templates[index] = results
            return carried.packed(results, types, results, op.line), st

        return run

    arrays, state = lax.cond(jnp.asarray(k.array(op.operands[0])).astype(bool), side(0), side(1), state)
    for mine, theirs in zip(templates[0], templates[1], strict=True):
        carried.same_target(mine, theirs, op.line)
    return [carried.unpack(t, a) for t, a in zip(templates[0], arrays, strict=True)], state


def _jump(ctx: RuleContext, state: State) -> State:
    raise Unsupported(f"{ctx.op.name} outside the end of a block", ctx.op.line)  # `branch` runs it, as a terminator


rule("cf.br", jumps=True)(_jump)
rule("cf.cond_br", jumps=True)(_jump)


# -- scf.while ---------------------------------------------------------------------------------------------------


@rule("scf.while", analyse=loops.analyse_while)
def _while(ctx: RuleContext, state: State) -> State:
    """``scf.while``: a ``lax.while_loop`` whose condition runs the ``before`` region."""
    k, op = ctx.kernel, ctx.op
    before, after = op.regions[0][0], op.regions[1][0]
    if _stores(k, before):
        return _storing_while(k, op, state)
    inits = [k.get(v) for v in op.operands]
    arg_types = [k.type(v) for v in before.arguments]

    def forwarded(arrays: list[Any], st: State) -> tuple[Any, list[Any], State]:
        values = [carried.unpack(t, a) for t, a in zip(inits, arrays, strict=True)]
        handed, st = k.nested(before, values, st)
        return handed[0], handed[1:], st

    def condition(carry: tuple[list[Any], State]) -> jax.Array:
        arrays, st = carry
        cond, _, _ = forwarded(arrays, st)
        return jnp.asarray(cond).astype(bool)

    def body(carry: tuple[list[Any], State]) -> tuple[list[Any], State]:
        arrays, st = carry
        _, values, st = forwarded(arrays, st)
        yields, st = k.nested(after, values, st)
        return carried.packed(yields, arg_types, inits, op.line), st

    # The carried values start behind a barrier: XLA's loop analysis of jaxlib 0.11.2 counts the trips of a loop
    # whose start, bound and step it sees as constants by rounding down, and removed the one trip of `i = 0;
    # while i < 1: i += 2`.
    start = lax.optimization_barrier(carried.packed(inits, arg_types, inits, op.line))
    arrays, state = lax.while_loop(condition, body, (start, state))
    _, values, state = forwarded(arrays, state)
    for value, result in zip(op.results, values, strict=True):
        k.set(value, result)
    return state


def _stores(k: Any, block: Block) -> bool:
    """Whether running ``block`` may store (through the functions it calls too)."""
    return any(access.kind != "load" for access in k.accesses_within(block))


def _storing_while(k: Any, op: Operation, state: State) -> State:
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
    handed, state = k.nested(before, inits, state)
    templates = handed[1:]

    def trip(carry: tuple[jax.Array, list[Any], State]) -> tuple[jax.Array, list[Any], State]:
        _, arrays, st = carry
        values = [carried.unpack(t, a) for t, a in zip(templates, arrays, strict=True)]
        yields, moved = k.nested(after, values, st)
        yields = [
            carried.unpack(t, a) for t, a in zip(inits, carried.packed(yields, arg_types, inits, op.line), strict=True)
        ]
        again, moved = k.nested(before, yields, moved)
        next_arrays = carried.packed(again[1:], handed_types, templates, op.line)
        still = _same_bits([*next_arrays, *moved.buffers], [*arrays, *st.buffers])
        running = jnp.asarray(lang.as_array(again[0], k.type(before.operations[-1].operands[0]))).astype(bool)
        spins = running & still
        faults = moved.faults | jnp.where(spins, jnp.int8(SPINS), jnp.int8(0))
        return running & ~spins, next_arrays, State(moved.buffers, faults)

    condition = jnp.asarray(lang.as_array(handed[0], k.type(before.operations[-1].operands[0]))).astype(bool)
    start = (condition, carried.packed(templates, handed_types, templates, op.line), state)
    _, arrays, state = lax.while_loop(lambda carry: carry[0], trip, start)
    for value, template, array in zip(op.results, templates, arrays, strict=True):
        k.set(value, carried.unpack(template, array))
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


# -- calls and block ends ----------------------------------------------------------------------------------------


@rule("tt.call", analyse=loops.analyse_call, effect=True, sums=True, calls=True)
def _call(ctx: RuleContext, state: State) -> State:
    k, op = ctx.kernel, ctx.op
    args = [k.get(v) for v in op.operands]
    chained = [i for i, v in enumerate(op.operands) if v in k.call_results and _is_block(args[i])]
    if chained:
        # A helper's result handed straight to another helper (the stages of a sorting network): materialized
        # between the two, XLA compiles each stage once; fused, it duplicates every earlier stage into each use of
        # a later one (a 512-element bitonic argsort took minutes to compile).
        kept = lax.optimization_barrier([args[i] for i in chained])
        for i, array in zip(chained, kept, strict=True):
            args[i] = array
    results, state = k.call(op, args, state)
    for value, result in zip(op.results, results, strict=True):
        k.set(value, result)
    return state


def _is_block(value: Any) -> bool:
    """Whether ``value`` is a JAX array of more than one dimension's worth of elements (a block, not a scalar)."""
    return isinstance(value, jax.Array) and value.ndim > 0


def _ends(ctx: RuleContext, state: State) -> State:
    raise Unsupported(f"{ctx.op.name} outside the end of a block", ctx.op.line)  # the kernel hands its values on


for _name, _sums in (
    ("scf.yield", True),
    ("tt.return", True),
    ("scf.condition", False),
    ("tt.reduce.return", False),
    ("tt.scan.return", False),
    (mapped.RETURN, False),
):
    rule(_name, terminator=True, sums=_sums)(_ends)
