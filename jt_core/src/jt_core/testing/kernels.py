"""The Triton kernels `jt_core.testing` offers the suites of jt and of its plugins (re-exported there).

They live in a module of their own because Triton reads a kernel's source from its file. Each kernel is one small
behaviour a backend or launcher must get right: buffers by position and by name, aliasing, scalars, atomics into
zeroed outputs, partial writes, autotuning, host-side tensor descriptors.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

__all__ = [
    "accumulate_kernel",
    "add_tiles_kernel",
    "autotuned_add_tiles_kernel",
    "autotuned_scale_inplace_kernel",
    "copy_tiles_kernel",
    "half_write_kernel",
    "load_tile",
    "out_first_kernel",
    "read_tile_kernel",
    "sample_add_kernel",
    "scale_inplace_kernel",
]


@triton.jit
def sample_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``out = x + y`` over ``n`` elements: the kernel the conformance suites compile and run."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def scale_inplace_kernel(x_ptr, n, factor, BLOCK: tl.constexpr):
    """``x *= factor`` through the input pointer (current convention: the output aliased to ``x``)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)


#: `scale_inplace_kernel` autotuned over three block sizes and warp counts (key ``n``); every trial scales
#: the aliased buffer again, so a launcher must restore it before the real run.
autotuned_scale_inplace_kernel = triton.autotune(
    configs=[
        triton.Config({"BLOCK": 64}, num_warps=1),
        triton.Config({"BLOCK": 256}, num_warps=4),
        triton.Config({"BLOCK": 1024}, num_warps=8),
    ],
    key=["n"],
)(scale_inplace_kernel)


@triton.jit
def out_first_kernel(out_ptr, x_ptr, scale, n, BLOCK: tl.constexpr):
    """``out = x * scale`` with the output pointer declared before the input pointer."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale, mask=mask)


@triton.jit
def accumulate_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """``out[0] += sum(x)``, one atomic add per program: the output must start at zero (``zeroed_outputs``)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < n, other=0.0), axis=0))


@triton.jit
def half_write_kernel(out_ptr, n, BLOCK: tl.constexpr):
    """Writes 7.0 into the first ``n // 2`` elements of a float32 output only (one program)."""
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.full((BLOCK,), 7.0, tl.float32), mask=offsets < n // 2)


# -- host-side tensor descriptors --------------------------------------------------------------------------------


@triton.jit
def add_tiles_kernel(a_desc, b_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    """``out = a + b`` one (BM, BN) tile per program, all three through descriptors."""
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    out_desc.store([m, n], a_desc.load([m, n]) + b_desc.load([m, n]))


#: `add_tiles_kernel` tuned over the warp count (the descriptors' block is the same in every config).
autotuned_add_tiles_kernel = triton.autotune(
    configs=[triton.Config({}, num_warps=4), triton.Config({}, num_warps=8, num_stages=2)], key=[]
)(add_tiles_kernel)


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


def load_tile(desc: Any, row: int, col: int, **options: Any) -> Any:
    """The (BM, BN) tile of a ``jt.TensorDescriptor`` at (row, col), as its loads see it (padding included): a
    ``triton_call`` of `read_tile_kernel` with ``options``."""
    import jax

    from jt_core.api import triton_call

    bm, bn = desc.block_shape
    return triton_call(
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
