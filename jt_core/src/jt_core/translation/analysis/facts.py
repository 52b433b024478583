"""What the analyses find about a kernel, before any of it is traced: `Facts`, and its parts.

The address walk (`jt_core.translation.analysis.walk`) gives each value of each call of each function a `Fact`,
each loop a `Loop` and each memory access an `Access`; the independence pass
(`jt_core.translation.analysis.independence`) weighs the accesses, and the plan (`jt_core.translation.plan`) is
chosen from all of it. The lowering reads these facts; it proves nothing itself.

A value is named by a `Place`: the path of ``tt.call`` operations that leads to the function it lies in, and its
id (a function called from two places has two sets of facts).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from jt_core.translation.analysis.affine import Affine, Ranges, Symbol
from jt_core.translation.analysis.masks import Mask
from jt_core.translation.analysis.products import Fusions
from jt_core.translation.analysis.relabeling import Relabeling
from jt_core.translation.program import Operation

__all__ = ["Access", "Descriptor", "Fact", "Facts", "Loop", "Place", "Trips", "UNKNOWN"]

#: A call path (the ids of the ``tt.call`` operations from the kernel's entry) and a value id.
Place = tuple[tuple[int, ...], int]


@dataclasses.dataclass(frozen=True)
class Descriptor:
    """A tensor descriptor or block pointer as the analysis knows it: where its tensor lies and how it is laid out.

    Attributes:
        buffers: The buffers its tensor may lie in.
        base: The offset of the tensor's first element, as a form (``None``: not known as one).
        shape: The tensor's shape, each a known int or ``None``.
        strides: Its strides in elements, each a known int or ``None``.
        offsets: For a block pointer, the forms of its block's first element's indices (``None`` each where not
            known); empty for a descriptor, whose accesses name their offsets.
        block: The block an access moves.
    """

    buffers: frozenset[int]
    base: Affine | None
    shape: tuple[int | None, ...]
    strides: tuple[int | None, ...]
    offsets: tuple[Affine | None, ...]
    block: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Fact:
    """What the analysis knows of one value.

    Attributes:
        form: An integer's exact affine form (or a pointer's offset's, in elements of its buffer).
        mask: A boolean's mask, where it is a box of lanes (`jt_core.translation.analysis.masks.Mask`).
        buffers: For a pointer, the buffers it may point into.
        static: The value of a scalar known when tracing (a Python int, float or bool).
        descriptor: For a tensor descriptor or block pointer, what is known of it.
        varies: Whether the value may differ from program to program (it depends on the program id, or on what
            memory holds where programs read apart).
        address: Whether the value is a pointer turned into an integer (``tt.ptr_to_int``).
    """

    form: Affine | None = None
    mask: Mask | None = None
    buffers: frozenset[int] | None = None
    static: Any = None
    descriptor: Descriptor | None = None
    varies: bool = True
    address: bool = False


#: A value nothing is known of.
UNKNOWN = Fact()


class Trips(enum.Enum):
    """How many trips a ``scf.for`` makes, as the programs see it.

    * ``STATIC``: a number known when tracing;
    * ``UNIFORM``: the same in every program, known only when it runs (it depends on an outer loop's trip, or on a
      value loaded from one place);
    * ``BOUNDED``: different from program to program, at most ``Loop.most`` (a causal block range from the program
      id, a persistent kernel's ``range(pid, n, num_programs)``);
    * ``DYNAMIC``: different from program to program, with no bound known when tracing (a length loaded per
      program).
    """

    STATIC = "static"
    UNIFORM = "uniform"
    BOUNDED = "bounded"
    DYNAMIC = "dynamic"


@dataclasses.dataclass(frozen=True)
class Loop:
    """A loop of a kernel (``scf.for``, or ``scf.while`` with ``trips`` ``DYNAMIC`` and ``most`` ``None``).

    Attributes:
        op: The loop.
        path: The call path it lies in.
        trips: What kind of trip count it has.
        most: The most trips a program makes, where known (the count itself, for ``STATIC``).
        size: How many operations its body runs (nested ones included), of those something uses.
        carried: For each value the loop carries, the step it moves by in every trip, where it is an induction
            (``x += step``; ``None`` otherwise).
        dots: The products the loop only accumulates (``acc = tl.dot(a, b, acc)``, ``acc`` read by nothing else),
            each ``(dot, index of acc among the carried values, loads)``, ``loads`` the two unmasked loads its
            operands are, where they are (a K-loop's products can then be one product of two whole blocks).
    """

    op: Operation
    path: tuple[int, ...]
    trips: Trips
    most: int | None
    size: int
    carried: tuple[Affine | None, ...] = ()
    dots: tuple[tuple[Operation, int, tuple[Operation, Operation] | None], ...] = ()

    @property
    def symbol(self) -> Symbol:
        """The symbol of this loop's trip (0 for the first) in the forms of its body."""
        return ("trip", self.path, id(self.op))

    @property
    def is_while(self) -> bool:
        return self.op.name == "scf.while"


@dataclasses.dataclass(frozen=True)
class Access:
    """One memory access of a kernel, as the analysis found it.

    Attributes:
        kind: ``"load"``, ``"store"`` or ``"atomic"``.
        op: The operation.
        buffers: The buffers it may reach.
        form: The form of its lanes' offsets (symbols included), or ``None`` where not known as one.
        mask: Its mask, where known as a box (``None``: no mask, or not known: see ``masked``).
        masked: Whether it has a mask (or a guard from a branch both of whose sides run).
        shape: The block it moves.
        loops: The loops it lies in, outermost first.
        branches: The branches it lies on, each ``(condition place, side)``, outermost first.
        order: Its place in program order (an access inside a loop is also after itself, in the next trip).
        combiner: For an atomic, its kind (``"ADD"``, ``"FADD"``, ..., ``"CAS"``).
        result_used: For an atomic, whether anything reads what it returns.
        path: The call path it lies in.
    """

    kind: str
    op: Operation
    buffers: frozenset[int]
    form: Affine | None
    mask: Mask | None
    masked: bool
    shape: tuple[int, ...]
    loops: tuple[Loop, ...]
    branches: tuple[tuple[Place, bool], ...]
    order: int
    combiner: str | None = None
    result_used: bool = False
    path: tuple[int, ...] = ()


@dataclasses.dataclass
class Facts:
    """Everything the analyses found about one kernel, for one call's scalars and grid.

    Attributes:
        values: Each value's fact, by place.
        loops: Each loop, by ``(call path, id of the loop operation)``.
        accesses: The memory accesses, in program order.
        ranges: The range of each symbol that has one.
        grid: The grid the programs' ids range over (a relabeled one's box of tiles, where relabeled).
        launch: The grid launched.
        relabel: The relabeling the analysis assumed, or ``None``.
        fusions: Which products the sums fuse (where the strategy rounds as a GPU does).
        refusal: The first construct the translation cannot express, with its kernel source line, or ``None``.
        used: The values something with an effect depends on.
    """

    values: dict[Place, Fact]
    loops: dict[tuple[tuple[int, ...], int], Loop]
    accesses: list[Access]
    ranges: Ranges
    grid: tuple[int, int, int]
    launch: tuple[int, int, int]
    relabel: Relabeling | None
    fusions: Fusions | None
    refusal: tuple[str, str | None] | None
    used: frozenset[int]

    def fact(self, path: tuple[int, ...], value: int) -> Fact:
        return self.values.get((path, value), UNKNOWN)

    def loop(self, path: tuple[int, ...], op: Operation) -> Loop | None:
        return self.loops.get((path, id(op)))

    def access(self, path: tuple[int, ...], op: Operation) -> Access | None:
        """The access ``op`` makes in the function at ``path``."""
        if not hasattr(self, "_accesses_by_op"):
            self._accesses_by_op = {(a.path, id(a.op)): a for a in self.accesses}
        return self._accesses_by_op.get((path, id(op)))

    def symbol_ranges(self) -> Mapping[Symbol, tuple[int, int]]:
        return self.ranges
