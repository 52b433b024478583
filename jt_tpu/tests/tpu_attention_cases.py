"""Attention-side kernels of ``tpu_model_kernels.py`` called as a model calls them, with their jnp and float64
references: the attention forward pass with descriptors, paged decode attention and rotary embeddings in place.
`tpu_model_cases` gathers them with the other model kernels."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tpu_model_kernels as mk
import triton
from tpu_kernels import Case

import jt_core as jt

__all__ = ["attention_case", "normal", "paged_decode_case", "rotary_case", "rotary_varlen_case"]


def normal(rng: np.random.Generator, shape: Any, dtype: Any = np.float32, scale: float = 1.0) -> np.ndarray:
    """Standard normal values times ``scale``, drawn in float32 (a 128k-vocabulary batch of logits stays a few GB),
    as ``dtype``."""
    return (rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(dtype)


def _softmax64(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# -- attention forward ---------------------------------------------------------------------------------------------


def attention_case(
    batch: int, heads: int, n_ctx: int, head_dim: int, causal: bool, host_descriptors: bool = False, **overrides: Any
) -> Case:
    """The attention forward pass on bf16 q, k, v [batch, heads, n_ctx, head_dim], autotuned (``overrides`` fix
    metaparameters or options, pruning the configs), returning the output and the log-sum-exp per query. The kernel
    makes its tensor descriptors, or with ``host_descriptors`` is given `jt.TensorDescriptor` arguments whose block
    shapes each config's pre_hook sets."""
    scale = 1.0 / math.sqrt(head_dim)
    shape = (batch, heads, n_ctx, head_dim)
    rows = batch * heads * n_ctx

    def kernel(q: Any, k: Any, v: Any) -> Any:
        lse = jax.ShapeDtypeStruct((batch, heads, n_ctx), jnp.float32)
        grid = lambda meta: (n_ctx // meta["BLOCK_M"], batch * heads)  # noqa: E731
        operands: tuple[Any, ...] = (q, k, v)
        outputs: tuple[Any, ...] = (q, lse)
        aliases = {}
        if host_descriptors:
            # The block shape given here is a placeholder: each config's pre_hook sets its own. The output is a
            # fresh buffer wrapped in a descriptor, aliased to the call's first output.
            block = [16, head_dim]
            flat = [jt.TensorDescriptor(a.reshape(rows, head_dim), block_shape=block) for a in (q, k, v)]
            out = jt.TensorDescriptor(jnp.empty((rows, head_dim), q.dtype), block_shape=block)
            operands, outputs, aliases = (*flat, out), (out.base, lse), {3: 0}
        out, lse_out = jt.triton_call(
            *operands,
            sm_scale=scale,
            n_heads_total=batch * heads,
            N_CTX=n_ctx,
            kernel=mk.attention_forward_host_descriptors_kernel if host_descriptors else mk.attention_forward_kernel,
            out_shape=outputs,
            input_output_aliases=aliases,
            grid=grid,
            HEAD_DIM=head_dim,
            CAUSAL=causal,
            **overrides,
        )
        return out.reshape(shape), lse_out

    def reference(q: Any, k: Any, v: Any) -> Any:
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=jnp.float32) * scale
        if causal:
            s = jnp.where(jnp.tril(jnp.ones((n_ctx, n_ctx), bool)), s, -jnp.inf)
        lse = jax.nn.logsumexp(s, axis=-1)
        p = jnp.exp(s - lse[..., None]).astype(v.dtype)
        return jnp.einsum("bhqk,bhkd->bhqd", p, v, preferred_element_type=jnp.float32).astype(q.dtype), lse

    def exact(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q, k, v = (a.astype(np.float64) for a in (q, k, v))
        s = np.einsum("bhqd,bhkd->bhqk", q, k) * scale
        if causal:
            s = np.where(np.tril(np.ones((n_ctx, n_ctx), bool)), s, -np.inf)
        top = s.max(axis=-1, keepdims=True)
        lse = top[..., 0] + np.log(np.exp(s - top).sum(axis=-1))
        return np.einsum("bhqk,bhkd->bhqd", np.exp(s - lse[..., None]), v), lse

    kind = "causal" if causal else "full"
    where = "host" if host_descriptors else "kernel"
    return Case(
        f"attention fwd {kind} {where} descriptors {batch}x{heads}x{n_ctx}x{head_dim}",
        lambda rng: tuple(normal(rng, shape, jnp.bfloat16) for _ in range(3)),
        jax.jit(kernel),
        jax.jit(reference),
        exact,
        tolerance=2e-2,
    )


# -- paged decode attention ----------------------------------------------------------------------------------------


def paged_decode_case(
    requests: int, q_heads: int, kv_heads: int, head_dim: int, max_len: int, page: int, splits: int, block_n: int
) -> Case:
    """Decode attention of one new token per request over a paged KV cache: ``q_heads`` query heads share
    ``kv_heads`` KV heads, each request has its own length (up to ``max_len``) and its pages scattered over the pool;
    a partial kernel per ``splits`` share of each request's tokens, then a combine kernel."""
    group = q_heads // kv_heads
    pages_per_request = max_len // page
    n_slots = requests * pages_per_request * page
    scale = 1.0 / math.sqrt(head_dim)

    def inputs(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        q = normal(rng, (requests, q_heads, head_dim), jnp.bfloat16)
        k_cache = normal(rng, (n_slots, kv_heads, head_dim), jnp.bfloat16)
        v_cache = normal(rng, (n_slots, kv_heads, head_dim), jnp.bfloat16)
        # Every request owns pages scattered over the pool, and a length of its own.
        page_table = rng.permutation(requests * pages_per_request).reshape(requests, pages_per_request).astype(np.int32)
        seq_lens = rng.integers(1, max_len + 1, requests).astype(np.int32)
        seq_lens[0] = 1  # a request that has just started: all splits but the first are empty
        return q, k_cache, v_cache, page_table, seq_lens

    def kernel(q: Any, k_cache: Any, v_cache: Any, page_table: Any, seq_lens: Any) -> Any:
        part_out = jax.ShapeDtypeStruct((requests, q_heads, splits, head_dim), jnp.float32)
        part_lse = jax.ShapeDtypeStruct((requests, q_heads, splits), jnp.float32)
        parts = jt.triton_call(
            q,
            k_cache,
            v_cache,
            page_table,
            seq_lens,
            sm_scale=scale,
            page_table_stride=pages_per_request,
            q_heads=q_heads,
            cache_slot_stride=kv_heads * head_dim,
            cache_head_stride=head_dim,
            kernel=mk.paged_decode_partial_kernel,
            out_shape=(part_out, part_lse),
            grid=(requests, kv_heads, splits),
            GROUP=group,
            BLOCK_H=max(16, triton.next_power_of_2(group)),
            HEAD_DIM=head_dim,
            PAGE=page,
            BLOCK_N=block_n,
            SPLITS=splits,
        )
        return jt.triton_call(
            *parts,
            seq_lens,
            q_heads=q_heads,
            kernel=mk.paged_decode_combine_kernel,
            out_shape=q,
            grid=(requests, q_heads),
            HEAD_DIM=head_dim,
            SPLITS=splits,
        )

    def reference(q: Any, k_cache: Any, v_cache: Any, page_table: Any, seq_lens: Any) -> Any:
        pos = jnp.arange(max_len)
        slots = page_table[:, pos // page] * page + pos % page
        k, v = k_cache[slots], v_cache[slots]
        qg = q.reshape(requests, kv_heads, group, head_dim)
        s = jnp.einsum("rhgd,rlhd->rhgl", qg, k, preferred_element_type=jnp.float32) * scale
        s = jnp.where(pos < seq_lens[:, None, None, None], s, -jnp.inf)
        p = jax.nn.softmax(s, axis=-1).astype(v.dtype)
        out = jnp.einsum("rhgl,rlhd->rhgd", p, v, preferred_element_type=jnp.float32)
        return out.reshape(requests, q_heads, head_dim).astype(q.dtype)

    def exact(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, page_table: np.ndarray, lens: np.ndarray) -> Any:
        out = np.empty((requests, q_heads, head_dim))
        for r in range(requests):
            pos = np.arange(lens[r])
            slots = page_table[r, pos // page] * page + pos % page
            k = k_cache[slots].astype(np.float64)
            v = v_cache[slots].astype(np.float64)
            for h in range(q_heads):
                p = _softmax64(k[:, h // group] @ q[r, h].astype(np.float64) * scale)
                out[r, h] = p @ v[:, h // group]
        return out

    return Case(
        f"paged decode attention {requests}x{q_heads}/{kv_heads} heads x{max_len}",
        inputs,
        jax.jit(kernel),
        jax.jit(reference),
        exact,
        tolerance=2e-2,
    )


# -- rotary in place -----------------------------------------------------------------------------------------------


def _rotary_tables(rng: np.random.Generator, table_len: int, rot_half: int) -> tuple[np.ndarray, np.ndarray]:
    del rng
    inv_freq = 1.0 / (10000.0 ** (np.arange(rot_half) / rot_half))
    angles = np.arange(table_len)[:, None] * inv_freq[None, :]
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def _rotate64(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rot: int, interleaved: bool) -> np.ndarray:
    """``x`` [..., tokens, heads, dim] rotated by ``cos``/``sin`` [..., tokens, rot/2], float64."""
    x = x.astype(np.float64)
    out = x.copy()
    cos, sin = cos[..., None, :].astype(np.float64), sin[..., None, :].astype(np.float64)
    if interleaved:
        a, b = x[..., 0:rot:2], x[..., 1:rot:2]
        out[..., 0:rot:2], out[..., 1:rot:2] = a * cos - b * sin, a * sin + b * cos
    else:
        a, b = x[..., : rot // 2], x[..., rot // 2 : rot]
        out[..., : rot // 2], out[..., rot // 2 : rot] = a * cos - b * sin, a * sin + b * cos
    return out


def _rotate_jnp(x: Any, cos: Any, sin: Any, rot: int, interleaved: bool) -> Any:
    cos, sin = cos[..., None, :], sin[..., None, :]
    head, tail = x[..., :rot].astype(jnp.float32), x[..., rot:]
    if interleaved:
        pairs = head.reshape(*head.shape[:-1], rot // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        rotated = jnp.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(head.shape)
    else:
        a, b = head[..., : rot // 2], head[..., rot // 2 :]
        rotated = jnp.concatenate([a * cos - b * sin, a * sin + b * cos], axis=-1)
    return jnp.concatenate([rotated.astype(x.dtype), tail], axis=-1)


def rotary_case(
    batch: int, seqlen: int, heads: int, head_dim: int, rot: int, interleaved: bool, block_s: int, dtype: Any
) -> Case:
    """Rotary embedding of the first ``rot`` dims of x [batch, seqlen, heads, head_dim], in place, each sequence's
    positions starting where a per-sequence value read from memory says."""
    table_len = 2 * seqlen
    half = rot // 2

    def inputs(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        x = normal(rng, (batch, seqlen, heads, head_dim), dtype)
        cos, sin = _rotary_tables(rng, table_len, half)
        # Where each sequence starts in the table: tokens already in the cache.
        starts = rng.integers(0, table_len - seqlen + 1, batch).astype(np.int32)
        return x, cos, sin, starts

    def kernel(x: Any, cos: Any, sin: Any, starts: Any) -> Any:
        return jt.triton_call(
            x,
            cos,
            sin,
            starts,
            cu_seqlens=None,
            seqlen=seqlen,
            n_heads=heads,
            table_len=table_len,
            stride_batch=seqlen * heads * head_dim,
            stride_token=heads * head_dim,
            stride_head=head_dim,
            kernel=mk.rotary_in_place_kernel,
            out_shape=x,
            input_output_aliases={0: 0},
            grid=(triton.cdiv(seqlen, block_s), batch),
            ROT_HALF=half,
            BLOCK_S=block_s,
            BLOCK_K=triton.next_power_of_2(half),
            INTERLEAVED=interleaved,
        )

    def reference(x: Any, cos: Any, sin: Any, starts: Any) -> Any:
        pos = starts[:, None] + jnp.arange(seqlen)
        return _rotate_jnp(x, cos[pos], sin[pos], rot, interleaved)

    def exact(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, starts: np.ndarray) -> np.ndarray:
        pos = starts[:, None] + np.arange(seqlen)
        return _rotate64(x, cos[pos], sin[pos], rot, interleaved)

    layout = "interleaved" if interleaved else "halves"
    return Case(
        f"rotary in place {layout} {batch}x{seqlen}x{heads}x{head_dim}",
        inputs,
        jax.jit(kernel),
        jax.jit(reference),
        exact,
        tolerance=1e-2 if dtype == jnp.bfloat16 else 1e-6,
    )


def rotary_varlen_case(lengths: tuple[int, ...], heads: int, head_dim: int, interleaved: bool, block_s: int) -> Case:
    """`rotary_case` on sequences packed end to end ([tokens, heads, dim]), their bounds read from ``cu_seqlens``."""
    total, longest, table_len, half = sum(lengths), max(lengths), 2 * max(lengths), head_dim // 2
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)

    def inputs(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        cos, sin = _rotary_tables(rng, table_len, half)
        starts = rng.integers(0, table_len - longest + 1, len(lengths)).astype(np.int32)
        return normal(rng, (total, heads, head_dim)), cos, sin, starts, bounds

    def kernel(x: Any, cos: Any, sin: Any, starts: Any, cu_seqlens: Any) -> Any:
        return jt.triton_call(
            x,
            cos,
            sin,
            starts,
            cu_seqlens,
            seqlen=longest,
            n_heads=heads,
            table_len=table_len,
            stride_batch=0,
            stride_token=heads * head_dim,
            stride_head=head_dim,
            kernel=mk.rotary_in_place_kernel,
            out_shape=x,
            input_output_aliases={0: 0},
            grid=(triton.cdiv(longest, block_s), len(lengths)),
            ROT_HALF=half,
            BLOCK_S=block_s,
            BLOCK_K=triton.next_power_of_2(half),
            INTERLEAVED=interleaved,
        )

    def positions(starts: Any, cu_seqlens: Any, xp: Any) -> Any:
        seq = xp.searchsorted(cu_seqlens, xp.arange(total), side="right") - 1
        return starts[seq] + xp.arange(total) - cu_seqlens[seq]

    def reference(x: Any, cos: Any, sin: Any, starts: Any, cu_seqlens: Any) -> Any:
        pos = positions(starts, cu_seqlens, jnp)
        return _rotate_jnp(x, cos[pos], sin[pos], head_dim, interleaved)

    def exact(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, starts: np.ndarray, cu_seqlens: np.ndarray) -> Any:
        pos = positions(starts, cu_seqlens, np)
        return _rotate64(x, cos[pos], sin[pos], head_dim, interleaved)

    return Case(
        f"rotary in place varlen {len(lengths)} seqs {total}x{heads}x{head_dim}",
        inputs,
        jax.jit(kernel),
        jax.jit(reference),
        exact,
        tolerance=1e-6,
    )
