"""The plan: how a kernel's grid runs, chosen from what the analyses found, before anything is traced.

A `Plan` is one of:

* **side by side**: every program traced once under ``jax.vmap``, their stores made after them, in a box of whole
  planes of the grid's last two axes (as many along the first as memory allows at a time: one box, or boxes in a
  loop, `jt_core.translation.side_by_side`), or, where a plane does not fit, in flat chunks;
* **in order**: a ``fori_loop`` over the programs, each on the buffers the programs before it left, because the
  independence pass found why side by side might differ (the plan names it);
* **refused**: a construct the translation cannot express, with its kernel source line.

With it, the plan says how each loop is traced (`LoopMode`) and how each written buffer is written
(`jt_core.translation.analysis.independence.BufferMode`). ``JT_TRANSLATION_PLAN=1`` prints each plan as it is made,
with the facts that chose it.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jt_core import settings
from jt_core.translation.analysis import analyse
from jt_core.translation.analysis.facts import Fact, Facts, Loop, Trips
from jt_core.translation.analysis.independence import BufferMode, Window, independence, integer_buffers
from jt_core.translation.analysis.relabeling import Relabeling, relabeling
from jt_core.translation.folding import itemsize
from jt_core.translation.program import Program, parse_type
from jt_core.translation.strategy import Strategy

__all__ = ["LoopMode", "Plan", "choose"]

_IN_ORDER, _SIDE_BY_SIDE, _REFUSED = "in order", "side by side", "refused"
_WINDOWS_FIT = "buffers written through each program's window need every program side by side at once"


class LoopMode(enum.Enum):
    """How a ``scf.for`` is traced (`jt_core.translation.control`)."""

    UNROLLED = "unrolled"
    ROLLED = "rolled"
    PREDICATED = "predicated to the most trips"
    PER_PROGRAM = "each program's trips"


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a kernel's grid runs (see the module's docstring).

    Attributes:
        kind: ``"side by side"``, ``"in order"`` or ``"refused"``.
        reason: Why: what keeps the programs in order, or what is refused.
        line: The kernel source line the reason names, where it has one.
        facts: What the analyses found (for the relabeling the plan runs with, where it has one).
        chunk: How many programs run side by side at a time.
        loops: How each loop is traced, by ``(call path, id of the loop operation)``.
        buffers: How each written buffer is written, side by side.
        windows: For each buffer written through windows, where each program's lies.
    """

    kind: str
    reason: str
    line: str | None
    facts: Facts
    chunk: int = 1
    loops: Mapping[tuple[tuple[int, ...], int], LoopMode] = dataclasses.field(default_factory=dict)
    buffers: Mapping[int, BufferMode] = dataclasses.field(default_factory=dict)
    windows: Mapping[int, Window] = dataclasses.field(default_factory=dict)

    @property
    def side_by_side(self) -> bool:
        return self.kind == _SIDE_BY_SIDE

    @property
    def refused(self) -> bool:
        return self.kind == _REFUSED

    @property
    def relabel(self) -> Relabeling | None:
        return self.facts.relabel

    def loop_mode(self, loop: Loop) -> LoopMode:
        return self.loops.get((loop.path, id(loop.op)), LoopMode.ROLLED)

    def describe(self, name: str) -> str:
        """The plan and the facts that chose it, in a few lines (what ``JT_TRANSLATION_PLAN=1`` prints)."""
        facts = self.facts
        lines = [f"jt plan for {name}: {self.kind}" + (f" ({self.reason}{_at(self.line)})" if self.reason else "")]
        grid = facts.grid if facts.relabel is None else f"{facts.relabel.grid} tiles of the launched {facts.launch}"
        lines.append(
            f"  grid {grid}; {self.chunk} program(s) side by side at a time" if self.side_by_side else f"  grid {grid}"
        )
        for loop in facts.loops.values():
            how = self.loop_mode(loop).value
            most = "" if loop.most is None else f", at most {loop.most}"
            lines.append(
                f"  loop at {_line_of(loop.op)}: {loop.trips.value} trips{most}, {loop.size} operations: {how}"
            )
        for access in facts.accesses:
            form = "unknown offsets" if access.form is None else _form_text(access.form)
            lines.append(f"  {access.kind} at {access.op.line}: buffers {sorted(access.buffers)}, {form}")
        for buffer, mode in self.buffers.items():
            window = self.windows.get(buffer)
            where = "" if window is None else f" ({window.width} elements from {window.low} per program)"
            lines.append(f"  buffer {buffer}: {mode.value}{where}")
        return "\n".join(lines)


def _line_of(op: Any) -> str | None:
    """A loop's source line: its own, or its body's first that has one."""
    if op.line:
        return op.line
    return next(
        (inner.line for region in op.regions for block in region for inner in block.operations if inner.line), None
    )


def _at(line: str | None) -> str:
    return f" at {line}" if line else ""


def _form_text(form: Any) -> str:
    terms = "".join(f" + {c}*{s[0]}" for s, c in form.terms)
    return f"offsets {form.const} + pids{form.pids} + lanes{form.lanes}{terms}"


def loop_modes(facts: Facts, strategy: Strategy, side_by_side: bool) -> dict[tuple[tuple[int, ...], int], LoopMode]:
    """How each loop is traced: step by step where its trips (or the most any program makes) are known and few (side
    by side only: in order, every loop is an XLA loop), each program's trips past its own end masked; predicated
    where programs side by side make different trip counts with a known most; an XLA loop otherwise."""
    modes = {}
    for key, loop in facts.loops.items():
        if loop.is_while:
            continue
        if not side_by_side:
            modes[key] = LoopMode.ROLLED if loop.trips in (Trips.STATIC, Trips.UNIFORM) else LoopMode.PER_PROGRAM
        elif (
            loop.trips in (Trips.STATIC, Trips.BOUNDED)
            and loop.most is not None
            and loop.size * loop.most <= strategy.unrolled_operations
        ):
            modes[key] = LoopMode.UNROLLED
        elif loop.trips in (Trips.STATIC, Trips.UNIFORM):
            modes[key] = LoopMode.ROLLED
        elif loop.trips is Trips.BOUNDED:
            modes[key] = LoopMode.PREDICATED
        else:
            modes[key] = LoopMode.PER_PROGRAM
    return modes


def chunk_size(program: Program, total: int, budget: int) -> int:
    """How many programs run side by side at a time: as many as keep the largest value of the kernel, times the
    programs, within ``budget`` bytes (the strategy's `Strategy.side_by_side_bytes`)."""
    largest = 1
    for text in set(program.types.values()):
        ty = parse_type(text)
        size = 8 if ty.is_pointer else itemsize(ty.element) or 8  # a descriptor, a token: a pointer's size
        largest = max(largest, math.prod(ty.shape) * size)
    return max(1, min(total, budget // largest))


def choose(
    program: Program,
    parameters: Sequence[Fact],
    scalars: Sequence[Any],
    grid: tuple[int, int, int],
    strategy: Strategy,
    dtypes: Sequence[np.dtype],
    writable: frozenset[int],
    name: str = "kernel",
) -> Plan:
    """The plan for one call of a kernel.

    Args:
        program: The kernel's TTIR.
        parameters: What is known of the entry function's parameters (`jt_core.translation.analysis.facts.Fact`).
        scalars: The parameters' values where they are scalars (``None`` for pointers and descriptors): what the
            relabeling evaluates.
        grid: The launched grid.
        strategy: The platform's choices.
        dtypes: Each buffer's element type.
        writable: The buffers the kernel may write.
        name: The call's name (for the printout).
    """
    plan = _chosen(program, parameters, scalars, grid, strategy, dtypes, writable)
    if settings.flag("JT_TRANSLATION_PLAN", default=False):
        print(plan.describe(name), file=sys.stderr)
    return plan


def _chosen(
    program: Program,
    parameters: Sequence[Fact],
    scalars: Sequence[Any],
    grid: tuple[int, int, int],
    strategy: Strategy,
    dtypes: Sequence[np.dtype],
    writable: frozenset[int],
) -> Plan:
    plain = analyse(program, parameters, grid, grid, None, strategy, writable)
    if plain.refusal is not None:
        return Plan(_REFUSED, plain.refusal[0], plain.refusal[1], plain)
    total = math.prod(grid)
    if total <= 1 or not strategy.side_by_side:
        why = "one program" if total <= 1 else "the strategy runs programs in order"
        return Plan(_IN_ORDER, why, None, plain, 1, loop_modes(plain, strategy, False))
    chunk = chunk_size(program, total, strategy.side_by_side_bytes)
    integer = integer_buffers(dtypes)
    orderless = strategy.numerics.orderless_float_atomics()
    tiles = relabeling(program, scalars, grid)
    candidates = [plain]
    if tiles is not None:
        candidates.insert(0, analyse(program, parameters, tiles.grid, grid, tiles, strategy, writable))
    conflict = None
    for facts in candidates:
        modes = loop_modes(facts, strategy, True)
        unrolled = {loop: modes.get(key) is LoopMode.UNROLLED for key, loop in facts.loops.items()}
        verdict = independence(facts, unrolled, orderless, integer)
        if verdict.conflict is None and verdict.windows and chunk < math.prod(facts.grid):
            verdict = dataclasses.replace(verdict, conflict=(_WINDOWS_FIT, None))
        if verdict.conflict is None:
            return Plan(_SIDE_BY_SIDE, "", None, facts, chunk, modes, verdict.modes, verdict.windows)
        conflict = conflict or verdict.conflict
    assert conflict is not None
    return Plan(_IN_ORDER, conflict[0], conflict[1], plain, 1, loop_modes(plain, strategy, False))
