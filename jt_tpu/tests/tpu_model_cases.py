"""The kernels of ``tpu_model_kernels.py`` called as a model calls them, each with plain jnp doing the same work the
way a JAX user writes it and a float64 NumPy reference: `model_cases` at a language model's sizes (for a TPU v5e:
each fits its 15.7 GiB and takes milliseconds in jnp), `small_model_cases` at sizes a CPU runs in a test.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import tpu_model_kernels as mk
import triton
from tpu_attention_cases import attention_case, normal, paged_decode_case, rotary_case, rotary_varlen_case
from tpu_kernels import Case

import jt_core as jt

# -- cross entropy with the gradient in place -----------------------------------------------------------------------

IGNORE_INDEX = -100


def _cross_entropy_case(rows: int, vocab: int, smoothing: float, block_v: int, dtype: Any) -> Case:
    def inputs(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        logits = normal(rng, (rows, vocab), dtype, scale=2.0)
        labels = rng.integers(0, vocab, rows).astype(np.int32)
        labels[rng.random(rows) < 0.1] = IGNORE_INDEX
        return logits, labels

    def kernel(logits: Any, labels: Any) -> Any:
        valid = jnp.sum(labels != IGNORE_INDEX).astype(jnp.int32).reshape(1)
        grad, losses = jt.triton_call(
            logits,
            labels,
            valid,
            row_stride=vocab,
            vocab=vocab,
            ignore_index=IGNORE_INDEX,
            kernel=mk.vocab_cross_entropy_kernel,
            out_shape=(logits, jax.ShapeDtypeStruct((rows,), jnp.float32)),
            input_output_aliases={0: 0},
            grid=(rows,),
            SMOOTHING=smoothing,
            BLOCK_V=block_v,
        )
        return grad, jnp.sum(losses)

    def reference(logits: Any, labels: Any) -> Any:
        valid = labels != IGNORE_INDEX

        def mean_loss(x: Any) -> Any:
            logp = jax.nn.log_softmax(x.astype(jnp.float32), axis=-1)
            nll = -jnp.take_along_axis(logp, jnp.where(valid, labels, 0)[:, None], axis=-1)[:, 0]
            per_row = (1.0 - smoothing) * nll - smoothing * jnp.mean(logp, axis=-1)
            return jnp.sum(jnp.where(valid, per_row, 0.0)) / jnp.sum(valid)

        loss, grad = jax.value_and_grad(mean_loss)(logits)
        return grad.astype(logits.dtype), loss

    def exact(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, float]:
        valid = labels != IGNORE_INDEX
        count = int(valid.sum())
        grad = np.zeros((rows, vocab))
        loss = 0.0
        for first in range(0, rows, 256):
            x = logits[first : first + 256].astype(np.float64)
            y, ok = labels[first : first + 256], valid[first : first + 256]
            lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
            target = x[np.arange(len(x)), np.where(ok, y, 0)]
            per_row = (1 - smoothing) * (lse - target) + smoothing * (lse - x.mean(-1))
            loss += float(per_row[ok].sum())
            g = np.exp(x - lse[:, None]) - smoothing / vocab
            g[np.arange(len(x))[ok], y[ok]] -= 1 - smoothing
            grad[first : first + 256] = np.where(ok[:, None], g / count, 0.0)
        return grad, loss / count

    return Case(
        f"cross entropy in place {rows}x{vocab} {np.dtype(dtype).name}",
        inputs,
        jax.jit(kernel),
        jax.jit(reference),
        exact,
        tolerance=1e-2 if dtype == jnp.bfloat16 else 1e-5,
    )


# -- chunked cumsum ------------------------------------------------------------------------------------------------


def _chunk_cumsum_case(batch: int, steps: int, heads: int, chunk: int, reverse: bool) -> Case:
    def kernel(g: Any) -> Any:
        return jt.triton_call(
            g,
            cu_seqlens=None,
            chunk_table=None,
            T=steps,
            scale=None,
            kernel=mk.chunk_cumsum_kernel,
            out_shape=g,
            grid=(triton.cdiv(steps, chunk), batch),
            H=heads,
            BH=triton.next_power_of_2(heads),
            BT=chunk,
            REVERSE=reverse,
        )

    def reference(g: Any) -> Any:
        chunks = g.reshape(batch, steps // chunk, chunk, heads)
        summed = jnp.flip(jnp.cumsum(jnp.flip(chunks, 2), axis=2), 2) if reverse else jnp.cumsum(chunks, axis=2)
        return summed.reshape(g.shape)

    def exact(g: np.ndarray) -> np.ndarray:
        chunks = g.astype(np.float64).reshape(batch, steps // chunk, chunk, heads)
        summed = np.flip(np.cumsum(np.flip(chunks, 2), axis=2), 2) if reverse else np.cumsum(chunks, axis=2)
        return summed.reshape(g.shape)

    return Case(
        f"chunk cumsum {'reverse ' if reverse else ''}{batch}x{steps}x{heads} chunks of {chunk}",
        lambda rng: (normal(rng, (batch * steps, heads)).reshape(batch, steps, heads),),
        jax.jit(kernel),
        jax.jit(reference),
        exact,
    )


def _chunk_cumsum_varlen_case(lengths: tuple[int, ...], heads: int, chunk: int, scale: float) -> Case:
    """Sequences packed end to end; which chunk each program sums comes from a table, as the library builds it."""
    total = sum(lengths)
    bounds = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    table = np.array([(s, c) for s, n in enumerate(lengths) for c in range(triton.cdiv(n, chunk))], np.int32)

    def kernel(g: Any, cu_seqlens: Any, chunk_table: Any) -> Any:
        return jt.triton_call(
            g,
            cu_seqlens=cu_seqlens,
            chunk_table=chunk_table,
            T=0,
            scale=scale,
            kernel=mk.chunk_cumsum_kernel,
            out_shape=g,
            grid=(len(table), 1),
            H=heads,
            BH=triton.next_power_of_2(heads),
            BT=chunk,
            REVERSE=False,
        )

    def chunk_starts(cu_seqlens: Any, xp: Any) -> Any:
        seq = xp.searchsorted(cu_seqlens, xp.arange(total), side="right") - 1
        return cu_seqlens[seq] + (xp.arange(total) - cu_seqlens[seq]) // chunk * chunk

    def reference(g: Any, cu_seqlens: Any, chunk_table: Any) -> Any:
        running = jnp.cumsum(g, axis=0)
        first = chunk_starts(cu_seqlens, jnp)
        return (running - running[first] + g[first]) * scale

    def exact(g: np.ndarray, cu_seqlens: np.ndarray, chunk_table: np.ndarray) -> np.ndarray:
        g = g.astype(np.float64)
        out = np.empty_like(g)
        for first in np.unique(chunk_starts(cu_seqlens, np)):
            end = min(first + chunk, *(b for b in cu_seqlens if b > first))
            out[first:end] = np.cumsum(g[first:end], axis=0) * scale
        return out

    return Case(
        f"chunk cumsum varlen {len(lengths)} seqs {total}x{heads} chunks of {chunk}",
        lambda rng: (normal(rng, (total, heads)), bounds, table),
        jax.jit(kernel),
        jax.jit(reference),
        exact,
    )


# -- autotuned matmul ----------------------------------------------------------------------------------------------


def _autotuned_matmul_case(m: int, n: int, k: int, out_dtype: Any = jnp.bfloat16, **overrides: Any) -> Case:
    def kernel(a: Any, b: Any) -> Any:
        grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]), meta["SPLIT_K"])  # noqa: E731
        return jt.triton_call(
            a,
            b,
            M=m,
            N=n,
            K=k,
            stride_am=k,
            stride_ak=1,
            stride_bk=n,
            stride_bn=1,
            stride_cm=n,
            stride_cn=1,
            kernel=mk.grouped_matmul_kernel,
            out_shape=jax.ShapeDtypeStruct((m, n), out_dtype),
            grid=grid,
            GROUP_M=8,
            **overrides,
        )

    def inputs(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        return normal(rng, (m, k), jnp.bfloat16, scale=1 / math.sqrt(k)), normal(rng, (k, n), jnp.bfloat16)

    split = f" split-K {overrides['SPLIT_K']}" if "SPLIT_K" in overrides else ""
    return Case(
        f"autotuned matmul {len(mk.MATMUL_CONFIGS)} configs {m}x{n}x{k}{split}",
        inputs,
        jax.jit(kernel),
        jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32).astype(out_dtype)),
        lambda a, b: a.astype(np.float64) @ b.astype(np.float64),
        tolerance=1e-2,
    )


# -- state-space decode step ---------------------------------------------------------------------------------------


def _ssm_decode_case(batch: int, heads: int, headdim: int, dstate: int, groups: int, pool: int, block_m: int) -> Case:
    per_group = heads // groups

    def inputs(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        state = normal(rng, (pool, heads, headdim, dstate))
        x = normal(rng, (batch, heads, headdim), jnp.bfloat16)
        dt = normal(rng, (batch, heads), jnp.bfloat16)
        dt_bias = normal(rng, (heads,), scale=0.5) - np.float32(1.0)
        a = -np.exp(normal(rng, (heads,), scale=0.5))
        b = normal(rng, (batch, groups, dstate), jnp.bfloat16)
        c = normal(rng, (batch, groups, dstate), jnp.bfloat16)
        d = normal(rng, (heads,))
        z = normal(rng, (batch, heads, headdim), jnp.bfloat16)
        slots = rng.permutation(pool)[:batch].astype(np.int32)
        return state, x, dt, dt_bias, a, b, c, d, z, slots

    def kernel(state: Any, x: Any, dt: Any, dt_bias: Any, a: Any, b: Any, c: Any, d: Any, z: Any, slots: Any) -> Any:
        return jt.triton_call(
            state,
            x,
            dt,
            dt_bias,
            a,
            b,
            c,
            d,
            z,
            slots,
            headdim=headdim,
            dstate=dstate,
            n_heads=heads,
            n_groups=groups,
            heads_per_group=per_group,
            state_slot_stride=heads * headdim * dstate,
            state_head_stride=headdim * dstate,
            kernel=mk.ssm_decode_step_kernel,
            out_shape=(state, x),
            input_output_aliases={0: 0},
            grid=(triton.cdiv(headdim, block_m), batch, heads),
            BLOCK_M=block_m,
            DT_SOFTPLUS=True,
        )

    def step(state: Any, x: Any, dt: Any, dt_bias: Any, a: Any, b: Any, c: Any, d: Any, z: Any, xp: Any) -> Any:
        """One step on the gathered states [batch, heads, headdim, dstate], in the arrays' own precision."""
        dt = dt + dt_bias
        dt = xp.where(dt <= 20.0, xp.log1p(xp.exp(dt)), dt)
        group = np.arange(heads) // per_group
        b, c = b[:, group], c[:, group]
        state = state * xp.exp(a * dt)[..., None, None] + (dt[..., None] * b)[:, :, None, :] * x[..., None]
        y = xp.einsum("bhpn,bhn->bhp", state, c) + d[:, None] * x
        return state, y * z / (1.0 + xp.exp(-z))

    def reference(state: Any, x: Any, dt: Any, dt_bias: Any, a: Any, b: Any, c: Any, d: Any, z: Any, slots: Any) -> Any:
        f32 = [v.astype(jnp.float32) for v in (x, dt, b, c, z)]
        new, y = step(state[slots], f32[0], f32[1], dt_bias, a, f32[2], f32[3], d, f32[4], jnp)
        return state.at[slots].set(new), y.astype(x.dtype)

    def exact(state: Any, x: Any, dt: Any, dt_bias: Any, a: Any, b: Any, c: Any, d: Any, z: Any, slots: Any) -> Any:
        x, dt, dt_bias, a, b, c, d, z = (v.astype(np.float64) for v in (x, dt, dt_bias, a, b, c, d, z))
        new, y = step(state[slots].astype(np.float64), x, dt, dt_bias, a, b, c, d, z, np)
        full = state.astype(np.float64)
        full[slots] = new
        return full, y

    return Case(
        f"ssm decode step {batch}x{heads}x{headdim} state {dstate}",
        inputs,
        jax.jit(kernel),
        jax.jit(reference),
        exact,
        tolerance=1e-2,
    )


def model_cases() -> list[Case]:
    """The kernels at a language model's sizes, for a TPU v5e."""
    return [
        attention_case(4, 16, 2048, 128, causal=False),
        attention_case(4, 16, 2048, 128, causal=True),
        attention_case(4, 16, 2048, 128, causal=True, host_descriptors=True),
        paged_decode_case(32, 32, 4, 128, max_len=4096, page=16, splits=8, block_n=64),
        rotary_case(4, 2048, 32, 128, rot=128, interleaved=False, block_s=16, dtype=jnp.bfloat16),
        _cross_entropy_case(4096, 128256, smoothing=0.1, block_v=32768, dtype=jnp.bfloat16),
        _chunk_cumsum_case(8, 4096, 16, chunk=64, reverse=False),
        _autotuned_matmul_case(4096, 4096, 4096),
        _ssm_decode_case(64, 80, 64, 128, groups=1, pool=128, block_m=16),
    ]


def small_model_cases() -> list[Case]:
    """The same kernels at sizes a CPU runs in a test, with the variants the model sizes leave out."""
    return [
        attention_case(1, 2, 128, 32, causal=False, num_warps=4, num_stages=3),
        attention_case(1, 2, 256, 32, causal=True, BLOCK_M=64, BLOCK_N=32),
        attention_case(1, 2, 256, 32, causal=True, host_descriptors=True, BLOCK_M=64, BLOCK_N=32),
        paged_decode_case(3, 8, 2, 32, max_len=48, page=4, splits=2, block_n=16),
        rotary_case(2, 24, 3, 32, rot=16, interleaved=False, block_s=8, dtype=np.float32),
        rotary_varlen_case((5, 19, 12), 2, 16, interleaved=True, block_s=8),
        _cross_entropy_case(12, 1000, smoothing=0.1, block_v=256, dtype=np.float32),
        _chunk_cumsum_case(2, 96, 5, chunk=16, reverse=True),
        _chunk_cumsum_varlen_case((20, 7, 33), 3, chunk=16, scale=0.5),
        _autotuned_matmul_case(96, 80, 100),
        _autotuned_matmul_case(64, 64, 256, out_dtype=jnp.float32, SPLIT_K=4),
        _ssm_decode_case(3, 4, 24, 16, groups=2, pool=5, block_m=16),
    ]
