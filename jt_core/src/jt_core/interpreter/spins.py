"""While loops that would never end in Triton's interpreter: a spin lock no program releases.

The interpreter runs a launch's programs one after another, so while a program waits in a ``while`` loop no other
program can change what it waits for. A trip of the loop that changes no buffer (no store, no atomic that writes)
and leaves every name the loop assigns as it was would be repeated exactly, forever: ``while tl.atomic_cas(lock, 0,
1) == 1: pass`` on a lock an earlier program kept, or one that starts taken. The rewritten kernel
(`jt_core.interpreter.rewriting`) makes a `Trips` before each ``while`` loop and calls `trip` at the start of each
trip of its body; `trip` compares the state with the previous trip's and raises `Spinning` when nothing moved. The
compiled path finds the same loops in its own way (`jt_core.translation.control`); both errors start "triton_call
'NAME' never finishes: a program waits in a while loop".

A value `trip` cannot compare (a block pointer, a NaN) counts as changed, so such a loop runs on as it would have.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["Spinning", "Trips", "message", "trip", "wrote"]

#: How many accesses that may have written memory the interpreter has made (`wrote`); only compared for equality.
_writes = 0


class Spinning(Exception):
    """A program's ``while`` loop made a trip that changed nothing: it would never end."""


class Trips:
    """What one run of a ``while`` loop saw at the start of its previous trip."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: tuple[int, tuple[Any, ...]] | None = None


def wrote() -> None:
    """Counts an access that may have changed memory (a store, an atomic read-modify-write, a compare-and-swap
    that swapped)."""
    global _writes
    _writes += 1


def trip(trips: Trips, names: Sequence[str]) -> None:
    """Called at the start of a trip of a loop's body, with the names the loop assigns.

    Raises:
        Spinning: Since the previous trip began, nothing was written and none of ``names`` changed.
    """
    bound = sys._getframe(1).f_locals
    prints = tuple(_fingerprint(bound.get(name, _UNBOUND)) for name in names)
    if any(p is None for p in prints):
        trips.last = None
        return
    state = (_writes, prints)
    if state == trips.last:
        raise Spinning
    trips.last = state


def message(kernel_name: str, program: tuple[int, int, int], at: str) -> str:
    """The error of a call whose program ``program`` spins, at ``at`` (`` at FILE:LINE: TEXT`` or nothing)."""
    return (
        f"triton_call {kernel_name!r} never finishes: a program waits in a while loop for a change that no program "
        f"makes (program_id {program}{at}): a trip of the loop wrote nothing and changed none of its variables. "
        "Triton's interpreter runs the programs one after another, so a lock that a program still holds when it "
        "ends (or that starts taken) is never released; release every lock before the program ends "
        "(tl.atomic_xchg(lock, 0)) and pass the locks zeroed (zeroed_outputs=)"
    )


_UNBOUND = object()


def _fingerprint(value: Any) -> Any:
    """Something equal for equal values (bit for bit for blocks), or ``None`` where that cannot be told."""
    if value is _UNBOUND or value is None:
        return ("unbound",) if value is _UNBOUND else ("none",)
    if isinstance(value, bool | int | str):
        return (type(value), value)
    if isinstance(value, float):
        return None if value != value else (float, value.hex())
    if isinstance(value, tuple):
        items = tuple(_fingerprint(item) for item in value)
        return None if any(i is None for i in items) else ("tuple", items)
    inner = getattr(value, "value", _UNBOUND)  # a constexpr
    if inner is not _UNBOUND and type(value).__name__ == "constexpr":
        return _fingerprint(inner)
    handle = getattr(value, "handle", None)  # a tensor: its handle's data, a NumPy array
    data = getattr(handle, "data", None)
    if data is not None and hasattr(data, "tobytes"):
        return ("block", str(data.dtype), data.shape, data.tobytes(), str(getattr(value, "dtype", "")))
    return None
