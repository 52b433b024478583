"""An autotuned attention forward in the style of Triton's fused-attention tutorial runs on the CPU as written: its
kernel makes its own tensor descriptors from pointers (or takes host descriptors), its configs carry a ``pre_hook``
that sets the host descriptors' block shapes and returns at once when the arguments are arrays, and its
``early_config_prune`` reads a scalar passed by keyword from ``kwargs``. Checked against float64 NumPy attention."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import jt_core as jt

LN2 = math.log(2.0)

#: What each config's hook saw: whether ``q`` was a host descriptor, and the block shapes it set.
HOOK_CALLS: list[tuple[bool, int, int]] = []


def _descriptor_blocks(nargs: dict[str, Any]) -> None:
    """Gives host descriptors the config's block shapes; a kernel given pointers makes its own, so nothing to do."""
    block_q, block_kv, width = nargs["BLOCK_Q"], nargs["BLOCK_KV"], nargs["HEAD_DIM"]
    host = isinstance(nargs["q"], TensorDescriptor)
    HOOK_CALLS.append((host, block_q, block_kv))
    if not host:
        return
    nargs["q"].block_shape = [block_q, width]
    nargs["out"].block_shape = [block_q, width]
    nargs["k"].block_shape = [block_kv, width]
    nargs["v"].block_shape = [block_kv, width]


def _fits_sequence(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
    """Keeps the configs whose blocks fit the sequence (``SEQ_LEN`` comes by keyword, so it is in ``kwargs``)."""
    length = kwargs["SEQ_LEN"]
    return [c for c in configs if c.kwargs["BLOCK_Q"] <= length and c.kwargs["BLOCK_KV"] <= length]


CONFIGS = [
    triton.Config({"BLOCK_Q": block_q, "BLOCK_KV": block_kv}, num_warps=4, num_stages=2, pre_hook=_descriptor_blocks)
    for block_q in (32, 16, 128)
    for block_kv in (16, 32)
]


@triton.jit
def _as_descriptor(arg, rows, WIDTH: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    """``arg`` itself when the caller passed a descriptor, else a descriptor over the rows it points to."""
    if isinstance(arg, tl.tensor_descriptor):
        return arg
    else:
        return tl.make_tensor_descriptor(arg, shape=[rows, WIDTH], strides=[WIDTH, 1], block_shape=[BLOCK_ROWS, WIDTH])


@triton.autotune(configs=CONFIGS, key=["SEQ_LEN", "HEAD_DIM"], prune_configs_by={"early_config_prune": _fits_sequence})
@triton.jit
def attention_forward_kernel(
    scale,
    lse,
    heads,
    q,
    k,
    v,
    out,
    SEQ_LEN,
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_KV: tl.constexpr,
):
    """``out = softmax(q k^T scale) v`` and the rows' log-sum-exp, for ``BLOCK_Q`` queries of head
    ``program_id(1)``; every head's rows lie one after another (``[heads * SEQ_LEN, HEAD_DIM]``)."""
    rows = heads * SEQ_LEN
    q_desc = _as_descriptor(q, rows, HEAD_DIM, BLOCK_Q)
    k_desc = _as_descriptor(k, rows, HEAD_DIM, BLOCK_KV)
    v_desc = _as_descriptor(v, rows, HEAD_DIM, BLOCK_KV)
    out_desc = _as_descriptor(out, rows, HEAD_DIM, BLOCK_Q)
    head_start = tl.program_id(1) * SEQ_LEN
    first = head_start + tl.program_id(0) * BLOCK_Q
    queries = q_desc.load([first, 0])
    # Scores in base 2: exp2 of the scaled scores times log2(e) is exp of the scaled scores.
    scale_log2 = scale * 1.4426950408889634
    running_max = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, HEAD_DIM], tl.float32)
    for start in range(0, SEQ_LEN, BLOCK_KV):
        keys = k_desc.load([head_start + start, 0])
        scores = tl.dot(queries, keys.T) * scale_log2
        new_max = tl.maximum(running_max, tl.max(scores, 1))
        weights = tl.math.exp2(scores - new_max[:, None])
        shrink = tl.math.exp2(running_max - new_max)
        total = total * shrink + tl.sum(weights, 1)
        values = v_desc.load([head_start + start, 0])
        acc = acc * shrink[:, None] + tl.dot(weights.to(values.dtype), values)
        running_max = new_max
    positions = first + tl.arange(0, BLOCK_Q)
    tl.store(lse + positions, (running_max + tl.math.log2(total)) * 0.6931471805599453)
    out_desc.store([first, 0], (acc / total[:, None]).to(queries.dtype))


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> tuple[np.ndarray, np.ndarray]:
    """Attention and log-sum-exp per head in float64: ``[heads, seq, dim]`` arrays."""
    q, k, v = (np.asarray(t, np.float64) for t in (q, k, v))
    scores = np.einsum("hqd,hkd->hqk", q, k) * scale
    top = scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores - top)
    total = weights.sum(axis=-1, keepdims=True)
    return np.einsum("hqk,hkd->hqd", weights / total, v), (top + np.log(total))[..., 0]


def inputs(heads: int, seq: int, dim: int, seed: int) -> list[jax.Array]:
    keys = jax.random.split(jax.random.key(seed), 3)
    return [jax.random.normal(key, (heads * seq, dim), jnp.float32).astype(jnp.float16) for key in keys]


def attention(q: jax.Array, k: jax.Array, v: jax.Array, heads: int, launcher: str) -> tuple[jax.Array, jax.Array]:
    """The tutorial's call, with pointers: every operand by keyword but the scale, the outputs where none is given."""
    rows, dim = q.shape
    seq = rows // heads
    lse, out = jt.triton_call(
        1.0 / math.sqrt(dim),
        q=q,
        k=k,
        v=v,
        heads=heads,
        SEQ_LEN=seq,
        HEAD_DIM=dim,
        kernel=attention_forward_kernel,
        out_shape=[jax.ShapeDtypeStruct((rows,), jnp.float32), jax.ShapeDtypeStruct(q.shape, q.dtype)],
        grid=lambda meta: (seq // meta["BLOCK_Q"], heads),
        launcher=launcher,
    )
    return out, lse


def attention_with_host_descriptors(
    q: jax.Array, k: jax.Array, v: jax.Array, heads: int, launcher: str
) -> tuple[jax.Array, jax.Array]:
    """The same call with ``jt.TensorDescriptor`` operands, whose block shapes the hook sets per config; the output
    is written through the descriptor of a buffer aliased to it."""
    rows, dim = q.shape
    seq = rows // heads
    lse, out = jt.triton_call(
        1.0 / math.sqrt(dim),
        q=jt.TensorDescriptor(q, block_shape=[8, dim]),
        k=jt.TensorDescriptor(k, block_shape=[8, dim]),
        v=jt.TensorDescriptor(v, block_shape=[8, dim]),
        out=jt.TensorDescriptor(jnp.zeros_like(q), block_shape=[8, dim]),
        heads=heads,
        SEQ_LEN=seq,
        HEAD_DIM=dim,
        kernel=attention_forward_kernel,
        out_shape=[jax.ShapeDtypeStruct((rows,), jnp.float32), jax.ShapeDtypeStruct(q.shape, q.dtype)],
        input_output_aliases={5: 1},  # out, counting every operand in signature order (scalars too)
        grid=lambda meta: (seq // meta["BLOCK_Q"], heads),
        launcher=launcher,
    )
    return out, lse


def check(out: jax.Array, lse: jax.Array, q: jax.Array, k: jax.Array, v: jax.Array, heads: int) -> None:
    dim = q.shape[1]
    split = [np.asarray(t).reshape(heads, -1, dim) for t in (q, k, v)]
    want_out, want_lse = reference(*split, scale=1.0 / math.sqrt(dim))
    # float16 output, float16 weights in the second product: a few float16 ulps of values of order 1.
    np.testing.assert_allclose(np.asarray(out, np.float64).reshape(want_out.shape), want_out, atol=4e-3, rtol=4e-3)
    # The scores are exact float16 products summed in float32: the log-sum-exp is float32-accurate.
    np.testing.assert_allclose(np.asarray(lse).reshape(want_lse.shape), want_lse, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_the_tutorial_style_attention_runs_with_its_autotuner_and_hooks_on_pointers(launcher: str) -> None:
    HOOK_CALLS.clear()
    q, k, v = inputs(heads=2, seq=64, dim=16, seed=11)
    out, lse = attention(q, k, v, heads=2, launcher=launcher)
    check(out, lse, q, k, v, heads=2)
    # Every config the prune kept ran its hook on array stand-ins, which returned at once; BLOCK_Q=128 was pruned.
    assert sorted(set(HOOK_CALLS)) == [(False, 16, 16), (False, 16, 32), (False, 32, 16), (False, 32, 32)]


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_the_same_kernel_runs_with_host_descriptors_whose_block_shapes_the_hooks_set(launcher: str) -> None:
    HOOK_CALLS.clear()
    q, k, v = inputs(heads=2, seq=32, dim=16, seed=12)
    out, lse = attention_with_host_descriptors(q, k, v, heads=2, launcher=launcher)
    check(out, lse, q, k, v, heads=2)
    assert sorted(set(HOOK_CALLS)) == [(True, 16, 16), (True, 16, 32), (True, 32, 16), (True, 32, 32)]


def test_every_config_the_prune_keeps_gives_the_same_attention() -> None:
    """Each kept config run alone (fixed by the caller), so that the numbers do not rest on the first one alone."""
    q, k, v = inputs(heads=1, seq=32, dim=16, seed=13)
    for block_q, block_kv in ((16, 16), (16, 32), (32, 16), (32, 32)):
        lse, out = jt.triton_call(
            0.25,
            q=q,
            k=k,
            v=v,
            heads=1,
            SEQ_LEN=32,
            HEAD_DIM=16,
            BLOCK_Q=block_q,
            BLOCK_KV=block_kv,
            kernel=attention_forward_kernel,
            out_shape=[jax.ShapeDtypeStruct((32,), jnp.float32), jax.ShapeDtypeStruct(q.shape, q.dtype)],
            grid=lambda meta: (32 // meta["BLOCK_Q"], 1),
        )
        check(out, lse, q, k, v, heads=1)
