"""Running every program of a kernel's grid, as one computation XLA compiles, as its plan says
(`jt_core.translation.plan`).

* **in order**: a ``lax.fori_loop`` over the programs, in the interpreter's order (the last grid axis varies
  fastest), each on the buffers the programs before it left: always right, at a per-program cost;
* **side by side**: the programs traced once under ``jax.vmap``, their stores recorded and made after them: in
  boxes of whole planes of the grid (`jt_core.translation.side_by_side`), or, where a plane does not fit the plan's
  chunk of programs, in flat chunks here.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.translation import side_by_side
from jt_core.translation.kernel import Job
from jt_core.translation.memory import State, merged_faults, no_error

__all__ = ["run_grid"]


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


def run_grid(job: Job, state: State) -> State:
    """Runs every program of the plan's grid, side by side or in order as the plan says, from ``state``."""
    grid = job.plan.facts.grid
    if math.prod(grid) == 0:
        return state
    if not job.plan.side_by_side:
        return _in_order(job, state)
    if side_by_side.fits(job.plan):
        return side_by_side.run(job, state)
    return _side_by_side(job, state)


def _in_order(job: Job, state: State) -> State:
    grid = job.plan.facts.grid
    kernel = job.kernel(vector=False)

    def one(linear: Any, carried: State) -> State:
        kernel.start_program()
        kernel.pids = _program_ids(linear, grid)
        _, carried = kernel.run_block(job.entry, list(job.arguments), carried)
        return carried

    total = math.prod(grid)
    if total == 1:
        return one(0, state)
    linear = _linear_type(grid)
    return lax.fori_loop(linear(0), linear(total), lambda i, s: one(i, s), state)


def _side_by_side(job: Job, state: State) -> State:
    grid = job.plan.facts.grid
    memory = job.memory
    total = math.prod(grid)
    chunk = job.plan.chunk
    kernel = job.kernel(vector=True)
    entry = job.entry
    arguments = job.arguments
    recorded: list[Any] = []  # each store's buffer (or `parts.PartsStore`)

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
