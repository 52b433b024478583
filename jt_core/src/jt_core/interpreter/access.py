"""Checking every address a kernel touches on the CPU against the buffers it was given.

Triton's interpreter reads and writes raw addresses, so a kernel that strays outside its arguments would read
garbage or crash the process, or, where XLA placed two buffers side by side, read or write the neighbour without
anyone noticing. So that every address says which argument it came from, a checked run does not hand the kernel
its buffers' addresses: each argument's pointer is an address of its own region (`addresses`), far from every
other argument's and from any real memory, and every load, store and atomic is checked first and moved to the real
buffer (`AccessChecker.check`). An access outside its argument's elements, or a store into an input, becomes
`OutOfBoundsAccessError` naming that argument and the element. An access past the end of an output also names the
output's shape as ``out_shape`` gives it and the furthest element reached: the mistake may be ``out_shape``'s
rather than the kernel's.

A pointer can only come from a pointer argument, by adding offsets (a ``tl.where`` between two picks one of them),
so an address lies in the region of the argument it was derived from unless its offset passes half a region
(512 GiB) or the kernel made it from an integer. Arguments that share their memory (an output aliased to an input
and passed as both) share a region: their pointers compare equal, as on a device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jt_core.errors import OutOfBoundsAccessError

__all__ = ["AccessChecker", "Buffer", "Located", "addresses"]


#: How each kind of access is masked, for out-of-bounds messages.
_MASKED_FORMS = {
    "load": "tl.load(pointers, mask=..., other=...)",
    "store": "tl.store(pointers, values, mask=...)",
    "atomic": "tl.atomic_add(pointers, values, mask=...) and the other tl.atomic_* take mask= too",
}

#: The address the first argument's pointer holds in a checked run; argument ``k`` (in `addresses`' order) has
#: ``_BASE + k * _REGION``, and owns the addresses within half a region of it.
_BASE = 1 << 56
_REGION_BITS = 40
_REGION = 1 << _REGION_BITS
_HALF = _REGION >> 1


@dataclasses.dataclass(frozen=True)
class Buffer:
    """A buffer a kernel may access.

    Attributes:
        name: The kernel parameter it is passed as.
        start: Its first byte's address.
        end: The address after its last byte.
        writable: Whether the kernel may write it (an output, or an input aliased to one).
        itemsize: The size of its elements (what element indices in messages count).
        output: The output it holds (its index in ``out_shape``), or ``None`` for an input.
        shape: The output's shape (outputs only).
    """

    name: str
    start: int
    end: int
    writable: bool
    itemsize: int = 1
    output: int | None = None
    shape: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Located:
    """Where the lanes of one access land: their real addresses, and the index (in `AccessChecker.buffers`) of
    the buffer holding each (one index when they all lie in one buffer)."""

    addrs: np.ndarray
    slots: int | np.ndarray


def _regions(buffers: Sequence[Buffer]) -> tuple[list[Buffer], list[int]]:
    """The distinct buffers (arguments sharing memory are one, the first one's name kept; buffers without elements
    each their own) and, for each of ``buffers``, the index of its region."""
    distinct: list[Buffer] = []
    index: dict[tuple[int, int], int] = {}
    of: list[int] = []
    for buffer in buffers:
        key = (buffer.start, buffer.end)
        if buffer.end <= buffer.start or key not in index:
            if buffer.end > buffer.start:
                index[key] = len(distinct)
            of.append(len(distinct))
            distinct.append(buffer)
        else:
            known = distinct[index[key]]
            if buffer.writable and not known.writable:
                distinct[index[key]] = dataclasses.replace(buffer, name=known.name)
            of.append(index[key])
    return distinct, of


def addresses(buffers: Sequence[Buffer]) -> list[int]:
    """The address each of ``buffers`` is passed to the kernel as in a checked run (what `AccessChecker` built on
    the same buffers expects)."""
    _, of = _regions(buffers)
    return [_BASE + k * _REGION for k in of]


class AccessChecker:
    """Checks that every address a kernel touches lies inside the argument it came from, and finds its real place.

    Args:
        kernel_name: For messages.
        buffers: The kernel's pointer arguments, in the order `addresses` numbered them.
    """

    def __init__(self, kernel_name: str, buffers: Sequence[Buffer]) -> None:
        self.kernel_name = kernel_name
        #: One per region: arguments sharing memory are one.
        self.buffers, _ = _regions(buffers)
        #: The arguments that hold no element: any access through them is out of bounds.
        self.empty = [b for b in self.buffers if b.end <= b.start]
        self.starts = np.array([b.start for b in self.buffers], dtype=np.int64)
        self.sizes = np.array([max(0, b.end - b.start) for b in self.buffers], dtype=np.int64)
        self.writable = np.array([b.writable for b in self.buffers], dtype=bool)

    def check(
        self, ptrs: np.ndarray, mask: np.ndarray | None, itemsize: int, op: str
    ) -> tuple[np.ndarray, Located | None]:
        """Checks one access (the lanes ``mask`` leaves on) and says where it lands.

        Returns:
            The real addresses of ``ptrs`` (zero for lanes masked off), and the accessed real addresses with the
            buffer each lies in (an index into `buffers`), or ``None`` when every lane is masked off.

        Raises:
            OutOfBoundsAccessError: An address outside the elements of the argument it came from, or a store or
                atomic into a read-only one.
        """
        raw = np.asarray(ptrs, dtype=np.uint64)
        active = None if mask is None else np.broadcast_to(np.asarray(mask, dtype=bool), raw.shape)
        relative = (raw - np.uint64(_BASE - _HALF)).view(np.int64)
        slot = relative >> _REGION_BITS
        offset = relative - (slot << _REGION_BITS) - _HALF
        lanes = raw.reshape(-1) if active is None else raw[active]
        if lanes.size == 0:
            return np.zeros_like(raw), None
        slots = slot.reshape(-1) if active is None else slot[active]
        offsets = offset.reshape(-1) if active is None else offset[active]
        # Fast path: every lane in one argument (the usual case).
        first = int(slots[0])
        if 0 <= first < len(self.buffers) and (slots == first).all():
            low, high = int(offsets.min()), int(offsets.max())
            if low >= 0 and high + itemsize <= int(self.sizes[first]):
                if op != "load" and not self.writable[first]:
                    self._refuse_store(first, op)
                real = raw.view(np.int64) - (_BASE + first * _REGION) + int(self.starts[first])
                real = real if active is None else np.where(active, real, 0)
                return real.astype(np.uint64), Located((offsets + int(self.starts[first])).astype(np.uint64), first)
        known = (slots >= 0) & (slots < len(self.buffers))
        safe = np.where(known, slots, 0)
        inside = known & (offsets >= 0) & (offsets + itemsize <= self.sizes[safe])
        if not inside.all():
            bad = int(np.flatnonzero(~inside)[0])
            if not known[bad]:
                raise OutOfBoundsAccessError(self._describe(None, 0, 0, itemsize, op, int((~inside).sum())))
            target = int(slots[bad])
            stray = ~inside & (slots == target)
            furthest = int(offsets[stray].max())
            message = self._describe(target, int(offsets[bad]), furthest, itemsize, op, int((~inside).sum()))
            raise OutOfBoundsAccessError(message)
        if op != "load":
            readonly = ~self.writable[slots]
            if readonly.any():
                self._refuse_store(int(slots[readonly][0]), op)
        real_lanes = (offsets + self.starts[slots]).astype(np.uint64)
        real = np.zeros(raw.shape, dtype=np.uint64)
        if active is None:
            real = real_lanes.reshape(raw.shape)
        else:
            real[active] = real_lanes
        return real, Located(real_lanes, slots)

    def _refuse_store(self, index: int, op: str) -> None:
        name = self.buffers[index].name
        raise OutOfBoundsAccessError(
            f"kernel {self.kernel_name!r} {op}s into input {name!r}, which is not an output: its buffer "
            "belongs to the caller. Make it an output with input_output_aliases, or pass a jax.new_ref"
        )

    def _describe(self, target: int | None, offset: int, furthest: int, itemsize: int, op: str, count: int) -> str:
        advice = f"Mask the {op} ({_MASKED_FORMS[op]}) or fix the offsets."
        reached = ""
        if target is None:
            where = "an address outside every argument (a pointer made from an integer, or moved half a TiB away)"
        else:
            buffer = self.buffers[target]
            size = max(0, buffer.end - buffer.start)
            position = f"{-offset} bytes before its start" if offset < 0 else "past its end"
            held = "" if buffer.output is None else f" (output {buffer.output})"
            place = f"element {offset // itemsize} ({position}; it holds {size // itemsize} elements, {size} bytes)"
            where = f"argument {buffer.name!r}{held} at {place}"
            if buffer.output is not None and offset >= 0 and buffer.shape is not None and size:
                # Past the end of an output: out_shape may be what is wrong.
                last = furthest // itemsize
                reached = f", up to element {last}"
                advice = (
                    f"out_shape gives output {buffer.output} the shape {buffer.shape}, {size // itemsize} elements: if "
                    f"the kernel is right to reach element {last}, out_shape is too small (make it hold at least "
                    f"{last + 1} elements). Otherwise mask the {op} ({_MASKED_FORMS[op]}) or fix the offsets."
                )
        if self.empty:
            names = ", ".join(repr(b.name) for b in self.empty)
            which = f"Arguments {names} hold" if len(self.empty) > 1 else f"Argument {names} holds"
            advice += (
                f" {which} no elements (zero-size): any access through them is out of bounds, so mask it off or "
                "skip the call for empty arrays."
            )
        return (
            f"kernel {self.kernel_name!r}: out-of-bounds {op} of {itemsize} bytes from {where}; {count} offending "
            f"addresses{reached}. {advice} (Checked by jt's CPU backend; JT_CPU_BOUNDS_CHECK=0 turns the check off.)"
        )
