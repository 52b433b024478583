"""The proof the compiled CPU path uses before running a grid's programs side by side: when it says the programs
store to disjoint elements, they do (checked by enumerating every store of small grids)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from jt_core.translation.analysis.affine import Affine, disjoint


def _elements(store: Affine, pid: tuple[int, int, int]) -> set[int]:
    base = store.const + sum(a * p for a, p in zip(store.pids, pid, strict=True))
    ranges = [range(n) for n in store.shape]
    return {base + sum(c * i for c, i in zip(store.lanes, lane, strict=True)) for lane in itertools.product(*ranges)}


def _overlap(store: Affine, grid: tuple[int, int, int]) -> bool:
    seen: set[int] = set()
    for pid in itertools.product(*(range(g) for g in grid)):
        elements = _elements(store, pid)  # type: ignore[arg-type]
        if seen & elements:
            return True
        seen |= elements
    return False


coefficient = st.integers(min_value=-70, max_value=70)


@settings(max_examples=400, deadline=None)
@given(
    pids=st.tuples(coefficient, coefficient, coefficient),
    grid=st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 3)),
    lanes=st.lists(st.tuples(coefficient, st.sampled_from([1, 2, 4, 8])), min_size=0, max_size=2),
    const=st.integers(-5, 5),
)
def test_stores_said_to_be_disjoint_are_disjoint(
    pids: tuple[int, int, int], grid: tuple[int, int, int], lanes: list[tuple[int, int]], const: int
) -> None:
    store = Affine(const, pids, tuple(c for c, _ in lanes), tuple(n for _, n in lanes))
    if disjoint([store], grid):
        assert not _overlap(store, grid)


def test_a_block_per_program_and_the_tiles_of_a_matrix_are_proved_disjoint() -> None:
    block = Affine(0, (1024, 0, 0), (1,), (1024,))
    assert disjoint([block], (977, 1, 1))
    tiles = Affine(0, (64 * 256, 64, 0), (256, 1), (64, 64))
    assert disjoint([tiles], (4, 4, 1)) and not _overlap(Affine(0, (8 * 64, 8, 0), (64, 1), (8, 8)), (4, 8, 1))
    halves = Affine(0, (8, 0, 0), (1,), (16,))
    assert not disjoint([halves], (12, 1, 1)) and _overlap(halves, (12, 1, 1))
    assert not disjoint([block, Affine(1, (1024, 0, 0), (1,), (1024,))], (4, 1, 1))
