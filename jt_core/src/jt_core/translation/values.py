"""The kinds of values a traced kernel holds besides numbers, and the refusal of what the compiled path cannot
express."""

from __future__ import annotations

import dataclasses
from typing import Any

from jt_core.errors import UnsupportedKernelError

__all__ = ["BlockPointer", "NotVectorizable", "Unsupported"]


class Unsupported(UnsupportedKernelError):
    """A kernel construct the compiled CPU path cannot express: ``what``, at kernel source ``line``."""

    def __init__(self, what: str, line: str | None = None) -> None:
        self.what = what
        self.line = line
        super().__init__(f"{what} (at {line})" if line else what)


class NotVectorizable(Exception):
    """Running the programs side by side might not give what running them in order gives: why, in words."""


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
