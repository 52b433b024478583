"""Row-wise softmax fused into one kernel, called the current way.

Current convention: the result is described with ``out_type=`` and the operands are passed by keyword, so the
order of the call does not have to follow the kernel's signature (here the output pointer comes first). Each
program normalises one row held entirely in registers: one read and one write of the matrix, where
``jax.nn.softmax`` unfused reads it several times.

Run it alone with ``python examples/fused_softmax.py``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import triton
import triton.language as tl
from harness import check_close, default_platform_is_gpu, median_time_ms, report

import jt_core as jt


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    """Softmax of row ``program_id(0)``; ``BLOCK_SIZE`` is the next power of two above ``n_cols``."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    numerator = tl.exp(x)
    y = numerator / tl.sum(numerator, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x: jax.Array) -> jax.Array:
    """Softmax over the last axis of a 2-D array."""
    n_rows, n_cols = x.shape
    block_size = jt.next_power_of_2(n_cols)
    return jt.triton_call(
        kernel=softmax_kernel,
        in_ptr=x,
        in_row_stride=n_cols,
        out_row_stride=n_cols,
        n_cols=n_cols,
        out_type=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=n_rows,
        num_warps=8 if block_size >= 2048 else 4,
        BLOCK_SIZE=block_size,
    )


def run(platform_is_gpu: bool) -> dict[str, Any]:
    """Softmax of a random matrix (64 x 300 on the CPU, 8192 x 4096 bf16 on a GPU) against ``jax.nn.softmax``."""
    if platform_is_gpu:
        shape, dtype, tol = (8192, 4096), jnp.bfloat16, 2e-2
    else:
        shape, dtype, tol = (64, 300), jnp.float32, 1e-6
    x = (3.0 * jax.random.normal(jax.random.key(1), shape, jnp.float32)).astype(dtype)
    fn = jax.jit(softmax)
    out = fn(x)
    want = jax.nn.softmax(x.astype(jnp.float32), axis=-1)
    error = check_close("fused_softmax", out, want, atol=tol, rtol=tol)
    return report("fused_softmax", error, median_time_ms(fn, x), shape=shape, dtype=jnp.dtype(dtype).name)


if __name__ == "__main__":
    print(run(default_platform_is_gpu()))
