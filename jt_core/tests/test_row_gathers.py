"""Rows found through a table (a paged cache's rows, addresses loaded from memory): gathered whole where each lies
within one row of its buffer, element by element where it may not, and right either way, on both CPU paths."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.translation.analysis.rows import ANY, Rows

PATHS = ["compiled", "interpreter"]


@pytest.fixture(autouse=True)
def each_path_alone(jt_cpu_paths_by_name: None) -> None:
    """The path a call names is the one that runs it."""


@triton.jit
def table_rows_kernel(cache_ptr, table_ptr, out_ptr, n_rows, stride, shift, WIDTH: tl.constexpr, ROWS: tl.constexpr):
    # Program p copies ROWS rows of WIDTH elements, each starting at table[row] * stride + shift.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = rows < n_rows
    slot = tl.load(table_ptr + rows, mask=live, other=0)
    cols = tl.arange(0, WIDTH)
    values = tl.load(cache_ptr + (slot * stride + shift)[:, None] + cols[None, :], mask=live[:, None], other=-1.0)
    tl.store(out_ptr + rows[:, None] * WIDTH + cols[None, :], values, mask=live[:, None])


def _copy_rows(cache: Any, table: Any, stride: int, shift: int, width: int, launcher: str) -> Any:
    return jt.triton_call(
        cache,
        table,
        kernel=table_rows_kernel,
        out_shape=jax.ShapeDtypeStruct((table.shape[0], width), cache.dtype),
        grid=(triton.cdiv(table.shape[0], 8),),
        n_rows=table.shape[0],
        stride=stride,
        shift=shift,
        WIDTH=width,
        ROWS=8,
        launcher=launcher,
    )


#: (cache shape, stride, shift, width): rows that fill a row of the cache, the second half of one, and rows that
#: straddle two rows of the cache (which only an element-by-element gather reads right).
LAYOUTS = [((64, 4, 32), 128, 32, 32), ((64, 4, 32), 128, 16, 16), ((256, 48), 48, 40, 16), ((300, 7), 5, 0, 8)]


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("layout", LAYOUTS, ids=str)
def test_rows_found_through_a_table_read_right(layout: Any, launcher: str) -> None:
    shape, stride, shift, width = layout
    rng = np.random.default_rng(0)
    cache = rng.standard_normal(shape).astype(np.float32)
    slots = (cache.size - shift - width) // stride
    table = rng.integers(0, slots, 20).astype(np.int32)
    out = jax.jit(lambda c, t: _copy_rows(c, t, stride, shift, width, launcher))(cache, table)
    flat = cache.reshape(-1)
    expected = np.stack([flat[s * stride + shift : s * stride + shift + width] for s in table])
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_rows_gathered_whole_only_where_each_lies_within_a_row_of_the_buffer() -> None:
    def gathers(layout: Any) -> list[str]:
        shape, stride, shift, width = layout
        spec = jax.ShapeDtypeStruct(shape, np.float32), jax.ShapeDtypeStruct((20,), np.int32)
        text = jax.jit(lambda c, t: _copy_rows(c, t, stride, shift, width, "compiled")).lower(*spec).as_text()
        return [line for line in text.splitlines() if "stablehlo.gather" in line and "xf32>" in line]

    for layout in LAYOUTS[:2]:
        found = gathers(layout)
        assert found and all(f"slice_sizes = array<i64: 1, 1, {layout[3]}>" in line for line in found), found
    for layout in LAYOUTS[2:]:  # rows may straddle two rows of the buffer: element by element
        found = gathers(layout)
        assert found and all(line.count("slice_sizes = array<i64: 1, 1>") for line in found), found


def test_rows_arithmetic() -> None:
    start = ANY.times(128).plus(Rows(0, 0, 32))  # slot * 128 + 32, slot loaded from memory
    offsets = start.split_last().plus(Rows(1, 0, 0))  # [:, None] + a row of consecutive lanes
    assert offsets == Rows(1, 128, 32)
    assert offsets.within_rows_of(128, 64) == 32  # a row of 64 lanes from column 32 of a row of 128
    assert offsets.within_rows_of(128, 128) is None  # it would run past the row's end
    assert offsets.within_rows_of(256, 64) is None  # 128 apart: not one column of rows of 256
    assert Rows(2, 128, 0).within_rows_of(128, 8) is None  # every second element: not consecutive
    assert Rows(3, 12, 5).split_last() == Rows(0, 3, 2)  # lanes 5, 8, 11, ... modulo 12 are 2 modulo 3
    assert ANY.plus(Rows(1, 0, 0)).within_rows_of(128, 8) is None  # rows of unknown lanes stay unknown


@triton.jit
def rows_to_slots_kernel(
    cache_ptr, table_ptr, new_ptr, n_rows, stride, n_cols, WIDTH: tl.constexpr, ROWS: tl.constexpr
):
    # Program p writes ROWS rows of new values back into the cache, row r at table[r] * stride (a state written back
    # to the slot its sequence holds), the lanes past n_cols masked off.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = rows < n_rows
    slot = tl.load(table_ptr + rows, mask=live, other=0)
    cols = tl.arange(0, WIDTH)
    keep = live[:, None] & (cols < n_cols)[None, :]
    values = tl.load(new_ptr + rows[:, None] * WIDTH + cols[None, :], mask=keep)
    tl.store(cache_ptr + (slot * stride)[:, None] + cols[None, :], values, mask=keep)


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("n_cols", [32, 20])  # whole rows (one index a row), and rows partly masked (an element each)
def test_rows_stored_to_slots_found_through_a_table_write_right(n_cols: int, launcher: str) -> None:
    rng = np.random.default_rng(1)
    cache = rng.standard_normal((40, 32)).astype(np.float32)
    table = rng.permutation(40)[:21].astype(np.int32)  # 21 rows: the last program's last three masked off
    new = rng.standard_normal((21, 32)).astype(np.float32)

    def store(c: Any, t: Any, v: Any) -> Any:
        return jt.triton_call(
            c,
            t,
            v,
            kernel=rows_to_slots_kernel,
            out_shape=c,
            input_output_aliases={0: 0},
            grid=(triton.cdiv(21, 8),),
            n_rows=21,
            stride=32,
            n_cols=n_cols,
            WIDTH=32,
            ROWS=8,
            launcher=launcher,
        )

    out = jax.jit(store)(cache, table, new)
    expected = cache.copy()
    expected[table, :n_cols] = new[:, :n_cols]
    np.testing.assert_array_equal(np.asarray(out), expected)


@triton.jit
def rows_at_starts_kernel(out_ptr, starts_ptr, new_ptr, WIDTH: tl.constexpr, ROWS: tl.constexpr):
    # Program p writes ROWS rows of WIDTH new values, row r from the offset starts[r] on: nothing says whether a row
    # stays within a row of the buffer until the starts are read.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    start = tl.load(starts_ptr + rows)
    cols = tl.arange(0, WIDTH)
    values = tl.load(new_ptr + rows[:, None] * WIDTH + cols[None, :])
    tl.store(out_ptr + start[:, None] + cols[None, :], values)


def _rows_at_starts(out: Any, starts: Any, new: Any, launcher: str) -> Any:
    return jt.triton_call(
        out,
        starts,
        new,
        kernel=rows_at_starts_kernel,
        out_shape=out,
        input_output_aliases={0: 0},
        grid=(starts.shape[0] // 8,),
        WIDTH=new.shape[1],
        ROWS=8,
        launcher=launcher,
    )


@pytest.mark.parametrize("launcher", PATHS)
@pytest.mark.parametrize("row", [32, 24, 8], ids=["rows-within", "rows-straddle", "rows-longer"])
def test_rows_stored_from_loaded_starts_write_right_whether_or_not_they_straddle_the_buffers_rows(
    row: int, launcher: str
) -> None:
    """Rows of 16 at distinct multiples of 16: within the buffer's rows of 32 (one row scatter), across its rows of 24
    for some (the check made when the store runs sends them element by element), longer than its rows of 8 (element
    by element, known when traced)."""
    rng = np.random.default_rng(2)
    out = rng.standard_normal((60, row)).astype(np.float32)
    starts = (rng.permutation(out.size // 16)[:24] * 16).astype(np.int32)
    new = rng.standard_normal((24, 16)).astype(np.float32)
    got = jax.jit(lambda o, s, v: _rows_at_starts(o, s, v, launcher))(out, starts, new)
    expected = out.reshape(-1).copy()
    for start, values in zip(starts, new, strict=True):
        expected[start : start + 16] = values
    np.testing.assert_array_equal(np.asarray(got), expected.reshape(out.shape))


def test_rows_stored_from_loaded_starts_are_one_row_scatter_or_one_element_scatter_chosen_once() -> None:
    spec = [jax.ShapeDtypeStruct(s, t) for s, t in (((30, 32), np.float32), ((24,), np.int32), ((24, 16), np.float32))]
    text = jax.jit(lambda o, s, v: _rows_at_starts(o, s, v, "compiled")).lower(*spec).as_text()
    scatters = [line for line in text.splitlines() if "stablehlo.scatter" in line]
    assert text.count("stablehlo.case") == 1 and len(scatters) == 2, scatters
    assert sum("update_window_dims = [" in line for line in scatters) == 1, scatters
