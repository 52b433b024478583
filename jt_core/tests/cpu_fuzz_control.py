"""Generated control flow for the CPU fuzzer: ``for`` loops over a run-time trip count with loop-carried values,
``tl.static_range``, ``while`` loops, and ``if``/``else`` on kernel scalars and on values computed from the data,
each body an element-wise expression (`cpu_fuzz_grammar`) that the reference runs through the same control flow.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cpu_fuzz_grammar import Evaluator, Leaves, Node, Val, Writer, converted, expressions, is_scalar
from cpu_fuzz_programs import Expected, Instance, Program, _module, random_array, stored
from cpu_fuzz_semantics import DATA_TYPES, I32, ty
from hypothesis import strategies as st


@st.composite
def control_flow(draw: Any, avoid: frozenset[str]) -> Program:
    """One of: a ``for`` loop (``range`` with a run-time bound, a start and a step, or ``tl.static_range``), a
    ``while`` loop, an ``if``/``else`` on a scalar or on a reduction of the data, or a loop with a branch inside;
    the loop-carried value keeps its type."""
    t = ty(draw(st.sampled_from(DATA_TYPES)))
    block = draw(st.sampled_from((8, 16)))
    chunks = draw(st.integers(1, 3))
    shape = draw(st.sampled_from(("for", "static", "while", "if_scalar", "if_data", "for_if")))
    leaves = Leaves((("acc", t), ("y", t)), (("i", I32),))
    update, other = (
        _block_valued(draw(expressions(leaves, draw(st.integers(1, 3)), avoid)), t, avoid) for _ in range(2)
    )
    start, step = draw(st.integers(0, 2)), draw(st.integers(1, 2))
    trips = draw(st.integers(0, 5))
    threshold = draw(st.sampled_from((-3, 0, 2)))

    write = Writer(indent="        ")
    u = write(update)
    update_lines = write.lines
    write_other = Writer(prefix="w", indent="        ")
    o = write_other(other)
    other_lines = write_other.lines
    load = "        y = tl.load(x_ptr + (i % CHUNKS) * BLOCK + offs)"
    body = [
        "    offs = tl.arange(0, BLOCK)",
        "    acc = tl.load(x_ptr + offs)",
    ]
    loop = f"    for i in range({start}, n, {step}):"
    if shape == "for":
        body += [loop, load, *update_lines, f"        acc = {u}"]
    elif shape == "static":
        body += [f"    for j in tl.static_range({start}, STATIC, {step}):", "        i = tl.full([], j, tl.int32)"]
        body += [load, *update_lines, f"        acc = {u}"]
    elif shape == "while":
        body += [f"    i = tl.full([], {start}, tl.int32)", "    while i < n:", load, *update_lines]
        body += [f"        acc = {u}", f"        i += {step}"]
    elif shape == "for_if":
        body += [loop, load, "        if i % 2 == 0:"]
        body += [_indent(line) for line in update_lines] + [f"            acc = {u}", "        else:"]
        body += [_indent(line) for line in other_lines] + [f"            acc = {o}"]
    else:
        condition = "s > 0" if shape == "if_scalar" else f"tl.sum(tl.load(c_ptr + offs), axis=0) > {threshold}"
        body += [f"    i = tl.full([], {start}, tl.int32)", "    y = tl.load(x_ptr + (CHUNKS - 1) * BLOCK + offs)"]
        body += [f"    if {condition}:", *update_lines, f"        acc = {u}", "    else:"]
        body += [*other_lines, f"        acc = {o}"]
    body.append("    tl.store(out0_ptr + offs, acc)")
    uses_libdevice = write.uses_libdevice or write_other.uses_libdevice
    params = ["x_ptr", "c_ptr", "init0_ptr", "n", "s", "out0_ptr", "BLOCK: tl.constexpr", "CHUNKS: tl.constexpr"]
    params.append("STATIC: tl.constexpr")
    source = _module(params, body, uses_libdevice)
    scalar = draw(st.sampled_from((-5, 3)))
    bound = start + trips
    if bound == 1 and shape == "while" and "while_bound_one" in avoid:
        bound = 2

    def make(rng: np.random.Generator) -> Instance:
        data = random_array(rng, t, chunks * block, avoid)
        condition_data = rng.integers(-4, 5, block).astype(np.int32)
        initial = random_array(rng, t, block, avoid)

        def evaluate(ev_factory: Any) -> list[tuple[np.ndarray, np.ndarray]]:
            acc = Val(data[:block].copy(), t, False, np.zeros(block))

            def step_with(node: Any, i: int, y: np.ndarray) -> Val:
                env = {
                    "acc": acc,
                    "y": Val(y, t, False, np.zeros(block)),
                    "i": Val(np.asarray(i, np.int32), I32, False, np.zeros(())),
                }
                return ev_factory(env)(node)

            def chunk(i: int) -> np.ndarray:
                k = int(np.fmod(i, chunks))
                return data[k * block : (k + 1) * block]

            if shape in ("for", "static", "while"):
                for i in range(start, bound, step):
                    acc = step_with(update, i, chunk(i))
            elif shape == "for_if":
                for i in range(start, bound, step):
                    acc = step_with(update if i % 2 == 0 else other, i, chunk(i))
            else:
                taken = scalar > 0 if shape == "if_scalar" else int(condition_data.astype(np.int64).sum()) > threshold
                acc = step_with(update if taken else other, start, data[(chunks - 1) * block :])
            return [stored(initial, np.ones(block, bool), acc, t)]

        def reference(slack: frozenset[str]) -> list:
            flush: list[bool | str] = [False, True, "use"] if "ftz" in slack else [False]
            results = [evaluate(lambda env, f=f: Evaluator(env, slack, flush=f))[0] for f in flush]
            return [Expected(results[0][0], results[0][1], [r for r in results[1:]])]

        return Instance([data, condition_data, initial], reference)

    return Program(
        "control_flow",
        source,
        {"n": bound, "s": scalar},
        [((block,), t)],
        {2: 0},
        (1,),
        {"BLOCK": block, "CHUNKS": chunks, "STATIC": bound},
        make,
        {"enable_fp_fusion": False},
        features=frozenset({"libdevice"} if uses_libdevice else ()),
    )


def _block_valued(node: Node, t: Any, avoid: frozenset[str]) -> Node:
    """``node`` as the loop-carried block's type (a value computed from scalars alone would change its shape)."""
    if is_scalar(node) or (node.op == "load" and node.attr == "acc" and "carried_unchanged" in avoid):
        return Node("load", (), t, attr="y" if "carried_unchanged" in avoid else "acc")
    return converted(node, t)


def _indent(line: str) -> str:
    return "    " + line


__all__ = ["control_flow"]
