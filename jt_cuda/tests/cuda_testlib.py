"""Kernels and helpers shared by the jt-cuda tests (a module, so that Triton can read the kernels' source)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

# -- kernels -------------------------------------------------------------------------------------------------


@triton.jit
def scalar_types_kernel(a, b, c, d, e, out_ptr, BLOCK: tl.constexpr):
    """Writes ``a + b + c + d + e`` (int8, int16, int64, float32, float64 scalars) as float32."""
    offsets = tl.arange(0, BLOCK)
    value = a.to(tl.float32) + b.to(tl.float32) + c.to(tl.float32) + d + e.to(tl.float32)
    tl.store(out_ptr + offsets, tl.full((BLOCK,), 0.0, tl.float32) + value)


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    """``C = A @ B`` with float32 accumulation, grouped program order for L2 reuse."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % group) % group_size)
    pid_n = (pid % group) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        mask_k = rk < K - k * BLOCK_K
        acc += tl.dot(tl.load(a, mask=mask_k[None, :], other=0.0), tl.load(b, mask=mask_k[:, None], other=0.0))
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def big_shared_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    """A row reduction whose tile is staged through shared memory (scaled by ``BLOCK``)."""
    rows = tl.arange(0, BLOCK)
    cols = tl.arange(0, BLOCK)
    tile = tl.load(x_ptr + rows[:, None] * BLOCK + cols[None, :])
    tl.store(out_ptr + rows, tl.sum(tl.trans(tile), axis=0))


# -- helpers -------------------------------------------------------------------------------------------------


def add_call(x: Any, y: Any, block: int = 128, **options: Any) -> Any:
    """``triton_call`` of ``sample_add_kernel`` over all of ``x``."""
    import jt_core as jt
    from jt_core.testing import sample_add_kernel

    return jt.triton_call(
        x,
        y,
        kernel=sample_add_kernel,
        out_shape=x,
        grid=(triton.cdiv(x.size, block),),
        n=x.size,
        BLOCK=block,
        **options,
    )


def lower_for_cuda(fn: Callable[..., Any], *specs: Any, **jit_kwargs: Any) -> Any:
    """``jax.jit(fn)`` lowered for the ``cuda`` platform (works without a GPU)."""
    return jax.jit(fn, **jit_kwargs).trace(*specs).lower(lowering_platforms=("cuda",))


def f32(shape: Sequence[int]) -> jax.ShapeDtypeStruct:
    """A float32 abstract array."""
    return jax.ShapeDtypeStruct(tuple(shape), jnp.float32)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    """Row-wise softmax of a row-major matrix, one program per row."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * n_cols + cols, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
    """``y = (x - mean) * rstd * w + b`` per row; also writes mean and rstd for the backward pass."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * n_cols + cols, centered * rstd * w + b, mask=mask)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def layer_norm_bwd_kernel(
    x_ptr, w_ptr, mean_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_part_ptr, db_part_ptr, n_cols, BLOCK: tl.constexpr
):
    """Per row: ``dx``, and this row's contributions to ``dw`` and ``db`` (summed by the caller)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    mean = tl.load(mean_ptr + row)
    rstd = tl.load(rstd_ptr + row)
    xhat = tl.where(mask, (x - mean) * rstd, 0.0)
    wdy = tl.where(mask, w * dy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / n_cols
    c2 = tl.sum(wdy, axis=0) / n_cols
    tl.store(dx_ptr + row * n_cols + cols, (wdy - (xhat * c1 + c2)) * rstd, mask=mask)
    tl.store(dw_part_ptr + row * n_cols + cols, dy * xhat, mask=mask)
    tl.store(db_part_ptr + row * n_cols + cols, dy, mask=mask)
