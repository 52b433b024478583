"""Program ids relabeled: the programs of a grid that the kernel maps to tiles by division (the grouped ordering of
Triton's matrix-product tutorial) run side by side over the tiles.

Running programs side by side, their order does not matter: any numbering of them runs the same. A kernel that turns
its program id into a tile's coordinates by division and remainder (``pid_m = first_pid_m + (pid % group) %
group_size_m``) makes those coordinates no affine function of the id, so its loads would be gathers. Where the
coordinates, computed for every program of the launched grid when the kernel is traced, are a one-to-one map onto a
box of tiles ``[0, A) x [0, B)``, the programs run over that box instead: the coordinates are the box's program ids
(affine, so the loads are slices), and the launched id, where the kernel reads it, is looked up in a table.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jt_core.translation import folding, integers, lang
from jt_core.translation.program import Program
from jt_core.translation.rules import rule_of

__all__ = ["Relabeling", "relabeling"]

#: The most programs whose coordinates are computed when tracing (one pass of the id's arithmetic per program).
_MOST_PROGRAMS = 1 << 16

#: Integer operations on scalars that keep a value derived from the program id such a value.
_ARITHMETIC = integers.INTEGER_OPERATIONS
#: The operations whose presence makes coordinates non-affine: only then is relabeling looked for.
_NON_AFFINE = integers.INTEGER_OPERATIONS - integers.LINEAR_OPERATIONS - {"arith.cmpi"}


def _toward_pointers(name: str) -> bool:
    """Whether a scalar reaches a pointer's offsets through operation ``name``: affine arithmetic, or an operation
    that moves elements around (a splat, a broadcast)."""
    if name in integers.AFFINE_OPERATIONS:
        return True
    found = rule_of(name)
    return found is not None and found.keeps_known


@dataclasses.dataclass(frozen=True)
class Relabeling:
    """The box of tiles the programs run side by side over.

    Attributes:
        grid: The box, as a grid of three axes.
        axes: The values that stand for the box's program ids, by value id: each one's axis.
        launched: ``launched[u, w]`` is the launched program id of the program of tile ``(u, w)``.
    """

    grid: tuple[int, int, int]
    axes: Mapping[int, int]
    launched: np.ndarray = dataclasses.field(compare=False)


def relabeling(program: Program, arguments: Sequence[Any], grid: tuple[int, int, int]) -> Relabeling | None:
    """The relabeling of a one-axis grid whose kernel maps its program id to two tile coordinates one to one, or
    ``None``.

    Args:
        program: The kernel.
        arguments: The entry function's arguments (scalars are known when tracing).
        grid: The launched grid.
    """
    total = math.prod(grid)
    if grid[1] != 1 or grid[2] != 1 or not 1 < total <= _MOST_PROGRAMS:
        return None
    entry = program.functions[program.entry].body[0]
    derived: set[int] = set()
    found_non_affine = False
    for op in entry.operations:
        if op.name == "tt.get_program_id" and int(op.attr("axis", 0)) == 0:
            derived.update(op.results)
        elif op.name in _ARITHMETIC and any(v in derived for v in op.operands):
            if program.type_of(op.results[0]).shape:
                continue
            derived.update(op.results)
            found_non_affine = found_non_affine or op.name in _NON_AFFINE
    if not found_non_affine:
        return None
    values = _evaluated(program, arguments, grid, derived)
    candidates = [v for v in values if v in derived and _reaches_pointers(program, v) and np.ptp(values[v]) > 0]
    order = {v: i for i, op in enumerate(entry.operations) for v in op.results}
    # The coordinates the kernel computes last are the tile's (earlier ones are steps toward them: a group's id and
    # the place in it); the earlier of a pair is the box's first axis.
    pairs = sorted(
        ((a, b) for a in candidates for b in candidates if order[a] < order[b]),
        key=lambda pair: (-order[pair[1]], -order[pair[0]]),
    )
    for first, second in pairs:
        a, b = values[first], values[second]
        if a.min() != 0 or b.min() != 0:
            continue
        rows, cols = int(a.max()) + 1, int(b.max()) + 1
        if rows * cols != total:
            continue
        tile = a * cols + b
        if np.unique(tile).size != total:
            continue
        launched = np.empty(total, np.int32)
        launched[tile] = np.arange(total, dtype=np.int32)
        return Relabeling((rows, cols, 1), {first: 0, second: 1}, launched.reshape(rows, cols))
    return None


def _evaluated(
    program: Program, arguments: Sequence[Any], grid: tuple[int, int, int], derived: set[int]
) -> dict[int, np.ndarray]:
    """The values of the top-level scalar integer operations derived from the program id, for every program of the
    grid at once (NumPy arrays over the programs), with the helpers they call (``tl.cdiv``) evaluated inline; those
    that cannot be evaluated are left out."""
    entry = program.functions[program.entry].body[0]
    env: dict[int, Any] = {v: a for v, a in zip(entry.arguments, arguments, strict=True) if lang.is_static(a)}
    _evaluate(program, entry.operations, env, np.arange(math.prod(grid), dtype=np.int64), grid, 0)
    total = math.prod(grid)
    return {v: np.broadcast_to(np.asarray(env[v], np.int64), (total,)) for v in derived if v in env}


def _evaluate(
    program: Program, operations: Sequence[Any], env: dict[int, Any], pids: np.ndarray, grid: Any, depth: int
) -> list[Any] | None:
    """Evaluates the scalar integer operations of a block into ``env``; what its ``tt.return`` returns."""
    for op in operations:
        if op.name == "tt.return":
            return [env.get(v) for v in op.operands]
        if op.name == "tt.get_program_id":
            env[op.results[0]] = pids if int(op.attr("axis", 0)) == 0 else 0
        elif op.name == "tt.get_num_programs":
            env[op.results[0]] = grid[int(op.attr("axis", 0))]
        elif op.name == "arith.constant" and not program.type_of(op.results[0]).shape:
            value = lang.constant(op.attr("text"), op.attr("value"), program.type_of(op.results[0]))
            if lang.is_static(value) and not isinstance(value, float):
                env[op.results[0]] = int(value)
        elif op.name == "tt.call" and depth < 8 and all(v in env for v in op.operands):
            function = program.functions.get(str(op.attr("callee")))
            if function is None:
                continue
            body = function.body[0]
            inner = dict(zip(body.arguments, (env[v] for v in op.operands), strict=True))
            returned = _evaluate(program, body.operations, inner, pids, grid, depth + 1)
            for value, result in zip(op.results, returned or (), strict=False):
                if result is not None:
                    env[value] = result
        elif op.name in _ARITHMETIC and all(v in env for v in op.operands):
            if program.type_of(op.results[0]).shape or any(program.type_of(v).shape for v in op.operands):
                continue
            result = _operation(program, op, [env[v] for v in op.operands])
            if result is not None:
                env[op.results[0]] = result
    return None


def _operation(program: Program, op: Any, args: list[Any]) -> Any:
    """One integer operation on NumPy arrays over the programs (or ints), computed in its types' widths
    (`jt_core.translation.integers`) and returned as int64; ``None`` where a divisor is zero."""
    if op.name in folding.DIVISIONS and np.any(np.asarray(args[1]) == 0):
        return None
    arrays = [
        np.asarray(a, np.int64).astype(folding.dtype_of(program.type_of(v).element))
        for a, v in zip(args, op.operands, strict=True)
    ]
    out = folding.dtype_of(program.type_of(op.results[0]).element)
    with np.errstate(all="ignore"):
        found = integers.apply(integers.NUMPY, op.name, arrays, out, op.attr("predicate"))
    return np.asarray(found).astype(np.int64)


def _reaches_pointers(program: Program, value: int, seen: frozenset[int] = frozenset()) -> bool:
    """Whether ``value`` reaches a pointer's offsets, through sums, products and broadcasts."""
    for op in program.users.get(value, ()):
        if op.name == "tt.addptr":
            return True
        onward = _toward_pointers(op.name) and op.results and op.results[0] not in seen
        if onward and _reaches_pointers(program, op.results[0], seen | {value}):
            return True
    return False
