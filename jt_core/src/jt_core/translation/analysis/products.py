"""Which products a kernel's sums and differences fuse into one rounding, as Triton's GPU compilers fuse them.

With ``enable_fp_fusion`` (Triton's default), LLVM contracts a floating product and the sum or difference that reads
it into one fused multiply-add (``fma.rn``) wherever both lie in one basic block: ``a * b + c``, ``c + a * b``,
``a * b - c``, ``c - a * b``, ``-(a * b) + c``, a product read through a splat or broadcast, and a product read by
other operations too (NVIDIA's backend contracts aggressively). Where both operands are products, the left one is
fused and the right one rounded. The rule both CPU paths follow is that one, on the kernel's structure:

* a product fuses into a sum or difference that reads it (directly, negated, splat, broadcast or given a new axis)
  in the same stretch of straight-line code: no loop, branch or call between them (Triton's loops and branches are
  basic blocks of their own; a helper's body, inlined by LLVM, is taken as one too);
* the left operand is fused where both are products;
* every other product is rounded on its own.

`fusions` reads that off the TTIR, for the compiled path; the interpreter follows the same rule as the kernel runs
(`jt_core.interpreter.numerics`). Whatever the host's own compiler would contract (XLA's CPU code contracts a float32
product and sum, and float16 ones on processors with AVX-512 FP16), a product that must round alone is kept from it
(`Fusions.rounded`), so the bits are the same on every host.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from jt_core.translation.program import Block, Operation, Program
from jt_core.translation.rules import Rule, rule_of

__all__ = ["Fusions", "fusions"]


def _rule(op: Operation) -> Any:
    found = rule_of(op.name)
    return found if found is not None else _NO_RULE


_NO_RULE = Rule("")


@dataclasses.dataclass(frozen=True)
class Fusions:
    """The fused products of a kernel.

    Attributes:
        fused: For each sum or difference that fuses a product (by the operation's identity), the operand that is
            the product (0 or 1).
        rounded: The products (values of ``arith.mulf``) that round on their own while a sum may read them: what
            must be kept from the host compiler's own contraction.
    """

    fused: dict[int, int]
    rounded: frozenset[int]


def _blocks(program: Program) -> Iterator[Block]:
    def visit(blocks: tuple[Block, ...]) -> Iterator[Block]:
        for block in blocks:
            yield block
            for op in block.operations:
                for region in op.regions:
                    yield from visit(region)

    for function in program.functions.values():
        yield from visit(function.body)


def _is_float(program: Program, value: int) -> bool:
    element = program.type_of(value).element
    return element in ("f16", "bf16", "f32", "f64")


def fusions(program: Program) -> Fusions:
    """The products ``program``'s sums and differences fuse, and those that round on their own."""
    fused: dict[int, int] = {}
    products: set[int] = set()
    for block in _blocks(program):
        stretch = 0
        # Each product, or value passing one on, of this block: the stretch of straight-line code it lies in.
        made: dict[int, int] = {}
        for op in block.operations:
            rule = _rule(op)
            if rule.calls or op.regions:
                stretch += 1
                continue
            if op.name == "arith.mulf" and op.results and _is_float(program, op.results[0]):
                made[op.results[0]] = stretch
                products.add(op.results[0])
            elif (rule.passes_product or op.name == "arith.negf") and op.operands and op.operands[0] in made:
                if made[op.operands[0]] == stretch:
                    made[op.results[0]] = stretch
            elif op.name in ("arith.addf", "arith.subf") and len(op.operands) == 2:
                for index, value in enumerate(op.operands):
                    if made.get(value) == stretch:
                        fused[id(op)] = index
                        break
    # A fused sum reads the factors, not the rounded product: what reads the rounded one is kept from the host's
    # contraction (a product nothing else reads is dead code, and its barrier with it).
    reaching = {value for value in products if _reaches_sums(program, value, frozenset())}
    return Fusions(fused, frozenset(reaching))


def _reaches_sums(program: Program, value: int, seen: frozenset[int]) -> bool:
    """Whether ``value`` reaches a sum or reduction, directly or through conversions and changes of shape."""
    for op in program.users.get(value, ()):
        rule = _rule(op)
        if rule.sums:
            return True
        onward = (rule.passes_product or rule.passes_value) and op.results and op.results[0] not in seen
        if onward and _reaches_sums(program, op.results[0], seen | {value}):
            return True
    return False


def fused_operand(fusions_: Fusions, op: Operation) -> int | None:
    """The operand of ``op`` (a sum or difference) that is the product it fuses, or ``None``."""
    return fusions_.fused.get(id(op))
