"""Checking every address a kernel touches on the CPU against the buffers it was given.

Triton's interpreter reads and writes raw addresses, so a kernel that strays outside its arguments would read
garbage or crash the process. Every load, store and atomic is checked first; an access outside every buffer, or a
store into an input, becomes `OutOfBoundsAccessError` naming the argument the access was
meant for: the one holding the access's other addresses, else the nearest one (said to be only the nearest when the
address lies far from it), and the arguments that hold no element. An access past the end of an output
also names the output's shape as ``out_shape`` gives it and the furthest element reached: the mistake may be
``out_shape``'s rather than the kernel's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from jt_core.errors import OutOfBoundsAccessError

__all__ = ["AccessChecker", "Buffer", "Located"]


#: How each kind of access is masked, for out-of-bounds messages.
_MASKED_FORMS = {
    "load": "tl.load(pointers, mask=..., other=...)",
    "store": "tl.store(pointers, values, mask=...)",
    "atomic": "tl.atomic_add(pointers, values, mask=...) and the other tl.atomic_* take mask= too",
}


@dataclasses.dataclass(frozen=True)
class Buffer:
    """A buffer a kernel may access.

    Attributes:
        name: The kernel parameter it is passed as.
        start: Its first byte's address.
        end: The address after its last byte.
        writable: Whether the kernel may write it (an output, or an input aliased to one).
        itemsize: The size of its elements (what element indices in the race check's messages count).
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
    """Where the lanes of one access land: their addresses, and the index of the buffer holding each (one index
    when they all lie in one buffer)."""

    addrs: np.ndarray
    slots: int | np.ndarray


class AccessChecker:
    """Checks that every address a kernel touches lies inside one of its buffers."""

    def __init__(self, kernel_name: str, buffers: Sequence[Buffer]) -> None:
        self.kernel_name = kernel_name
        ordered = sorted((b for b in buffers if b.end > b.start), key=lambda b: b.start)
        self.buffers = ordered
        #: The arguments that hold no element: any access through them lands outside every buffer.
        self.empty = [b for b in buffers if b.end <= b.start]
        self.starts = np.array([b.start for b in ordered], dtype=np.uint64)
        self.ends = np.array([b.end for b in ordered], dtype=np.uint64)
        self.writable = np.array([b.writable for b in ordered], dtype=bool)

    def check(self, ptrs: np.ndarray, mask: np.ndarray | None, itemsize: int, op: str) -> Located | None:
        """Checks one access (the lanes ``mask`` leaves on) and says where it lands.

        Returns:
            The accessed addresses and the buffer each lies in (an index into `buffers`, one for all when
            they share a buffer), or ``None`` when every lane is masked off.

        Raises:
            OutOfBoundsAccessError: An address outside every buffer, or a store or atomic into a read-only one.
        """
        addrs = np.asarray(ptrs, dtype=np.uint64)
        if mask is not None:
            addrs = addrs[np.broadcast_to(np.asarray(mask, dtype=bool), addrs.shape)]
        else:
            addrs = addrs.reshape(-1)
        if addrs.size == 0:
            return None
        if not self.buffers:
            bad, furthest = int(addrs[0]), int(addrs.max())
            raise OutOfBoundsAccessError(self._describe(bad, furthest, itemsize, op, addrs.size, None))
        # Fast path: every address falls in the buffer holding the lowest one (the usual case: one argument).
        low, high = int(addrs.min()), int(addrs.max())
        first = int(np.searchsorted(self.starts, np.uint64(low), side="right")) - 1
        if first >= 0 and high + itemsize <= int(self.ends[first]):
            if op != "load" and not self.writable[first]:
                self._refuse_store(first, op)
            return Located(addrs, first)
        slot = np.searchsorted(self.starts, addrs, side="right").astype(np.int64) - 1
        inside = (slot >= 0) & (addrs + np.uint64(itemsize) <= self.ends[np.maximum(slot, 0)])
        if not inside.all():
            outside = addrs[~inside]
            bad = int(outside[0])
            target = self._meant(bad, itemsize, slot[inside])
            raise OutOfBoundsAccessError(self._describe(bad, int(outside.max()), itemsize, op, outside.size, target))
        if op != "load":
            readonly = ~self.writable[slot]
            if readonly.any():
                self._refuse_store(int(slot[readonly][0]), op)
        return Located(addrs, slot)

    def _meant(self, addr: int, itemsize: int, inside_slots: np.ndarray) -> int | None:
        """The buffer an access that strays to ``addr`` was meant for: the one holding most of its other
        addresses, else the buffer nearest to ``addr`` (``None`` without buffers)."""
        if inside_slots.size:
            return int(np.bincount(inside_slots, minlength=len(self.buffers)).argmax())
        if not self.buffers:
            return None
        distances = [b.start - addr if addr < b.start else max(0, addr + itemsize - b.end) for b in self.buffers]
        return int(np.argmin(distances))

    def _refuse_store(self, index: int, op: str) -> None:
        name = self.buffers[index].name
        raise OutOfBoundsAccessError(
            f"kernel {self.kernel_name!r} {op}s into input {name!r}, which is not an output: its buffer "
            "belongs to the caller. Make it an output with input_output_aliases, or pass a jax.new_ref"
        )

    def _describe(self, addr: int, furthest: int, itemsize: int, op: str, count: int, target: int | None) -> str:
        advice = f"Mask the {op} ({_MASKED_FORMS[op]}) or fix the offsets."
        reached = ""
        if target is None:
            where = "an address outside every argument (none holds an element)"
        else:
            buffer = self.buffers[target]
            size = buffer.end - buffer.start
            offset = addr - buffer.start
            position = f"{-offset} bytes before its start" if offset < 0 else "past its end"
            held = "" if buffer.output is None else f" (output {buffer.output})"
            place = f"element {offset // itemsize} ({position}; it holds {size // itemsize} elements, {size} bytes)"
            if -size <= offset < 2 * size:
                where = f"argument {buffer.name!r}{held} at {place}"
            else:  # far from every buffer: which pointer the access went through cannot be told from its address
                where = f"an address far outside every argument; the nearest is {buffer.name!r}{held}, at its {place}"
            if buffer.output is not None and offset >= 0 and buffer.shape is not None:
                # Past the end of an output: out_shape may be what is wrong.
                last = (furthest - buffer.start) // itemsize
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
