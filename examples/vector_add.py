"""Vector addition, the "hello world" of Triton, called the classic way.

Classic convention: the operands fill the kernel's parameters in order (``x``, ``y`` and the length), and one
pointer per output is appended after them (``output_ptr``). The block size is a metaparameter given by keyword.

Run it alone with ``python examples/vector_add.py``.
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
def add_kernel(x_ptr, y_ptr, length, output_ptr, block_size: tl.constexpr):
    """``output[i] = x[i] + y[i]`` for ``i < length``; each program handles ``block_size`` elements."""
    pid = tl.program_id(axis=0)
    offsets = pid * block_size + tl.arange(0, block_size)
    mask = offsets < length
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)


def add(x: jax.Array, y: jax.Array, block_size: int = 1024) -> jax.Array:
    """Adds two vectors of the same shape and dtype with `add_kernel`."""
    out_shape = jax.ShapeDtypeStruct(shape=x.shape, dtype=x.dtype)
    return jt.triton_call(
        x,
        y,
        x.size,
        kernel=add_kernel,
        out_shape=out_shape,
        grid=(jt.cdiv(x.size, block_size),),
        block_size=block_size,
    )


def run(platform_is_gpu: bool) -> dict[str, Any]:
    """Adds two random vectors (50 000 elements on the CPU, 2**24 on a GPU) and checks against ``x + y``."""
    size, block_size = ((1 << 24) + 3, 1024) if platform_is_gpu else (50_000, 1024)
    kx, ky = jax.random.split(jax.random.key(0))
    x = jax.random.normal(kx, (size,), jnp.float32)
    y = jax.random.normal(ky, (size,), jnp.float32)
    fn = jax.jit(add, static_argnames="block_size")
    out = fn(x, y, block_size=block_size)
    error = check_close("vector_add", out, x + y, atol=0.0, rtol=0.0)
    return report("vector_add", error, median_time_ms(fn, x, y, block_size), size=size)


if __name__ == "__main__":
    print(run(default_platform_is_gpu()))
