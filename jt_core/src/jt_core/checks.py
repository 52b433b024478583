"""What the CPU backend checks while it runs a kernel, and the switches that choose it.

Three checks, each found by watching every load, store and atomic of a run:

* **bounds** (on by default): an access outside every buffer passed to the kernel, or a store into an input,
  raises `OutOfBoundsAccessError`. ``JT_CPU_BOUNDS_CHECK=0`` turns it off.
* **races** (off by default): two program instances of one launch touching the same element, at least one of them
  writing and not both with atomics, raise `DataRaceError`. ``JT_CPU_RACE_CHECK=1``
  turns it on.
* **unwritten outputs** (with the race check): an output that is neither aliased to an input nor zeroed, with
  elements no program wrote, warns (`UnwrittenOutputWarning`, the default) or raises
  (`UnwrittenOutputError`, ``unwritten="error"`` or ``JT_CPU_UNWRITTEN=error``).

The environment gives the process-wide default; `cpu_checks` overrides it for the calls traced inside a
``with`` block. The choice is made when a call is traced and is part of ``jax.jit``'s cache key, so a jitted
function called inside the block is traced again with the block's checks, and again without them afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import jax

from jt_core import settings
from jt_core.errors import KernelCallValueError

__all__ = ["UNWRITTEN_ACTIONS", "CpuChecks", "cpu_checks", "current"]

#: What an unwritten output does: warn, raise, or nothing.
UNWRITTEN_ACTIONS = ("warn", "error", "ignore")


@dataclasses.dataclass(frozen=True)
class CpuChecks:
    """The checks the CPU backend runs for one call.

    Attributes:
        bounds: Check every address against the buffers passed to the kernel.
        races: Report data races between the program instances of one launch (needs ``bounds``' bookkeeping,
            which it turns on).
        unwritten: With ``races``, what an output left partly unwritten does: ``"warn"``, ``"error"`` or
            ``"ignore"``.
    """

    bounds: bool = True
    races: bool = False
    unwritten: str = "warn"

    def __post_init__(self) -> None:
        if self.unwritten not in UNWRITTEN_ACTIONS:
            raise KernelCallValueError(f"unwritten= must be one of {list(UNWRITTEN_ACTIONS)}, got {self.unwritten!r}")


# Part of jax.jit's cache key: entering or leaving a block re-traces the functions called in it.
_block = jax.make_user_context(default_value=None)


def _from_environment() -> CpuChecks:
    unwritten = (settings.text("JT_CPU_UNWRITTEN") or "warn").lower()
    if unwritten not in UNWRITTEN_ACTIONS:
        raise KernelCallValueError(f"JT_CPU_UNWRITTEN must be one of {list(UNWRITTEN_ACTIONS)}, got {unwritten!r}")
    return CpuChecks(
        bounds=settings.flag("JT_CPU_BOUNDS_CHECK", default=True),
        races=settings.flag("JT_CPU_RACE_CHECK"),
        unwritten=unwritten,
    )


def current() -> CpuChecks:
    """The checks for a call traced now: the innermost `cpu_checks` block's, else the environment's."""
    chosen = _block.value
    return chosen if isinstance(chosen, CpuChecks) else _from_environment()


@contextmanager
def cpu_checks(
    *, races: bool | None = None, unwritten: str | None = None, bounds: bool | None = None
) -> Iterator[CpuChecks]:
    """Chooses the CPU backend's checks for the calls traced inside the block.

    Arguments left ``None`` keep what is in force (an outer block's choice, else the environment's).

    Example:
        >>> with jt.cpu_checks(races=True, unwritten="error"):
        ...     out = step(x)  # every triton_call in step runs with the race check

    Args:
        races: Report data races between program instances (`DataRaceError`).
        unwritten: ``"warn"``, ``"error"`` or ``"ignore"``: what an output with elements no program wrote does
            (checked with the race check).
        bounds: Check addresses against the buffers (``False`` turns the check off; the race check keeps the
            bookkeeping it needs).

    Yields:
        The `CpuChecks` in force inside the block.
    """
    given: dict[str, Any] = {
        name: value
        for name, value in (("races", races), ("unwritten", unwritten), ("bounds", bounds))
        if value is not None
    }
    chosen = dataclasses.replace(current(), **given)
    with _block(chosen):
        yield chosen
