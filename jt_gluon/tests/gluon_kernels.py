"""Gluon kernels shared by the jt-gluon tests, and the layouts they take for a given wavefront size."""

from __future__ import annotations

from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma

from jt_gluon._compat import hopper_tma_copies

tma_load, tma_store = hopper_tma_copies()


def blocked_1d(warp_size: int, num_warps: int = 4) -> Any:
    """A 1-D blocked layout covering ``warp_size * num_warps`` elements."""
    return gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[warp_size], warps_per_cta=[num_warps], order=[0])


def blocked_rows(warp_size: int, num_warps: int = 4) -> Any:
    """A 2-D layout whose threads run along rows (row-major, coalesced for row-major tiles)."""
    return gl.BlockedLayout(
        size_per_thread=[1, 4], threads_per_warp=[warp_size // 8, 8], warps_per_cta=[num_warps, 1], order=[1, 0]
    )


def blocked_cols(warp_size: int, num_warps: int = 4) -> Any:
    """A 2-D layout whose threads run down columns: converting to it from `blocked_rows` moves data."""
    return gl.BlockedLayout(
        size_per_thread=[4, 1], threads_per_warp=[8, warp_size // 8], warps_per_cta=[1, num_warps], order=[0, 1]
    )


@gluon.jit
def memcpy_kernel(in_ptr, out_ptr, n, BLOCK: gl.constexpr, layout: gl.constexpr):
    """``out[:n] = in[:n]`` with an explicit blocked layout."""
    offsets = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offsets < n
    gl.store(out_ptr + offsets, gl.load(in_ptr + offsets, mask=mask), mask=mask)


@gluon.jit
def tile_axpy_kernel(
    x_ptr,
    y_ptr,
    out_ptr,
    M,
    N,
    alpha,
    BM: gl.constexpr,
    BN: gl.constexpr,
    load_layout: gl.constexpr,
    store_layout: gl.constexpr,
):
    """``out = alpha * x + y`` on row-major ``M x N`` tiles, loaded in one layout and stored from another."""
    pid_m = gl.program_id(0)
    pid_n = gl.program_id(1)
    rows = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, load_layout))
    cols = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, load_layout))
    offsets = rows[:, None] * N + cols[None, :]
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    value = alpha * gl.load(x_ptr + offsets, mask=mask) + gl.load(y_ptr + offsets, mask=mask)
    value = gl.convert_layout(value, store_layout)
    rows_s = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, store_layout))
    cols_s = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, store_layout))
    offsets_s = rows_s[:, None] * N + cols_s[None, :]
    mask_s = (rows_s[:, None] < M) & (cols_s[None, :] < N)
    gl.store(out_ptr + offsets_s, value, mask=mask_s)


@gluon.jit
def row_sum_kernel(x_ptr, out_ptr, M, N, BM: gl.constexpr, BN: gl.constexpr, layout: gl.constexpr):
    """``out[i] = sum(x[i, :N])`` for a row-major ``M x N`` array with ``N <= BN``."""
    rows = gl.program_id(0) * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, layout))
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, layout))
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = gl.load(x_ptr + rows[:, None] * N + cols[None, :], mask=mask, other=0.0)
    gl.store(out_ptr + rows, gl.sum(x, axis=1), mask=rows < M)


@gluon.jit
def copy_scalar_kernel(in_ptr, out_ptr):
    """``*out = *in`` for a single element (0-d arrays)."""
    gl.store(out_ptr, gl.load(in_ptr))


@gluon.jit
def add_one_inplace_kernel(x_ptr, n, BLOCK: gl.constexpr, layout: gl.constexpr):
    """``x[:n] += 1`` in place."""
    offsets = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    mask = offsets < n
    gl.store(x_ptr + offsets, gl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)


@gluon.jit
def tma_copy_kernel(in_ptr, out_ptr, M, N, BM: gl.constexpr, BN: gl.constexpr, smem_layout: gl.constexpr):
    """Copies a row-major ``M x N`` array tile by tile through shared memory with device-side TMA descriptors."""
    in_desc = tma.make_tensor_descriptor(in_ptr, [M, N], [N, 1], [BM, BN], smem_layout)
    out_desc = tma.make_tensor_descriptor(out_ptr, [M, N], [N, 1], [BM, BN], smem_layout)
    row = gl.program_id(0) * BM
    col = gl.program_id(1) * BN
    smem = gl.allocate_shared_memory(in_ptr.dtype.element_ty, [BM, BN], smem_layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, in_desc.block_type.nbytes)
    tma_load(in_desc, [row, col], bar, smem)
    mbarrier.wait(bar, 0)
    mbarrier.invalidate(bar)
    tma_store(out_desc, [row, col], smem)
    tma.store_wait(0)
