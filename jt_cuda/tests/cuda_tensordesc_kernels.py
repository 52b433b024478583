"""Kernels and calls that take host-side tensor descriptors (a module, so that Triton can read their source)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import triton

import jt_core as jt
from jt_core.testing import add_tiles_kernel, autotuned_add_tiles_kernel, copy_tiles_kernel, load_tile


def autotuned_add_tiles(a: Any, b: Any, **options: Any) -> Any:
    """``a + b`` of (96, 160) float32 arrays through the autotuned kernel, in (32, 32) tiles."""
    out = jnp.full(a.shape, jnp.nan, a.dtype)
    return jt.triton_call(
        jt.TensorDescriptor(a, [32, 32]),
        jt.TensorDescriptor(b, [32, 32]),
        jt.TensorDescriptor(out, [32, 32]),
        kernel=autotuned_add_tiles_kernel,
        out_shape=a,
        input_output_aliases={2: 0},
        grid=(triton.cdiv(a.shape[0], 32), triton.cdiv(a.shape[1], 32)),
        BM=32,
        BN=32,
        **options,
    )


def add_tiles(a: Any, b: Any, block: tuple[int, int], **options: Any) -> Any:
    """``a + b`` through descriptors; the result is a NaN-poisoned buffer aliased to the output."""
    bm, bn = block
    poisoned = jnp.full(a.shape, jnp.nan, a.dtype)
    return jt.triton_call(
        jt.TensorDescriptor(a, block_shape=[bm, bn]),
        jt.TensorDescriptor(b, block_shape=[bm, bn]),
        jt.TensorDescriptor(poisoned, block_shape=[bm, bn]),
        kernel=add_tiles_kernel,
        out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype),
        input_output_aliases={2: 0},
        grid=(triton.cdiv(a.shape[0], bm), triton.cdiv(a.shape[1], bn)),
        BM=bm,
        BN=bn,
        **options,
    )


def read_tile(x: Any, block: tuple[int, int], row: int, col: int, padding: str = "zero", **options: Any) -> Any:
    """The (block) tile of ``x`` at (row, col) as the descriptor loads it (out-of-bounds elements padded)."""
    return load_tile(jt.TensorDescriptor(x, block_shape=list(block), padding=padding), row, col, **options)


def copy_into_view(base: Any, src: Any, **options: Any) -> Any:
    """``base`` with ``src`` (40 x 32 float32) written through a view of its left part, in (16, 32) tiles."""
    return jt.triton_call(
        jt.TensorDescriptor.from_array(src, [16, 32]),
        jt.TensorDescriptor(base, src.shape, (base.shape[1], 1), (16, 32)),
        kernel=copy_tiles_kernel,
        out_shape=base,
        input_output_aliases={1: 0},
        grid=(triton.cdiv(src.shape[0], 16), 1),
        BM=16,
        BN=32,
        **options,
    )
