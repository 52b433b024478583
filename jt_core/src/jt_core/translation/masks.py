"""Which masks of a kernel are boxes of its block's lanes, known when the kernel is traced.

A mask such as ``cols < n_cols``, for ``cols = tl.arange(0, BLOCK)`` and a scalar ``n_cols`` known when tracing (every
scalar argument is), is on for the lanes ``[0, n_cols)`` of its axis, in every program. Tracked through comparisons of
affine integers (`jt_core.translation.affine`), ``&``, broadcasting and new axes, such a mask is `Limits`: one lane
interval per block axis. A load or store under it reaches a box of the block, whose elements are often a slice of
the buffer where the whole block's are not (a row of 1000 floats read as a block of 1024, say); and a mask that is on
for every lane of every program of the grid (``offsets < M`` where M is a multiple of the tile) is no mask at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.translation.affine import Affine

__all__ = ["Limits", "broadcast", "compared", "expanded", "full", "intersect", "is_empty", "is_full"]

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


def compared(
    predicate: int, lhs: Affine, rhs: Affine, shape: Sequence[int], grid: Sequence[int], unsigned_ok: bool
) -> Limits | None:
    """The limits of ``lhs <predicate> rhs`` over a block of ``shape``, or ``None`` when the mask is not a box of
    lanes the same in every program (or not known to be one).

    Args:
        predicate: ``arith.cmpi``'s predicate.
        lhs, rhs: The affine forms of the operands.
        shape: The block's shape.
        grid: The grid, over whose programs a mask that depends on the program id must be the same.
        unsigned_ok: Whether both operands are known not to be negative (an unsigned comparison is then the signed
            one).
    """
    if predicate >= _ULT and not unsigned_ok:
        return None
    shape = tuple(shape)
    a = lhs.broadcast(shape) if lhs.shape != shape else lhs
    b = rhs.broadcast(shape) if rhs.shape != shape else rhs
    form = _normalised(predicate, a.plus(b, -1))
    if form is None:
        return None
    d, below = form
    if not d.base_known:
        return None
    if any(d.pids):
        # The same in every program only where it is on everywhere, or nowhere.
        bounds = d.bounds(tuple(grid))  # type: ignore[arg-type]
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
        # c * i + const < 0  <=>  i < -const / c  <=>  i < ceil(-const / c)
        first_not_below = max(0, min(n, _ceil_div(-d.const, c)))
        limits[axis] = (0, first_not_below) if below else (first_not_below, n)
    else:
        # c < 0: c * i + const < 0  <=>  i > -const / c' (c' = -c)  <=>  i >= floor(const / c') + 1
        first_below = max(0, min(n, d.const // -c + 1))
        limits[axis] = (first_below, n) if below else (0, first_below)
    return tuple(limits)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)
