"""Which masks of a kernel are boxes of its block's lanes, known when the kernel is traced.

A mask such as ``cols < n_cols``, for ``cols = tl.arange(0, BLOCK)`` and a scalar ``n_cols`` known when tracing (every
scalar argument is), is on for the lanes ``[0, n_cols)`` of its axis, in every program. Tracked through comparisons of
affine integers (`jt_core.translation.affine`), ``&``, broadcasting and new axes, such a mask is `Limits`: one lane
interval per block axis. A load or store under it reaches a box of the block, whose elements are often a slice of
the buffer where the whole block's are not (a row of 1000 floats read as a block of 1024, say); and a mask that is on
for every lane of every program of the grid (``offsets < M`` where M is a multiple of the tile) is no mask at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from jt_core.translation.analysis.affine import Affine, Ranges, Symbol

__all__ = [
    "Limits",
    "Mask",
    "broadcast",
    "comparison",
    "expanded",
    "full",
    "intersect",
    "is_empty",
    "is_full",
]

#: Per block axis, the half-open interval of the lanes that are on.
Limits = tuple[tuple[int, int], ...]

#: MLIR's ``arith.cmpi`` predicates (signed ones; the unsigned ones are taken as signed on non-negative values).
_SLT, _SLE, _SGT, _SGE = 2, 3, 4, 5
_ULT, _ULE, _UGT, _UGE = 6, 7, 8, 9


def full(shape: Sequence[int]) -> Limits:
    """Every lane of a block of ``shape``."""
    return tuple((0, n) for n in shape)


def is_full(limits: Limits, shape: Sequence[int]) -> bool:
    return limits == full(shape)


def is_empty(limits: Limits) -> bool:
    return any(high <= low for low, high in limits)


def intersect(a: Limits, b: Limits) -> Limits:
    return tuple((max(x[0], y[0]), min(x[1], y[1])) for x, y in zip(a, b, strict=True))


def broadcast(limits: Limits, before: Sequence[int], after: Sequence[int]) -> Limits:
    """The limits of a mask broadcast from shape ``before`` to ``after`` (same rank): an axis of one lane that is on
    is on for every lane of the wider axis."""
    out = []
    for (low, high), m, n in zip(limits, before, after, strict=True):
        out.append((0, n) if m == 1 and n != 1 and high > low else (low, high) if m == n else (0, 0))
    return tuple(out)


def expanded(limits: Limits, axis: int) -> Limits:
    """The limits of a mask given a new axis of one lane at ``axis``."""
    return (*limits[:axis], (0, 1), *limits[axis:])


def _normalised(predicate: int, lhs_minus_rhs: Affine) -> tuple[Affine, bool] | None:
    """``lhs < rhs`` and its kin as ``d < 0`` (``True``) or ``d >= 0`` (``False``), with ``d`` affine; ``None`` for
    ``==``, ``!=``."""
    d = lhs_minus_rhs
    if predicate in (_SLT, _ULT):
        return d, True
    if predicate in (_SLE, _ULE):
        return d.plus(Affine.constant(1, d.shape), -1), True  # d <= 0  <=>  d - 1 < 0
    if predicate in (_SGE, _UGE):
        return d, False
    if predicate in (_SGT, _UGT):
        return d.plus(Affine.constant(1, d.shape), -1), False  # d > 0  <=>  d - 1 >= 0
    return None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass(frozen=True)
class Mask:
    """A mask as the address analysis knows it: the lanes where every one of its comparisons holds, each comparison
    ``d < 0`` (``below``) or ``d >= 0`` of an affine form ``d`` (`jt_core.translation.analysis.affine`) over the
    mask's shape. Its forms may hold symbols (a loop's trip): the box of lanes it has on is found where the kernel is
    traced and the symbols are known (`limits`).

    Attributes:
        shape: The mask's shape.
        atoms: The comparisons, each ``(d, below)``.
        never: Whether the mask is off everywhere.
    """

    shape: tuple[int, ...]
    atoms: tuple[tuple[Affine, bool], ...] = ()
    never: bool = False

    def both(self, other: Mask) -> Mask:
        """The mask of lanes on in both (``&``)."""
        return Mask(self.shape, self.atoms + other.atoms, self.never or other.never)

    def moved(self, move: Callable[[Affine], Affine | None], shape: tuple[int, ...]) -> Mask | None:
        """The mask with every form moved as a value of its shape is (a broadcast, a new axis)."""
        atoms = []
        for form, below in self.atoms:
            moved = move(form)
            if moved is None:
                return None
            atoms.append((moved, below))
        return Mask(shape, tuple(atoms), self.never)

    @property
    def symbols(self) -> frozenset[Symbol]:
        return frozenset(s for form, _ in self.atoms for s in form.symbols)

    def limits(self, grid: tuple[int, int, int], value_of: Callable[[Symbol], Any], ranges: Ranges) -> Limits | None:
        """The box of lanes the mask has on, the same in every program of ``grid``, with each symbol bound to its
        value where the kernel is traced (`Affine.bind`); ``None`` where that is not a box known when tracing."""
        if self.never:
            return tuple((0, 0) for _ in self.shape)
        found = full(self.shape)
        for form, below in self.atoms:
            # On (or off) for every value its symbols take is known without them; else with their values here.
            box = _box(form, below, self.shape, grid, ranges)
            if box is None and form.terms:
                box = _box(form.bind(value_of), below, self.shape, grid, ranges)
            if box is None:
                return None
            found = intersect(found, box)
        return found

    def always_on(self, grid: tuple[int, int, int], ranges: Ranges) -> bool:
        """Whether the mask is on for every lane of every program, whatever its symbols' values in their ranges."""
        if self.never:
            return False
        return all(_box(form, below, self.shape, grid, ranges) == full(self.shape) for form, below in self.atoms)


def comparison(predicate: int, lhs: Affine, rhs: Affine, shape: tuple[int, ...], unsigned_ok: bool) -> Mask | None:
    """``lhs <predicate> rhs`` over a block of ``shape`` as a `Mask`, or ``None`` (``==``, ``!=``, or an unsigned
    comparison of values not known to be non-negative: ``unsigned_ok``)."""
    if predicate >= _ULT and not unsigned_ok:
        return None
    a = lhs.broadcast(shape) if lhs.shape != shape else lhs
    b = rhs.broadcast(shape) if rhs.shape != shape else rhs
    form = _normalised(predicate, a.plus(b, -1))
    if form is None:
        return None
    return Mask(shape, (form,))


def _box(d: Affine, below: bool, shape: tuple[int, ...], grid: tuple[int, int, int], ranges: Ranges) -> Limits | None:
    """The lanes where ``d < 0`` (``below``) or ``d >= 0``, as a box the same in every program, or ``None``."""
    if not d.base_known:
        return None
    if d.terms and any(d.lanes):
        # Lanes and symbols together: a box only where it is on everywhere, or nowhere, over the symbols' ranges.
        bounds = d.bounds(grid, ranges)
        if bounds is not None and ((below and bounds[1] < 0) or (not below and bounds[0] >= 0)):
            return full(shape)
        if bounds is not None and ((below and bounds[0] >= 0) or (not below and bounds[1] < 0)):
            return tuple((0, 0) for _ in shape)
        return None
    if any(d.pids) or d.terms:
        # The same in every program only where it is on everywhere, or nowhere.
        bounds = d.bounds(grid, ranges)
        if bounds is None:
            return None
        low, high = bounds
        if (below and high < 0) or (not below and low >= 0):
            return full(shape)
        if (below and low >= 0) or (not below and high < 0):
            return tuple((0, 0) for _ in shape)
        return None
    varying = [axis for axis, (c, n) in enumerate(zip(d.lanes, shape, strict=True)) if c and n > 1]
    if len(varying) > 1:
        return None
    limits = list(full(shape))
    if not varying:
        on = (d.const < 0) == below
        return tuple(limits) if on else tuple((0, 0) for _ in shape)
    axis = varying[0]
    c, n = d.lanes[axis], shape[axis]
    # The lanes i with c * i + const < 0 (below) or >= 0: an interval, since c * i + const is monotone in i.
    if c > 0:
        first_not_below = max(0, min(n, _ceil_div(-d.const, c)))
        limits[axis] = (0, first_not_below) if below else (first_not_below, n)
    else:
        first_below = max(0, min(n, d.const // -c + 1))
        limits[axis] = (first_below, n) if below else (0, first_below)
    return tuple(limits)
