"""Whether a grid's programs may run side by side: for every buffer the kernel writes, whether running the
programs together gives what running them one after another gives, and how its writes are then made.

Side by side, the programs' stores are recorded and made after every program ran (`DEFERRED`), and order-free
atomics whose results nobody reads are combined in one scatter after them (`ATOMIC`). That gives what the programs
in order give when:

* every store lies outside the loops traced as XLA loops (a loop traced step by step is straight-line code), and
  its offsets' form is known, with ranges for its symbols;
* no two programs store to one element (`jt_core.translation.analysis.affine.disjoint`: the programs' and lanes'
  steps as the digits of a mixed-radix number, or each program's accesses in a window of its own);
* a program loads from a buffer it stores to only what no earlier store of its own reaches (its stores are not made
  yet), and what no other program writes: its own elements, or through offsets known only when it runs, before it
  stored anything to that buffer (a read of another program's elements would be a data race on a GPU too);
* an atomic's buffer is touched by nothing else, and its combiner gives the same memory whatever order the lanes
  come in (integer sums, extremes; float sums where the numerics leave the order to XLA).

A store through offsets known only when it runs (a state slot loaded from memory) is made after the programs too,
provided its program loads nothing of that buffer after it: two programs that store to one element through such
offsets race, as they do on a GPU, where either may win (`BufferMode.SCATTERED`). A buffer that a program loads
again after its own stores, or that it stores to inside a loop traced as an XLA loop, is written through each
program's window of it (`BufferMode.WINDOW`) where every access is an affine form and the windows are apart.

Anything else makes the programs run in order, and the reason is the plan's.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence

import numpy as np

from jt_core.translation.analysis import affine, masks
from jt_core.translation.analysis.facts import Access, Facts, Loop

__all__ = ["BufferMode", "Independence", "independence"]

#: Atomics whose final memory does not depend on the order of their lanes, where nobody reads what they return.
ORDERLESS = frozenset({"ADD", "MAX", "MIN", "UMAX", "UMIN", "FADD"})


class BufferMode(enum.Enum):
    """How programs run side by side write one buffer."""

    DEFERRED = "stores made after the programs"
    SCATTERED = (
        "stores made after the programs, some through offsets known only when they run (two programs that store to"
        " one element race, as they do on a GPU)"
    )
    WINDOW = "each program's window of it its own, written back after the programs"
    ATOMIC = "atomics combined after the programs"


@dataclasses.dataclass(frozen=True)
class Window:
    """Where a buffer written through windows lies for each program: from ``pids . program_id + low`` on,
    ``width`` elements, no two programs' overlapping.

    Attributes:
        pids: The coefficients of the program ids in every access's offsets.
        low: The lowest offset a lane that its mask has on reaches, relative to the program's own.
        width: How many elements from there the lanes that are on reach (what the program owns).
        reach: The lowest offset and the count of elements every lane of an access reaches, masked ones too
            (what the program's copy holds, so that a block partly past its end is one slice of it).
        row: The length of the rows the accesses' two-dimensional blocks step over (their larger lane step, where
            they share one; 1 otherwise): the program's copy is held in rows of it, so that such a block is a slice
            of rows and columns, not of every element between its first and last.
        in_rows: Whether every such block stays, whatever its symbols' values, within the rows it starts in (it is
            then always that slice: no choice is made when the kernel runs).
    """

    pids: tuple[int, int, int]
    low: int
    width: int
    reach: tuple[int, int]
    row: int = 1
    in_rows: bool = False


@dataclasses.dataclass(frozen=True)
class Independence:
    """The independence pass's verdict.

    Attributes:
        modes: How each written buffer is written, where the programs may run side by side.
        windows: For each buffer written through windows, where each program's lies.
        conflict: Why they may not (``None`` where they may), and the kernel source line of the access it names.
    """

    modes: Mapping[int, BufferMode]
    windows: Mapping[int, Window]
    conflict: tuple[str, str | None] | None


def _straight(access: Access, unrolled: Mapping[Loop, bool]) -> bool:
    """Whether an access lies in straight-line code: in no loop, or only in loops traced step by step."""
    return all(unrolled.get(loop, False) for loop in access.loops)


def _exclusive(a: Access, b: Access) -> bool:
    """Whether ``a`` and ``b`` lie on opposite sides of one branch (a program makes at most one of them)."""
    sides = dict(a.branches)
    return any(place in sides and sides[place] != side for place, side in b.branches)


def _before(store: Access, load: Access) -> bool:
    """Whether ``store`` may run before ``load`` in one program: earlier in program order, or in a loop both lie
    in (the next trip's load comes after this trip's store)."""
    if _exclusive(store, load):
        return False
    return store.order < load.order or bool(set(store.loops) & set(load.loops))


def independence(
    facts: Facts, unrolled: Mapping[Loop, bool], float_atomics_orderless: bool, integer: Sequence[int]
) -> Independence:
    """The verdict for ``facts``' accesses, the loops ``unrolled`` says are traced step by step.

    Args:
        facts: What the address walk found.
        unrolled: For each loop, whether it is traced step by step (straight-line code).
        float_atomics_orderless: Whether float atomic sums may be combined in any order.
        integer: The buffers that hold integers (their atomics are always order-free).
    """
    grid, ranges = facts.grid, facts.ranges
    modes: dict[int, BufferMode] = {}
    windows: dict[int, Window] = {}
    by_buffer: dict[int, list[Access]] = {}
    for access in facts.accesses:
        for buffer in access.buffers:
            by_buffer.setdefault(buffer, []).append(access)
    for buffer, made in by_buffer.items():
        accesses = [_narrowed(a, grid, ranges) for a in made]
        accesses = [a for a in accesses if a.kind != "none"]
        writes = [a for a in accesses if a.kind != "load"]
        if not writes:
            continue
        atomics = [a for a in writes if a.kind == "atomic"]
        if atomics:
            found = _atomics(accesses, atomics, unrolled, float_atomics_orderless or buffer in integer)
            if found is not None:
                return Independence(modes, windows, found)
            modes[buffer] = BufferMode.ATOMIC
            continue
        found = _stores(accesses, writes, unrolled, grid, ranges)
        if found is None:
            placed = all(a.form is not None and _bounded(a.form, ranges) for a in writes)
            modes[buffer] = BufferMode.DEFERRED if placed else BufferMode.SCATTERED
            continue
        window = _window(accesses, grid, ranges)
        if window is None:
            return Independence(modes, windows, found)
        modes[buffer] = BufferMode.WINDOW
        windows[buffer] = dataclasses.replace(window, in_rows=_in_rows(made, window, ranges))
    return Independence(modes, windows, None)


def _line(access: Access) -> str | None:
    return access.op.line


def _atomics(
    accesses: Sequence[Access], atomics: Sequence[Access], unrolled: Mapping[Loop, bool], orderless_floats: bool
) -> tuple[str, str | None] | None:
    for atomic in atomics:
        if atomic.result_used or atomic.combiner not in ORDERLESS:
            return "an atomic whose result is read, or whose combiner depends on the order", _line(atomic)
        if atomic.combiner == "FADD" and not orderless_floats:
            return "a float atomic sum, whose rounding depends on the order", _line(atomic)
        if not _straight(atomic, unrolled):
            return "an atomic inside a loop traced as an XLA loop", _line(atomic)
        if len(atomic.buffers) != 1:
            return "an atomic through a pointer into one of several arguments", _line(atomic)
    others = [a for a in accesses if a.kind != "atomic"]
    if others:
        return "a buffer updated by atomics and also loaded or stored", _line(others[0])
    return None


def _stores(
    accesses: Sequence[Access],
    stores: Sequence[Access],
    unrolled: Mapping[Loop, bool],
    grid: tuple[int, int, int],
    ranges: Mapping,
) -> tuple[str, str | None] | None:
    for store in stores:
        if any(loop.is_while for loop in store.loops):
            return "a store inside a while loop", _line(store)
        if not _straight(store, unrolled):
            return "a store inside a loop traced as an XLA loop", _line(store)
    # A store through offsets known only when it runs (a slot loaded from memory) is made after the programs as
    # the others are: programs that store to one element through it race, as on a GPU, where either may win.
    placed = [s for s in stores if s.form is not None and _bounded(s.form, ranges)]
    scattered = [s for s in stores if s not in placed]
    loads = [a for a in accesses if a.kind == "load"]
    for store in scattered:
        later = next((load for load in loads if _before(store, load)), None)
        if later is not None:
            return "a program loading a buffer after it stored to it through offsets known when it runs", _line(later)
    stores = placed
    forms = [s.form for s in stores]
    same = all(form == forms[0] for form in forms)
    exact = bool(stores) and same and affine.disjoint(forms[:1], grid, ranges)  # type: ignore[arg-type]
    if stores and not exact and _apart(stores, grid, ranges) is None:
        return "stores that may reach one element from two programs", _line(stores[0])
    for load in loads:
        earlier = [s for s in stores if _before(s, load)]
        if load.form is None or not _bounded(load.form, ranges):
            if earlier:
                return "a program loading, through offsets known when it runs, what it stored", _line(load)
            continue
        if any(_meets(store, load, ranges) for store in earlier):
            return "a program loading what it stored itself", _line(load)
    known = [a for a in accesses if a.form is not None and _bounded(a.form, ranges) and a not in scattered]
    if stores and loads and not all(a.form == forms[0] for a in known) and _apart(known, grid, ranges) is None:
        return "a buffer loaded where another program may write it", _line(loads[0])
    return None


def _meets(store: Access, load: Access, ranges: Mapping) -> bool:
    """Whether a store a program made before a load may reach what the load reads: their spans meet, unless both
    lie in a loop whose trip moves them alike by at least what either spans in one trip (each trip's store then
    meets only its own trip's load, which it precedes only where it comes first in the body)."""
    assert store.form is not None and load.form is not None
    shared = [loop for loop in store.loops if loop in load.loops]
    for loop in reversed(shared):
        step = store.form.coefficient(loop.symbol)
        if not step or load.form.coefficient(loop.symbol) != step:
            continue
        fixed = {**ranges, loop.symbol: (0, 0)}
        store_span, load_span = _span(store, fixed), _span(load, fixed)
        if store_span is None or load_span is None:
            continue
        low, high = min(store_span[0], load_span[0]), max(store_span[1], load_span[1])
        if high - low < abs(step):
            # Trips apart: only this trip's store may meet this trip's load.
            return store.order < load.order and _overlap(store_span, load_span)
    found = _span(store, ranges), _span(load, ranges)
    return found[0] is None or found[1] is None or _overlap(found[0], found[1])


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _window(accesses: Sequence[Access], grid: tuple[int, int, int], ranges: Mapping) -> Window | None:
    """Where each program's window of a buffer lies, where every access is known and the programs' windows are
    apart (a load through offsets known only when it runs is let through where no store of the program comes before
    it: it reads the buffer as it was before the kernel); ``None`` otherwise."""
    stores = [a for a in accesses if a.kind != "load"]
    known = []
    for access in accesses:
        if access.kind == "atomic" or any(loop.is_while for loop in access.loops):
            return None
        if access.form is None or not _bounded(access.form, ranges):
            if access.kind != "load" or any(_before(store, access) for store in stores):
                return None
            continue
        known.append(access)
    return _apart(known, grid, ranges)


def _apart(accesses: Sequence[Access], grid: tuple[int, int, int], ranges: Mapping) -> Window | None:
    """The window each program's ``accesses`` stay in, where they all move with the program id alike and the
    windows of two programs never meet (`jt_core.translation.analysis.affine`); ``None`` otherwise."""
    if not accesses:
        return None
    pids = accesses[0].form.pids  # type: ignore[union-attr]
    spans = []
    for access in accesses:
        if access.form.pids != pids:  # type: ignore[union-attr]
            return None
        span = _span(access, ranges)
        if span is None:
            return None
        spans.append(span)
    low, high = min(s[0] for s in spans), max(s[1] for s in spans)
    if not affine.mixed_radix(pids, grid, [(1, high - low)]):
        return None
    reaches = [_span(dataclasses.replace(a, mask=None), ranges) for a in accesses]
    reach_low = min(r[0] for r in reaches if r is not None)
    reach_high = max(r[1] for r in reaches if r is not None)
    rows = {_row(a.form) for a in accesses} - {1}  # type: ignore[arg-type]
    row = rows.pop() if len(rows) == 1 else 1
    return Window(pids, low, high - low + 1, (reach_low, reach_high - reach_low + 1), row)


def _in_rows(accesses: Sequence[Access], window: Window, ranges: Mapping) -> bool:
    """Whether each access whose lanes are a block of the window's rows (lane steps ``(row, 1)``, neither negative)
    starts, for every value of its symbols, at a column of the program's copy (held in rows from ``reach[0]``) that
    leaves room for its columns in that row."""
    if window.row <= 1:
        return False
    for access in accesses:
        form = access.form
        if form is None or _row(form) != window.row or any(c < 0 for c in form.lanes):
            continue
        if not form.base_known:
            return False  # a base known only when it runs (a load of the buffer as it was): any column
        cols = next(n for c, n in zip(form.lanes, form.shape, strict=True) if c == 1 and n > 1)
        low = high = (form.const - window.reach[0]) % window.row
        for symbol, coefficient in form.terms:
            if coefficient % window.row == 0:
                continue  # whole rows
            span = ranges.get(symbol)
            if span is None:
                return False
            low += min(coefficient * span[0], coefficient * span[1])
            high += max(coefficient * span[0], coefficient * span[1])
        if low < 0 or high + cols > window.row:
            return False
    return True


def _row(form: affine.Affine) -> int:
    """The row length a two-dimensional block of lanes steps over (lane steps ``(row, 1)``), else 1."""
    varying = sorted(abs(c) for c, n in zip(form.lanes, form.shape, strict=True) if c and n > 1)
    if len(varying) == 2 and varying[0] == 1 and varying[1] > 1:
        return varying[1]
    return 1


def _narrowed(access: Access, grid: tuple[int, int, int], ranges: Mapping) -> Access:
    """The access with its form narrowed to the box of lanes its mask has on, where that box is the same in every
    program and every trip (``cols < n_cols`` over a block wider than a row: the row alone)."""
    if access.mask is None or access.form is None or access.form.shape != access.mask.shape:
        return access
    lanes = access.mask.limits(grid, lambda symbol: None, ranges)
    if lanes is None or masks.is_full(lanes, access.form.shape):
        return access
    if masks.is_empty(lanes):
        return dataclasses.replace(access, form=None, kind="none")
    shifted = sum(c * low for c, (low, _) in zip(access.form.lanes, lanes, strict=True))
    box = tuple(high - low for low, high in lanes)
    form = dataclasses.replace(access.form, const=access.form.const + shifted, shape=box)
    return dataclasses.replace(access, form=form, shape=box)


def _bounded(form: affine.Affine, ranges: Mapping) -> bool:
    """Whether every symbol of ``form`` has a range (its offsets are then known up to the program ids)."""
    return form.base_known and all(symbol in ranges for symbol in form.symbols)


def _span(access: Access, ranges: Mapping) -> tuple[int, int] | None:
    """The lowest and highest offset an access reaches in one program, relative to its program-id terms, over its
    lanes and symbols, narrowed by each comparison of its mask that bounds the same offsets (``X_offsets < n_cols``
    for an access at ``row + X_offsets``)."""
    assert access.form is not None
    own = dataclasses.replace(access.form, pids=(0, 0, 0))
    found = own.bounds((1, 1, 1), ranges)
    if found is None:
        return None
    low, high = found
    for d, below in access.mask.atoms if access.mask is not None and access.mask.shape == own.shape else ():
        scale = _ratio(d, own)
        if scale is None or any(d.pids):
            continue
        # d = scale * own + rest: own < -rest / scale (below) or own >= -rest / scale, for a positive scale.
        rest = d.const - scale * own.const
        if scale > 0 and below:
            high = min(high, -(rest // scale) - 1)
        elif scale > 0:
            low = max(low, -(rest // scale))
        elif below:
            low = max(low, rest // -scale + 1)
        else:
            high = min(high, rest // -scale)
    return low, high


def _ratio(d: affine.Affine, own: affine.Affine) -> int | None:
    """The integer ``scale`` with ``d``'s lanes and symbols ``scale`` times ``own``'s, or ``None``."""
    pairs = [(x, y) for x, y in zip(d.lanes, own.lanes, strict=True) if x or y]
    terms = set(d.symbols) | set(own.symbols)
    pairs += [(d.coefficient(s), own.coefficient(s)) for s in terms]
    if not pairs:
        return None
    x, y = pairs[0]
    if y == 0 or x % y:
        return None
    scale = x // y
    if scale == 0 or any(a != scale * b for a, b in pairs):
        return None
    return scale


def integer_buffers(dtypes: Sequence[np.dtype]) -> list[int]:
    """The buffers (by index) whose elements are integers."""
    return [i for i, dtype in enumerate(dtypes) if np.issubdtype(dtype, np.integer) or dtype == np.bool_]
