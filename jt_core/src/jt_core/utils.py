"""Small helpers kernel authors use when computing grids and strides."""

from __future__ import annotations

from collections.abc import Sequence


def cdiv(a: int, b: int) -> int:
    """Ceiling division: the number of blocks of size ``b`` that cover ``a`` elements.

    Args:
        a: The number of elements (non-negative).
        b: The block size (positive).

    Raises:
        ValueError: When ``b`` is not positive.
    """
    if b <= 0:
        raise ValueError(f"cdiv(a, b) needs a positive b (block size), got b={b}")
    return -(-a // b)


def next_power_of_2(x: int) -> int:
    """The smallest power of two that is at least ``x`` (1 for ``x <= 1``)."""
    if x <= 1:
        return 1
    return 1 << (int(x) - 1).bit_length()


def strides_from_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major (C order) strides, in elements, of an array of ``shape``."""
    strides = []
    stride = 1
    for dim in reversed(tuple(shape)):
        strides.append(stride)
        stride *= int(dim)
    return tuple(reversed(strides))


__all__ = ["cdiv", "next_power_of_2", "strides_from_shape"]
