"""Running every program of a kernel's grid, as one computation XLA compiles.

Two ways give the same result:

* **in order**: a ``lax.fori_loop`` over the programs, in the interpreter's order (the last grid axis varies
  fastest), each on the buffers the programs before it left: always right, at a per-program cost;
* **side by side**: the programs traced once under ``jax.vmap``, over as many programs at a time as
  `chunk_size` allows, their stores recorded and made after them. That gives what the programs in order give
  only when no program can see another's stores and no two programs store to one element, and it is used only
  when the kernel's TTIR proves it: no atomics; no buffer both loaded and stored; every store outside loops and
  branches, through offsets affine in the program ids whose steps keep the programs' elements apart
  (`jt_core.translation.affine.disjoint`). Anything else runs in order.

Side by side runs in boxes of programs first (`jt_core.translation.side_by_side`: one ``jax.vmap`` per grid
axis, block accesses as slices of their buffers, in-place kernels too, several stores per buffer, order-free
atomics; a grid relabeled as the tiles its kernel maps its ids to, `jt_core.translation.relabeling`); the flat
chunks here take the grids whose planes of programs do not fit in a box.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core import settings
from jt_core.translation import affine, side_by_side
from jt_core.translation import strategy as strategies
from jt_core.translation.kernel import Kernel
from jt_core.translation.memory import Memory, State, merged_faults, no_error
from jt_core.translation.program import Program, parse_type
from jt_core.translation.relabeling import relabeling
from jt_core.translation.strategy import CPU_STRATEGY, Strategy
from jt_core.translation.values import NotVectorizable

__all__ = ["chunk_size", "run_grid"]


def _linear_type(grid: tuple[int, int, int]) -> Any:
    """The integer type numbering the programs of ``grid``: int64 from 2**31 programs on (each id stays int32)."""
    return jnp.int32 if math.prod(grid) <= np.iinfo(np.int32).max else jnp.int64


def _program_ids(linear: Any, grid: tuple[int, int, int]) -> tuple[Any, Any, Any]:
    """The program ids (int32) of program number ``linear`` (z varies fastest)."""
    kind = np.dtype(_linear_type(grid)).type
    inner = grid[1] * grid[2]
    x = linear if inner == 1 else lax.div(linear, kind(inner))
    y = 0 if grid[1] == 1 else (linear if grid[2] == 1 else lax.div(linear, kind(grid[2]))) % kind(grid[1])
    z = 0 if grid[2] == 1 else lax.rem(linear, kind(grid[2]))
    return tuple(i if isinstance(i, int) else i.astype(jnp.int32) for i in (x, y, z))  # type: ignore[return-value]


def run_grid(
    program: Program,
    memory: Memory,
    grid: tuple[int, int, int],
    arguments: Sequence[Any],
    state: State,
    fuse: bool = True,
    strategy: Strategy = CPU_STRATEGY,
) -> State:
    """Runs every program of ``grid``: side by side where that provably gives what running them in order gives,
    else in order.

    Args:
        program: The kernel.
        memory: Its buffers.
        grid: The grid, three axes.
        arguments: The entry function's arguments: `Pointer` for pointers,
            Python scalars for scalars.
        state: The initial state.
        fuse: Whether a product and a sum may be fused into one multiply-add (``enable_fp_fusion``).
        strategy: The platform's choices (how many programs run side by side at a time, among others).
    """
    with strategies.using(strategy):
        return _run_grid(program, memory, grid, arguments, state, fuse, strategy)


def _run_grid(
    program: Program,
    memory: Memory,
    grid: tuple[int, int, int],
    arguments: Sequence[Any],
    state: State,
    fuse: bool,
    strategy: Strategy,
) -> State:
    total = math.prod(grid)
    if total == 0:
        return state
    if total > 1 and settings.flag("JT_CPU_SIDE_BY_SIDE", default=True):
        try:
            chunk = chunk_size(program, total, strategy.side_by_side_bytes)
            tiles = relabeling(program, arguments, grid)
            boxed = None
            if tiles is not None:
                try:
                    boxed = side_by_side.run(program, memory, grid, arguments, state, fuse, chunk, strategy, tiles)
                except NotVectorizable:
                    pass  # over the launched ids, it may still run side by side
            if boxed is None:
                boxed = side_by_side.run(program, memory, grid, arguments, state, fuse, chunk, strategy)
            if boxed is not None:
                return boxed
            return _side_by_side(program, memory, grid, arguments, state, fuse, strategy)
        except NotVectorizable:
            pass
    return _in_order(program, memory, grid, arguments, state, fuse, strategy)


def _in_order(
    program: Program,
    memory: Memory,
    grid: tuple[int, int, int],
    arguments: Sequence[Any],
    state: State,
    fuse: bool,
    strategy: Strategy,
) -> State:
    kernel = Kernel(program, memory, grid, fuse, strategy=strategy)
    entry = program.functions[program.entry].body[0]

    def one(linear: Any, carried: State) -> State:
        kernel.start_program()
        kernel.pids = _program_ids(linear, grid)
        _, carried = kernel.run_block(entry, list(arguments), carried)
        return carried

    total = math.prod(grid)
    if total == 1:
        return one(0, state)
    linear = _linear_type(grid)
    return lax.fori_loop(linear(0), linear(total), lambda i, s: one(i, s), state)


def chunk_size(program: Program, total: int, budget: int = CPU_STRATEGY.side_by_side_bytes) -> int:
    """How many programs run side by side at a time: as many as keep the largest value of the kernel, times the
    programs, within ``budget`` bytes (the strategy's `Strategy.side_by_side_bytes`)."""
    largest = 1
    for text in set(program.types.values()):
        ty = parse_type(text)
        size = 8 if ty.is_pointer else _itemsize(ty.element)
        largest = max(largest, math.prod(ty.shape) * size)
    return max(1, min(total, budget // largest))


def _itemsize(element: str) -> int:
    digits = "".join(c for c in element if c.isdigit())
    return max(1, int(digits[:2] or 8) // 8) if element.startswith(("i", "f", "bf")) else 8


def _side_by_side(
    program: Program,
    memory: Memory,
    grid: tuple[int, int, int],
    arguments: Sequence[Any],
    state: State,
    fuse: bool,
    strategy: Strategy,
) -> State:
    total = math.prod(grid)
    chunk = chunk_size(program, total, strategy.side_by_side_bytes)
    kernel = Kernel(program, memory, grid, fuse, vector=True, strategy=strategy)
    entry = program.functions[program.entry].body[0]
    recorded: list[int] = []

    def programs(first: Any, buffers: tuple[jax.Array, ...]) -> tuple[list[jax.Array], list[jax.Array], jax.Array]:
        def one(linear: Any) -> tuple[list[jax.Array], list[jax.Array], jax.Array]:
            kernel.start_program()
            memory.deferred, memory.loaded = [], set()
            try:
                kernel.pids = _program_ids(linear, grid)
                _, after = kernel.run_block(entry, list(arguments), State(buffers, no_error()))
                deferred = memory.deferred
            finally:
                memory.deferred = None
            stored = {buffer for buffer, _ in kernel.stores}
            if stored & memory.loaded:
                raise NotVectorizable("a buffer both loaded and stored")
            for buffer in stored:
                if not affine.disjoint([a for b, a in kernel.stores if b == buffer], grid):
                    raise NotVectorizable("stores that may reach one element from two programs")
            recorded[:] = [buffer for buffer, _, _ in deferred]
            return [i for _, i, _ in deferred], [v for _, _, v in deferred], after.faults

        linear = first + lax.iota(_linear_type(grid), chunk)
        index, values, faults = jax.vmap(one)(linear)
        valid = linear < total
        index = [jnp.where(valid.reshape((-1,) + (1,) * (i.ndim - 1)), i, np.iinfo(i.dtype).max) for i in index]
        return index, values, merged_faults(jnp.where(valid, faults, 0))

    def chunk_of(first: Any, carried: State) -> State:
        index, values, faults = programs(first, carried.buffers)
        for buffer, where, what in zip(recorded, index, values, strict=True):
            carried = memory.apply(carried, buffer, where, what)
        return State(carried.buffers, carried.faults | faults)

    chunks = -(-total // chunk)
    kind = _linear_type(grid)
    if chunks == 1:
        return chunk_of(kind(0), state)
    return lax.fori_loop(kind(0), kind(chunks), lambda c, s: chunk_of(c * kind(chunk), s), state)
