"""Large kernels on a GPU: jt vs the same Triton kernel launched by Triton itself (torch tensors) vs ``jnp``.

Run on the GPU machine: ``python benchmarks/gpu_throughput.py [--json FILE]``. Two workloads:

* a 64M-element float32 add (memory bound: 768 MiB moved per call);
* a 4096 x 4096 x 4096 bfloat16 matmul with float32 accumulation, bfloat16 output (compute bound).

Every path runs ``K`` dependent calls back to back (each call consumes the previous result, so nothing can be
deduplicated or fused; JAX steps are separated by ``lax.optimization_barrier``) and the wall time of the sequence,
synchronised at the end, is measured for ``K = 1`` and ``K = CALLS``. The figure per call is the marginal
``(median T(CALLS) - median T(1)) / (CALLS - 1)``: the fixed cost of a dispatch and a synchronisation cancels, for
JAX and torch alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import jt_core as jt

ADD_SIZE = 64 * 1024 * 1024
ADD_BLOCK = 1024
MM = 4096
CALLS = 21


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % group) % group_size)
    pid_n = (pid % group) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BLOCK_K)):
        acc += tl.dot(tl.load(a), tl.load(b))
        a += BLOCK_K * stride_ak
        b += BLOCK_K * stride_bk
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty))


MM_META = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}
MM_OPTIONS = {"num_warps": 8, "num_stages": 3}


def mm_grid() -> int:
    return triton.cdiv(MM, MM_META["BLOCK_M"]) * triton.cdiv(MM, MM_META["BLOCK_N"])


def jt_add(launcher: str) -> Callable[[Any, Any], Any]:
    def add(x: Any, y: Any) -> Any:
        return jt.triton_call(
            x, y, kernel=add_kernel, out_shape=x, grid=ADD_SIZE // ADD_BLOCK, n=ADD_SIZE, BLOCK=ADD_BLOCK,
            launcher=launcher,
        )  # fmt: skip

    return add


def jt_matmul(launcher: str) -> Callable[[Any, Any], Any]:
    def matmul(a: Any, b: Any) -> Any:
        return jt.triton_call(
            a, b, kernel=matmul_kernel, out_shape=a, grid=mm_grid(), M=MM, N=MM, K=MM,
            stride_am=MM, stride_ak=1, stride_bk=MM, stride_bn=1, stride_cm=MM, stride_cn=1,
            launcher=launcher, **MM_META, **MM_OPTIONS,
        )  # fmt: skip

    return matmul


def jax_sequence(step: Callable[[Any, Any], Any], calls: int) -> Callable[[Any, Any], Any]:
    @jax.jit
    def run(x: Any, y: Any) -> Any:
        for _ in range(calls):
            x = jax.lax.optimization_barrier(step(x, y))
        return x

    return run


def _median_wall(run: Callable[[], Any], sync: Callable[[Any], Any], reps: int) -> float:
    for _ in range(3):
        sync(run())
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        sync(run())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_jax(step: Callable[[Any, Any], Any], x: Any, y: Any, reps: int) -> float:
    def sync(out: Any) -> Any:
        return out.block_until_ready()

    one, many = jax_sequence(step, 1), jax_sequence(step, CALLS)
    t_one = _median_wall(lambda: one(x, y), sync, reps)
    t_many = _median_wall(lambda: many(x, y), sync, reps)
    return (t_many - t_one) / (CALLS - 1)


def time_torch(step: Callable[[Any, Any], Any], x: Any, y: Any, reps: int) -> float:
    import torch

    def run(calls: int) -> Any:
        out = x
        for _ in range(calls):
            out = step(out, y)
        return out

    def sync(_: Any) -> None:
        torch.cuda.synchronize()

    t_one = _median_wall(lambda: run(1), sync, reps)
    t_many = _median_wall(lambda: run(CALLS), sync, reps)
    return (t_many - t_one) / (CALLS - 1)


def torch_add(x: Any, y: Any) -> Any:
    import torch

    out = torch.empty_like(x)
    add_kernel[(ADD_SIZE // ADD_BLOCK,)](x, y, out, ADD_SIZE, BLOCK=ADD_BLOCK)
    return out


def torch_matmul(a: Any, b: Any) -> Any:
    import torch

    c = torch.empty_like(a)
    matmul_kernel[(mm_grid(),)](a, b, c, MM, MM, MM, MM, 1, MM, 1, MM, 1, **MM_META, **MM_OPTIONS)
    return c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    import torch

    results: dict[str, dict[str, float]] = {}

    x = jax.random.normal(jax.random.key(0), (ADD_SIZE,), jnp.float32)
    y = jax.random.normal(jax.random.key(1), (ADD_SIZE,), jnp.float32)
    expected = np.asarray(x) + np.asarray(y)
    np.testing.assert_array_equal(np.asarray(jax.jit(jt_add("jt"))(x, y)), expected)
    tx = torch.from_numpy(np.asarray(x)).cuda()
    ty = torch.from_numpy(np.asarray(y)).cuda()
    np.testing.assert_array_equal(torch_add(tx, ty).cpu().numpy(), expected)
    add: dict[str, float] = {}
    for launcher in ("jt", "jaxlib", "xla"):
        add[f"jt[{launcher}]"] = time_jax(jt_add(launcher), x, y, args.reps)
    add["triton+torch"] = time_torch(torch_add, tx, ty, args.reps)
    add["jnp"] = time_jax(jnp.add, x, y, args.reps)
    results["add_64M_f32"] = add
    del tx, ty

    scale = 1.0 / np.sqrt(MM)
    a = jax.random.normal(jax.random.key(2), (MM, MM), jnp.float32).astype(jnp.bfloat16)
    b = (jax.random.normal(jax.random.key(3), (MM, MM), jnp.float32) * scale).astype(jnp.bfloat16)
    ref = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    got = np.asarray(jax.jit(jt_matmul("jt"))(a, b), np.float64)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-2
    ta = torch.from_numpy(np.asarray(a.astype(jnp.float32))).to(torch.bfloat16).cuda()
    tb = torch.from_numpy(np.asarray(b.astype(jnp.float32))).to(torch.bfloat16).cuda()
    tgot = torch_matmul(ta, tb).float().cpu().numpy().astype(np.float64)
    assert np.linalg.norm(tgot - ref) / np.linalg.norm(ref) < 1e-2
    mm: dict[str, float] = {}
    for launcher in ("jt", "jaxlib", "xla"):
        mm[f"jt[{launcher}]"] = time_jax(jt_matmul(launcher), a, b, args.reps)
    mm["triton+torch"] = time_torch(torch_matmul, ta, tb, args.reps)
    mm["jnp"] = time_jax(lambda p, q: jnp.matmul(p, q, preferred_element_type=jnp.float32).astype(p.dtype), a, b,
                         args.reps)  # fmt: skip
    results["matmul_4096_bf16"] = mm

    flops = 2 * MM**3
    print(f"{'workload':18} {'path':14} {'ms':>8} {'vs triton':>9} {'vs jnp':>7} {'rate':>14}")
    for workload, paths in results.items():
        for path, seconds in paths.items():
            rate = (
                f"{3 * ADD_SIZE * 4 / seconds / 1e12:6.2f} TB/s"
                if workload.startswith("add")
                else f"{flops / seconds / 1e12:6.1f} TFLOP/s"
            )
            print(
                f"{workload:18} {path:14} {seconds * 1e3:8.3f} {seconds / paths['triton+torch']:9.3f} "
                f"{seconds / paths['jnp']:7.3f} {rate:>14}"
            )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"device": str(jax.devices()[0].device_kind), "seconds": results}, handle, indent=2)


if __name__ == "__main__":
    main()
