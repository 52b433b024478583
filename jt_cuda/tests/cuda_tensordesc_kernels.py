"""Kernels and calls that take host-side tensor descriptors (a module, so that Triton can read their source)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

import jt_core as jt


@triton.jit
def add_tiles_kernel(a_desc, b_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    """``out = a + b`` one (BM, BN) tile per program, all three through descriptors."""
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    out_desc.store([m, n], a_desc.load([m, n]) + b_desc.load([m, n]))


@triton.jit
def read_tile_kernel(desc, out_ptr, row, col, BM: tl.constexpr, BN: tl.constexpr):
    """Copies the (BM, BN) tile of ``desc`` at (row, col), padding included, to a dense (BM, BN) output."""
    tile = desc.load([row, col])
    offsets = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
    tl.store(out_ptr + offsets, tile)


@triton.jit
def copy_tiles_kernel(src_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    """``out = src`` one (BM, BN) tile per program, both through descriptors."""
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    out_desc.store([m, n], src_desc.load([m, n]))


@triton.autotune(configs=[triton.Config({}, num_warps=4), triton.Config({}, num_warps=8, num_stages=2)], key=[])
@triton.jit
def autotuned_add_tiles_kernel(a_desc, b_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    """``add_tiles_kernel`` tuned over the warp count (the descriptors' block is the same in every config)."""
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    out_desc.store([m, n], a_desc.load([m, n]) + b_desc.load([m, n]))


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
    return read_desc(jt.TensorDescriptor(x, block_shape=list(block), padding=padding), row, col, **options)


def read_desc(desc: jt.TensorDescriptor, row: int, col: int, **options: Any) -> Any:
    """The (BM, BN) tile of any descriptor at (row, col), as its loads see it (padding included)."""
    bm, bn = desc.block_shape
    return jt.triton_call(
        desc,
        row=row,
        col=col,
        kernel=read_tile_kernel,
        out_shape=jax.ShapeDtypeStruct((bm, bn), desc.dtype),
        grid=1,
        BM=bm,
        BN=bn,
        **options,
    )


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
