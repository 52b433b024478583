"""Integers affine in the program ids, the block's lanes and a few named unknowns, and what that proves about the
programs' accesses.

An offset such as ``tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)`` is ``c + a . pid + sum(c_d * i_d)``, with
constant ``c``, ``a`` and ``c_d`` (``i_d`` the lane's index along axis ``d`` of the block). Inside a loop the same
offset may also move with the loop's trip (``k * BLOCK_K``), and it may start at a scalar known only when the kernel
runs (a length loaded from memory): those are *symbols*, each with the range it takes where that is known (a trip
``t`` of a loop of at most ``n`` trips lies in ``[0, n - 1]``). `Affine` holds such a form.

A form is exact: the address analysis (`jt_core.translation.analysis.values`) gives a value a form only where the
kernel's own arithmetic, in its integers' width, computes what the form says for every program, lane and symbol
value, and drops it where the arithmetic may wrap around.

When the kernel is traced, a form is *bound* (`Affine.bind`): each symbol is given the value it has there, an int
(a trip of a loop traced step by step) or a traced scalar, which then makes the form's base known only when it runs
(``base_known`` false, ``dynamic`` that scalar).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Affine", "Symbol", "apart_in_windows", "disjoint", "mixed_radix", "window"]

#: A named unknown of a form: ``("trip", loop)`` (a loop's trip, from 0), ``("scalar", value)`` (a run-time scalar),
#: ``("carry", loop, index)`` (a loop's carried value, while the loop is analysed).
Symbol = tuple[Any, ...]
#: The range of each symbol that has one: lowest and highest value, both included.
Ranges = Mapping[Symbol, tuple[int, int]]

_NO_RANGES: Ranges = {}


def _merged(a: tuple[tuple[Symbol, int], ...], b: tuple[tuple[Symbol, int], ...], sign: int) -> tuple:
    out = dict(a)
    for symbol, coefficient in b:
        out[symbol] = out.get(symbol, 0) + sign * coefficient
    return tuple(sorted(((s, c) for s, c in out.items() if c), key=lambda item: repr(item[0])))


@dataclasses.dataclass(frozen=True)
class Affine:
    """``const + sum(pids[k] * pid_k) + sum(lanes[d] * i_d) + sum(c * symbol)`` over a block of ``shape``.

    Attributes:
        const: The constant term.
        pids: The coefficients of the three program ids.
        lanes: The coefficient of each block axis's lane index.
        shape: The block's shape (``()`` for a scalar).
        terms: The symbols and their coefficients (none zero), in a fixed order.
        base_known: Whether the base is known when tracing; where not, ``dynamic`` (a traced scalar, or ``None``
            where even that is unknown) is added to it. Only a bound form has an unknown base.
        dynamic: The traced scalar added to a bound form's base.
        dynamic_step: What ``dynamic`` is known to be a multiple of (1 where nothing is known): a symbol's
            coefficient, a loaded value's scale.
    """

    const: int
    pids: tuple[int, int, int] = (0, 0, 0)
    lanes: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    terms: tuple[tuple[Symbol, int], ...] = ()
    base_known: bool = True
    dynamic: Any = dataclasses.field(default=None, compare=False)
    dynamic_step: int = dataclasses.field(default=1, compare=False)

    @staticmethod
    def constant(value: int, shape: tuple[int, ...] = ()) -> Affine:
        return Affine(int(value), (0, 0, 0), (0,) * len(shape), shape)

    @staticmethod
    def symbol(symbol: Symbol, shape: tuple[int, ...] = ()) -> Affine:
        """The symbol itself, the same in every lane of a block of ``shape``."""
        return Affine(0, (0, 0, 0), (0,) * len(shape), shape, ((symbol, 1),))

    @staticmethod
    def unknown_scalar(value: Any = None) -> Affine:
        """A bound scalar known only at run time: ``value`` (traced), where that is known."""
        return Affine(0, (0, 0, 0), (), (), base_known=False, dynamic=value)

    @property
    def is_constant(self) -> bool:
        return self.base_known and not self.terms and not any(self.pids) and not any(self.lanes)

    @property
    def symbols(self) -> frozenset[Symbol]:
        return frozenset(s for s, _ in self.terms)

    def coefficient(self, symbol: Symbol) -> int:
        return dict(self.terms).get(symbol, 0)

    # -- changes of shape --------------------------------------------------------------------------------------

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

    def transposed(self, order: Sequence[int]) -> Affine:
        return dataclasses.replace(
            self, lanes=tuple(self.lanes[i] for i in order), shape=tuple(self.shape[i] for i in order)
        )

    # -- arithmetic --------------------------------------------------------------------------------------------

    def plus(self, other: Affine, sign: int = 1) -> Affine:
        shape = self.shape if len(self.shape) >= len(other.shape) else other.shape
        a = self.broadcast(shape) if self.shape != shape else self
        b = other.broadcast(shape) if other.shape != shape else other
        return Affine(
            a.const + sign * b.const,
            tuple(x + sign * y for x, y in zip(a.pids, b.pids, strict=True)),  # type: ignore[arg-type]
            tuple(x + sign * y for x, y in zip(a.lanes, b.lanes, strict=True)),
            shape,
            _merged(a.terms, b.terms, sign),
            a.base_known and b.base_known,
            _dynamic_sum(a, b, sign),
            _dynamic_step(a, b),
        )

    def times(self, factor: int) -> Affine:
        if factor == 0:
            return Affine.constant(0, self.shape)
        return Affine(
            self.const * factor,
            tuple(p * factor for p in self.pids),  # type: ignore[arg-type]
            tuple(c * factor for c in self.lanes),
            self.shape,
            tuple((s, c * factor) for s, c in self.terms),
            self.base_known,
            None if self.dynamic is None else self.dynamic * factor,
            self.dynamic_step * abs(factor),
        )

    def shifted(self, amount: int) -> Affine:
        """The form plus the constant ``amount``."""
        return dataclasses.replace(self, const=self.const + amount)

    def substitute(self, symbol: Symbol, by: Affine) -> Affine:
        """The form with ``symbol`` replaced by the form ``by`` (a scalar's)."""
        coefficient = self.coefficient(symbol)
        if not coefficient:
            return self
        rest = dataclasses.replace(self, terms=tuple((s, c) for s, c in self.terms if s != symbol))
        return rest.plus(by.broadcast(self.shape) if by.shape != self.shape else by, coefficient)

    def bind(self, value_of: Callable[[Symbol], Any]) -> Affine:
        """The form with each symbol given its value where the kernel is traced (`value_of` gives an int, a traced
        scalar, or ``None`` for one that is not known there): ints go into ``const``, traced scalars into
        ``dynamic`` (the base then known only at run time), and an unknown leaves the base unknown."""
        if not self.base_known and self.dynamic is None:
            return Affine(self.const, self.pids, self.lanes, self.shape, (), False, None)
        const, dynamic, known, step = self.const, self.dynamic, self.base_known, self.dynamic_step
        for symbol, coefficient in self.terms:
            value = value_of(symbol)
            if isinstance(value, int) and not isinstance(value, bool):
                const += coefficient * value
            elif value is None:
                return Affine(const, self.pids, self.lanes, self.shape, (), False, None)
            else:
                known = False
                term = value if coefficient == 1 else value * coefficient
                step = abs(coefficient) if dynamic is None else math.gcd(step, coefficient)
                dynamic = term if dynamic is None else dynamic + term
        return Affine(const, self.pids, self.lanes, self.shape, (), known, dynamic, step)

    # -- ranges ------------------------------------------------------------------------------------------------

    def bounds(self, grid: Sequence[int], ranges: Ranges = _NO_RANGES) -> tuple[int, int] | None:
        """The smallest and largest value over every program of ``grid``, every lane and every symbol's range, or
        ``None`` where the base is not known or a symbol has no range."""
        if not self.base_known:
            return None
        low, high = self.spread()
        for coefficient, size in zip(self.pids, grid, strict=True):
            low += min(0, coefficient * (size - 1))
            high += max(0, coefficient * (size - 1))
        for symbol, coefficient in self.terms:
            span = ranges.get(symbol)
            if span is None:
                return None
            low += min(coefficient * span[0], coefficient * span[1])
            high += max(coefficient * span[0], coefficient * span[1])
        return self.const + low, self.const + high

    def spread(self) -> tuple[int, int]:
        """How far below and above its first lane (all lane indices zero) the block's values reach."""
        low = high = 0
        for c, n in zip(self.lanes, self.shape, strict=True):
            low += min(0, c * (n - 1))
            high += max(0, c * (n - 1))
        return low, high


def _dynamic_step(a: Affine, b: Affine) -> int:
    """What the run-time scalar of ``a ± b`` is known to be a multiple of."""
    if a.dynamic is None:
        return b.dynamic_step if b.dynamic is not None else 1
    return a.dynamic_step if b.dynamic is None else math.gcd(a.dynamic_step, b.dynamic_step)


def _dynamic_sum(a: Affine, b: Affine, sign: int) -> Any:
    """The run-time scalar of ``a + sign * b``: ``None`` unless each is known or absent."""
    if (not a.base_known and a.dynamic is None) or (not b.base_known and b.dynamic is None):
        return None
    if a.dynamic is None:
        return None if b.dynamic is None else sign * b.dynamic
    return a.dynamic if b.dynamic is None else a.dynamic + sign * b.dynamic


def _digits(form: Affine, ranges: Ranges) -> list[tuple[int, int]] | None:
    """The lanes' and the symbols' terms of a form as (step, largest multiple) digits, or ``None`` where a symbol
    has no range."""
    digits = [(abs(c), n - 1) for c, n in zip(form.lanes, form.shape, strict=True) if c != 0 and n > 1]
    for symbol, coefficient in form.terms:
        span = ranges.get(symbol)
        if span is None:
            return None
        if span[1] > span[0]:
            digits.append((abs(coefficient), span[1] - span[0]))
    return digits


def disjoint(stores: Sequence[Affine], grid: tuple[int, int, int], ranges: Ranges = _NO_RANGES) -> bool:
    """Whether the programs of ``grid`` store to disjoint elements, when program ``pid`` stores (some of) the values
    of each of ``stores`` at ``pid``, every symbol taking any value of its range.

    Two programs ``P != Q`` store to one element when ``a . (P - Q) = sum(c_d * j_d)`` for lane (or symbol)
    differences ``|j_d| < n_d``. Taken together, the program axes' coefficients (with ranges ``g_k - 1``) and the
    lanes' (ranges ``n_d - 1``) are the digits of a mixed-radix number when, sorted by size, each is larger than
    what all smaller ones reach together: then zero has one representation, all digits zero, so ``P = Q``. That
    covers a block per program (``pid * BLOCK + arange(BLOCK)``) and tiles of a row-major matrix alike. Several
    different stores to one buffer (the blocks of a row, stored one after another) are apart when each program's
    stay within a window of its own (`apart_in_windows`).
    """
    if not stores:
        return True
    if any(s != stores[0] for s in stores):
        return apart_in_windows(stores, grid, ranges)
    store = stores[0]
    if not store.base_known:
        return False
    digits = _digits(store, ranges)
    return digits is not None and mixed_radix(store.pids, grid, digits)


def mixed_radix(pids: Sequence[int], grid: Sequence[int], digits: list[tuple[int, int]]) -> bool:
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


def window(accesses: Sequence[Affine], ranges: Ranges = _NO_RANGES) -> tuple[int, int] | None:
    """The lowest and highest offsets, relative to the program's own (``sum(pid[k] * pids[k])``), that ``accesses``
    reach over their lanes and symbols, when they all have known bases, ranges for their symbols and the same
    program-id coefficients; else ``None``."""
    if not accesses or any(not a.base_known or a.pids != accesses[0].pids for a in accesses):
        return None
    spans = []
    for access in accesses:
        bounds = dataclasses.replace(access, pids=(0, 0, 0)).bounds((1, 1, 1), ranges)
        if bounds is None:
            return None
        spans.append(bounds)
    return min(low for low, _ in spans), max(high for _, high in spans)


def apart_in_windows(accesses: Sequence[Affine], grid: tuple[int, int, int], ranges: Ranges = _NO_RANGES) -> bool:
    """Whether each program's ``accesses`` stay within a window of offsets no other program's reach: every access
    moves with the program id alike, and the window they span together, placed once per program, does not meet the
    next program's (the rows of a matrix, each program reading and writing its own row in blocks)."""
    span = window(accesses, ranges)
    if span is None:
        return False
    return mixed_radix(accesses[0].pids, grid, [(1, span[1] - span[0])])
