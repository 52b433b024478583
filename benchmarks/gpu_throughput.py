"""Large kernels on a GPU: jt vs the same Triton kernel launched by Triton itself (torch tensors) vs ``jnp``.

Run on the GPU machine: ``python benchmarks/gpu_throughput.py [--json FILE]``. Two workloads:

* a 64M-element float32 add (memory bound: 768 MiB moved per call);
* a 4096 x 4096 x 4096 bfloat16 matmul with float32 accumulation, bfloat16 output (compute bound).

Every path runs ``K`` dependent calls back to back (each call consumes the previous result, so nothing can be
deduplicated or fused; JAX steps are separated by ``lax.optimization_barrier``) and the wall time of the sequence,
synchronised at the end, is measured for ``K = 1`` and ``K = CALLS``. The figure per call is the marginal
``(median T(CALLS) - median T(1)) / (CALLS - 1)``: the fixed cost of a dispatch and a synchronisation cancels, for
JAX and torch alike.

With ``--rounds R`` every path is timed once per round, the paths of a round in an order rotated by one from the
last round's, so that no path always follows the same one (the GPU's clocks and the placement of large buffers
drift within a run). The table gives each path's median over the rounds with its range, and its ratio to Triton with
torch tensors as the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

if "--kernel-times" in sys.argv:  # XLA turns its command buffers off while profiling unless told otherwise
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_enable_command_buffers_during_profiling=true"

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


def jax_timer(step: Callable[[Any, Any], Any], x: Any, y: Any, reps: int) -> Callable[[], float]:
    """A function that times ``step``'s marginal cost per call (compiled once, timed on each call)."""

    def sync(out: Any) -> Any:
        return out.block_until_ready()

    one, many = jax_sequence(step, 1), jax_sequence(step, CALLS)

    def timer() -> float:
        t_one = _median_wall(lambda: one(x, y), sync, reps)
        t_many = _median_wall(lambda: many(x, y), sync, reps)
        return (t_many - t_one) / (CALLS - 1)

    return timer


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


def kernel_times(run: Callable[[], Any], sync: Callable[[Any], Any], executions: int = 5) -> dict[str, Any]:
    """The GPU's own view of a path (torch's CUPTI profiler): the median duration of its large kernels (over 20 us:
    the adds or matmuls, not copies), the median idle time between two of them within one run (kernels less than
    30 us apart), the median span per kernel of a run, how many runs the kernels formed (one per execution when
    nothing idles the GPU within an execution) and the timeline itself (start and duration, us)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        sync(run())
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(executions):
            sync(run())
    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as handle:
            events = json.load(handle)["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel" and e.get("dur", 0) > 20), key=lambda e: e["ts"])
    chains: list[list[dict[str, Any]]] = []
    for event in kernels:  # one execution of the chain: kernels less than 30 us apart
        if chains and event["ts"] - (chains[-1][-1]["ts"] + chains[-1][-1]["dur"]) < 30:
            chains[-1].append(event)
        else:
            chains.append([event])
    gaps = [b["ts"] - (a["ts"] + a["dur"]) for chain in chains for a, b in itertools.pairwise(chain)]
    return {
        "kernels": len(kernels),
        "kernel_us": statistics.median(e["dur"] for e in kernels),
        "gap_us": statistics.median(gaps) if gaps else float("nan"),
        "span_us": statistics.median((c[-1]["ts"] + c[-1]["dur"] - c[0]["ts"]) / len(c) for c in chains),
        "runs": len(chains),
        "timeline": [(e["ts"] - kernels[0]["ts"], e["dur"]) for e in kernels],
    }


def run_rounds(paths: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Times every path once per round, the order rotated by one each round; returns each path's samples."""
    names = list(paths)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(paths[name]())
    return samples


def summary(samples: dict[str, list[float]], reference: str) -> dict[str, dict[str, float]]:
    """Each path's median and range, and the median of its per-round ratios to ``reference``."""
    out = {}
    for name, values in samples.items():
        ratios = [v / r for v, r in zip(values, samples[reference], strict=True)]
        out[name] = {
            "median": statistics.median(values),
            "low": min(values),
            "high": max(values),
            "ratio": statistics.median(ratios),
            "ratio_low": min(ratios),
            "ratio_high": max(ratios),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--kernel-times", action="store_true", help="also trace the add's kernels on the GPU")
    args = parser.parse_args()
    import torch

    samples: dict[str, dict[str, list[float]]] = {}

    x = jax.random.normal(jax.random.key(0), (ADD_SIZE,), jnp.float32)
    y = jax.random.normal(jax.random.key(1), (ADD_SIZE,), jnp.float32)
    expected = np.asarray(x) + np.asarray(y)
    np.testing.assert_array_equal(np.asarray(jax.jit(jt_add("jt"))(x, y)), expected)
    tx = torch.from_numpy(np.asarray(x)).cuda()
    ty = torch.from_numpy(np.asarray(y)).cuda()
    np.testing.assert_array_equal(torch_add(tx, ty).cpu().numpy(), expected)
    add: dict[str, Callable[[], float]] = {
        f"jt[{launcher}]": jax_timer(jt_add(launcher), x, y, args.reps) for launcher in ("jt", "jaxlib", "xla")
    }
    add["triton+torch"] = lambda: time_torch(torch_add, tx, ty, args.reps)
    add["jnp"] = jax_timer(jnp.add, x, y, args.reps)
    samples["add_64M_f32"] = run_rounds(add, args.rounds)
    traced: dict[str, dict[str, Any]] = {}
    if args.kernel_times:
        chain = jax_sequence(jt_add("jt"), CALLS)
        traced["jt[jt]"] = kernel_times(lambda: chain(x, y), lambda out: out.block_until_ready())
        plain = jax_sequence(jnp.add, CALLS)
        traced["jnp"] = kernel_times(lambda: plain(x, y), lambda out: out.block_until_ready())

        def torch_chain() -> Any:
            out = tx
            for _ in range(CALLS):
                out = torch_add(out, ty)
            return out

        traced["triton+torch"] = kernel_times(torch_chain, lambda _: torch.cuda.synchronize())

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
    mm: dict[str, Callable[[], float]] = {
        f"jt[{launcher}]": jax_timer(jt_matmul(launcher), a, b, args.reps) for launcher in ("jt", "jaxlib", "xla")
    }
    mm["triton+torch"] = lambda: time_torch(torch_matmul, ta, tb, args.reps)
    mm["jnp"] = jax_timer(
        lambda p, q: jnp.matmul(p, q, preferred_element_type=jnp.float32).astype(p.dtype), a, b, args.reps
    )
    samples["matmul_4096_bf16"] = run_rounds(mm, args.rounds)

    flops = 2 * MM**3
    results = {workload: summary(paths, "triton+torch") for workload, paths in samples.items()}
    print(f"{args.rounds} round(s) of {args.reps} repetitions; ms per call: median (range); ratio: median of rounds")
    print(f"{'workload':18} {'path':14} {'ms':>8} {'range':>15} {'vs triton':>9} {'ratio range':>13} {'rate':>14}")
    for workload, paths in results.items():
        for path, row in paths.items():
            seconds = row["median"]
            rate = (
                f"{3 * ADD_SIZE * 4 / seconds / 1e12:6.2f} TB/s"
                if workload.startswith("add")
                else f"{flops / seconds / 1e12:6.1f} TFLOP/s"
            )
            spread = f"{row['low'] * 1e3:.3f}-{row['high'] * 1e3:.3f}"
            ratio_spread = f"{row['ratio_low']:.3f}-{row['ratio_high']:.3f}"
            print(
                f"{workload:18} {path:14} {seconds * 1e3:8.3f} {spread:>15} {row['ratio']:9.3f} {ratio_spread:>13} "
                f"{rate:>14}"
            )
    if traced:
        print(f"the add's kernels on the GPU (CUPTI, {CALLS}-call chain, 5 executions): median us")
        print(f"{'path':14} {'kernels':>8} {'runs':>5} {'kernel us':>10} {'gap us':>8} {'span per kernel us':>19}")
        for path, row in traced.items():
            print(
                f"{path:14} {row['kernels']:8d} {row['runs']:5d} {row['kernel_us']:10.2f} {row['gap_us']:8.2f} "
                f"{row['span_us']:19.2f}"
            )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {"device": str(jax.devices()[0].device_kind), "rounds": args.rounds, "samples": samples,
                 "summary": results, "kernel_times": traced},
                handle,
                indent=2,
            )  # fmt: skip


if __name__ == "__main__":
    main()
