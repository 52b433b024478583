"""How many programs the plan runs side by side at a time: as many as keep the kernel's largest value, times the
programs, within the strategy's budget, each element counted at its own size."""

from __future__ import annotations

import types

import pytest

from jt_core.translation.plan import chunk_size


@pytest.mark.parametrize(
    ("value", "bytes_each"),
    [("f8E4M3FN", 1), ("f8E5M2", 1), ("i1", 1), ("bf16", 2), ("f32", 4), ("i64", 8), ("!tt.ptr<f32>", 8)],
)
def test_programs_side_by_side_count_each_element_at_its_size(value: str, bytes_each: int) -> None:
    program = types.SimpleNamespace(types={"%0": f"tensor<1024x{value}>", "%1": "i32"})
    assert chunk_size(program, total=1000, budget=1024 * 64) == 64 // bytes_each  # type: ignore[arg-type]
