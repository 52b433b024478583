"""Tracing a kernel's TTIR with JAX, as its plan says: each operation by its rule (`jt_core.translation.rules`),
``tt.call`` inlined.

A `Kernel` holds what one trace needs: the values traced so far, the buffers (`jt_core.translation.memory`), the
program ids, the guard of the branch side or loop trip being traced, and each loop's trip where a symbol of the
analyses' forms stands for it. It answers the rules' questions from the facts (`form`, `limits`, `access_fact`): the
lowering proves nothing itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jt_core.errors import UnsupportedKernelError
from jt_core.translation import blocks, floats, lang
from jt_core.translation.analysis import masks
from jt_core.translation.analysis.affine import Affine, Symbol
from jt_core.translation.analysis.facts import Access, Loop
from jt_core.translation.analysis.rows import Rows
from jt_core.translation.fusing import Fusing
from jt_core.translation.memory import Memory, Pointer, State
from jt_core.translation.plan import LoopMode, Plan
from jt_core.translation.program import Block, Operation, TensorType
from jt_core.translation.rules import RuleContext, rule_of
from jt_core.translation.strategy import Strategy
from jt_core.translation.values import BlockPointer, Unsupported

__all__ = ["Job", "Kernel"]


@dataclasses.dataclass(frozen=True)
class Job:
    """What running a kernel's grid takes, the state aside: its plan, its TTIR, its buffers, the entry function's
    arguments (`Pointer` for pointers, Python scalars for scalars), whether products and sums may fuse
    (``enable_fp_fusion``), and the platform's choices."""

    plan: Plan
    program: Any
    memory: Memory
    arguments: Sequence[Any]
    fuse: bool
    strategy: Strategy

    def kernel(self, vector: bool) -> Kernel:
        """A trace of the kernel, its programs side by side (``vector``) or one at a time."""
        return Kernel(self.plan, self.program, self.memory, self.strategy, self.fuse, vector)

    @property
    def entry(self) -> Block:
        return self.program.functions[self.program.entry].body[0]


class Kernel:
    """One trace of a kernel: `jt_core.translation.grid` runs its entry block once per program, or once for many
    programs side by side.

    Args:
        plan: The kernel's plan (its facts included).
        program: The kernel's TTIR.
        memory: Its buffers.
        strategy: The platform's choices.
        fuse: Whether a product and a sum may be fused into one multiply-add (``enable_fp_fusion``).
        vector: Whether the programs run side by side.
    """

    def __init__(self, plan: Plan, program: Any, memory: Memory, strategy: Strategy, fuse: bool, vector: bool) -> None:
        self.ir = program
        self.plan = plan
        self.facts = plan.facts
        self.strategy = strategy
        self.memory = memory
        self.vector = vector
        #: Where the programs run over the tiles their ids map to: the relabeling.
        self.relabel = plan.relabel if vector else None
        #: The grid launched (``tl.num_programs``); the facts' grid is the one the programs' ids range over.
        self.launch = plan.facts.launch
        self.pids: tuple[Any, Any, Any] = (0, 0, 0)
        self.env: dict[int, Any] = {}
        #: The call path of the function being traced (the facts' key).
        self.path: tuple[int, ...] = ()
        #: Where both sides of a branch run, or a loop's trips past some programs' ends (programs side by side), the
        #: condition of the lanes being traced: what their loads, stores and atomics are masked with.
        self.predicate: Any = None
        #: The sides of the branches being traced that way, as (branch, side) pairs, outermost first.
        self.branch_path: tuple[tuple[int, bool], ...] = ()
        #: Each loop's trip, where it is being traced (an int, or a traced scalar), by the loop's symbol.
        self.trips: dict[Symbol, Any] = {}
        #: How deep inside loops and branches run as JAX's control flow the operation being traced is.
        self.region_depth = 0
        #: The products computed around the loop they accumulate in (`jt_core.translation.control`), and the
        #: operands each step of such a loop collects where it is unrolled.
        self.outside: set[int] = set()
        self.collected: dict[int, list[tuple[jax.Array, jax.Array]]] = {}
        #: The values XLA may see as constants whatever their value (`jt_core.translation.floats.sign_safe_values`).
        self.sign_safe = floats.sign_safe_values(program)
        self.products = Fusing(plan.facts.fusions, fuse)
        #: The one value each element of a value holds where it is known at trace time.
        self._known: dict[int, Any] = {}
        #: The values that are results of helper calls (``tt.call``).
        self.call_results = {r for op in program.operations() if _calls(op) for r in op.results}
        self._branches = 0

    # -- values ------------------------------------------------------------------------------------------------

    def type(self, value: int) -> TensorType:
        return self.ir.type_of(value)

    def get(self, value: int) -> Any:
        return self.env[value]

    def set(self, value: int, what: Any) -> None:
        self.env[value] = what

    def array(self, value: int) -> jax.Array:
        """A value as a JAX array of its type."""
        found = self.env[value]
        if isinstance(found, (Pointer, BlockPointer)):
            raise Unsupported("a pointer used as a number")
        return lang.as_array(found, self.type(value))

    def known(self, value: int) -> Any:
        """The one value each element of ``value`` holds, where it is known at trace time (else ``None``)."""
        found = self.env.get(value)
        return found if lang.is_static(found) else self._known.get(value)

    def set_known(self, value: int, known: Any) -> None:
        # A value traced again (a loop's body, trip by trip) may be known in one trace and not another.
        if known is None:
            self._known.pop(value, None)
        else:
            self._known[value] = known

    # -- facts -------------------------------------------------------------------------------------------------

    def _symbol(self, symbol: Symbol) -> Any:
        """What a symbol of the forms is where the kernel is being traced (``None``: not known here)."""
        if symbol[0] == "trip":
            return self.trips.get(symbol)
        if symbol[0] == "scalar":
            value = self.env.get(symbol[1][1])
            if value is None or isinstance(value, (Pointer, BlockPointer)):
                return None
            if lang.is_static(value):
                return int(value)
            return jnp.asarray(value).astype(jnp.int64)
        return None

    def bind(self, form: Affine | None) -> Affine | None:
        """A form of the facts with its symbols given their values here."""
        if form is None:
            return None
        return form.bind(self._symbol) if form.terms else form

    def form(self, value: int) -> Affine | None:
        """The affine form of an integer (or of a pointer's offsets), bound here, where the analyses know one."""
        return self.bind(self.facts.fact(self.path, value).form)

    def rows(self, value: int) -> Rows | None:
        """How a block without a form runs along its rows, where the analyses know it (`Rows`)."""
        return self.facts.fact(self.path, value).rows

    def bounds(self, value: int) -> tuple[int, int] | None:
        """The range a value's form takes over every program, lane and symbol's range, where known."""
        found = self.facts.fact(self.path, value).form
        return None if found is None else found.bounds(self.facts.grid, self.facts.ranges)

    def limits(self, value: int) -> masks.Limits | None:
        """The box of lanes a mask has on, the same in every program, where the analyses know it as one here."""
        found = self.env.get(value)
        shape = self.type(value).shape
        if isinstance(found, (bool, np.bool_)):
            return masks.full(shape) if found else tuple((0, 0) for _ in shape)
        fact = self.facts.fact(self.path, value).mask
        if fact is None or fact.shape != shape:
            return None
        return fact.limits(self.facts.grid, self._symbol, self.facts.ranges)

    def access_fact(self, op: Operation) -> Access | None:
        return self.facts.access(self.path, op)

    def access_form(self, op: Operation) -> Affine | None:
        """The bound form of the lanes an access reaches (a block pointer's, a descriptor's), where known."""
        found = self.access_fact(op)
        return None if found is None else self.bind(found.form)

    def access_reach(self, op: Operation) -> tuple[int, int] | None:
        """The lowest and highest offset an access's lanes take over every program and trip, where known."""
        found = self.access_fact(op)
        if found is None or found.form is None:
            return None
        return found.form.bounds(self.facts.grid, self.facts.ranges)

    def access_limits(self, op: Operation) -> masks.Limits | None:
        """The box of an access's lanes its mask has on, where the analyses know it as one here."""
        found = self.access_fact(op)
        if found is None or found.mask is None:
            return None
        return found.mask.limits(self.facts.grid, self._symbol, self.facts.ranges)

    def loop_fact(self, op: Operation) -> Loop | None:
        return self.facts.loop(self.path, op)

    def loop_mode(self, loop: Loop) -> LoopMode:
        if not self.vector:
            return LoopMode.ROLLED
        return self.plan.loop_mode(loop)

    def stepped_pointer(self, access: Access, loop: Loop) -> Pointer:
        """The pointer to every trip's block of an unmasked load in ``loop`` at once: its form with the loop's trip as
        a new first axis of the block (a K-loop's operands, `jt_core.translation.control`)."""
        assert access.form is not None and loop.most is not None
        step = access.form.coefficient(loop.symbol)
        rest = dataclasses.replace(access.form, terms=tuple((s, c) for s, c in access.form.terms if s != loop.symbol))
        bound = self.bind(rest)
        assert bound is not None
        whole = Affine(
            bound.const,
            bound.pids,
            (step, *bound.lanes),
            (loop.most, *bound.shape),
            (),
            bound.base_known,
            bound.dynamic,
        )
        (buffer,) = access.buffers
        pointee = self.type(access.op.results[0]).element
        return Pointer(buffer, self.offsets(whole), pointee, whole)

    def offsets(self, form: Affine) -> jax.Array:
        """The offsets a bound form gives in this program (its program ids those being traced)."""
        offsets: Any = jnp.asarray(form.const, jnp.int64)
        if not form.base_known:
            offsets = offsets + jnp.asarray(form.dynamic, jnp.int64)
        for pid, coefficient in zip(self.pids, form.pids, strict=True):
            if coefficient:
                offsets = offsets + jnp.asarray(pid, jnp.int64) * coefficient
        return blocks.strided(offsets, form.lanes, form.shape)

    def loops_within(self, block: Block) -> list[Loop]:
        """The loops running ``block`` may run (through the functions it calls too)."""
        return [found for op, path in _within(self.ir, block, self.path) if (found := self.facts.loop(path, op))]

    def accesses_within(self, block: Block) -> list[Access]:
        """The accesses running ``block`` may make (through the functions it calls too)."""
        return [found for op, path in _within(self.ir, block, self.path) if (found := self.facts.access(path, op))]

    def outside_loop(self, dot: Operation) -> bool:
        """Whether a loop's product is computed around the loop; a step traced alone collects its operands."""
        collected = self.collected.get(id(dot))
        if collected is not None:
            a, b = (lang.widen_for_dot(self.array(v)) for v in dot.operands[:2])
            collected.append((a, b))
        return id(dot) in self.outside

    # -- guards ------------------------------------------------------------------------------------------------

    def guarded(self, mask: Any, shape: tuple[int, ...]) -> Any:
        """An access's mask, and-ed with the guard of the branch side or loop trip being traced."""
        if self.predicate is None:
            return mask
        predicate = jnp.broadcast_to(self.predicate, shape)
        return predicate if mask is None else jnp.broadcast_to(jnp.asarray(mask, bool), shape) & predicate

    @contextlib.contextmanager
    def guard(self, condition: Any, side: tuple[int, bool] | None = None) -> Iterator[None]:
        """Traces what the block runs with ``condition`` and-ed into the guard (and, for a branch, its side)."""
        outer, outer_path = self.predicate, self.branch_path
        self.predicate = condition if outer is None else outer & condition
        if side is not None:
            self.branch_path = (*outer_path, side)
        try:
            yield
        finally:
            self.predicate, self.branch_path = outer, outer_path

    def new_branch(self) -> int:
        self._branches += 1
        return self._branches

    # -- structure ---------------------------------------------------------------------------------------------

    def start_program(self) -> None:
        """Forgets what the program traced before knew: its values and what is known of them."""
        self.env, self._known = {}, {}
        self.products.forget()
        self.predicate = None
        self.branch_path = ()
        self.trips = {}

    def nested(self, block: Block, args: Sequence[Any], state: State) -> tuple[list[Any], State]:
        """Runs a block of a loop or branch that JAX's control flow runs."""
        self.region_depth += 1
        try:
            return self.run_block(block, args, state)
        finally:
            self.region_depth -= 1

    def run_block(self, block: Block, args: Sequence[Any], state: State) -> tuple[list[Any], State]:
        """Runs a block's operations; returns what its terminator hands on, and the state."""
        from jt_core.translation import control

        for value, arg in zip(block.arguments, args, strict=True):
            self.env[value] = arg
        for op in block.operations:
            found = rule_of(op.name)
            if found is not None and found.terminator:
                return [self.env[v] for v in op.operands], state
            if found is not None and found.jumps:
                return control.branch(self, op, self.ir.regions[id(block)], state)
            try:
                state = self.operation(op, state)
            except Unsupported as exc:
                if exc.line is None and op.line is not None:
                    raise Unsupported(exc.what, op.line) from None
                raise
            except UnsupportedKernelError as exc:
                raise Unsupported(str(exc), op.line) from None
        return [], state

    def operation(self, op: Operation, state: State) -> State:
        found = rule_of(op.name)
        if found is None or found.lower is None:
            raise Unsupported(found.refused if found is not None and found.refused else f"the operation {op.name}")
        if op.results and not op.regions and not found.effect and not any(r in self.facts.used for r in op.results):
            return state  # nothing reads it (Triton's overflow checks without debug=True, say)
        state = found.lower(RuleContext(op, self, self.strategy, self.path), state)
        if found.keeps_known and op.name != "arith.constant":
            self.set_known(op.results[0], self.known(op.operands[0]))
        if found.passes_product:
            self.products.passed(op, self.type(op.results[0]).shape)
        if self.relabel is not None and not self.path and op.results and op.results[0] in self.relabel.axes:
            axis = self.relabel.axes[op.results[0]]
            dtype = lang.dtype_of(self.type(op.results[0]).element)
            self.env[op.results[0]] = jnp.asarray(self.pids[axis]).astype(dtype)
            self._known.pop(op.results[0], None)
        return state

    def call(self, op: Operation, args: Sequence[Any], state: State) -> tuple[list[Any], State]:
        """Runs the helper ``op`` calls (the analysis found it defined, and no recursion)."""
        function = self.ir.functions[str(op.attr("callee"))]
        outer = self.path
        self.path = (*outer, id(op))
        try:
            return self.run_block(function.body[0], args, state)
        finally:
            self.path = outer


def _calls(op: Operation) -> bool:
    found = rule_of(op.name)
    return found is not None and found.calls


def _within(program: Any, block: Block, path: tuple[int, ...]) -> Iterator[tuple[Operation, tuple[int, ...]]]:
    """Every operation running ``block`` may run, with the call path it runs at (helpers followed once each)."""
    seen: set[str] = set()

    def visit(blocks: Sequence[Block], at: tuple[int, ...]) -> Iterator[tuple[Operation, tuple[int, ...]]]:
        for inner in blocks:
            for op in inner.operations:
                yield op, at
                for region in op.regions:
                    yield from visit(region, at)
                if _calls(op):
                    callee = str(op.attr("callee"))
                    function = program.functions.get(callee)
                    if function is not None and callee not in seen:
                        seen.add(callee)
                        yield from visit(function.body, (*at, id(op)))

    yield from visit([block], path)
