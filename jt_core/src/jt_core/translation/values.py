"""The kinds of values a traced kernel holds besides numbers, and the refusal of what the compiled path cannot
express."""

from __future__ import annotations

import dataclasses
from typing import Any

from jt_core.errors import UnsupportedKernelError

__all__ = ["Address", "BlockPointer", "Unsupported"]


class Unsupported(UnsupportedKernelError):
    """A kernel construct the compiled CPU path cannot express: ``what``, at kernel source ``line``."""

    def __init__(self, what: str, line: str | None = None) -> None:
        self.what = what
        self.line = line
        super().__init__(f"{what} (at {line})" if line else what)


@dataclasses.dataclass(frozen=True)
class BlockPointer:
    """A block pointer (``tl.make_block_ptr``): a box of a strided tensor in a buffer.

    Attributes:
        buffer: The buffer it points into.
        base: The offset of the tensor's first element in the buffer.
        shape: The tensor's shape.
        strides: The tensor's strides, in elements.
        offsets: The box's first element, per axis.
        block: The box's shape.
        pointee: The element type.
    """

    buffer: int
    base: Any
    shape: tuple[Any, ...]
    strides: tuple[Any, ...]
    offsets: tuple[Any, ...]
    block: tuple[int, ...]
    pointee: str


@dataclasses.dataclass(frozen=True)
class Address:
    """A pointer turned into an integer (``tt.ptr_to_int``, what Triton makes of ``if ptr:``). The compiled path
    knows no address, only that a pointer derived from an argument is never null (an argument the caller passes
    as ``None`` is a constexpr ``None``, which Triton's front end settles before the IR): comparing it with zero,
    or with another into the same buffer, is all it can express.

    Attributes:
        pointer: The pointer (`jt_core.translation.memory.Pointer`).
    """

    pointer: Any
