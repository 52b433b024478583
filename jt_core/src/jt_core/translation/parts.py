"""A buffer read and written through a pointer to smaller elements (``x_ptr.to(tl.pointer_type(tl.uint8))`` over
float32: a pointer cast that reinterprets): the buffer seen as its elements' parts, little-endian as a GPU's memory
holds them, each part an unsigned integer of the pointer's element size.

The pointer's offsets count parts; the whole buffer is viewed as parts for an access (a bitcast, and reshapes) and
joined back after a store, so that stores of neighbouring parts of one element compose.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["PartsStore", "joined", "part_type", "split", "to_part", "to_value"]


@dataclasses.dataclass(frozen=True)
class PartsStore:
    """A store recorded in parts of a buffer (its indices count the pointer's elements), made after the programs."""

    buffer: int
    part: np.dtype


def part_type(itemsize: int) -> np.dtype:
    """The unsigned integer type of a part of ``itemsize`` bytes."""
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32}[itemsize])


def split(array: jax.Array, part: np.dtype) -> jax.Array:
    """A flat buffer as its elements' parts (flat)."""
    pieces = lax.bitcast_convert_type(array, part)
    return lax.reshape(pieces, (pieces.size,))


def joined(parts: jax.Array, storage: np.dtype) -> jax.Array:
    """Parts (flat) joined back into elements of ``storage``."""
    ratio = storage.itemsize // parts.dtype.itemsize
    return lax.bitcast_convert_type(lax.reshape(parts, (parts.size // ratio, ratio)), storage)


def to_value(parts: jax.Array, value: np.dtype) -> jax.Array:
    """Parts read as the pointer's element type."""
    if value == np.bool_:
        return parts != 0
    return parts if parts.dtype == value else lax.bitcast_convert_type(parts, value)


def to_part(values: jax.Array, part: np.dtype) -> jax.Array:
    """Values of the pointer's element type as parts."""
    if values.dtype == jnp.bool_:
        return values.astype(part)
    return values if values.dtype == part else lax.bitcast_convert_type(values, part)
