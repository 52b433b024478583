"""Autotuned kernels in the style of Triton's matmul tutorials (grouped tiles; persistent programs), and calls of
them, for jt-cuda's tests (a module, so that Triton can read the kernels' source)."""

from __future__ import annotations

import itertools
from typing import Any

import jax
import triton
import triton.language as tl

import jt_core as jt


def matmul_configs() -> list[Any]:
    """Sixteen small-tile configurations, and one whose pipeline stages need about 384 KiB of shared memory."""
    small = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 32, "GROUP_M": 4}, num_stages=stages, num_warps=warps)
        for bm, bn, stages, warps in itertools.product((32, 64), (32, 64), (2, 3), (2, 4))
    ]
    huge = triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 4}, num_stages=6, num_warps=8)
    return [*small[:8], huge, *small[8:]]


@triton.autotune(configs=matmul_configs(), key=["M", "N", "K"])
@triton.jit
def grouped_matmul_kernel(
    a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, c_ptr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    """``C = A @ B``, programs walking the output tiles in groups of ``GROUP_M`` rows for L2 reuse."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    tile_m = first_m + (pid % per_group) % rows_in_group
    tile_n = (pid % per_group) // rows_in_group
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + (rm % M)[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + (rn % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for step in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - step * BLOCK_K
        acc = tl.dot(
            tl.load(a, mask=rk[None, :] < left, other=0.0), tl.load(b, mask=rk[:, None] < left, other=0.0), acc
        )
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def persistent_configs() -> list[Any]:
    """Three that fit sm90, and two whose stages do not (the tiles of Triton's persistent tutorial, deeper)."""
    fits = [
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": bk}, num_stages=stages, num_warps=4)
        for bk, stages in ((32, 2), (32, 3), (64, 2))
    ]
    too_deep = [
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_stages=5, num_warps=8),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128}, num_stages=4, num_warps=8),
    ]
    return [too_deep[0], *fits, too_deep[1]]


@triton.autotune(configs=persistent_configs(), key=["M", "N", "K"])
@triton.jit
def persistent_matmul_kernel(
    a_ptr, b_ptr, M, N, K, c_ptr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PROGRAMS: tl.constexpr,
):  # fmt: skip
    """``C = A @ B`` (row-major, contiguous), each of ``PROGRAMS`` programs looping over output tiles."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles = tl.cdiv(M, BLOCK_M) * tiles_n
    rk = tl.arange(0, BLOCK_K)
    for tile in tl.range(tl.program_id(0), tiles, PROGRAMS):
        rm = (tile // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = (tile % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        for k in range(0, K, BLOCK_K):
            a = tl.load(a_ptr + (rm % M)[:, None] * K + (k + rk)[None, :], mask=(k + rk)[None, :] < K, other=0.0)
            b = tl.load(b_ptr + (k + rk)[:, None] * N + (rn % N)[None, :], mask=(k + rk)[:, None] < K, other=0.0)
            acc = tl.dot(a, b, acc)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


def grouped_matmul(a: Any, b: Any, kernel: Any = grouped_matmul_kernel, **options: Any) -> Any:
    """``a @ b`` through `grouped_matmul_kernel` (``options``: ``triton_call``'s, e.g. ``compute_capability=90``)."""
    (m, k), (_, n) = a.shape, b.shape
    return jt.triton_call(
        a, b, m, n, k, k, 1, n, 1, n, 1,
        kernel=kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),),
        **options,
    )  # fmt: skip


#: The programs of `persistent_matmul`: an H100's or H200's multiprocessors.
PROGRAMS = 132


def persistent_matmul(a: Any, b: Any, kernel: Any = persistent_matmul_kernel, **options: Any) -> Any:
    """``a @ b`` through `persistent_matmul_kernel`, with at most `PROGRAMS` programs."""
    (m, k), (_, n) = a.shape, b.shape
    return jt.triton_call(
        a, b, m, n, k,
        kernel=kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=lambda meta: (min(PROGRAMS, triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"])),),
        PROGRAMS=PROGRAMS,
        **options,
    )  # fmt: skip
