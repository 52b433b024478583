"""Which integers of a kernel are affine in the program id and the block's lanes, and what that proves about the
programs' stores.

An offset such as ``tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)`` is ``c + a . pid + sum(c_d * i_d)``, with
constant ``c``, ``a`` and ``c_d`` (``i_d`` the lane's index along axis ``d`` of the block). Tracking that form
through ``make_range``, ``splat``, broadcasting, sums and products with constants is enough to show, for most
kernels, that no two programs store to the same element; then running the programs side by side (vectorised)
gives what running them one after the other gives (`jt_core.translation.grid`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

__all__ = ["Affine", "disjoint"]


@dataclasses.dataclass(frozen=True)
class Affine:
    """``const + sum(pid[k] * pids[k]) + sum(lanes[d] * i_d)`` over a block of ``shape``.

    Attributes:
        const: The constant term.
        pids: The coefficients of the three program ids.
        lanes: The coefficient of each block axis's lane index.
        shape: The block's shape (``()`` for a scalar).
        base_known: Whether ``const`` and ``pids`` are known; when not, the value is some run-time scalar (a loop's
            counter, say) plus the lanes' terms, which still bound the block's spread.
        dynamic: Where ``base_known`` is false and the run-time scalar is known as a traced value: that scalar, so
            that the value is ``dynamic + const + sum(pid[k] * pids[k]) + sum(lanes[d] * i_d)``; else ``None``.
    """

    const: int
    pids: tuple[int, int, int] = (0, 0, 0)
    lanes: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    base_known: bool = True
    dynamic: Any = dataclasses.field(default=None, compare=False)

    @staticmethod
    def unknown_scalar(value: Any = None) -> Affine:
        """A scalar known only at run time: ``value`` (traced), where that is known."""
        return Affine(0, (0, 0, 0), (), (), base_known=False, dynamic=value)

    @staticmethod
    def constant(value: int, shape: tuple[int, ...] = ()) -> Affine:
        return Affine(int(value), (0, 0, 0), (0,) * len(shape), shape)

    @property
    def is_constant(self) -> bool:
        return self.base_known and not any(self.pids) and not any(self.lanes)

    def broadcast(self, shape: tuple[int, ...]) -> Affine:
        """The same values over ``shape`` (a scalar's, or this block's broadcast: an axis of size 1 varies no more)."""
        if not self.shape:
            return dataclasses.replace(self, lanes=(0,) * len(shape), shape=shape)
        lanes = tuple(c if n == m else 0 for c, n, m in zip(self.lanes, self.shape, shape, strict=True))
        return dataclasses.replace(self, lanes=lanes, shape=shape)

    def expand(self, axis: int) -> Affine:
        lanes = list(self.lanes)
        shape = list(self.shape)
        lanes.insert(axis, 0)
        shape.insert(axis, 1)
        return dataclasses.replace(self, lanes=tuple(lanes), shape=tuple(shape))

    def reshaped(self, shape: tuple[int, ...]) -> Affine | None:
        """The same values over ``shape`` when only axes of size 1 come or go, else ``None``."""
        if [n for n in self.shape if n != 1] != [n for n in shape if n != 1]:
            return None
        varying = iter([c for c, n in zip(self.lanes, self.shape, strict=True) if n != 1])
        lanes = tuple(next(varying) if n != 1 else 0 for n in shape)
        return dataclasses.replace(self, lanes=lanes, shape=shape)

    def plus(self, other: Affine, sign: int = 1) -> Affine:
        shape = self.shape if len(self.shape) >= len(other.shape) else other.shape
        a, b = (
            self.broadcast(shape) if self.shape != shape else self,
            other.broadcast(shape) if other.shape != shape else other,
        )
        return Affine(
            a.const + sign * b.const,
            tuple(x + sign * y for x, y in zip(a.pids, b.pids, strict=True)),  # type: ignore[arg-type]
            tuple(x + sign * y for x, y in zip(a.lanes, b.lanes, strict=True)),
            shape,
            a.base_known and b.base_known,
            _dynamic_sum(a, b, sign),
        )

    def times(self, factor: int) -> Affine:
        return Affine(
            self.const * factor,
            tuple(p * factor for p in self.pids),  # type: ignore[arg-type]
            tuple(c * factor for c in self.lanes),
            self.shape,
            self.base_known,
            None if self.dynamic is None else self.dynamic * factor,
        )

    def bounds(self, grid: tuple[int, int, int]) -> tuple[int, int] | None:
        """The smallest and largest value over every program of ``grid`` and every lane, or ``None`` where the base is
        known only at run time."""
        if not self.base_known:
            return None
        low, high = self.spread()
        for coefficient, size in zip(self.pids, grid, strict=True):
            low += min(0, coefficient * (size - 1))
            high += max(0, coefficient * (size - 1))
        return self.const + low, self.const + high

    def spread(self) -> tuple[int, int]:
        """How far below and above its first lane (all lane indices zero) the block's values reach."""
        low = high = 0
        for c, n in zip(self.lanes, self.shape, strict=True):
            low += min(0, c * (n - 1))
            high += max(0, c * (n - 1))
        return low, high


def _dynamic_sum(a: Affine, b: Affine, sign: int) -> Any:
    """The run-time scalar of ``a + sign * b``: ``None`` unless each is known or absent."""
    if (not a.base_known and a.dynamic is None) or (not b.base_known and b.dynamic is None):
        return None
    if a.dynamic is None:
        return None if b.dynamic is None else sign * b.dynamic
    return a.dynamic if b.dynamic is None else a.dynamic + sign * b.dynamic


def disjoint(stores: Sequence[Affine], grid: tuple[int, int, int]) -> bool:
    """Whether the programs of ``grid`` store to disjoint elements, when program ``pid`` stores (some of) the values
    of each of ``stores`` at ``pid``.

    Two programs ``P != Q`` store to one element when ``a . (P - Q) = sum(c_d * j_d)`` for lane differences
    ``|j_d| < n_d``. Taken together, the program axes' coefficients (with ranges ``g_k - 1``) and the lanes'
    (ranges ``n_d - 1``) are the digits of a mixed-radix number when, sorted by size, each is larger than what all
    smaller ones reach together: then zero has one representation, all digits zero, so ``P = Q``. That covers a
    block per program (``pid * BLOCK + arange(BLOCK)``) and tiles of a row-major matrix alike. Several different
    stores to one buffer (the blocks of a row, stored one after another) are apart when each program's stay within
    a window of its own (`apart_in_windows`).
    """
    if not stores:
        return True
    if any(s != stores[0] for s in stores):
        return apart_in_windows(stores, grid)
    if not stores[0].base_known:
        return False
    store = stores[0]
    digits = [(abs(c), n - 1) for c, n in zip(store.lanes, store.shape, strict=True) if c != 0 and n > 1]
    return _mixed_radix(store.pids, grid, digits)


def _mixed_radix(pids: Sequence[int], grid: Sequence[int], digits: list[tuple[int, int]]) -> bool:
    """Whether ``sum(pid[k] * pids[k]) + sum(step * lane)`` over the ``digits`` (step, largest lane) tells the
    programs apart: each step, sorted by size, larger than what all smaller ones reach together."""
    steps = [(abs(a), g - 1) for a, g in zip(pids, grid, strict=True) if g > 1]
    if any(step == 0 for step, _ in steps):
        return False  # programs along that axis reach the same elements
    reach = 0
    for step, count in sorted(steps + digits):
        if step <= reach:
            return False
        reach += step * count
    return True


def window(accesses: Sequence[Affine]) -> tuple[int, int] | None:
    """The lowest and highest offsets, relative to the program's own (``sum(pid[k] * pids[k])``), that ``accesses``
    reach, when they all have known bases and the same program-id coefficients; else ``None``."""
    if not accesses or any(not a.base_known or a.pids != accesses[0].pids for a in accesses):
        return None
    spans = [(a.const + a.spread()[0], a.const + a.spread()[1]) for a in accesses]
    return min(low for low, _ in spans), max(high for _, high in spans)


def apart_in_windows(accesses: Sequence[Affine], grid: tuple[int, int, int]) -> bool:
    """Whether each program's ``accesses`` stay within a window of offsets no other program's reach: every access
    moves with the program id alike, and the window they span together, placed once per program, does not meet the
    next program's (the rows of a matrix, each program reading and writing its own row in blocks)."""
    span = window(accesses)
    if span is None:
        return False
    return _mixed_radix(accesses[0].pids, grid, [(1, span[1] - span[0])])
