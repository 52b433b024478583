"""One rule per TTIR operation: everything the translation knows about it, registered once (`rule`).

A `Rule` says how an operation lowers to JAX (``lower``, given a `RuleContext`), what it tells the analyses
(``analyse``: its results' facts, the accesses it makes, what it refuses; `jt_core.translation.analysis.walk`), and
the few properties the passes read of it by name (an effect to keep, a product passed on). Nothing else in the
translation names an operation: adding one means writing its rule in the module of its kind
(`elementwise`, `shapes`, `accesses`, `descriptors`, `reductions`, `control`,
`mapped`, `refusals`), and the test of the rules checks that every operation Triton's dialects register has
exactly one.

Pallas's Mosaic lowering (one rule per primitive through ``register_lowering_rule``, a four-field context) is the
model for the shape of it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from jt_core.translation.program import Operation

__all__ = ["Lowering", "Rule", "RuleContext", "Transfer", "all_rules", "refuse", "rule", "rule_of"]


class Lowering(Protocol):
    """How an operation lowers: traces it in the rule's context, from the memory state before it to the one after
    (`jt_core.translation.memory.State`)."""

    def __call__(self, ctx: RuleContext, state: Any, /) -> Any: ...


class Transfer(Protocol):
    """What an operation tells the analyses: sets its results' facts in the walk (and records its accesses)."""

    def __call__(self, walk: Any, op: Operation, /) -> None: ...


@dataclasses.dataclass(frozen=True)
class RuleContext:
    """What a rule's lowering is given.

    Attributes:
        op: The operation.
        kernel: The kernel being traced (`jt_core.translation.kernel.Kernel`): its values, memory and blocks.
        strategy: The platform's choices (`jt_core.translation.strategy.Strategy`).
        path: The call path the operation lies in (its facts' key).
    """

    op: Operation
    kernel: Any
    strategy: Any
    path: tuple[int, ...]

    # The kernel's values, as the rules use them.

    def get(self, value: int) -> Any:
        return self.kernel.env[value]

    def set(self, value: int, what: Any) -> None:
        self.kernel.env[value] = what

    def operand(self, index: int) -> Any:
        return self.kernel.env[self.op.operands[index]]

    def array(self, value: int) -> Any:
        return self.kernel.array(value)

    def type(self, value: int) -> Any:
        return self.kernel.ir.type_of(value)

    def fact(self, value: int) -> Any:
        """What the analyses found about ``value`` (`jt_core.translation.analysis.facts.Fact`)."""
        return self.kernel.facts.fact(self.path, value)


@dataclasses.dataclass(frozen=True)
class Rule:
    """Everything the translation knows about one TTIR operation.

    Attributes:
        name: The operation's name (``"arith.addi"``).
        lower: How it lowers; ``None`` for an operation the translation refuses.
        analyse: What it tells the analyses; ``None``: its results' facts are unknown.
        refused: For a refused operation, what to call it in the one line that says why (``"inline asm
            (tl.inline_asm_elementwise)"``).
        effect: Whether it has an effect beyond its results (it is kept where nothing reads them).
        terminator: Whether it ends a block, handing values on.
        keeps_known: Whether its result holds one known value where its first operand does (a splat, a
            broadcast): what the lowering may keep as that value.
        passes_product: Whether it passes a product on to a sum unchanged but for its shape (a splat, a
            broadcast, a new axis): the product may still fuse into that sum.
        passes_value: Whether it passes a value on unchanged but for its shape or type (a splat, a conversion): a
            zero it makes is as safe from XLA's simplifier as its uses (`jt_core.translation.floats`), and a product
            may reach a sum through it.
        sums: Whether it sums or reduces what it reads, or hands it to code that may (a helper's return, a loop's
            next trip): a product that reaches it rounds alone, kept from the host compiler's contraction.
        sign_safe: The operands (``None``: all) where a zero constant cannot lose its sign to XLA's simplifier (a
            comparison, a product): those may stay constants XLA sees.
        compute: For an element-wise operation, what it computes on JAX arrays (``compute(*arrays)``, or
            ``compute(result dtype, *arrays)`` where ``takes_dtype``).
        takes_dtype: Whether ``compute`` takes the result's dtype first.
        evaluate: For an element-wise operation on floats, what it computes on NumPy values (the one value of a
            block known when tracing).
        picks_float8: Whether it takes float8 values without computing on them (a conversion, a choice).
        calls: Whether it runs a function of the module (``tt.call``): a stretch of straight-line code ends there,
            and what it runs is the callee's.
        jumps: Whether it ends a block by going on in another block of its region (``cf.br``, what an early
            ``return`` makes).
    """

    name: str
    lower: Lowering | None = None
    analyse: Transfer | None = None
    refused: str | None = None
    effect: bool = False
    terminator: bool = False
    keeps_known: bool = False
    passes_product: bool = False
    passes_value: bool = False
    sums: bool = False
    sign_safe: tuple[int, ...] | None = ()
    compute: Callable[..., Any] | None = None
    takes_dtype: bool = False
    evaluate: Callable[..., Any] | None = None
    picks_float8: bool = False
    calls: bool = False
    jumps: bool = False


_RULES: dict[str, Rule] = {}

#: The modules that register rules: importing them fills the table.
_MODULES = (
    "elementwise",
    "shapes",
    "accesses",
    "descriptors",
    "reductions",
    "control",
    "mapped",
    "refusals",
)


def rule(name: str, **properties: Any) -> Callable[[Lowering], Lowering]:
    """Registers the decorated function as the lowering of operation ``name``, with the rule's other
    ``properties`` (`Rule`'s attributes).

    Raises:
        ValueError: When ``name`` already has a rule.
    """

    def register(lower: Lowering) -> Lowering:
        _add(Rule(name, lower=lower, **properties))
        return lower

    return register


def add_rules(names: Iterable[str], lower: Lowering, **properties: Any) -> None:
    """Registers one lowering for several operations (the element-wise ones share theirs)."""
    for name in names:
        _add(Rule(name, lower=lower, **properties))


def refuse(name: str, what: str, analyse: Transfer | None = None) -> None:
    """Registers an operation the translation refuses: ``what`` names it in the one line that says why."""
    _add(Rule(name, refused=what, analyse=analyse))


def _add(found: Rule) -> None:
    if found.name in _RULES:
        raise ValueError(f"the TTIR operation {found.name!r} already has a rule")
    _RULES[found.name] = found


def all_rules() -> dict[str, Rule]:
    """Every rule, by operation name (the rule modules imported on first use)."""
    if not _loaded:
        _load()
    return _RULES


_loaded: list[bool] = []


def _load() -> None:
    for module in _MODULES:
        importlib.import_module(f"jt_core.translation.{module}")
    _loaded.append(True)


def rule_of(name: str) -> Rule | None:
    """The rule of operation ``name``, or ``None`` for one the translation has never heard of."""
    return all_rules().get(name)
