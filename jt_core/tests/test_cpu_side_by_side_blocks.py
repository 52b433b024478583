"""Programs side by side with block accesses as slices (the compiled CPU path's fast way through a grid): each
kernel here runs through the compiled path and through Triton's interpreter, and both must give what NumPy gives,
at the edges of the views (tails, backwards steps, tiles with gaps, blocks shared by programs, in-place kernels,
loads in loops and in branches) and where the programs must not run side by side."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.errors import OutOfBoundsAccessError


@pytest.fixture(autouse=True)
def compiled_path_alone(jt_cpu_paths_by_name: None) -> None:
    """The structure asserted here is the compiled path's own (CI's second run compares every call with the
    interpreter anyway)."""


def call(kernel: Any, *args: Any, launcher: str = "compiled", **kwargs: Any) -> Any:
    return jax.jit(lambda *a: jt.triton_call(*a, kernel=kernel, launcher=launcher, **kwargs))(*args)


def both(kernel: Any, *args: Any, **kwargs: Any) -> np.ndarray:
    """The compiled path's result, after checking that the interpreter's is the same bit for bit."""
    compiled = np.asarray(call(kernel, *args, **kwargs))
    np.testing.assert_array_equal(compiled, np.asarray(call(kernel, *args, launcher="ffi", **kwargs)))
    return compiled


def side_by_side(kernel: Any, *args: Any, **kwargs: Any) -> bool:
    """Whether the compiled call runs its programs at once (no loop over them is left)."""
    text = jax.jit(lambda *a: jt.triton_call(*a, kernel=kernel, launcher="compiled", **kwargs)).lower(*args).as_text()
    return "while" not in text


def random(shape: Any, dtype: Any = np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@triton.jit
def affine_map_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=1.0)
    tl.store(out_ptr + offs, tl.where(x > 0, x * 3.0, -x), mask=mask)


@pytest.mark.parametrize("n", [1000, 1024, 37])
def test_a_masked_block_per_program_with_a_tail_matches_numpy(n: int) -> None:
    x = random(n, seed=n)
    kwargs = dict(out_shape=x, grid=triton.cdiv(n, 64), n=n, BLOCK=64)
    assert side_by_side(affine_map_kernel, x, **kwargs)
    np.testing.assert_array_equal(both(affine_map_kernel, x, **kwargs), np.where(x > 0, x * np.float32(3), -x))


@triton.jit
def reverse_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + (n - 1 - offs), tl.load(x_ptr + (n - 1 - offs), mask=mask) * 2.0, mask=mask)


def test_blocks_walked_backwards_match_numpy() -> None:
    x = random(300)
    out = both(reverse_kernel, x, out_shape=x, grid=5, n=300, BLOCK=64)
    np.testing.assert_array_equal(out, x * 2)


@triton.jit
def transpose_kernel(x_ptr, out_ptr, ROWS: tl.constexpr, COLS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    r = tl.program_id(0) * BR + tl.arange(0, BR)[:, None]
    c = tl.program_id(1) * BC + tl.arange(0, BC)[None, :]
    tl.store(out_ptr + c * ROWS + r, tl.load(x_ptr + r * COLS + c))


def test_tiles_read_by_rows_and_written_by_columns_match_numpy() -> None:
    x = random((16, 24))
    kwargs = dict(out_shape=jax.ShapeDtypeStruct((24, 16), jnp.float32), grid=(4, 3), ROWS=16, COLS=24, BR=4, BC=8)
    assert side_by_side(transpose_kernel, x, **kwargs)
    np.testing.assert_array_equal(both(transpose_kernel, x, **kwargs), x.T)


@triton.jit
def bias_kernel(x_ptr, b_ptr, scale_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    # A 3-D grid: batch, row tile, column tile; the bias is the same for every batch and row tile, the scale for all.
    r = tl.program_id(1) * BM + tl.arange(0, BM)[:, None]
    c = tl.program_id(2) * BN + tl.arange(0, BN)[None, :]
    where = tl.program_id(0) * M * N + r * N + c
    tl.store(out_ptr + where, tl.load(x_ptr + where) * tl.load(scale_ptr) + tl.load(b_ptr + c))


def test_a_block_every_program_shares_matches_numpy() -> None:
    x, b, scale = random((3, 8, 32)), random(32, seed=1), np.array([0.5], np.float32)
    kwargs = dict(out_shape=x, grid=(3, 2, 4), M=8, N=32, BM=4, BN=8, enable_fp_fusion=False)
    assert side_by_side(bias_kernel, x, b, scale, **kwargs)
    np.testing.assert_array_equal(both(bias_kernel, x, b, scale, **kwargs), x * scale[0] + b)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int16, np.float16, ml_dtypes.bfloat16])
def test_blocks_of_every_element_type_are_copied_bit_for_bit(dtype: Any) -> None:
    x = (random(100) * 50).astype(dtype)
    np.testing.assert_array_equal(both(copy_kernel, x, out_shape=x, grid=4, n=100, BLOCK=32), x)


def test_programs_side_by_side_in_boxes_with_a_partial_last_box_match_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    from jt_core.cpu.compiled.launcher import CpuCompiledLauncher
    from jt_core.translation.strategy import Strategy

    few = Strategy(side_by_side_bytes=8 * 8 * 8 * 6)  # 6 programs of 8 x 8 at a time: 3 boxes of 2 x 3
    monkeypatch.setattr(CpuCompiledLauncher, "strategy", lambda self: few)
    x = random((40, 24))
    kwargs = dict(out_shape=jax.ShapeDtypeStruct((24, 40), jnp.float32), grid=(5, 3), ROWS=40, COLS=24, BR=8, BC=8)
    np.testing.assert_array_equal(both(transpose_kernel, x, **kwargs), x.T)


# -- in-place kernels ---------------------------------------------------------------------------------------


@triton.jit
def scale_in_place_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0 + 1.0, mask=offs < n)


@triton.jit
def running_in_place_kernel(x_ptr, n, BLOCK: tl.constexpr):
    # Each program adds one to the block before it, which the program before it wrote: in order, a running count.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    before = offs - BLOCK
    x = tl.load(x_ptr + before, mask=(before >= 0) & (before < n), other=0.0)
    tl.store(x_ptr + offs, x + 1.0, mask=offs < n)


@triton.jit
def reread_in_place_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.full((BLOCK,), 5.0, tl.float32), mask=offs < n)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


def test_an_in_place_kernel_whose_programs_load_only_what_they_store_runs_side_by_side() -> None:
    x = random(200)

    def scale(x: jax.Array, launcher: str = "compiled") -> jax.Array:
        return jt.triton_call(
            x,
            kernel=scale_in_place_kernel,
            out_shape=x,
            grid=4,
            n=200,
            BLOCK=64,
            input_output_aliases={0: 0},
            launcher=launcher,
        )

    assert "while" not in jax.jit(scale).lower(x).as_text()
    out = np.asarray(jax.jit(scale)(x))
    np.testing.assert_array_equal(out, np.asarray(jax.jit(lambda x: scale(x, "ffi"))(x)))
    np.testing.assert_array_equal(out, x * 2 + 1)


def test_an_in_place_kernel_that_reads_what_another_program_wrote_runs_in_order() -> None:
    x = random(100)

    def running(x: jax.Array, launcher: str = "compiled") -> jax.Array:
        return jt.triton_call(
            x,
            kernel=running_in_place_kernel,
            out_shape=x,
            grid=4,
            n=100,
            BLOCK=32,
            input_output_aliases={0: 0},
            launcher=launcher,
        )

    assert "while" in jax.jit(running).lower(x).as_text()
    out = np.asarray(jax.jit(running)(x))
    np.testing.assert_array_equal(out, np.asarray(jax.jit(lambda x: running(x, "ffi"))(x)))
    np.testing.assert_array_equal(out, np.repeat(np.arange(1, 5, dtype=np.float32), 32)[:100])


def test_an_in_place_kernel_that_reads_its_own_store_runs_side_by_side_in_windows() -> None:
    # Each program stores its block, then loads it back: its own window of the buffer, where it sees its store.
    x = random(100)

    def reread(x: jax.Array, launcher: str = "compiled") -> Any:
        return jt.triton_call(
            x,
            kernel=reread_in_place_kernel,
            out_shape=(x, x),
            grid=4,
            n=100,
            BLOCK=32,
            input_output_aliases={0: 0},
            launcher=launcher,
        )

    assert "while" not in jax.jit(reread).lower(x).as_text()
    written, doubled = (np.asarray(a) for a in jax.jit(reread)(x))
    np.testing.assert_array_equal(written, 5)
    np.testing.assert_array_equal(doubled, 10)


# -- loads in loops and branches ----------------------------------------------------------------------------


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        ks = k + tl.arange(0, BK)
        a = tl.load(a_ptr + rows[:, None] * K + ks[None, :], mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * N + cols[None, :], mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@triton.jit
def matmul_moving_pointers_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    a_ptrs = a_ptr + rows[:, None] * K + ks[None, :]
    b_ptrs = b_ptr + ks[:, None] * N + cols[None, :]
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] < K - k * BK), other=0.0)
        b = tl.load(b_ptrs, mask=(ks[:, None] < K - k * BK) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BK
        b_ptrs += BK * N
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


@pytest.mark.parametrize("kernel", [matmul_kernel, matmul_moving_pointers_kernel])
@pytest.mark.parametrize("shape", [(32, 32, 64), (30, 20, 44)])
def test_matmuls_with_and_without_tails_match_numpy(kernel: Any, shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    a, b = random((m, k), seed=2), random((k, n), seed=3)
    kwargs = dict(
        out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
        grid=(triton.cdiv(m, 16), triton.cdiv(n, 16)),
        M=m,
        N=n,
        K=k,
        BM=16,
        BN=16,
        BK=16,
    )
    compiled = np.asarray(call(kernel, a, b, **kwargs))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(compiled, want, rtol=1e-5, atol=1e-5)
    # Each step's product of 16 terms is summed in XLA's order on one path and NumPy's on the other: a few ulps.
    interpreted = np.asarray(call(kernel, a, b, launcher="ffi", **kwargs))
    np.testing.assert_allclose(compiled, interpreted, rtol=4 * k * np.finfo(np.float32).eps, atol=1e-6)


@triton.jit
def ragged_sum_kernel(x_ptr, lengths_ptr, out_ptr, STRIDE: tl.constexpr, BLOCK: tl.constexpr):
    # Each program sums the first `length` elements of its row: a loop whose trip count differs by program.
    row = tl.program_id(0)
    length = tl.load(lengths_ptr + row)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, length, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * STRIDE + offs, mask=offs < length, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def test_loads_in_a_loop_whose_trip_count_differs_by_program_match_numpy() -> None:
    x = random((6, 40))
    lengths = np.array([40, 0, 7, 16, 33, 1], np.int32)
    out = np.asarray(
        call(
            ragged_sum_kernel, x, lengths, out_shape=jax.ShapeDtypeStruct((6,), jnp.float32), grid=6, STRIDE=40, BLOCK=8
        )
    )
    want = [x[i, :n].astype(np.float64).sum() for i, n in enumerate(lengths)]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


@triton.jit
def odd_programs_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    # Odd programs copy the block before theirs; program 0 would read before the start if it took the branch.
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.full((BLOCK,), -1.0, tl.float32)
    if tl.program_id(0) % 2 == 1:
        acc = tl.load(x_ptr + offs - BLOCK)
    tl.store(out_ptr + offs, acc)


def test_a_load_in_a_branch_only_some_programs_take_reads_only_for_them() -> None:
    x = random(128)
    out = both(odd_programs_kernel, x, out_shape=x, grid=4, BLOCK=32)
    want = np.full(128, -1, np.float32)
    want[32:64], want[96:128] = x[0:32], x[64:96]
    np.testing.assert_array_equal(out, want)


# -- stray lanes --------------------------------------------------------------------------------------------


@triton.jit
def stray_store_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n + 3)


@triton.jit
def stray_loop_load_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for k in range(0, 3):
        acc += tl.load(x_ptr + offs + k, mask=offs < n)
    tl.store(out_ptr + offs, acc, mask=offs < n)


@pytest.mark.parametrize(
    ("kernel", "access", "element"),
    [(stray_store_kernel, "store of 4 bytes from argument 'out_ptr'", 100), (stray_loop_load_kernel, "load", 100)],
)
def test_a_stray_lane_of_a_block_access_is_found_and_named(kernel: Any, access: str, element: int) -> None:
    x = random(100)
    with pytest.raises(Exception) as raised:
        jax.block_until_ready(call(kernel, x, out_shape=x, grid=4, n=100, BLOCK=32))
    error = jt.errors.from_runtime_error(raised.value)
    assert isinstance(error, OutOfBoundsAccessError), raised.value
    assert f"out-of-bounds {access}" in str(error) and f"at element {element}" in str(error)


def test_with_the_bounds_check_off_a_stray_lane_of_a_block_store_writes_nothing_and_the_call_runs() -> None:
    x = random(100)
    with jt.cpu_checks(bounds=False):
        out = np.asarray(
            call(
                stray_store_kernel,
                x,
                out_shape=jax.ShapeDtypeStruct((100,), jnp.float32),
                grid=4,
                n=100,
                BLOCK=32,
                zeroed_outputs=(0,),
            )
        )
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("case", ["tail", "matmul"])
def test_block_accesses_side_by_side_compile_to_slices_not_gathers_and_scatters(case: str) -> None:
    """What keeps the compiled path near `jnp`'s speed: XLA is left with slices of the buffers."""
    if case == "tail":
        x = random(1000)
        fn = jax.jit(lambda x: jt.triton_call(x, kernel=affine_map_kernel, out_shape=x, grid=16, n=1000, BLOCK=64))
        args: tuple[Any, ...] = (x,)
    else:
        args = (random((64, 64), seed=4), random((64, 64), seed=5))
        fn = jax.jit(
            lambda a, b: jt.triton_call(
                a,
                b,
                kernel=matmul_kernel,
                out_shape=jax.ShapeDtypeStruct((64, 64), jnp.float32),
                grid=(2, 2),
                M=64,
                N=64,
                K=64,
                BM=32,
                BN=32,
                BK=16,
            )
        )
    text = fn.lower(*args).compile().as_text()
    assert "gather(" not in text and "scatter(" not in text and "while(" not in text
