"""Rows of consecutive elements moved whole: a block whose lanes run along its last axis one element apart, at starts
known only when it runs (a page's rows of a KV cache found through a table, a state's rows found through its slot),
gathered or scattered a row at a time, one index per row where there was one per element, where each row lies
within one row of its buffer (the analyses prove it, or a store checks it once for all the programs' rows)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core.translation.analysis.affine import Affine
from jt_core.translation.analysis.rows import Rows

__all__ = ["RowsStore", "column", "consecutive", "gathered", "store_record", "written"]


@dataclasses.dataclass(frozen=True)
class RowsStore:
    """A store recorded as rows of consecutive elements (its indices each row's first offset, the buffer's size where
    the row strays; its values one row of lanes per index), made after the programs (`written`).

    Attributes:
        buffer: The buffer written.
        column: The column of the buffer's rows every row starts at, where the analyses prove it and that the rows
            end within the buffer's rows; ``None``: checked when the store is made.
    """

    buffer: int
    column: int | None


def consecutive(buffer: tuple[int, ...], block: tuple[int, ...], affine: Affine | None, rows: Rows | None) -> bool:
    """Whether a block's rows (along its last axis) are consecutive elements of a buffer of rows (two axes or more,
    under 2**31 elements) no shorter than they are, which a gather or scatter of rows may move whole."""
    if len(block) < 1 or len(buffer) < 2 or not 2 <= block[-1] <= buffer[-1] or int(np.prod(buffer)) >= 2**31:
        return False
    if affine is not None and affine.shape == block:
        return affine.lanes[-1:] == (1,)
    return rows is not None and rows.step == 1


def column(buffer: tuple[int, ...], block: tuple[int, ...], affine: Affine | None, rows: Rows | None) -> int | None:
    """The column of the buffer's rows a block's rows all start at, where the analyses prove they each lie within
    one row of it (`jt_core.translation.analysis.rows.Rows.within_rows_of`); else ``None``."""
    if rows is None or not consecutive(buffer, block, affine, rows):
        return None
    return rows.within_rows_of(buffer[-1], block[-1])


def _starts(buffer: tuple[int, ...], at: int | jax.Array, rows: jax.Array) -> jax.Array:
    """The coordinates, in the buffer's shape, of element ``at`` of each of its flat ``rows`` (int32, at least zero);
    a row past the buffer's end is past its first axis's end (not wrapped round)."""
    index = rows
    coordinates = [jnp.broadcast_to(jnp.asarray(at, jnp.int32), index.shape)]
    for size in reversed(buffer[1:-1]):
        coordinates.append(lax.rem(index, np.int32(size)))
        index = lax.div(index, np.int32(size))
    coordinates.append(index)
    return jnp.stack(coordinates[::-1], axis=-1)


def gathered(held: jax.Array, offsets: jax.Array, at: int, length: int) -> jax.Array:
    """The rows of ``length`` elements whose first lanes lie at ``offsets[..., 0]`` of a buffer (``held`` in its own
    shape), each starting at column ``at`` of a row of it (`column`). A row whose start strays reads its nearest
    row (its lanes are the bounds check's, as ever)."""
    leading = held.ndim - 1
    # Offsets are at least zero here (a stray row below reads row zero): truncating division is floor's.
    rows = lax.div(jnp.maximum(offsets[..., 0].astype(jnp.int32), 0), np.int32(held.shape[-1]))
    dims = lax.GatherDimensionNumbers(
        offset_dims=(rows.ndim,), collapsed_slice_dims=tuple(range(leading)), start_index_map=tuple(range(leading + 1))
    )
    starts = _starts(held.shape, at, rows)
    return lax.gather(held, starts, dims, slice_sizes=(1,) * leading + (length,), mode=lax.GatherScatterMode.CLIP)


def store_record(
    buffer: int, shape: tuple[int, ...], offsets: jax.Array, affine: Affine | None, rows: Rows | None
) -> tuple[RowsStore, jax.Array] | None:
    """An unmasked store of rows of consecutive elements (`consecutive`) into a buffer of ``shape`` as a `RowsStore`
    and its indices: each row's first lane's offset, the buffer's size where the row's start strays (it writes
    nothing, as its lanes would not: a row checked to lie within a row of the buffer lies inside it or wholly
    outside)."""
    if not consecutive(shape, offsets.shape, affine, rows):
        return None
    size = int(np.prod(shape))
    first = offsets[..., 0]
    starts = jnp.where((first < 0) | (first >= size), size, first).astype(jnp.int32)
    return RowsStore(buffer, column(shape, offsets.shape, affine, rows)), starts


def written(held: jax.Array, record: RowsStore, starts: jax.Array, values: jax.Array) -> jax.Array:
    """A buffer (``held`` in its own shape) with a `RowsStore` made: a scatter of whole rows where every row lies
    within a row of the buffer (proven, or checked here, once for all the programs' rows), else of their
    elements."""
    extent, length = held.shape[-1], values.shape[-1]
    leading = held.ndim - 1

    def by_rows(held: jax.Array) -> jax.Array:
        at: Any = lax.rem(starts, np.int32(extent)) if record.column is None else record.column
        dims = lax.ScatterDimensionNumbers(
            update_window_dims=(values.ndim - 1,),
            inserted_window_dims=tuple(range(leading)),
            scatter_dims_to_operand_dims=tuple(range(leading + 1)),
        )
        where = _starts(held.shape, at, lax.div(starts, np.int32(extent)))
        return lax.scatter(held, where, values, dims, mode=lax.GatherScatterMode.FILL_OR_DROP)

    def by_elements(held: jax.Array) -> jax.Array:
        offsets = jnp.ravel(starts[..., None] + lax.iota(jnp.int32, length))
        dims = lax.ScatterDimensionNumbers(
            update_window_dims=(), inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,)
        )
        flat = lax.scatter(
            lax.reshape(held, (held.size,)),
            offsets[:, None],
            jnp.ravel(values),
            dims,
            mode=lax.GatherScatterMode.FILL_OR_DROP,
        )
        return lax.reshape(flat, held.shape)

    if record.column is not None:
        return by_rows(held)
    return lax.cond(jnp.all(lax.rem(starts, np.int32(extent)) + length <= extent), by_rows, by_elements, held)
