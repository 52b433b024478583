"""The address analysis: one walk over a kernel's TTIR, before it is traced, that gives every value its `Fact`.

Each operation's rule says what its results are (`jt_core.translation.rules.Rule.analyse`); the walk visits the
operations in program order, each function once per call, each loop's body as one trip for every trip (its trip a
symbol, `jt_core.translation.analysis.loops`), both sides of a branch whose condition is not known when tracing. It
finds, together, because each needs the others:

* integers as exact affine forms in the program ids, lanes and symbols (`jt_core.translation.analysis.affine`), and
  pointers as the buffers they may point into with their offsets' forms;
* masks as boxes of lanes (`jt_core.translation.analysis.masks`);
* loops' trip counts and the values they carry that move by a fixed step;
* every load, store and atomic, with its form, its mask and the loops and branches it lies in (`Access`);
* the first construct the translation cannot express, with its source line.

Assumptions, written down once:

* The scalars of the call are known (they are Python values in ``triton_call``), and so is the grid.
* A form is exact in its integer's width: where the kernel's arithmetic might wrap (the form's range over every
  program, lane and symbol leaves the type's), the form is shifted by the multiple of ``2**bits`` that the whole
  range wraps by, or dropped where the range straddles a wrap (`Walk.exact`). Integers narrower than 32 bits get no
  form. A form with a symbol of unknown range (a scalar loaded from memory) is exact modulo ``2**bits`` only: it
  proves nothing that needs bounds, and what uses it checks its range when it runs.
* A pointer's offset is sign-extended and added in 64 bits, as Triton adds it: it does not wrap.
* Operations nothing with an effect depends on are not analysed, as they are not traced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from jt_core.translation.analysis.affine import Affine, Symbol
from jt_core.translation.analysis.facts import UNKNOWN, Access, Fact, Facts, Loop, Place
from jt_core.translation.analysis.masks import Mask
from jt_core.translation.analysis.relabeling import Relabeling
from jt_core.translation.program import Block, Operation, Program, TensorType
from jt_core.translation.rules import rule_of

__all__ = ["Walk", "used_values"]

_T = TypeVar("_T")

#: How many blocks the branches of early returns may reach, counting each time one is visited.
MAX_BRANCHED_BLOCKS = 256
#: How deep helper calls may nest.
MAX_CALL_DEPTH = 64

_NARROW = {"i1", "i8", "i16"}
_WIDTH = {"i32": 32, "i64": 64, "index": 64}


class Walk:
    """The walk over one kernel for one call's scalars and grid (see the module's docstring).

    Args:
        program: The kernel's TTIR.
        parameters: The facts of the entry function's parameters (pointers' buffers, the scalars' values).
        grid: The grid the program ids range over.
        launch: The grid launched (``tl.num_programs``).
        relabel: The relabeling assumed (`jt_core.translation.analysis.relabeling`), or ``None``.
        writable: The buffers the kernel may write (what a program loads from them may be another's store).
    """

    def __init__(
        self,
        program: Program,
        parameters: Sequence[Fact],
        grid: tuple[int, int, int],
        launch: tuple[int, int, int],
        relabel: Relabeling | None,
        writable: frozenset[int] = frozenset(),
    ) -> None:
        self.ir = program
        self.writable = writable
        self.parameters = list(parameters)
        self.grid = grid
        self.launch = launch
        self.relabel = relabel
        self.values: dict[Place, Fact] = {}
        self.loops: dict[tuple[tuple[int, ...], int], Loop] = {}
        self.accesses: list[Access] = []
        self.ranges: dict[Symbol, tuple[int, int]] = {}
        self.refusal: tuple[str, str | None] | None = None
        #: The call path of the function being walked.
        self.path: tuple[int, ...] = ()
        #: The loops and the sides of branches around the operation being walked.
        self.loop_stack: list[Loop] = []
        self.branch_stack: list[tuple[Place, bool]] = []
        #: Whether accesses and refusals are recorded (not while a loop's body is first walked to find its steps).
        self.recording = True
        self.used = used_values(program)
        self._order = 0
        self._branched = 0
        #: The operation being walked (whose line a refusal names).
        self.op: Operation | None = None

    # -- facts -------------------------------------------------------------------------------------------------

    def fact(self, value: int) -> Fact:
        return self.values.get((self.path, value), UNKNOWN)

    def set(self, value: int, fact: Fact) -> None:
        self.values[(self.path, value)] = fact

    def type(self, value: int) -> TensorType:
        return self.ir.type_of(value)

    def static(self, value: int) -> Any:
        """The value of a scalar known when tracing, or ``None``."""
        found = self.fact(value)
        if found.static is not None:
            return found.static
        if found.form is not None and found.form.is_constant and not found.form.shape:
            return found.form.const
        return None

    def form(self, value: int) -> Affine | None:
        """The exact affine form of an integer (or a pointer's offsets), or ``None``."""
        return self.fact(value).form

    def varies(self, *values: int) -> bool:
        return any(self.fact(v).varies for v in values)

    def exact(self, form: Affine | None, element: str) -> Affine | None:
        """``form`` as the kernel's ``element`` integers hold it: itself where its range fits, shifted by the
        multiple of ``2**bits`` its whole range wraps by, ``None`` where the range straddles a wrap (or the type is
        narrower than 32 bits, or not an integer)."""
        if form is None or element in _NARROW:
            return None
        bits = _WIDTH.get(element)
        if bits is None:
            return None
        bounds = form.bounds(self.grid, self.ranges)
        if bounds is None:
            # A symbol of unknown range (or an unknown base): exact modulo 2**bits, which proves nothing needing
            # bounds (they are unknown too).
            return form if form.terms and form.base_known else None
        low, high = bounds
        half = 1 << (bits - 1)
        wraps = (low + half) >> bits
        if wraps != (high + half) >> bits:
            return None
        return form.shifted(-(wraps << bits)) if wraps else form

    def refuse(self, what: str, line: str | None = None) -> None:
        """Records a construct the translation cannot express (the first one is what the plan refuses with)."""
        if self.recording and self.refusal is None:
            self.refusal = (what, line if line is not None else (self.op.line if self.op is not None else None))

    def access(
        self,
        kind: str,
        op: Operation,
        buffers: frozenset[int] | None,
        form: Affine | None,
        mask: Mask | None,
        masked: bool,
        shape: tuple[int, ...],
        combiner: str | None = None,
        result_used: bool = False,
    ) -> None:
        """Records a memory access (while recording)."""
        if not self.recording:
            return
        if buffers is None:
            self.refuse(f"{op.name} through something that is not a pointer", op.line)
            return
        masked = masked or bool(self.branch_stack)
        self.accesses.append(
            Access(
                kind,
                op,
                buffers,
                form,
                mask,
                masked,
                shape,
                tuple(self.loop_stack),
                tuple(self.branch_stack),
                self._order,
                combiner,
                result_used,
                self.path,
            )
        )
        self._order += 1

    # -- structure ---------------------------------------------------------------------------------------------

    def run(self, fusions: Any) -> Facts:
        """Walks the kernel from its entry; returns what it found."""
        entry = self.ir.functions[self.ir.entry].body[0]
        self.block(entry, self.parameters)
        return Facts(
            self.values,
            self.loops,
            self.accesses,
            dict(self.ranges),
            self.grid,
            self.launch,
            self.relabel,
            fusions,
            self.refusal,
            frozenset(self.used),
        )

    def block(self, block: Block, arguments: Sequence[Fact]) -> list[Fact]:
        """Walks a block; returns the facts of what its terminator hands on."""
        for value, fact in zip(block.arguments, arguments, strict=False):
            self.set(value, fact)
            self._settle(value)
        for op in block.operations:
            found = rule_of(op.name)
            if found is not None and found.terminator:
                return [self.fact(v) for v in op.operands]
            if found is not None and found.jumps:
                return self._branch(op, self.ir.regions.get(id(block), (block,)))
            self.operation(op)
        return []

    def operation(self, op: Operation) -> None:
        self.op = op
        found = rule_of(op.name)
        if found is None:
            self.refuse(f"the operation {op.name}", op.line)
            self._unknown(op)
            return
        dead = op.results and not op.regions and not found.effect and not any(r in self.used for r in op.results)
        if dead:
            return  # never traced
        if found.refused is not None:
            self.refuse(found.refused, op.line)
        if found.analyse is None:
            self._unknown(op)
        else:
            found.analyse(self, op)
        for value in op.results:
            self._settle(value)
            if self.type(value).is_pointer and self.fact(value).buffers is None and value in self.used:
                self.refuse(f"a pointer made by {op.name}", op.line)

    def _settle(self, value: int) -> None:
        """Gives a run-time integer scalar a form of its own (a symbol, known only when it runs), and a value that
        stands for a relabeled program id its form."""
        if self.relabel is not None and not self.path and value in self.relabel.axes:
            unit = [0, 0, 0]
            unit[self.relabel.axes[value]] = 1
            self.set(value, Fact(form=Affine(0, (unit[0], unit[1], unit[2]))))
            return
        found = self.fact(value)
        ty = self.type(value)
        if found.form is None and found.static is None and not found.address and not ty.shape and ty.element in _WIDTH:
            self.set(value, dataclasses.replace(found, form=Affine.symbol(("scalar", (self.path, value)))))

    def _unknown(self, op: Operation) -> None:
        for value in op.results:
            self.set(value, UNKNOWN)

    def nested(self, blocks: Sequence[Block], arguments: Sequence[Fact]) -> list[Fact]:
        """Walks the first block of a region (a loop's body, a branch's side)."""
        return self.block(blocks[0], arguments)

    def on_side(self, condition: int, side: bool, walk: Callable[[], list[Fact]]) -> list[Fact]:
        """Walks one side of a branch whose condition is not known when tracing."""
        self.branch_stack.append(((self.path, condition), side))
        try:
            return walk()
        finally:
            self.branch_stack.pop()

    def in_loop(self, loop: Loop, walk: Callable[[], _T]) -> _T:
        """Walks a loop's body, the loop's trip a symbol of the range ``loop`` knows."""
        self.loop_stack.append(loop)
        if loop.most is not None and loop.most > 0:
            self.ranges[loop.symbol] = (0, loop.most - 1)
        try:
            return walk()
        finally:
            self.loop_stack.pop()

    def call(self, op: Operation, name: str, arguments: Sequence[Fact]) -> list[Fact] | None:
        """Walks a helper function for a call; ``None`` where it cannot (the refusal says why)."""
        function = self.ir.functions.get(name)
        if function is None:
            self.refuse(f"a call of {name}, which the module does not define", op.line)
            return None
        if len(self.path) >= MAX_CALL_DEPTH:
            self.refuse("recursion", op.line)
            return None
        outer = self.path
        self.path = (*outer, id(op))
        try:
            return self.block(function.body[0], arguments)
        finally:
            self.path = outer

    def forget(self, block: Block) -> None:
        """Forgets the facts of the values a block defines (before it is walked again, with other facts)."""
        for value in defined(block):
            self.values.pop((self.path, value), None)

    def _branch(self, op: Operation, region: Sequence[Block]) -> list[Fact]:
        """``cf.br`` and ``cf.cond_br``, which an early ``return`` makes: the target blocks walked to the end."""
        targets = op.attr("successors")
        if not targets or any(t >= len(region) for t in targets):
            self.refuse("a branch whose target blocks cannot be read", op.line)
            return []
        self._branched += 1
        if self._branched > MAX_BRANCHED_BLOCKS:
            self.refuse(f"more than {MAX_BRANCHED_BLOCKS} blocks reached through early returns", op.line)
            return []
        if op.name == "cf.br":
            return self.block(region[targets[0]], [self.fact(v) for v in op.operands])
        sides = [region[t] for t in targets]
        split = 1 + len(sides[0].arguments)
        arguments = [[self.fact(v) for v in op.operands[1:split]], [self.fact(v) for v in op.operands[split:]]]
        known = self.static(op.operands[0])
        if known is not None:
            chosen = 0 if known else 1
            return self.block(sides[chosen], arguments[chosen])
        results = [
            self.on_side(op.operands[0], side, lambda i=i: self.block(sides[i], arguments[i]))  # type: ignore[misc]
            for i, side in ((0, True), (1, False))
        ]
        return [join(a, b) for a, b in zip(results[0], results[1], strict=False)]


def join(a: Fact, b: Fact) -> Fact:
    """What is known of a value that is ``a`` on one path and ``b`` on another."""
    if a == b:
        return a
    buffers = None if a.buffers is None or b.buffers is None else a.buffers | b.buffers
    return Fact(
        form=a.form if a.form == b.form else None,
        mask=a.mask if a.mask == b.mask else None,
        buffers=buffers,
        static=a.static if a.static == b.static and type(a.static) is type(b.static) else None,
        descriptor=a.descriptor if a.descriptor == b.descriptor else None,
        varies=True,
        address=a.address and b.address,
    )


def defined(block: Block) -> list[int]:
    """The values a block defines: its arguments and its operations' results, nested ones included."""
    found = list(block.arguments)
    for op in block.operations:
        found.extend(op.results)
        for region in op.regions:
            for inner in region:
                found.extend(defined(inner))
    return found


def used_values(program: Program) -> set[int]:
    """The values something with an effect depends on (what the other values are computed for is nothing)."""
    operations = program.operations()
    live: set[int] = set()
    changed = True
    while changed:
        changed = False
        for op in operations:
            found = rule_of(op.name)
            kept = found is None or found.effect or found.terminator
            if kept or op.regions or not op.results or any(r in live for r in op.results):
                for value in op.operands:
                    if value not in live:
                        live.add(value)
                        changed = True
    return live
