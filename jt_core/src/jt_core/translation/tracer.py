"""What the operation handlers use of the kernel they trace: the `Tracer` protocol, which
`Kernel` fulfils.

The kernel dispatches each operation to the handlers of `shapes`,
`accesses`, `reductions` and
`control`, so the handlers name it by this protocol rather than import it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax

from jt_core.translation import masks
from jt_core.translation.affine import Affine
from jt_core.translation.memory import Memory, Pointer, State
from jt_core.translation.program import Block, Operation, Program, TensorType
from jt_core.translation.relabeling import Relabeling
from jt_core.translation.strategy import Strategy

__all__ = ["Handler", "Tracer"]


class Tracer(Protocol):
    """The kernel being traced, as a handler sees it (see `Kernel`)."""

    ir: Program
    strategy: Strategy
    memory: Memory
    grid: tuple[int, int, int]
    launch: tuple[int, int, int]
    relabel: Relabeling | None
    vector: bool
    pids: tuple[Any, Any, Any]
    env: dict[int, Any]
    affine: dict[int, Affine]
    limits: dict[int, masks.Limits]
    predicate: Any
    path: tuple[tuple[int, bool], ...]
    region_depth: int
    stores: list[tuple[int, Affine]]
    used: set[int]
    sign_safe: frozenset[int]
    branched_blocks: int
    deferred_dots: dict[int, list[tuple[jax.Array, jax.Array]]]
    dot_sources: dict[int, list[tuple[Pointer | None, Pointer | None]]]
    loaded_from: dict[int, Pointer]

    def type(self, value: int) -> TensorType:
        """The type of a value."""

    def get(self, value: int) -> Any:
        """A value as traced so far."""

    def affine_of(self, value: int) -> Affine | None:
        """The affine form of an integer value, where it is known."""

    def array(self, value: int) -> jax.Array:
        """A value as a JAX array of its type."""

    def run_block(self, block: Block, args: Sequence[Any], state: State) -> tuple[list[Any], State]:
        """Runs a block's operations; returns what its terminator hands on, and the state."""

    def elementwise(self, op: Operation) -> None:
        """Traces an element-wise operation."""


#: An operation's handler: traces ``op`` in the kernel, from the memory state before it to the one after.
Handler = Callable[[Tracer, Operation, State], State]
