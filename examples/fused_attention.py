"""Fused attention forward (flash attention): ``softmax(q k^T * scale) v`` without materialising ``q k^T``.

Each program owns ``BLOCK_M`` queries of one (batch, head) pair and streams over the keys and values in blocks of
``BLOCK_N``, keeping a running maximum and normaliser (the online softmax), so memory traffic is linear in the
sequence length. ``CAUSAL`` masks keys after the query.

Current convention: every operand is passed by keyword (strides included), the output is described with
``out_type=`` and the grid is a function of the metaparameters.

Run it alone with ``python examples/fused_attention.py``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import triton
import triton.language as tl
from harness import check_close, default_platform_is_gpu, median_time_ms, report

import jt_core as jt


@triton.jit
def attention_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    scale,
    stride_b,
    stride_h,
    stride_s,
    n_heads,
    seq_len,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
):
    """Attention for queries ``[m0, m0 + BLOCK_M)`` of batch/head ``program_id(1)``; arrays are ``[B, H, S, D]``."""
    start_m = tl.program_id(0) * BLOCK_M
    batch = tl.program_id(1) // n_heads
    head = tl.program_id(1) % n_heads
    base = batch * stride_b + head * stride_h
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + base + rows[:, None] * stride_s + dims[None, :], mask=rows[:, None] < seq_len, other=0.0)
    # exp2 is cheaper than exp: fold log2(e) into the scale once.
    qk_scale = scale * 1.4426950408889634
    running_max = tl.full((BLOCK_M,), -float("inf"), tl.float32)
    normaliser = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), dtype=tl.float32)
    end_n = tl.minimum(start_m + BLOCK_M, seq_len) if CAUSAL else seq_len
    for start_n in range(0, end_n, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + base + cols[None, :] * stride_s + dims[:, None], mask=cols[None, :] < seq_len, other=0.0)
        scores = tl.dot(q, k) * qk_scale
        valid = cols[None, :] < seq_len
        if CAUSAL:
            valid = valid & (cols[None, :] <= rows[:, None])
        scores = tl.where(valid, scores, -float("inf"))
        new_max = tl.maximum(running_max, tl.max(scores, axis=1))
        p = tl.exp2(scores - new_max[:, None])
        correction = tl.exp2(running_max - new_max)
        normaliser = normaliser * correction + tl.sum(p, axis=1)
        v = tl.load(v_ptr + base + cols[:, None] * stride_s + dims[None, :], mask=cols[:, None] < seq_len, other=0.0)
        acc = acc * correction[:, None] + tl.dot(p.to(v.dtype), v)
        running_max = new_max
    out = acc / normaliser[:, None]
    tl.store(
        o_ptr + base + rows[:, None] * stride_s + dims[None, :],
        out.to(o_ptr.dtype.element_ty),
        mask=rows[:, None] < seq_len,
    )


@functools.partial(jax.jit, static_argnames=("causal", "block_m", "block_n"))
def attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False, block_m: int = 128, block_n: int = 64):
    """Scaled dot-product attention of ``[batch, heads, seq, head_dim]`` arrays (contiguous, same shape)."""
    batch, heads, seq_len, head_dim = q.shape
    stride_b, stride_h, stride_s, _ = jt.strides_from_shape(q.shape)
    return jt.triton_call(
        q_ptr=q,
        k_ptr=k,
        v_ptr=v,
        scale=1.0 / math.sqrt(head_dim),
        stride_b=stride_b,
        stride_h=stride_h,
        stride_s=stride_s,
        n_heads=heads,
        seq_len=seq_len,
        kernel=attention_fwd_kernel,
        out_type=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=lambda meta: (jt.cdiv(seq_len, meta["BLOCK_M"]), batch * heads),
        num_warps=4 if head_dim <= 64 else 8,
        num_stages=3,
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        CAUSAL=causal,
    )


def attention_reference(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> jax.Array:
    """The same computation in float32 ``jax.numpy``."""
    q, k, v = (t.astype(jnp.float32) for t in (q, k, v))
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k, precision="highest") / math.sqrt(q.shape[-1])
    if causal:
        seq_len = q.shape[2]
        scores = jnp.where(jnp.tril(jnp.ones((seq_len, seq_len), bool)), scores, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v, precision="highest")


def run(platform_is_gpu: bool) -> dict[str, Any]:
    """Causal attention on random float16 inputs (1x2x80x32 on the CPU, 4x16x4096x64 on a GPU) against ``jnp``."""
    if platform_is_gpu:
        shape, blocks = (4, 16, 4096, 64), {"block_m": 128, "block_n": 64}
    else:
        shape, blocks = (1, 2, 80, 32), {"block_m": 32, "block_n": 32}
    kq, kk, kv = jax.random.split(jax.random.key(4), 3)
    q, k, v = (jax.random.normal(key, shape, jnp.float32).astype(jnp.float16) for key in (kq, kk, kv))
    fn = functools.partial(attention, causal=True, **blocks)
    out = fn(q, k, v)
    # float16 output and float16 probabilities in the second product: a few float16 ulps of values of order 1.
    error = check_close("fused_attention", out, attention_reference(q, k, v, causal=True), atol=1e-2, rtol=1e-2)
    time_ms = median_time_ms(fn, q, k, v)
    batch, heads, seq_len, head_dim = shape
    flops = 2 * 2 * batch * heads * seq_len * seq_len * head_dim / 2  # two products, half of them masked
    return report("fused_attention", error, time_ms, shape=shape, tflops=flops / time_ms / 1e9)


if __name__ == "__main__":
    print(run(default_platform_is_gpu()))
