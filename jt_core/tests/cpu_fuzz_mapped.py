"""Generated ``tl.map_elementwise`` calls for the CPU fuzzer: a scalar ``@triton.jit`` function of one to three
operands (loaded blocks of any of the nine types, and a kernel scalar) with one or two results, an ``if``/``else``
on its operands inside, each side an element-wise expression (`cpu_fuzz_grammar`), mapped over the blocks one
element at a time or two (``pack=2``: the function takes and gives two of each, one per position).

The reference evaluates both sides on the whole blocks and picks each element's side by the condition.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from cpu_fuzz_grammar import Evaluator, Leaves, Node, Val, Writer, converted, expressions, truthy
from cpu_fuzz_programs import HEADER, Expected, Instance, Program, random_array, references, scalar_value, stored
from cpu_fuzz_semantics import DATA_TYPES, F32, I32, I64, ty
from hypothesis import strategies as st


class _Positioned(Writer):
    """A `Writer` whose operands are the function's parameters of one position of the pack (``a0_1``)."""

    def __init__(self, position: int, prefix: str, indent: str) -> None:
        super().__init__(prefix, indent)
        self.position = position

    def _write(self, n: Node) -> str:
        if n.op in ("load", "scalar"):
            return f"{n.attr}_{self.position}"
        return super()._write(n)


@st.composite
def mapped(draw: Any, avoid: frozenset[str]) -> Program:
    """A kernel mapping a generated scalar function over its loaded blocks with ``tl.map_elementwise``."""
    block = draw(st.sampled_from((16, 32)))
    programs = draw(st.integers(1, 3))
    size = block * programs - draw(st.integers(0, block - 1))
    input_types = [ty(n) for n in draw(st.lists(st.sampled_from(DATA_TYPES), min_size=1, max_size=3))]
    scalar_type = draw(st.sampled_from((None, I32, I64, F32)))
    operand_types = input_types + ([scalar_type] if scalar_type is not None else [])
    leaves = Leaves(tuple((f"a{i}", t) for i, t in enumerate(operand_types)))
    pack = draw(st.sampled_from((1, 1, 2)))
    count = draw(st.integers(1, 2))
    condition = truthy(draw(expressions(leaves, draw(st.integers(1, 2)), avoid)))
    taken = [draw(expressions(leaves, draw(st.integers(1, 3)), avoid)) for _ in range(count)]
    result_types = [t.ty for t in taken]
    other = [converted(draw(expressions(leaves, draw(st.integers(1, 3)), avoid)), t) for t in result_types]
    taken = [converted(t, rt) for t, rt in zip(taken, result_types, strict=True)]

    params = [f"a{i}_{j}" for i in range(len(operand_types)) for j in range(pack)]
    function = [f"@triton.jit\ndef mapped({', '.join(params)}):"]
    uses_libdevice = False
    for j in range(pack):
        head = _Positioned(j, f"c{j}_", "    ")
        cond = head(condition)
        sides = []
        for side, nodes in (("t", taken), ("e", other)):
            write = _Positioned(j, f"{side}{j}_", "        ")
            names = [write(node) for node in nodes]
            sides.append((write.lines, names))
            uses_libdevice |= write.uses_libdevice
        uses_libdevice |= head.uses_libdevice
        function += [*head.lines, f"    if {cond}:", *sides[0][0]]
        function += [f"        r{k}_{j} = {name}" for k, name in enumerate(sides[0][1])]
        function += ["    else:", *sides[1][0]]
        function += [f"        r{k}_{j} = {name}" for k, name in enumerate(sides[1][1])]
    function.append(f"    return {', '.join(f'r{k}_{j}' for k in range(count) for j in range(pack))}")

    operands = [f"x{i}" for i in range(len(input_types))] + (["s"] if scalar_type is not None else [])
    results = ", ".join(f"r{k}" for k in range(count)) + ("," if count == 1 and pack > 1 else "")
    call = f"tl.map_elementwise(mapped, {', '.join(operands)}{', pack=2' if pack > 1 else ''})"
    body = [
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
        *(f"    x{i} = tl.load(x{i}_ptr + offs, mask=offs < n)" for i in range(len(input_types))),
        f"    {'(' + results + ')' if count == 1 and pack > 1 else results} = {call}",
        *(f"    tl.store(out{k}_ptr + offs, r{k}, mask=offs < n)" for k in range(count)),
    ]
    out_types = [t if t.name != "int1" else ty("int8") for t in result_types]
    kernel_params = [f"x{i}_ptr" for i in range(len(input_types))] + [f"init{k}_ptr" for k in range(count)]
    kernel_params += (["s"] if scalar_type is not None else []) + ["n"]
    kernel_params += [f"out{k}_ptr" for k in range(count)] + ["BLOCK: tl.constexpr"]
    imports = HEADER + ("from triton.language.extra import libdevice\n" if uses_libdevice else "")
    source = (
        imports
        + "\n\n"
        + "\n".join(function)
        + f"\n\n\n@triton.jit\ndef kernel({', '.join(kernel_params)}):\n"
        + "\n".join(body)
        + "\n"
    )
    scalars = {"s": scalar_value(draw, scalar_type)} if scalar_type is not None else {}
    total = block * programs

    def make(rng: np.random.Generator) -> Instance:
        data = [random_array(rng, t, size, avoid) for t in input_types]
        initial = [random_array(rng, t, size, avoid) for t in out_types]
        env = {
            f"a{i}": Val(np.concatenate([d, np.zeros(total - size, d.dtype)]), t, False, np.zeros(total))
            for i, (d, t) in enumerate(zip(data, input_types, strict=True))
        }
        if scalar_type is not None:
            env[f"a{len(input_types)}"] = Val(
                np.asarray(scalars["s"]).astype(scalar_type.np), scalar_type, False, np.zeros(())
            )

        def evaluate(ev: Evaluator, open_side: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
            chosen = ev(condition)
            pick = np.broadcast_to(np.asarray(chosen.v).astype(bool), (total,))
            unsure = np.broadcast_to(chosen.err > 0, (total,)) | open_side
            found = []
            for k, (yes, no) in enumerate(zip(taken, other, strict=True)):
                a, b = ev(yes), ev(no)
                value = np.where(pick, np.broadcast_to(a.v, (total,)), np.broadcast_to(b.v, (total,)))
                err = np.where(pick, np.broadcast_to(a.err, (total,)), np.broadcast_to(b.err, (total,)))
                err = np.where(unsure, np.inf, err)
                out, out_err = stored(
                    initial[k], np.ones(size, bool), Val(value[:size], a.ty, False, err[:size]), out_types[k]
                )
                found.append((out, out_err))
            return found

        def reference(slack: frozenset[str]) -> list[Expected]:
            open_side = np.zeros(total, bool)
            if "ftz" in slack:
                # The compiled path flushes subnormals in some operations and not in others (XLA's choice): where
                # flushing them changes the branch's condition, an element may take either side.
                sides = [Evaluator(env, slack, flush=f)(condition).v for f in (False, True, "use")]
                picks = [np.broadcast_to(np.asarray(v).astype(bool), (total,)) for v in sides]
                open_side = (picks[0] != picks[1]) | (picks[0] != picks[2])
            return references(lambda ev: evaluate(ev, open_side), env, slack)

        return Instance(data + initial, reference)

    return Program(
        "mapped",
        source,
        {**scalars, "n": size},
        [((size,), t) for t in out_types],
        {len(input_types) + k: k for k in range(count)},
        (programs,),
        {"BLOCK": block},
        make,
        {"enable_fp_fusion": False},
        features=frozenset({"libdevice"} if uses_libdevice else ()),
    )


__all__ = ["mapped"]
