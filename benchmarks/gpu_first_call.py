"""First call of a new kernel: in a warm process, and in new processes with a cold and a warm Triton cache.

Run on the GPU machine: ``python benchmarks/gpu_first_call.py [--json FILE]``.

* warm process: JAX, the CUDA client and jt are initialised by an earlier call; then a kernel never seen before
  (new source, empty Triton cache) is called once: trace + lower (Triton compile to cubin) + XLA compile + run;
* new process, cold cache: the whole first ``triton_call`` of a fresh interpreter (imports, CUDA start, compile);
* new process, warm cache: the same with Triton's on-disk cache already holding the kernel;
* new process, warm caches, by path: the first call alone (imports done before the clock starts) of the same
  elementwise kernel through jt's ``jt`` and ``xla`` launchers, Pallas and ``jnp``, each path's caches warmed by an
  earlier process; the median of several processes per path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

_CHILD = textwrap.dedent(
    """
    import time
    start = time.perf_counter()
    import jax, jax.numpy as jnp, numpy as np, triton, triton.language as tl
    import jt_core as jt

    @triton.jit
    def fresh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * {factor} + 1.0, mask=mask)

    x = jnp.arange(4096, dtype=jnp.float32)
    out = jax.jit(lambda x: jt.triton_call(x, kernel=fresh_kernel, out_shape=x, grid=4, n=4096, BLOCK=1024))(x)
    out.block_until_ready()
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(np.asarray(out), np.arange(4096) * {factor} + 1.0)
    print(elapsed)
    """
)


_PATH_CHILD = textwrap.dedent(
    """
    import sys, time
    import jax, jax.numpy as jnp, numpy as np, triton, triton.language as tl
    import jt_core as jt
    from jax.experimental import pallas as pl

    path = sys.argv[1]

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3.0 + 1.0, mask=mask)

    def pallas_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0 + 1.0

    def call(x):
        if path == "jnp":
            return x * 3.0 + 1.0
        if path == "pallas":
            return pl.pallas_call(pallas_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
        return jt.triton_call(x, kernel=scale_kernel, out_shape=x, grid=4, n=4096, BLOCK=1024, launcher=path)

    x = jnp.arange(4096, dtype=jnp.float32)
    x.block_until_ready()
    start = time.perf_counter()
    out = jax.jit(call)(x)
    out.block_until_ready()
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(np.asarray(out), np.arange(4096) * 3.0 + 1.0)
    print(elapsed)
    """
)

PATHS = ("jt", "xla", "pallas", "jnp")


def first_call_by_path(count: int) -> dict[str, list[float]]:
    """Median-ready samples: one warm-up process per path, then ``count`` measured processes, interleaved."""
    env = dict(os.environ, TRITON_CACHE_DIR=tempfile.mkdtemp(prefix="jt-triton-cache-"))
    env.setdefault("JT_CACHE_DIR", tempfile.mkdtemp(prefix="jt-cache-"))
    script = os.path.join(tempfile.mkdtemp(prefix="jt-first-call-"), "first_call_path.py")
    with open(script, "w") as handle:
        handle.write(_PATH_CHILD)

    def run(path: str) -> float:
        result = subprocess.run([sys.executable, "-P", script, path], env=env, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"first-call child ({path}) failed:\n{result.stderr[-3000:]}")
        return float(result.stdout.strip().splitlines()[-1])

    for path in PATHS:
        run(path)
    samples: dict[str, list[float]] = {path: [] for path in PATHS}
    for _ in range(count):
        for path in PATHS:
            samples[path].append(run(path))
    return samples


def new_process(factor: float, cache_dir: str) -> float:
    env = dict(os.environ, TRITON_CACHE_DIR=cache_dir)
    script = os.path.join(tempfile.mkdtemp(prefix="jt-first-call-"), "first_call_child.py")
    with open(script, "w") as handle:  # Triton reads a kernel's source from its file
        handle.write(_CHILD.format(factor=factor))
    result = subprocess.run([sys.executable, "-P", script], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"first-call child failed:\n{result.stderr[-3000:]}")
    return float(result.stdout.strip().splitlines()[-1])


def warm_process_new_kernel(count: int) -> list[float]:
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="jt-triton-cache-")
    import jax
    import jax.numpy as jnp
    import numpy as np
    import triton
    import triton.language as tl

    import jt_core as jt

    @triton.jit
    def warmup_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)

    x = jnp.arange(4096, dtype=jnp.float32)
    jax.jit(lambda x: jt.triton_call(x, kernel=warmup_kernel, out_shape=x, grid=4, n=4096, BLOCK=1024))(x)
    times = []
    for i in range(count):
        namespace: dict[str, object] = {"triton": triton, "tl": tl}
        source = textwrap.dedent(
            f"""
            @triton.jit
            def new_kernel_{i}(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
                offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
                mask = offsets < n
                tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * {i + 2}.0, mask=mask)
            """
        )
        path = os.path.join(tempfile.mkdtemp(), f"new_kernel_{i}.py")
        with open(path, "w") as handle:
            handle.write(source)
        exec(compile(source, path, "exec"), namespace)  # Triton reads the kernel's source from the file
        kernel = namespace[f"new_kernel_{i}"]
        start = time.perf_counter()
        out = jax.jit(lambda x, k=kernel: jt.triton_call(x, kernel=k, out_shape=x, grid=4, n=4096, BLOCK=1024))(x)
        out.block_until_ready()
        times.append(time.perf_counter() - start)
        np.testing.assert_allclose(np.asarray(out), np.arange(4096) * (i + 2.0))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--count", type=int, default=5)
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="jt-triton-cache-")
    cold = new_process(3.0, cache)
    warm = new_process(3.0, cache)
    by_path = first_call_by_path(args.count)
    in_process = warm_process_new_kernel(args.count)
    results = {
        "new_process_cold_cache_s": cold,
        "new_process_warm_cache_s": warm,
        "warm_process_new_kernel_s": in_process,
        "new_process_first_call_by_path_s": by_path,
    }
    print(f"new process, cold Triton cache: {cold * 1e3:8.1f} ms")
    print(f"new process, warm Triton cache: {warm * 1e3:8.1f} ms")
    print("warm process, new kernel:       " + ", ".join(f"{t * 1e3:.1f}" for t in in_process) + " ms")
    pallas = statistics.median(by_path["pallas"])
    for path, times in by_path.items():
        median = statistics.median(times)
        print(
            f"new process, warm caches, first call only, {path:6}: median {median * 1e3:7.1f} ms "
            f"({median / pallas:.2f}x Pallas; samples {', '.join(f'{t * 1e3:.0f}' for t in times)})"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
