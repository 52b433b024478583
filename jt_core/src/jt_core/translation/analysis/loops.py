"""What the address walk learns from a kernel's loops, branches and calls: the rules' analyses of ``scf.for``,
``scf.while``, ``scf.if`` and ``tt.call`` (`jt_core.translation.control` registers them).

A loop's body is walked as one trip standing for all of them: its trip is a symbol ``t`` (from 0) whose range is
``[0, most - 1]`` where the most trips any program makes is known, and its counter is ``lower + step * t``. A value
the loop carries that every trip moves by the same constant (``ptrs += BLOCK_K * stride``, ``offset += BLOCK``) is
an *induction*: ``init + step * t``, found by walking the body once with the carried values as unknowns, then again
with their forms.

Assumptions: a loop's trip count is ``ceil((upper - lower) / step)`` for a positive step (a step that is not
positive refuses the kernel: Triton's front end makes no such loop for ``range``); a ``while`` loop's trips are
never known; a helper is walked once per call, with its call's facts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from jt_core.translation.analysis.affine import Affine
from jt_core.translation.analysis.facts import UNKNOWN, Fact, Loop, Trips
from jt_core.translation.analysis.walk import Walk, join
from jt_core.translation.program import Block, Operation

__all__ = ["BATCHED_PRECISIONS", "analyse_call", "analyse_for", "analyse_if", "analyse_while", "body_size"]


def body_size(block: Block, used: set[int] | frozenset[int]) -> int:
    """How many operations a block holds that compute what something uses, nested ones included."""
    return sum(
        (not op.results or any(r in used for r in op.results)) + sum(body_size(b, used) for r in op.regions for b in r)
        for op in block.operations
    )


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _trips(walk: Walk, op: Operation) -> tuple[Trips, int | None] | None:
    """The kind and the most of a ``scf.for``'s trips, or ``None`` (refused) for a step that is not positive."""
    lower, upper, step = op.operands[:3]
    known = [walk.static(v) for v in (lower, upper, step)]
    if known[2] is not None and int(known[2]) <= 0:
        walk.refuse("a loop whose step is not positive", op.line)
        return None
    varies = walk.varies(lower, upper, step)
    if all(k is not None for k in known) and not varies:
        return Trips.STATIC, max(0, _ceil_div(int(known[1]) - int(known[0]), int(known[2])))
    most = None
    span = None
    lower_form, upper_form = walk.form(lower), walk.form(upper)
    if known[2] is not None and lower_form is not None and upper_form is not None:
        span = upper_form.plus(lower_form, -1).bounds(walk.grid, walk.ranges)
    if span is not None:
        most = max(0, _ceil_div(span[1], int(known[2])))
    if not varies:
        return Trips.UNIFORM, most
    return (Trips.BOUNDED, most) if most is not None else (Trips.DYNAMIC, None)


def _carried_unknowns(walk: Walk, loop: Loop, inits: Sequence[Fact], values: Sequence[int]) -> list[Fact]:
    """The carried values as unknown symbols (the body's first walk), keeping what cannot change."""
    found = []
    for index, (init, value) in enumerate(zip(inits, values, strict=True)):
        ty = walk.type(value)
        form = None
        if init.form is not None:
            form = Affine.symbol(("carry", loop.path, id(loop.op), index), ty.shape)
        found.append(Fact(form=form, buffers=init.buffers, varies=init.varies))
    return found


def _step(carried: Affine | None, yielded: Affine | None) -> int | None:
    """The constant a carried value moves by in every trip, where it does."""
    if carried is None or yielded is None:
        return None
    delta = yielded.plus(carried, -1)
    if not delta.is_constant:
        return None
    return delta.const


def analyse_for(walk: Walk, op: Operation) -> None:
    """``scf.for``: its trips, its counter's form, its carried values (inductions where they are), its body."""
    inits = [walk.fact(v) for v in op.operands[3:]]
    body = op.regions[0][0]
    found = _trips(walk, op)
    if found is None:
        for value in op.results:
            walk.set(value, UNKNOWN)
        return
    kind, most = found
    loop = Loop(op, walk.path, kind, most, body_size(body, walk.used))
    if most == 0:  # no program makes a trip: the loop hands on what it was given
        walk.loops[(walk.path, id(op))] = loop
        for value, init in zip(op.results, inits, strict=True):
            walk.set(value, init)
        return
    trip = Affine.symbol(loop.symbol)
    lower_form = walk.form(op.operands[0])
    step = walk.static(op.operands[2])
    counter_type = walk.type(body.arguments[0]).element
    counter_form = None
    if lower_form is not None and step is not None:
        counter_form = walk.exact(lower_form.plus(trip.times(int(step))), counter_type)
    counter = Fact(form=counter_form, varies=walk.varies(*op.operands[:3]))

    # First walk: the carried values as unknowns, to find what each trip moves them by.
    recording = walk.recording
    walk.recording = False
    try:
        walked = walk.in_loop(
            loop, lambda: walk.block(body, [counter, *_carried_unknowns(walk, loop, inits, body.arguments[1:])])
        )
    finally:
        walk.recording = recording
    unknowns = _carried_unknowns(walk, loop, inits, body.arguments[1:])
    first = list(walked) + [UNKNOWN] * (len(inits) - len(walked))
    steps = [_step(u.form, y.form) for u, y in zip(unknowns, first, strict=True)]
    carried = []
    for init, value, once, moved in zip(inits, body.arguments[1:], first, steps, strict=True):
        form = None
        if moved is not None and init.form is not None:
            form = walk.exact(init.form.plus(trip.times(moved).broadcast(init.form.shape)), walk.type(value).element)
            if walk.type(value).is_pointer:
                form = init.form.plus(trip.times(moved).broadcast(init.form.shape))
        if init.buffers is not None and once.buffers is not None and not once.buffers <= init.buffers:
            walk.refuse("a pointer moved to another argument inside a loop", op.line)
        buffers = init.buffers if once.buffers is None or init.buffers is None else init.buffers | once.buffers
        static = init.static if moved == 0 else None
        carried.append(Fact(form=form, buffers=buffers, static=static, varies=init.varies or once.varies))
    loop = dataclasses.replace(loop, carried=tuple(None if s is None else Affine.constant(s) for s in steps))
    walk.loops[(walk.path, id(op))] = loop

    # Second walk: the carried values' forms known where they are inductions.
    walk.forget(body)
    yielded = walk.in_loop(loop, lambda: walk.block(body, [counter, *carried]))
    walk.loops[(walk.path, id(op))] = dataclasses.replace(
        loop, dots=walk.in_loop(loop, lambda: _accumulating(walk, body))
    )
    for index, value in enumerate(op.results):
        init = inits[index]
        after = yielded[index] if index < len(yielded) else UNKNOWN
        form = None
        if steps[index] is not None and kind is Trips.STATIC and init.form is not None and most is not None:
            form = walk.exact(init.form.shifted(steps[index] * most), walk.type(value).element)  # type: ignore[operator]
            if walk.type(value).is_pointer:
                form = init.form.shifted(steps[index] * most)  # type: ignore[operator]
        merged = join(init, after)
        walk.set(value, dataclasses.replace(merged, form=form, static=init.static if steps[index] == 0 else None))


#: The input precisions whose products a loop's accumulation may batch (TF32x3 sums three products per step).
BATCHED_PRECISIONS = ("IEEE", "TF32")


def _accumulating(walk: Walk, body: Block) -> tuple[tuple[Operation, int, tuple[Operation, Operation] | None], ...]:
    """The products a loop's body only accumulates into what the loop carries (`Loop.dots`)."""
    users = walk.ir.users
    carried = {value: index for index, value in enumerate(body.arguments[1:])}
    yielded = body.operations[-1].operands
    made = {result: op for op in body.operations for result in op.results}
    found = []
    for dot in body.operations:
        if dot.name != "tt.dot" or dot.attr("inputPrecision", "IEEE") not in BATCHED_PRECISIONS:
            continue
        index = carried.get(dot.operands[2])
        result = dot.results[0]
        if index is None or yielded[index] != result:
            continue
        if len(users.get(dot.operands[2], ())) != 1 or len(users.get(result, ())) != 1:
            continue
        loads = [made.get(v) for v in dot.operands[:2]]
        whole = all(op is not None and op.name == "tt.load" and _unmasked(walk, op) for op in loads)
        found.append((dot, index, (loads[0], loads[1]) if whole else None))
    return tuple(found)  # type: ignore[arg-type]


def _unmasked(walk: Walk, load: Operation) -> bool:
    """Whether a load reads every lane of its block in every program and trip: no mask, or one always on."""
    if len(load.operands) == 1:
        return True
    mask = walk.fact(load.operands[1]).mask
    return mask is not None and mask.always_on(walk.grid, walk.ranges)


def analyse_while(walk: Walk, op: Operation) -> None:
    """``scf.while``: trips never known; what it carries keeps only the buffers its pointers point into."""
    before, after = op.regions[0][0], op.regions[1][0]
    inits = [walk.fact(v) for v in op.operands]
    loop = Loop(op, walk.path, Trips.DYNAMIC, None, body_size(before, walk.used) + body_size(after, walk.used))
    walk.loops[(walk.path, id(op))] = loop
    carried = [Fact(buffers=f.buffers) for f in inits]

    def both() -> list[Fact]:
        handed = walk.block(before, carried)
        walk.block(after, [Fact(buffers=f.buffers) for f in handed[1:]])
        return handed[1:]

    handed = walk.in_loop(loop, both)
    for value, fact in zip(op.results, handed, strict=False):
        walk.set(value, Fact(buffers=fact.buffers))


def analyse_if(walk: Walk, op: Operation) -> None:
    """``scf.if``: the side a condition known when tracing picks; both sides otherwise, their results joined."""
    then_block = op.regions[0][0]
    else_block = op.regions[1][0] if len(op.regions) > 1 and op.regions[1] else None
    known = walk.static(op.operands[0])
    if known is not None:
        chosen = then_block if known else else_block
        results = walk.block(chosen, []) if chosen is not None else []
        for value, fact in zip(op.results, results, strict=False):
            walk.set(value, fact)
        return
    sides: list[list[Fact]] = []
    for block, side in ((then_block, True), (else_block, False)):
        if block is None:
            sides.append([])
            continue
        sides.append(walk.on_side(op.operands[0], side, lambda b=block: walk.block(b, [])))  # type: ignore[misc]
    for index, value in enumerate(op.results):
        a = sides[0][index] if index < len(sides[0]) else UNKNOWN
        b = sides[1][index] if index < len(sides[1]) else UNKNOWN
        walk.set(value, join(a, b))


def analyse_call(walk: Walk, op: Operation) -> None:
    """``tt.call``: the helper walked with its call's facts."""
    results = walk.call(op, str(op.attr("callee")), [walk.fact(v) for v in op.operands])
    for index, value in enumerate(op.results):
        walk.set(value, results[index] if results is not None and index < len(results) else UNKNOWN)
