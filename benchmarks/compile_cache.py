"""Compile once per machine: lowering six distinct kernels for sm90 in a fresh process, then in a second one.

Each measurement runs in its own process with its own cache directories, so nothing is shared through memory:

* ``cold``: empty jt cache (``JT_CACHE_DIR``) and empty Triton cache (``TRITON_CACHE_DIR``);
* ``warm``: a second process over the same two directories;
* ``jt only``: the jt cache warm but a fresh, empty Triton cache (jt's own cache alone avoids the compile);
* ``no cache``: ``JT_DISABLE_CACHE=1`` and a fresh Triton cache (what every process pays without caching).

The figure per row is the time to lower the six kernels inside the process (JAX import and start-up excluded).
A second part compiles the eight configurations of an autotuned matmul serially and with threads.

Usage: ``python benchmarks/compile_cache.py [--arch 90] [--platform cuda]``. No GPU is needed: lowering for
``cuda`` compiles to cubin with an explicit target.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(out_ptr + row * n_cols + cols, x / rms * tl.load(w_ptr + cols, mask=mask), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


@triton.jit
def transpose_kernel(x_ptr, out_ptr, R, C, B: tl.constexpr):
    r = tl.program_id(0) * B + tl.arange(0, B)
    c = tl.program_id(1) * B + tl.arange(0, B)
    tile = tl.load(x_ptr + r[:, None] * C + c[None, :], mask=(r[:, None] < R) & (c[None, :] < C))
    tl.store(out_ptr + c[:, None] * R + r[None, :], tl.trans(tile), mask=(c[:, None] < C) & (r[None, :] < R))


MATMUL_CONFIGS = [(64, 64, 4, 3), (128, 64, 4, 3), (64, 128, 4, 3), (128, 128, 8, 3), (64, 64, 4, 4),
                  (128, 64, 8, 4), (64, 128, 8, 4), (128, 128, 4, 4)]  # fmt: skip


@triton.autotune(
    configs=[triton.Config({"BM": m, "BN": n, "BK": 32}, num_warps=w, num_stages=s) for m, n, w, s in MATMUL_CONFIGS],
    key=["M", "N", "K"],
)
@triton.jit
def tuned_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :]),
                      tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :]))  # fmt: skip
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def _six_kernels(arch: int) -> list[object]:
    import jax
    import jax.numpy as jnp

    import jt_core as jt

    f32 = jax.ShapeDtypeStruct((4096,), jnp.float32)
    rows = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    w = jax.ShapeDtypeStruct((256,), jnp.float32)
    half = jax.ShapeDtypeStruct((512, 512), jnp.float16)
    cc = {"compute_capability": arch}
    return [
        (lambda x, y: jt.triton_call(x, y, kernel=add_kernel, out_shape=x, grid=4, n=4096, BLOCK=1024, **cc),
         (f32, f32)),
        (lambda x: jt.triton_call(x, kernel=scale_kernel, out_shape=x, grid=4, n=4096, factor=2.0, BLOCK=1024, **cc),
         (f32,)),
        (lambda x: jt.triton_call(x, kernel=softmax_kernel, out_shape=x, grid=64, n_cols=256, BLOCK=256, **cc),
         (rows,)),
        (lambda x, w: jt.triton_call(x, w, kernel=rms_norm_kernel, out_shape=x, grid=64, n_cols=256, eps=1e-6,
                                     BLOCK=256, **cc), (rows, w)),
        (lambda a, b: jt.triton_call(a, b, kernel=matmul_kernel, out_shape=a, grid=(8, 8), M=512, N=512, K=512,
                                     BM=64, BN=64, BK=32, **cc), (half, half)),
        (lambda x: jt.triton_call(x, kernel=transpose_kernel, out_shape=x, grid=(16, 16), R=512, C=512, B=32, **cc),
         (half,)),
    ]  # fmt: skip


def _compile_one(index: int, arch: int, cache_dir: str) -> str:
    """Compiles config ``index`` of the autotuned matmul straight through ``triton.compile`` (a pool's task)."""
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    bm, bn, warps, stages = MATMUL_CONFIGS[index][0], MATMUL_CONFIGS[index][1], *MATMUL_CONFIGS[index][2:]
    fn = tuned_matmul_kernel.fn
    names = [p.name for p in fn.params]
    signature = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32", "N": "i32", "K": "i32",
                 "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}  # fmt: skip
    constants = {(names.index("BM"),): bm, (names.index("BN"),): bn, (names.index("BK"),): 32}
    source = ASTSource(fn=fn, signature=signature, constexprs=constants)
    compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": warps,
                                                                                   "num_stages": stages})  # fmt: skip
    return str(compiled.metadata.name)


def compile_pool(arch: int, tmp: str) -> dict[str, float]:
    """The eight configs compiled serially, by threads and by processes (each mode with an empty Triton cache)."""
    import concurrent.futures
    import multiprocessing

    workers = os.cpu_count() or 1
    _compile_one(0, arch, os.path.join(tmp, "warm-up"))  # one-time costs (loading the compiler) out of the timings
    results = {}
    for mode in ("serial", "threads", "processes"):
        cache = os.path.join(tmp, f"pool-{mode}")
        start = time.perf_counter()
        if mode == "serial":
            for i in range(len(MATMUL_CONFIGS)):
                _compile_one(i, arch, cache)
        else:
            pool: concurrent.futures.Executor
            if mode == "threads":
                pool = concurrent.futures.ThreadPoolExecutor(workers)
            else:
                pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
            with pool:
                list(pool.map(_compile_one, range(len(MATMUL_CONFIGS)), [arch] * 8, [cache] * 8))
        results[mode] = time.perf_counter() - start
    return results


def child(arch: int, platform: str, what: str) -> dict[str, float]:
    import jax
    import jax.numpy as jnp

    import jt_core as jt

    if what == "six":
        start = time.perf_counter()
        for fn, specs in _six_kernels(arch):
            jax.jit(fn).trace(*specs).lower(lowering_platforms=(platform,))
        return {"seconds": time.perf_counter() - start}
    half = jax.ShapeDtypeStruct((512, 512), jnp.float16)

    def f(a: jax.Array, b: jax.Array) -> jax.Array:
        return jt.triton_call(a, b, kernel=tuned_matmul_kernel, out_shape=a,
                              grid=lambda m: (512 // m["BM"], 512 // m["BN"]), M=512, N=512, K=512,
                              compute_capability=arch)  # fmt: skip

    start = time.perf_counter()
    jax.jit(f).trace(half, half).lower(lowering_platforms=(platform,))
    return {"seconds": time.perf_counter() - start}


def run_child(what: str, arch: int, platform: str, env: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--child", what, "--arch", str(arch), "--platform", platform],
        env={**os.environ, **env}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--platform", default="cuda")
    parser.add_argument("--child", choices=["six", "tuned"])
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--pool", action="store_true", help="only compare serial, thread and process compiles")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.arch, args.platform, args.child)))
        return
    if args.pool:
        with tempfile.TemporaryDirectory() as tmp:
            pool = compile_pool(args.arch, tmp)
        print(f"8 configs compiled straight through triton.compile, {os.cpu_count()} cores (processes include their "
              "start-up):")  # fmt: skip
        for mode, seconds in pool.items():
            print(f"  {mode:10} {seconds:8.3f} s")
        return

    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        jt_dir, triton_dir = os.path.join(tmp, "jt"), os.path.join(tmp, "triton")
        shared = {"JT_CACHE_DIR": jt_dir, "TRITON_CACHE_DIR": triton_dir}
        rows.append(("six kernels, cold (empty jt + Triton caches)", run_child("six", args.arch, args.platform,
                                                                              shared)))  # fmt: skip
        rows.append(("six kernels, second process (both caches warm)", run_child("six", args.arch, args.platform,
                                                                                shared)))  # fmt: skip
        jt_only = {"JT_CACHE_DIR": jt_dir, "TRITON_CACHE_DIR": os.path.join(tmp, "t2")}
        rows.append(("six kernels, jt cache warm, empty Triton cache", run_child("six", args.arch, args.platform,
                                                                                jt_only)))  # fmt: skip
        uncached = {"JT_DISABLE_CACHE": "1", "JT_CACHE_DIR": jt_dir, "TRITON_CACHE_DIR": os.path.join(tmp, "t3")}
        rows.append(("six kernels, no cache (JT_DISABLE_CACHE=1, empty Triton cache)",
                     run_child("six", args.arch, args.platform, uncached)))  # fmt: skip
        for workers in (1, os.cpu_count() or 1):
            env = {"JT_DISABLE_CACHE": "1", "JT_COMPILE_WORKERS": str(workers),
                   "TRITON_CACHE_DIR": os.path.join(tmp, f"w{workers}")}  # fmt: skip
            rows.append((f"8-config autotuned matmul, {workers} compile thread(s), no cache",
                         run_child("tuned", args.arch, args.platform, env)))  # fmt: skip
    cold = rows[0][1]
    print(f"compile cache benchmark: lowering for {args.platform} sm{args.arch}, {os.cpu_count()} cores")
    print(f"{'case':66} {'seconds':>8} {'vs cold':>8}")
    for label, seconds in rows:
        print(f"{label:66} {seconds:8.3f} {seconds / cold:8.1%}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"cores": os.cpu_count(), "rows": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
