"""Triton kernels as users write them, with the jnp functions that do the same work: the TPU suite's and the TPU
benchmark's cases (``benchmarks/tpu_kernels.py`` imports this module).

Each `Case` builds its operands with NumPy and runs the kernel through ``jt.triton_call``; ``reference`` is plain
``jax.numpy`` doing the same work (what the benchmark compares against), ``exact`` a float64 NumPy reference.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import jt_core as jt

# -- the seven kernels of a first try ------------------------------------------------------------------------------


@triton.jit
def add_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, centered * rstd * w + b, mask=mask)


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_bk,
    stride_cm,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, K, BK):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += BK
        b_ptrs += BK * stride_bk
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def histogram_kernel(x_ptr, n, bins_ptr, BINS: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0)
    tl.atomic_add(bins_ptr + x % BINS, 1, mask=mask)


@triton.jit
def cumsum_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, tl.cumsum(x, axis=0), mask=mask)


# -- Triton's tutorials, written in their style -----------------------------------------------------------------


@triton.jit
def tutorial_softmax_kernel(
    output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr
):
    # A persistent kernel: each program walks the rows from its id, a grid's width at a time.
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        tl.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}),
        triton.Config({"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 8}),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def tutorial_matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    # Programs in groups of GROUP_SIZE_M rows of tiles, for L2 reuse on a GPU.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.bfloat16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


@triton.jit
def tutorial_layer_norm_fwd_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    # One program per row; the row in blocks of BLOCK_SIZE columns, three passes.
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    mean = 0
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.0)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        tl.store(Y + cols, y, mask=mask)


# -- Liger-Kernel's style: a row per program, strides passed in, the row in one block ---------------------------


@triton.jit
def liger_rms_norm_kernel(
    Y_ptr, Y_row_stride, X_ptr, X_row_stride, W_ptr, RSTD_ptr, n_cols, eps, offset, BLOCK_SIZE: tl.constexpr
):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    X_row = tl.load(X_ptr + row_idx * X_row_stride + col_offsets, mask=mask, other=0)
    W_row = tl.load(W_ptr + col_offsets, mask=mask, other=0)
    X_f32 = X_row.to(tl.float32)
    mean_square = tl.sum(X_f32 * X_f32, axis=0) / n_cols
    rstd = tl.rsqrt(mean_square + eps)
    tl.store(RSTD_ptr + row_idx, rstd)
    Y_row = (X_f32 * rstd).to(X_row.dtype) * (offset + W_row)
    tl.store(Y_ptr + row_idx * Y_row_stride + col_offsets, Y_row, mask=mask)


@triton.jit
def liger_swiglu_kernel(a_ptr, b_ptr, c_ptr, stride, n_cols: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    program_id = tl.program_id(0).to(tl.int64)
    a_ptr += program_id * stride
    b_ptr += program_id * stride
    c_ptr += program_id * stride
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    a_row = tl.load(a_ptr + col_offsets, mask=mask, other=0).to(tl.float32)
    b_row = tl.load(b_ptr + col_offsets, mask=mask, other=0)
    c_row = (a_row * tl.sigmoid(a_row)).cast(b_row.dtype) * b_row
    tl.store(c_ptr + col_offsets, c_row, mask=mask)


@triton.jit
def liger_cross_entropy_kernel(
    X_ptr, X_stride, Y_ptr, loss_ptr, n_cols, n_non_ignore, ignore_index, BLOCK_SIZE: tl.constexpr
):
    # Online softmax over the vocabulary in blocks, then the gradient written over the logits in place.
    program_id = tl.program_id(0).to(tl.int64)
    Y_ptr += program_id
    y = tl.load(Y_ptr)
    X_ptr += program_id * X_stride
    if y == ignore_index:
        for i in range(0, n_cols, BLOCK_SIZE):
            X_offsets = i + tl.arange(0, BLOCK_SIZE)
            tl.store(X_ptr + X_offsets, 0.0, mask=X_offsets < n_cols)
        return
    loss_ptr += program_id
    m = float("-inf")
    d = 0.0
    ori_X_y = tl.load(X_ptr + y).cast(tl.float32)
    for i in range(0, n_cols, BLOCK_SIZE):
        X_offsets = i + tl.arange(0, BLOCK_SIZE)
        X_block = tl.load(X_ptr + X_offsets, mask=X_offsets < n_cols, other=float("-inf")).cast(tl.float32)
        block_max = tl.max(X_block)
        m_new = tl.maximum(m, block_max)
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(X_block - m_new))
        m = m_new
    lse = m + tl.log(d)
    for i in range(0, n_cols, BLOCK_SIZE):
        X_offsets = i + tl.arange(0, BLOCK_SIZE)
        X_block = tl.load(X_ptr + X_offsets, mask=X_offsets < n_cols, other=float("-inf")).cast(tl.float32)
        X_block = tl.exp(X_block - m) / d / n_non_ignore
        X_block = tl.where(X_offsets != y, X_block, X_block - 1.0 / n_non_ignore)
        tl.store(X_ptr + X_offsets, X_block, mask=X_offsets < n_cols)
    loss = (lse - ori_X_y) / n_non_ignore
    tl.store(loss_ptr, loss)


# -- the cases -----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """A kernel called as a user calls it, with plain jnp doing the same work.

    Attributes:
        name: What the benchmark calls it.
        inputs: The NumPy operands, made from a seed.
        kernel: The jitted function that runs the kernel on the operands.
        reference: The jitted jnp function that does the same work (what the kernel is compared with for speed).
        exact: A float64 NumPy reference of the outputs (what both are compared with for the numbers).
        tolerance: The largest relative error allowed (of the outputs' norm), for the kernel and for jnp alike.
    """

    name: str
    inputs: Callable[[np.random.Generator], tuple[np.ndarray, ...]]
    kernel: Callable[..., Any]
    reference: Callable[..., Any]
    exact: Callable[..., Any]
    tolerance: float = 1e-5


def _add_case(n: int, block: int = 1024) -> Case:
    def kernel(x: Any, y: Any) -> Any:
        return jt.triton_call(x, y, x.size, kernel=add_kernel, out_shape=x, grid=(triton.cdiv(n, block),), BLOCK=block)

    return Case(
        f"add {n // (1 << 20)}M" if n >= 1 << 20 else f"add {n}",
        lambda rng: (rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)),
        jax.jit(kernel),
        jax.jit(lambda x, y: x + y),
        lambda x, y: x.astype(np.float64) + y,
    )


def _softmax_exact(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _softmax_case(rows: int, cols: int) -> Case:
    block = triton.next_power_of_2(cols)

    def kernel(x: Any) -> Any:
        return jt.triton_call(
            x_ptr=x, n_cols=cols, row_stride=cols, kernel=softmax_kernel, out_shape=x, grid=(rows,), BLOCK=block
        )

    return Case(
        f"softmax {rows}x{cols}",
        lambda rng: (rng.standard_normal((rows, cols)).astype(np.float32),),
        jax.jit(kernel),
        jax.jit(lambda x: jax.nn.softmax(x, axis=-1)),
        _softmax_exact,
    )


def _layer_norm_exact(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    x = x.astype(np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def _layer_norm_jnp(x: Any, w: Any, b: Any, eps: float = 1e-5) -> Any:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * w + b


def _layer_norm_inputs(rows: int, cols: int) -> Callable[[np.random.Generator], tuple[np.ndarray, ...]]:
    def make(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        return (
            rng.standard_normal((rows, cols)).astype(np.float32),
            rng.standard_normal(cols).astype(np.float32),
            rng.standard_normal(cols).astype(np.float32),
        )

    return make


def _layer_norm_case(rows: int, cols: int) -> Case:
    block = triton.next_power_of_2(cols)

    def kernel(x: Any, w: Any, b: Any) -> Any:
        return jt.triton_call(
            x_ptr=x,
            w_ptr=w,
            b_ptr=b,
            n_cols=cols,
            eps=1e-5,
            kernel=layer_norm_kernel,
            out_shape=x,
            grid=(rows,),
            BLOCK=block,
        )

    return Case(
        f"layer norm {rows}x{cols}",
        _layer_norm_inputs(rows, cols),
        jax.jit(kernel),
        jax.jit(_layer_norm_jnp),
        _layer_norm_exact,
    )


def _matmul_inputs(m: int, n: int, k: int) -> Callable[[np.random.Generator], tuple[np.ndarray, ...]]:
    def make(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        a = (rng.standard_normal((m, k)) / math.sqrt(k)).astype(jnp.bfloat16)
        b = rng.standard_normal((k, n)).astype(jnp.bfloat16)
        return a, b

    return make


def _matmul_exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


def _matmul_jnp(a: Any, b: Any) -> Any:
    return jnp.dot(a, b, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def _matmul_case(size: int, bm: int = 128, bn: int = 128, bk: int = 32) -> Case:
    def kernel(a: Any, b: Any) -> Any:
        out = jax.ShapeDtypeStruct((size, size), jnp.bfloat16)
        grid = (size // bm, size // bn)
        return jt.triton_call(
            a_ptr=a,
            b_ptr=b,
            M=size,
            N=size,
            K=size,
            stride_am=size,
            stride_bk=size,
            stride_cm=size,
            kernel=matmul_kernel,
            out_shape=out,
            grid=grid,
            BM=bm,
            BN=bn,
            BK=bk,
        )

    return Case(
        f"matmul bf16 {size}^3",
        _matmul_inputs(size, size, size),
        jax.jit(kernel),
        jax.jit(_matmul_jnp),
        _matmul_exact,
        tolerance=1e-2,
    )


def _histogram_case(n: int, bins: int = 256, block: int = 1024) -> Case:
    def kernel(x: Any) -> Any:
        out = jax.ShapeDtypeStruct((bins,), jnp.int32)
        return jt.triton_call(
            x,
            n,
            kernel=histogram_kernel,
            out_shape=out,
            grid=(triton.cdiv(n, block),),
            zeroed_outputs=(0,),
            BINS=bins,
            BLOCK=block,
        )

    return Case(
        f"histogram {n // (1 << 20)}M -> {bins}",
        lambda rng: (rng.integers(0, 1 << 20, n).astype(np.int32),),
        jax.jit(kernel),
        jax.jit(lambda x: jnp.zeros(bins, jnp.int32).at[x % bins].add(1)),
        lambda x: np.bincount(x % bins, minlength=bins).astype(np.float64),
        tolerance=0.0,
    )


def _cumsum_case(rows: int, cols: int) -> Case:
    block = triton.next_power_of_2(cols)

    def kernel(x: Any) -> Any:
        return jt.triton_call(x_ptr=x, n_cols=cols, kernel=cumsum_kernel, out_shape=x, grid=(rows,), BLOCK=block)

    return Case(
        f"cumsum {rows}x{cols}",
        lambda rng: (rng.standard_normal((rows, cols)).astype(np.float32),),
        jax.jit(kernel),
        jax.jit(lambda x: jnp.cumsum(x, axis=-1)),
        lambda x: np.cumsum(x.astype(np.float64), axis=-1),
        tolerance=1e-5,
    )


def _tutorial_softmax_case(rows: int, cols: int, programs: int) -> Case:
    block = triton.next_power_of_2(cols)

    def kernel(x: Any) -> Any:
        return jt.triton_call(
            input_ptr=x,
            input_row_stride=cols,
            output_row_stride=cols,
            n_rows=rows,
            n_cols=cols,
            kernel=tutorial_softmax_kernel,
            out_shape=x,
            grid=(programs,),
            BLOCK_SIZE=block,
        )

    return Case(
        f"tutorial 02 softmax {rows}x{cols}",
        lambda rng: (rng.standard_normal((rows, cols)).astype(np.float32),),
        jax.jit(kernel),
        jax.jit(lambda x: jax.nn.softmax(x, axis=-1)),
        _softmax_exact,
    )


def _tutorial_matmul_case(size: int) -> Case:
    def kernel(a: Any, b: Any) -> Any:
        out = jax.ShapeDtypeStruct((size, size), jnp.bfloat16)
        grid = lambda meta: (triton.cdiv(size, meta["BLOCK_SIZE_M"]) * triton.cdiv(size, meta["BLOCK_SIZE_N"]),)  # noqa: E731
        return jt.triton_call(
            a_ptr=a,
            b_ptr=b,
            M=size,
            N=size,
            K=size,
            stride_am=size,
            stride_ak=1,
            stride_bk=size,
            stride_bn=1,
            stride_cm=size,
            stride_cn=1,
            kernel=tutorial_matmul_kernel,
            out_shape=out,
            grid=grid,
        )

    return Case(
        f"tutorial 03 matmul bf16 {size}^3",
        _matmul_inputs(size, size, size),
        jax.jit(kernel),
        jax.jit(_matmul_jnp),
        _matmul_exact,
        tolerance=1e-2,
    )


def _tutorial_layer_norm_case(rows: int, cols: int) -> Case:
    block = min(triton.next_power_of_2(cols), 65536 // 4)

    def kernel(x: Any, w: Any, b: Any) -> Any:
        out = (x, jax.ShapeDtypeStruct((rows,), jnp.float32), jax.ShapeDtypeStruct((rows,), jnp.float32))
        y, _, _ = jt.triton_call(
            X=x,
            W=w,
            B=b,
            stride=cols,
            N=cols,
            eps=1e-5,
            kernel=tutorial_layer_norm_fwd_kernel,
            out_shape=out,
            grid=(rows,),
            BLOCK_SIZE=block,
        )
        return y

    return Case(
        f"tutorial 05 layer norm {rows}x{cols}",
        _layer_norm_inputs(rows, cols),
        jax.jit(kernel),
        jax.jit(_layer_norm_jnp),
        _layer_norm_exact,
    )


def _rms_norm_case(rows: int, cols: int) -> Case:
    block = triton.next_power_of_2(cols)

    def kernel(x: Any, w: Any) -> Any:
        out = (x, jax.ShapeDtypeStruct((rows,), jnp.float32))
        y, _ = jt.triton_call(
            Y_row_stride=cols,
            X_ptr=x,
            X_row_stride=cols,
            W_ptr=w,
            n_cols=cols,
            eps=1e-6,
            offset=0.0,
            kernel=liger_rms_norm_kernel,
            out_shape=out,
            grid=(rows,),
            BLOCK_SIZE=block,
        )
        return y

    def reference(x: Any, w: Any) -> Any:
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w

    def exact(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64)
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * w

    return Case(
        f"liger rms_norm {rows}x{cols}",
        lambda rng: (
            rng.standard_normal((rows, cols)).astype(np.float32),
            rng.standard_normal(cols).astype(np.float32),
        ),
        jax.jit(kernel),
        jax.jit(reference),
        exact,
    )


def _swiglu_case(rows: int, cols: int) -> Case:
    block = triton.next_power_of_2(cols)

    def kernel(a: Any, b: Any) -> Any:
        return jt.triton_call(
            a_ptr=a,
            b_ptr=b,
            stride=cols,
            kernel=liger_swiglu_kernel,
            out_shape=a,
            grid=(rows,),
            n_cols=cols,
            BLOCK_SIZE=block,
        )

    def exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        a = a.astype(np.float64)
        return a / (1 + np.exp(-a)) * b

    return Case(
        f"liger swiglu {rows}x{cols}",
        lambda rng: tuple(rng.standard_normal((rows, cols)).astype(np.float32) for _ in range(2)),
        jax.jit(kernel),
        jax.jit(lambda a, b: jax.nn.silu(a) * b),
        exact,
    )


def _cross_entropy_case(rows: int, vocab: int, block: int = 4096) -> Case:
    def kernel(x: Any, y: Any) -> Any:
        out = jax.ShapeDtypeStruct((rows,), jnp.float32)
        grads, loss = jt.triton_call(
            x,
            X_stride=vocab,
            Y_ptr=y,
            n_cols=vocab,
            n_non_ignore=rows,
            ignore_index=-100,
            kernel=liger_cross_entropy_kernel,
            out_shape=(x, out),
            input_output_aliases={0: 0},
            grid=(rows,),
            BLOCK_SIZE=block,
        )
        return grads, loss

    def reference(x: Any, y: Any) -> Any:
        def loss(v: Any) -> Any:
            logp = jax.nn.log_softmax(v, axis=-1)
            return -jnp.take_along_axis(logp, y[:, None], axis=-1)[:, 0] / rows

        value, grad = jax.value_and_grad(lambda v: loss(v).sum(), has_aux=False)(x)
        return grad, loss(x) + 0 * value

    def exact(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        x = x.astype(np.float64)
        p = _softmax_exact(x)
        grad = p.copy()
        grad[np.arange(rows), y] -= 1
        loss = -np.log(p[np.arange(rows), y])
        return grad / rows, loss / rows

    return Case(
        f"liger cross_entropy {rows}x{vocab}",
        lambda rng: (
            rng.standard_normal((rows, vocab)).astype(np.float32),
            rng.integers(0, vocab, rows).astype(np.int32),
        ),
        jax.jit(kernel),
        jax.jit(reference),
        exact,
    )


def benchmark_cases() -> list[Case]:
    """The TPU benchmark's cases, at their sizes."""
    return [
        _add_case(1 << 24),
        _softmax_case(4096, 1000),
        _layer_norm_case(4096, 1000),
        _matmul_case(1024),
        _matmul_case(4096),
        _histogram_case(1 << 20),
        _cumsum_case(1024, 1000),
        _tutorial_softmax_case(4096, 1000, programs=4096),
        _tutorial_matmul_case(4096),
        _tutorial_layer_norm_case(4096, 1000),
        _rms_norm_case(4096, 4096),
        _swiglu_case(4096, 4096),
        _cross_entropy_case(4096, 32000),
    ]


def small_cases() -> list[Case]:
    """The same kernels at sizes a CPU runs in a test."""
    return [
        _add_case(10_000, block=256),
        _softmax_case(64, 100),
        _layer_norm_case(64, 100),
        _matmul_case(256, bm=64, bn=64, bk=32),
        _histogram_case(10_000, bins=64, block=256),
        _cumsum_case(32, 100),
        _tutorial_softmax_case(64, 100, programs=16),
        _tutorial_matmul_case(256),
        _tutorial_layer_norm_case(64, 100),
        _rms_norm_case(64, 256),
        _swiglu_case(64, 256),
        _cross_entropy_case(32, 1000, block=256),
    ]
