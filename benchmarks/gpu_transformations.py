"""GPU benchmark of jt's transformations: vmap strategies and a sharded elementwise call.

Run on the GPU machine: ``python benchmarks/gpu_transformations.py`` (``--quick`` for fewer repetitions). The
sharding part needs two GPUs and is reported as skipped with one. Prints a table; every figure is the median of
the repetitions measured in this run (references measured in the same run).

Goals: vmap grid strategy >= 1.5x ``jax.lax.map`` and within 1.05x of the batch folded into the grid by hand
(every round, every size); sharded elementwise call on 2 GPUs >= 1.95x the throughput of 1. The sharding rows also
time one GPU on half the data: what two GPUs would take with nothing lost, so the gap to 2x is split into the
kernels' own time and what running on two devices adds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import jt_core as jt


@triton.jit
def layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n
    xc = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / n + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(y_ptr + row * n + cols, xc * rstd * w + b, mask=mask)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def layer_norm(x: Any, w: Any, b: Any, vmap: str = "auto", launcher: str | None = None) -> Any:
    rows, n = x.shape
    return jt.triton_call(
        x,
        w,
        b,
        n=n,
        eps=1e-5,
        kernel=layer_norm_fwd_kernel,
        out_shape=x,
        grid=(rows,),
        BLOCK=triton.next_power_of_2(n),
        vmap=vmap,
        launcher=launcher,
    )


#: Calls enqueued between two synchronisations: blocking on every call would add the wait for the device to the
#: figure (about 0.2 ms per call on an H200 machine), more than a small kernel takes.
BATCH = 20


def median_seconds(fn: Callable[..., Any], *args: Any, reps: int) -> float:
    """The median over ``reps`` samples of the time per call, each sample ``BATCH`` calls enqueued and blocked on
    once."""
    jax.block_until_ready(fn(*args))  # compile and warm up
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        results = [fn(*args) for _ in range(BATCH)]
        jax.block_until_ready(results)
        times.append((time.perf_counter() - start) / BATCH)
        del results
    return statistics.median(times)


def bench_vmap(
    reps: int, rounds: int, batch: int, rows: int, cols: int, launcher: str | None = None
) -> list[tuple[str, float, str]]:
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((batch, rows, cols), dtype=np.float32))
    w = jnp.asarray(rng.standard_normal(cols, dtype=np.float32))
    b = jnp.asarray(rng.standard_normal(cols, dtype=np.float32))
    grid = jax.jit(jax.vmap(lambda a: layer_norm(a, w, b, "grid", launcher)))
    folded = jax.jit(lambda xs: layer_norm(xs.reshape(batch * rows, cols), w, b, launcher=launcher).reshape(xs.shape))
    sequential = jax.jit(jax.vmap(lambda a: layer_norm(a, w, b, "sequential", launcher)))
    lax_map = jax.jit(lambda xs: jax.lax.map(lambda a: layer_norm(a, w, b, launcher=launcher), xs))
    reference = np.asarray(lax_map(x))
    for fn in (grid, folded, sequential):
        np.testing.assert_allclose(np.asarray(fn(x)), reference, rtol=1e-5, atol=1e-5)
    shape = f"batch {batch} x ({rows}, {cols}) f32 layer norm, launcher {launcher or 'default'}"
    out = []
    for round_index in range(rounds):
        t_grid = median_seconds(grid, x, reps=reps)
        t_fold = median_seconds(folded, x, reps=reps)
        t_seq = median_seconds(sequential, x, reps=reps)
        t_map = median_seconds(lax_map, x, reps=reps)
        out += [
            (
                f"vmap grid       [{shape}] r{round_index}",
                t_grid,
                f"{t_grid / t_fold:.3f}x folded by hand (goal <= 1.05x), {t_map / t_grid:.2f}x faster than lax.map",
            ),
            (f"folded by hand  [{shape}] r{round_index}", t_fold, "reference"),
            (f"vmap sequential [{shape}] r{round_index}", t_seq, f"{t_map / t_seq:.2f}x vs lax.map"),
            (f"jax.lax.map     [{shape}] r{round_index}", t_map, ""),
        ]
    return out


CHAIN = 10


def bench_sharding(reps: int, size: int, launcher: str | None = None) -> list[tuple[str, float, str]]:
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    if jax.device_count() < 2:
        return [("sharded add on 2 GPUs", float("nan"), f"skipped: {jax.device_count()} device(s)")]
    block = 1024

    def add(x: Any, y: Any) -> Any:
        return jt.triton_call(
            x, y, n=x.size, kernel=add_kernel, out_shape=x, grid=(triton.cdiv(x.size, block),), BLOCK=block,
            launcher=launcher,
        )  # fmt: skip

    rng = np.random.default_rng(0)
    x_host = rng.standard_normal(size, dtype=np.float32)
    y_host = rng.standard_normal(size, dtype=np.float32)
    one = jax.devices()[0]
    x1, y1 = jax.device_put(x_host, one), jax.device_put(y_host, one)
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    sharding = NamedSharding(mesh, P("x"))
    x2, y2 = jax.device_put(x_host, sharding), jax.device_put(y_host, sharding)
    partitioned_add = jt.partitioned(jt.Elementwise())(add)

    def chain(step: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
        # Several adds per jitted call, so that per-call dispatch (larger across two devices) does not hide the
        # kernels' throughput.
        def run(x: Any, y: Any) -> Any:
            for _ in range(CHAIN):
                x = step(x, y)
            return x

        return jax.jit(run)

    single, sharded = chain(add), chain(partitioned_add)
    expected = x_host + CHAIN * y_host
    np.testing.assert_allclose(np.asarray(sharded(x2, y2)), expected, rtol=1e-5, atol=1e-5)
    text = sharded.lower(x2, y2).compile().as_text()
    gathers = "all-gather" in text
    half = size // 2
    xh, yh = jax.device_put(x_host[:half], one), jax.device_put(y_host[:half], one)
    t1 = median_seconds(single, x1, y1, reps=reps)
    t2 = median_seconds(sharded, x2, y2, reps=reps)
    th = median_seconds(single, xh, yh, reps=reps)
    gb = CHAIN * 3 * 4 * size / 1e9
    name = f"{CHAIN} chained adds of {size} f32, launcher {launcher or 'default'}"
    return [
        (f"{name}, 1 GPU", t1, f"{gb / t1:.0f} GB/s"),
        (
            f"{name}, sharded on 2 GPUs",
            t2,
            f"{gb / t2:.0f} GB/s, {t1 / t2:.3f}x vs 1 GPU (goal >= 1.95x){', ALL-GATHER IN HLO' if gathers else ''}",
        ),
        (
            f"{name}, 1 GPU on half the data",
            th,
            f"ideal for 2 GPUs: {t1 / th:.3f}x; two devices add {(t2 - th) * 1e3:.3f} ms per call",
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-sharding", action="store_true", help="the vmap rows only")
    args = parser.parse_args(argv)
    reps = 10 if args.quick else 50
    rounds = 1 if args.quick else 3
    print(f"jax {jax.__version__}, triton {triton.__version__}, devices: {[d.device_kind for d in jax.devices()]}")
    rows = []
    for launcher in ("jt", "xla"):
        for batch, height, width in ((8, 256, 1024), (8, 4096, 1024), (32, 1024, 512), (4, 16384, 1024)):
            rows += bench_vmap(reps, rounds, batch, height, width, launcher)
    for launcher in () if args.no_sharding else ("jt", "xla"):
        rows += bench_sharding(reps, size=256 * 1024 * 1024, launcher=launcher)
    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'median ms':>10}  notes")
    for name, seconds, note in rows:
        print(f"{name:<{width}}  {seconds * 1e3:>10.3f}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
