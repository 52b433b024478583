"""Gluon kernels that take host-side tensor descriptors (a module, so that Triton can read their source)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

import jt_core as jt
from jt_gluon._compat import hopper_tma_copies

tma_load, tma_store = hopper_tma_copies()


@gluon.jit
def tma_add_kernel(a_desc, b_desc, out_desc, BM: gl.constexpr, BN: gl.constexpr):
    """``out = a + b`` one (BM, BN) tile per program: TMA loads into shared memory, add in registers, TMA store."""
    row = gl.program_id(0) * BM
    col = gl.program_id(1) * BN
    a_smem = gl.allocate_shared_memory(a_desc.dtype, a_desc.block_type.shape, a_desc.layout)
    b_smem = gl.allocate_shared_memory(b_desc.dtype, b_desc.block_type.shape, b_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
    tma_load(a_desc, [row, col], bar, a_smem)
    tma_load(b_desc, [row, col], bar, b_smem)
    mbarrier.wait(bar, 0)
    mbarrier.invalidate(bar)
    blocked: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [gl.num_warps(), 1], [1, 0])
    total = a_smem.load(blocked) + b_smem.load(blocked)
    out_smem = gl.allocate_shared_memory(out_desc.dtype, out_desc.block_type.shape, out_desc.layout)
    out_smem.store(total)
    fence_async_shared()
    tma_store(out_desc, [row, col], out_smem)
    tma.store_wait(0)


@gluon.jit
def load_block(desc, row, col):
    """The block of ``desc`` at (row, col), TMA-loaded into shared memory (waited for)."""
    smem = gl.allocate_shared_memory(desc.dtype, desc.block_type.shape, desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    mbarrier.expect(bar, desc.block_type.nbytes)
    tma_load(desc, [row, col], bar, smem)
    mbarrier.wait(bar, 0)
    mbarrier.invalidate(bar)
    return smem


@gluon.jit
def tma_copy_kernel(in_desc, out_desc, BM: gl.constexpr, BN: gl.constexpr):
    """Copies ``in`` to ``out`` one (BM, BN) tile per program through shared memory."""
    row = gl.program_id(0) * BM
    col = gl.program_id(1) * BN
    tma_store(out_desc, [row, col], load_block(in_desc, row, col))
    tma.store_wait(0)


@gluon.jit
def tma_read_tile_kernel(in_desc, out_desc, row, col):
    """Copies the block of ``in`` at (row, col), padding included, to the one block of ``out``."""
    tma_store(out_desc, [0, 0], load_block(in_desc, row, col))
    tma.store_wait(0)


#: What an integer output holds before the kernel writes it (test data stays below it).
INT_POISON = 111

#: Gluon's element type for each dtype TMA moves.
GLUON_DTYPES = {
    np.dtype(np.float32): gl.float32,
    np.dtype(np.float16): gl.float16,
    np.dtype(ml_dtypes.bfloat16): gl.bfloat16,
    np.dtype(ml_dtypes.float8_e4m3fn): gl.float8e4nv,
    np.dtype(ml_dtypes.float8_e5m2): gl.float8e5,
    np.dtype(np.int8): gl.int8,
    np.dtype(np.int16): gl.int16,
    np.dtype(np.int32): gl.int32,
    np.dtype(np.uint16): gl.uint16,
}


def shared_layout(block: list[int], dtype: Any) -> Any:
    """The default NVMMA shared layout of a block (what Gluon's own examples use for TMA)."""
    return gl.NVMMASharedLayout.get_default_for(block, dtype)


def tma_add(a: Any, b: Any, block: tuple[int, int], **options: Any) -> Any:
    """``a + b`` (float16) through Gluon TMA copies; the result is a NaN-poisoned buffer aliased to the output."""
    bm, bn = block
    layout = shared_layout([bm, bn], gl.float16)
    poisoned = jnp.full(a.shape, jnp.nan, a.dtype)

    def desc(x: Any) -> jt.TensorDescriptor:
        return jt.TensorDescriptor(x, block_shape=[bm, bn], layout=layout)

    return jt.triton_call(
        desc(a),
        desc(b),
        desc(poisoned),
        kernel=tma_add_kernel,
        out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype),
        input_output_aliases={2: 0},
        grid=(triton.cdiv(a.shape[0], bm), triton.cdiv(a.shape[1], bn)),
        BM=bm,
        BN=bn,
        **options,
    )


def tma_copy(x: Any, block: tuple[int, int], **options: Any) -> Any:
    """A copy of ``x`` through Gluon TMA copies into a NaN-poisoned buffer aliased to the output."""
    bm, bn = block
    layout = shared_layout([bm, bn], gl.float16 if x.dtype == jnp.float16 else gl.float32)
    return jt.triton_call(
        jt.TensorDescriptor(x, [bm, bn], layout=layout),
        jt.TensorDescriptor(jnp.full(x.shape, jnp.nan, x.dtype), [bm, bn], layout=layout),
        kernel=tma_copy_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        input_output_aliases={1: 0},
        grid=(triton.cdiv(x.shape[0], bm), triton.cdiv(x.shape[1], bn)),
        BM=bm,
        BN=bn,
        **options,
    )


def tma_read_tile(
    x: Any, view: tuple[int, int] | None, block: tuple[int, int], row: int, col: int, **kwargs: Any
) -> Any:
    """The ``block`` of ``x`` at (row, col) as a Gluon TMA load sees it, written out by a TMA store.

    Args:
        x: The base array.
        view: ``None`` for a descriptor over the whole array (``from_array``); else the shape of a view of the
            base's top-left corner, with the base's row stride.
        block: The block shape.
        row, col: The block's position.
        **kwargs: ``padding=`` and ``round_f32_to_tf32=`` for the input descriptor; the rest go to ``triton_call``.
    """
    desc_options = {key: kwargs.pop(key) for key in ("padding", "round_f32_to_tf32") if key in kwargs}
    layout = shared_layout(list(block), GLUON_DTYPES[np.dtype(x.dtype)])
    if view is None:
        source = jt.TensorDescriptor.from_array(x, list(block), layout, **desc_options)
    else:
        source = jt.TensorDescriptor(x, view, (x.shape[1], 1), block, layout, **desc_options)
    poison = INT_POISON if np.dtype(x.dtype).kind in "iu" else jnp.nan
    poisoned = jnp.full(block, poison, x.dtype)
    return jt.triton_call(
        source,
        jt.TensorDescriptor.from_array(poisoned, list(block), layout),
        row,
        col,
        kernel=tma_read_tile_kernel,
        out_type=jax.ShapeDtypeStruct(block, x.dtype),
        input_output_aliases={1: 0},
        grid=1,
        **kwargs,
    )
