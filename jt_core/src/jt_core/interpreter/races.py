"""Finding data races between the program instances of one launch, and outputs no program wrote.

On a GPU the program instances of a launch run in no fixed order. When two of them touch the same element, at
least one writing and not both with atomics, the result depends on which runs first: the kernel can pass every
test on one GPU and fail on the next. Triton's interpreter runs the programs one after another, so such a race
never shows there. The race check records, for each element of each buffer the kernel may write, which program
last loaded, stored and atomically updated it (and, for loads and atomics, the last other program that did too),
and raises `DataRaceError` at the first access that conflicts with another program's:

==================  ===========================================================
this access         races with another program's
==================  ===========================================================
load                store, atomic
store               load, store, atomic
atomic              load, store
==================  ===========================================================

Accesses a program makes while it holds a lock (from a compare-and-swap of one element that swapped, with
ordering semantics, as ``while tl.atomic_cas(lock, 0, 1) == 1: pass`` takes it, to the next ordering atomic it makes
on that element, as ``tl.atomic_xchg(lock, 0)`` gives it back) do not race with another program's accesses made
while holding the same lock: the lock puts them in order, as in the layer norm backward of Triton's tutorials.

Buffers the kernel may not write (inputs that are not aliased to an output) are not recorded: the bounds check
refuses any store into them, so loads of them never race. Elements are the buffer's own (its dtype's size); an
access through a pointer of another width covers every element it overlaps.

After the launch, `RaceTracker.unwritten` tells which elements of an output no program stored to.
"""

from __future__ import annotations

import dataclasses
import linecache
import os
import sys
from collections.abc import Collection, Sequence
from types import CodeType, FrameType

import numpy as np

from jt_core.errors import DataRaceError
from jt_core.interpreter.access import Buffer, Located

__all__ = ["ATOMIC", "LOAD", "STORE", "RaceTracker", "describe_elements"]

LOAD, STORE, ATOMIC = "load", "store", "atomic"

#: For each kind of access, the kinds of access by another program it races with.
_CONFLICTS = {LOAD: (STORE, ATOMIC), STORE: (LOAD, STORE, ATOMIC), ATOMIC: (LOAD, STORE)}
#: Kinds several programs may do to one element without a race: for these a second program is kept per element
#: (a store by any second program is a race at once, so stores keep only the first).
_SHARED = (LOAD, ATOMIC)
_DOES = {LOAD: "loads", STORE: "stores to", ATOMIC: "atomically updates"}
_NO_LOCKS = np.zeros(0, dtype=np.int32)
_NO_LOCKS.setflags(write=False)


class _Record:
    """For one kind of access to each element of a buffer: the last program that did it (``-1``: none) and where
    in the source; for shared kinds also the last program before that one that did it.

    Programs run in increasing order of their linear id, so a recorded program is never greater than the running
    one: "recorded and not the running program" is "less than it", one comparison of the ids as unsigned numbers
    (``-1`` becomes the largest).
    """

    def __init__(self, size: int, shared: bool) -> None:
        self.last = np.full(size, -1, dtype=np.int32)
        self.last_site = np.full(size, -1, dtype=np.int32)
        self.last_guard = np.full(size, -1, dtype=np.int32)  # the set of locks held then (-1: none)
        self.prev = np.full(size, -1, dtype=np.int32) if shared else None
        self.prev_site = np.full(size, -1, dtype=np.int32) if shared else None
        self.prev_guard = np.full(size, -1, dtype=np.int32) if shared else None

    def others(
        self, idx: np.ndarray, program: int, held: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """For elements ``idx``: which were accessed by a program other than ``program`` holding none of the locks
        the running program holds (``held``: the ids of the lock sets that share one with it), which program and
        where; ``None`` when none was (the usual case, found with one comparison)."""
        last = self.last[idx]
        hit_last = last.view(np.uint32) < program
        if held.size and hit_last.any():
            hit_last &= ~np.isin(self.last_guard[idx], held)
        prev = self.prev[idx] if self.prev is not None else None
        hit_prev = None
        if prev is not None and self.prev_guard is not None:
            hit_prev = prev >= 0  # an earlier program than the last, which is at most the running one
            if held.size and hit_prev.any():
                hit_prev &= ~np.isin(self.prev_guard[idx], held)
        hit = hit_last if hit_prev is None else hit_last | hit_prev
        if not hit.any():
            return None
        site = self.last_site[idx]
        if prev is None or self.prev_site is None:
            return hit, last, site
        return hit, np.where(hit_last, last, prev), np.where(hit_last, site, self.prev_site[idx])

    def add(self, idx: np.ndarray, program: int, site: int, guard: int) -> None:
        if self.prev is not None and self.prev_site is not None and self.prev_guard is not None:
            last = self.last[idx]
            moved = last != program
            if moved.any():
                self.prev[idx[moved]] = last[moved]
                self.prev_site[idx[moved]] = self.last_site[idx[moved]]
                self.prev_guard[idx[moved]] = self.last_guard[idx[moved]]
        self.last[idx] = program
        self.last_site[idx] = site
        self.last_guard[idx] = guard


class _Shadow:
    """The records of one writable buffer, made as each kind of access first reaches it."""

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer
        self.itemsize = max(1, buffer.itemsize)
        self.size = -(-(buffer.end - buffer.start) // self.itemsize)
        self.records: dict[str, _Record] = {}

    def elements(self, addrs: np.ndarray, itemsize: int) -> np.ndarray:
        """The indices of the elements an access of ``itemsize`` bytes at ``addrs`` covers."""
        offsets = addrs.view(np.int64) - self.buffer.start  # addresses are far below 2**63
        unit = self.itemsize
        if itemsize == unit and not (unit & (unit - 1)):
            if unit == 1:
                return offsets
            if not (offsets & (unit - 1)).any():
                return offsets >> (unit.bit_length() - 1)
        low = offsets // unit
        high = (offsets + itemsize - 1) // unit
        span = low[:, None] + np.arange(int(np.max(high - low)) + 1)
        return span[span <= high[:, None]]

    def record(self, kind: str) -> _Record:
        record = self.records.get(kind)
        if record is None:
            record = self.records[kind] = _Record(self.size, kind in _SHARED)
        return record


@dataclasses.dataclass(frozen=True)
class _Conflict:
    buffer: Buffer
    kind: str
    other_kind: str
    elements: np.ndarray
    other_program: int
    site: int
    other_site: int


class RaceTracker:
    """Watches the accesses of one launch for data races between its program instances.

    Args:
        kernel_name: For messages.
        grid: The launch's grid (program ids in messages are ``(x, y, z)``).
        buffers: The buffers of the launch (as the address checker orders them: `Located.slots` index it).
        kernel_codes: The code objects of the kernel and its helpers as the interpreter runs them: an access is
            placed at the innermost frame running one of them.
    """

    def __init__(
        self,
        kernel_name: str,
        grid: tuple[int, int, int],
        buffers: Sequence[Buffer],
        kernel_codes: Collection[CodeType],
    ) -> None:
        self.kernel_name = kernel_name
        self.grid = grid
        self.buffers = list(buffers)
        self._codes = kernel_codes
        # Keyed by address range: two arguments may share one buffer (an aliased output in the classic convention).
        self._shadows: dict[tuple[int, int], _Shadow] = {}
        self._sites: list[tuple[str, int]] = []
        self._site_ids: dict[tuple[str, int], int] = {}
        #: The linear id of the program running now (set by the interpreter's loop).
        self.program = 0
        self._locks: dict[int, int] = {}  # a lock's id by its address
        self._held: list[int] = []  # the ids of the locks the program `_holder` holds, innermost last
        self._lock_sets: dict[frozenset[int], int] = {}  # the sets of locks accesses were made under, by id
        self._holder = -1

    def _held_now(self) -> list[int]:
        if self._holder != self.program:  # a new program holds nothing yet
            self._held.clear()
            self._holder = self.program
        return self._held

    def _guard(self) -> tuple[int, np.ndarray]:
        """The id of the set of locks the running program holds (-1: none), and the ids of every set recorded that
        shares a lock with it."""
        held = frozenset(self._held_now())
        if not held:
            return -1, _NO_LOCKS
        guard = self._lock_sets.setdefault(held, len(self._lock_sets))
        sharing = [index for members, index in self._lock_sets.items() if members & held]
        return guard, np.asarray(sharing, dtype=np.int32)

    def holds(self, addrs: np.ndarray) -> bool:
        """Whether the running program holds a lock at one of ``addrs`` (real addresses)."""
        held = self._held_now()
        return any(self._locks.get(int(a)) in held for a in np.asarray(addrs).reshape(-1))

    def acquired(self, addrs: np.ndarray) -> None:
        """The running program took the lock at ``addrs`` (one real address)."""
        address = int(np.asarray(addrs).reshape(-1)[0])
        lock = self._locks.setdefault(address, len(self._locks))
        held = self._held_now()
        if lock not in held:
            held.append(lock)

    def released(self, addrs: np.ndarray, mask: np.ndarray | None) -> None:
        """The running program made an ordering atomic at ``addrs`` (real addresses, where ``mask`` is true): it
        gives back the locks it held there."""
        held = self._held_now()
        if not held:
            return
        addrs = np.asarray(addrs).reshape(-1)
        if mask is not None and np.ndim(mask):
            addrs = addrs[np.broadcast_to(np.asarray(mask, bool), np.shape(addrs)).reshape(-1)]
        for address in addrs.tolist():
            lock = self._locks.get(int(address))
            if lock in held:
                held.remove(lock)

    def record(self, located: Located, itemsize: int, kind: str) -> None:
        """Records one access of the current program; raises at the first conflict with another program's.

        Raises:
            DataRaceError: Naming the kernel, the argument, the elements, both programs and both source lines.
        """
        slots = located.slots
        if isinstance(slots, int):
            groups: list[tuple[int, np.ndarray]] = [(slots, located.addrs)]
        else:
            groups = [(int(slot), located.addrs[slots == slot]) for slot in np.unique(slots)]
        site: int | None = None
        guard, held = self._guard()
        for slot, addrs in groups:
            buffer = self.buffers[slot]
            if not buffer.writable:
                continue
            shadow = self._shadows.get((buffer.start, buffer.end))
            if shadow is None:
                shadow = self._shadows[buffer.start, buffer.end] = _Shadow(buffer)
            idx = shadow.elements(addrs, itemsize)
            if site is None:
                site = self._site()
            for other_kind in _CONFLICTS[kind]:
                record = shadow.records.get(other_kind)
                found = record.others(idx, self.program, held) if record is not None else None
                if found is not None:
                    hit, others, sites = found
                    where = np.flatnonzero(hit)
                    first = where[np.argmin(idx[where])]
                    raise DataRaceError(
                        self._describe(
                            _Conflict(
                                buffer,
                                kind,
                                other_kind,
                                np.unique(idx[where]),
                                int(others[first]),
                                site,
                                int(sites[first]),
                            )
                        )
                    )
            shadow.record(kind).add(idx, self.program, site, guard)

    def unwritten(self, buffer: Buffer) -> np.ndarray:
        """The indices of the elements of ``buffer`` that no program stored to (plainly or atomically)."""
        shadow = self._shadows.get((buffer.start, buffer.end)) or _Shadow(buffer)  # none: nothing was written
        written = np.zeros(shadow.size, dtype=bool)
        for kind in (STORE, ATOMIC):
            record = shadow.records.get(kind)
            if record is not None:
                written |= record.last >= 0
        return np.flatnonzero(~written)

    def _site(self) -> int:
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            if frame.f_code in self._codes:
                key = (frame.f_code.co_filename, frame.f_lineno)
                found = self._site_ids.get(key)
                if found is None:
                    found = self._site_ids[key] = len(self._sites)
                    self._sites.append(key)
                return found
            frame = frame.f_back
        return -1

    def _where(self, site: int) -> str:
        if site < 0:
            return "line unknown"
        filename, line = self._sites[site]
        text = linecache.getline(filename, line).strip()
        return f"{os.path.basename(filename)}:{line}" + (f" ({text})" if text else "")

    def program_id(self, linear: int) -> tuple[int, int, int]:
        """The ``(x, y, z)`` program id of a linear one (the interpreter's order: z fastest, x slowest)."""
        _, gy, gz = self.grid
        return linear // (gy * gz), (linear // gz) % gy, linear % gz

    def _describe(self, conflict: _Conflict) -> str:
        kinds = {conflict.kind, conflict.other_kind}
        form = "read-write" if LOAD in kinds else "write-write"
        if LOAD in kinds:
            advice = (
                "A program may load only elements that no other program of the same launch writes: split the work "
                "into two launches, or make both accesses atomic."
            )
        else:
            advice = (
                "Give each program elements of its own (check the offsets and the mask), or combine the values "
                "with atomics (tl.atomic_add and the other tl.atomic_*)."
            )
        return (
            f"kernel {self.kernel_name!r}: data race ({form}) on argument {conflict.buffer.name!r}, "
            f"{describe_elements(conflict.elements)}: {self._accesses(conflict)}. On a GPU the programs of a "
            f"launch run in no fixed order, so the result depends on which runs first. {advice} (Found by jt's CPU "
            "race check, switched on by JT_CPU_RACE_CHECK=1 or jt.cpu_checks(races=True).)"
        )

    def _accesses(self, conflict: _Conflict) -> str:
        """``program (1, 0, 0) stores to them at k.py:8 (...), and program (0, 0, 0) loads them at k.py:7 (...)``,
        naming a line shared by both once."""
        them = "it" if conflict.elements.size == 1 else "them"
        this = f"program {self.program_id(self.program)} {_DOES[conflict.kind]} {them}"
        other = f"program {self.program_id(conflict.other_program)} {_DOES[conflict.other_kind]} {them}"
        if conflict.site == conflict.other_site:
            return f"{this} and {other} too, both at {self._where(conflict.site)}"
        return f"{this} at {self._where(conflict.site)}, and {other} at {self._where(conflict.other_site)}"


def describe_elements(indices: np.ndarray, total: int | None = None, runs_shown: int = 4) -> str:
    """Element indices as runs: ``"element 7"``, ``"elements 32-47 (16 elements)"``, ``"elements 0-3, 8-11 and 2
    more runs (12 elements)"``; with ``total``, ``"(12 of 100 elements)"``."""
    indices = np.unique(np.asarray(indices, dtype=np.int64))
    count = int(indices.size)
    breaks = np.flatnonzero(np.diff(indices) != 1) + 1
    starts = np.concatenate([indices[:1], indices[breaks]])
    ends = np.concatenate([indices[breaks - 1], indices[-1:]])
    runs = [str(a) if a == b else f"{a}-{b}" for a, b in zip(starts.tolist(), ends.tolist())]
    shown = ", ".join(runs[:runs_shown])
    if len(runs) > runs_shown:
        shown += f" and {len(runs) - runs_shown} more runs"
    if count == 1 and total is None:
        return f"element {shown}"
    counted = f"{count} of {total}" if total is not None else str(count)
    return f"elements {shown} ({counted} elements)"
