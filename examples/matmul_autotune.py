"""Matrix multiplication with ``tl.dot``, autotuned over block sizes with ``@triton.autotune``.

The autotuner is used exactly as with Triton: a list of ``triton.Config`` and a ``key``. On a GPU every config is
compiled and the fastest one is kept per value of the key; the CPU backend runs the first config (it cannot time
anything meaningful), so the first config is also the one that suits small CPU problems. Programs are ordered in
groups of ``GROUP_M`` rows of blocks so that neighbouring programs reuse the same tiles of ``a`` from the L2 cache.

Classic convention: ``a``, ``b``, the sizes and strides fill the parameters in order and the output pointer ``c``
is appended.

Run it alone with ``python examples/matmul_autotune.py``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import triton
import triton.language as tl
from harness import check_close, default_platform_is_gpu, median_time_ms, report

import jt_core as jt

CONFIGS = [
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 4}, num_warps=4, num_stages=2),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
]


@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    c_ptr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """``c = a @ b`` with float32 accumulation; program ``pid`` computes one ``BLOCK_M x BLOCK_N`` tile of ``c``."""
    pid = tl.program_id(0)
    blocks_m = tl.cdiv(M, BLOCK_M)
    blocks_n = tl.cdiv(N, BLOCK_N)
    programs_per_group = GROUP_M * blocks_n
    first_m = (pid // programs_per_group) * GROUP_M
    group_rows = min(blocks_m - first_m, GROUP_M)
    block_m = first_m + (pid % programs_per_group) % group_rows
    block_n = (pid % programs_per_group) // group_rows

    rows = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = block_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & (ks[None, :] + k < K), other=0.0)
        b = tl.load(b_ptrs, mask=(ks[:, None] + k < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


def matmul(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a @ b`` for row-major 2-D arrays of the same dtype."""
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"matmul: inner dimensions differ: a is {a.shape}, b is {b.shape}")
    return jt.triton_call(
        a,
        b,
        m,
        n,
        k,
        *jt.strides_from_shape(a.shape),
        *jt.strides_from_shape(b.shape),
        *jt.strides_from_shape((m, n)),
        kernel=matmul_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), a.dtype),
        grid=lambda meta: (jt.cdiv(m, meta["BLOCK_M"]) * jt.cdiv(n, meta["BLOCK_N"]),),
    )


def run(platform_is_gpu: bool) -> dict[str, Any]:
    """Multiplies random float16 matrices (96 x 80 x 72 on the CPU, 4096^3 on a GPU) and checks against ``jnp``."""
    m, n, k = (4096, 4096, 4096) if platform_is_gpu else (96, 80, 72)
    ka, kb = jax.random.split(jax.random.key(2))
    a = jax.random.normal(ka, (m, k), jnp.float32).astype(jnp.float16)
    b = jax.random.normal(kb, (k, n), jnp.float32).astype(jnp.float16)
    fn = jax.jit(matmul)
    out = fn(a, b)
    want = jnp.matmul(a.astype(jnp.float32), b.astype(jnp.float32), precision="highest")
    # float16 output: half an ulp of values up to ~4 sqrt(k), plus the accumulation order.
    error = check_close("matmul_autotune", out, want, atol=2e-2 * (k / 64) ** 0.5, rtol=2e-3)
    time_ms = median_time_ms(fn, a, b)
    return report("matmul_autotune", error, time_ms, shape=(m, n, k), tflops=2 * m * n * k / time_ms / 1e9)


if __name__ == "__main__":
    print(run(default_platform_is_gpu()))
