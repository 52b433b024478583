"""A tuned call at the winner's speed: an 8-config autotuned 4096³ bf16 matmul against its winning config called
fixed, in the process that tuned it and in a second process that reads the tuning record.

One process (a new cache folder) first calls the autotuned kernel, which tunes it, and reads which config won; it
then times the winner called fixed and the autotuned call in interleaved rounds (each round: 20 calls enqueued, then
one wait; the order alternates between rounds). A second process on the same cache folder does the same with the
record read back. The figure that matters is the ratio tuned / fixed in each process (goal: at least 0.98).

``--diagnose`` adds a third process on a new cache folder with ``JT_TUNE_AHEAD=0``: the handler keeps every config
and tunes when the call first runs, as jt did before tuning ahead. It times, per stage, the lowering and compile,
the first run (the tuning), the steady calls of that executable, a second executable of the same function made in
the same process after the record exists (its handler reads the winner when XLA instantiates it), and the winner
fixed; with what the handler did in between (kernel nodes created, updated and stream captures of XLA's command
buffers, code objects loaded). Where the in-process tuned executable is slower than both the re-made one and the
fixed call, the time is lost in the executable kept from tuning; where the re-made one is slow too, in the process.

``--dry`` runs everything on the CPU with a 64³ float32 matmul and configs small enough for it
(``JT_CPU_AUTOTUNE=1``): a check that the benchmark runs, not a measurement.

Usage: ``python benchmarks/gpu_autotune_speed.py [--rounds 7] [--calls 20] [--diagnose] [--dry] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import triton
import triton.language as tl

#: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages); Triton's own autotuner picks index 1 for 4096³ bf16 on an H200.
CONFIGS = [(128, 128, 64, 4, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (64, 128, 64, 4, 4),
           (128, 64, 64, 4, 4), (128, 128, 32, 4, 4), (64, 64, 64, 4, 3), (128, 128, 64, 8, 4)]  # fmt: skip
DRY_CONFIGS = [(16, 16, 16, 1, 1), (32, 32, 16, 2, 1), (16, 32, 32, 2, 2), (32, 16, 16, 1, 2)]


@triton.jit
def tiled_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """``C = A @ B`` for row-major matrices whose sizes the blocks divide, one (BM, BN) tile per program."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


def label(config: tuple[int, ...]) -> str:
    """How jt labels a config of this kernel."""
    bm, bn, bk, warps, stages = config
    return f"BM={bm}, BN={bn}, BK={bk}, num_warps={warps}, num_stages={stages}"


def setting(dry: bool) -> tuple[int, list[tuple[int, ...]], Any]:
    import jax.numpy as jnp

    return (64, DRY_CONFIGS, jnp.float32) if dry else (4096, CONFIGS, jnp.bfloat16)


def calls(dry: bool) -> tuple[Callable[..., Any], Callable[[tuple[int, ...]], Callable[..., Any]], Any, Any]:
    """The autotuned call, a maker of the fixed call of one config, and two operands."""
    import jax

    import jt_core as jt

    size, configs, dtype = setting(dry)
    autotuned = triton.autotune(
        configs=[triton.Config({"BM": m, "BN": n, "BK": k}, num_warps=w, num_stages=s) for m, n, k, w, s in configs],
        key=["M", "N", "K"],
    )(tiled_matmul_kernel)

    def tuned(a: Any, b: Any) -> Any:
        return jt.triton_call(
            a, b, kernel=autotuned, out_shape=a, grid=lambda m: (size // m["BM"], size // m["BN"]), M=size, N=size,
            K=size,
        )  # fmt: skip

    def fixed(config: tuple[int, ...]) -> Callable[..., Any]:
        bm, bn, bk, warps, stages = config

        def call(a: Any, b: Any) -> Any:
            return jt.triton_call(
                a, b, kernel=tiled_matmul_kernel, out_shape=a, grid=(size // bm, size // bn), M=size, N=size, K=size,
                BM=bm, BN=bn, BK=bk, num_warps=warps, num_stages=stages,
            )  # fmt: skip

        return call

    a = jax.random.normal(jax.random.key(0), (size, size), dtype)
    b = jax.random.normal(jax.random.key(1), (size, size), dtype)
    return tuned, fixed, a, b


def seconds_per_call(fn: Callable[..., Any], a: Any, b: Any, count: int) -> float:
    """``count`` calls enqueued, then one wait (blocking on each call would add the wait to each)."""
    fn(a, b).block_until_ready()
    start = time.perf_counter()
    out = None
    for _ in range(count):
        out = fn(a, b)
    assert out is not None
    out.block_until_ready()
    return (time.perf_counter() - start) / count


def interleaved(
    variants: dict[str, Callable[..., Any]], a: Any, b: Any, rounds: int, count: int, size: int
) -> dict[str, dict[str, Any]]:
    """TFLOP/s of each variant over ``rounds`` rounds, the order reversed every other round."""
    names = list(variants)
    figures: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            figures[name].append(2 * size**3 / seconds_per_call(variants[name], a, b, count) / 1e12)
    return {
        name: {"tflops_median": statistics.median(values), "tflops_min": min(values), "tflops_max": max(values),
               "tflops": values}
        for name, values in figures.items()
    }  # fmt: skip


def winner_of(fn: Callable[..., Any], a: Any, b: Any, configs: list[tuple[int, ...]]) -> int:
    """The config the tuning record names for this call (written by the handler, or by the CPU's tuner)."""
    import jax

    from jt_core import tuning
    from jt_core.cpu.compiled.launcher import COMPILED_DEVICE_NAME
    from jt_core.cpu.lowered import CPU_DEVICE_NAME

    jaxpr = jax.make_jaxpr(fn)(a, b)
    (call,) = [e.params["call"] for e in jaxpr.eqns if "call" in e.params]
    device = a.devices().pop() if hasattr(a, "devices") else jax.devices()[0]
    names = [f"{device.platform}:{device.device_kind}", COMPILED_DEVICE_NAME, CPU_DEVICE_NAME]
    if device.platform == "gpu":
        names[0] = f"cuda:{device.device_kind}"
    for name in names:
        index = tuning.load_choice(tuning.tuning_key(call, name), len(call.configs))
        if index is not None:
            picked = call.configs[index].label
            return next(i for i, config in enumerate(configs) if label(config) == picked)
    raise SystemExit(f"no tuning record for the autotuned call (looked under {names})")


def handler_counts() -> dict[str, int]:
    """What jt's CUDA handler did so far in this process (zeros without one)."""
    try:
        from jt_cuda.launchers import HANDLER

        created, updated, captured = HANDLER.record_counts()
        return {"created": created, "updated": updated, "captured": captured, "modules": HANDLER.modules_loaded()}
    except Exception:
        return {"created": 0, "updated": 0, "captured": 0, "modules": 0}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {key: after[key] - before[key] for key in after}


def process(role: str, dry: bool, rounds: int, count: int, winner: int | None) -> dict[str, Any]:
    """One process's measurements: ``first`` (tunes, then times), ``second`` (reads the record, then times) or
    ``in-handler`` (``JT_TUNE_AHEAD=0``: stage by stage)."""
    import jax

    size, configs, _ = setting(dry)
    tuned, fixed, a, b = calls(dry)
    result: dict[str, Any] = {"role": role, "device": str(jax.devices()[0].device_kind), "size": size}
    counts = handler_counts()
    start = time.perf_counter()
    compiled = jax.jit(tuned).lower(a, b).compile()
    result["compile_s"] = time.perf_counter() - start
    start = time.perf_counter()
    out = compiled(a, b)
    out.block_until_ready()
    result["first_run_s"] = time.perf_counter() - start
    result["handler_after_first_run"] = delta(counts, handler_counts())
    index = winner if winner is not None else winner_of(tuned, a, b, configs)
    result["winner"] = label(configs[index])
    reference = jax.numpy.dot(a[:128].astype("float32"), b.astype("float32"))
    error = float(jax.numpy.max(jax.numpy.abs(out[:128].astype("float32") - reference)))
    result["max_abs_error_first_rows"] = error
    variants: dict[str, Callable[..., Any]] = {"fixed": jax.jit(fixed(configs[index])), "tuned": compiled}
    if role == "in-handler":
        counts = handler_counts()
        remade = jax.jit(lambda x, y: tuned(x, y))  # a new executable: its handler reads the record
        remade(a, b).block_until_ready()
        result["handler_after_remade_first_run"] = delta(counts, handler_counts())
        variants["tuned, executable made after the record"] = remade
    counts = handler_counts()
    result["speed"] = interleaved(variants, a, b, rounds, count, size)
    result["handler_during_timing"] = delta(counts, handler_counts())
    fixed_speed = result["speed"]["fixed"]["tflops_median"]
    result["ratios"] = {name: v["tflops_median"] / fixed_speed for name, v in result["speed"].items()}
    return result


def run_child(role: str, env: dict[str, str], args: argparse.Namespace, winner: int | None) -> dict[str, Any]:
    command = [sys.executable, "-P", __file__, "--child", role, "--rounds", str(args.rounds)]
    command += ["--calls", str(args.calls)]
    if args.dry:
        command.append("--dry")
    if winner is not None:
        command += ["--winner", str(winner)]
    out = subprocess.run(command, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the {role!r} process failed:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["said"] = [line for line in out.stderr.splitlines() if line.startswith(("jt: ", "jt_cuda: "))]
    return result


def table(results: dict[str, Any]) -> None:
    print(f"{'process':<12} {'variant':<42} {'TFLOP/s median':>15} {'min':>8} {'max':>8} {'/ fixed':>8}")
    for role, run in results.items():
        for name, figure in run["speed"].items():
            print(f"{role:<12} {name:<42} {figure['tflops_median']:15.4g} {figure['tflops_min']:8.4g} "
                  f"{figure['tflops_max']:8.4g} {run['ratios'][name]:8.3f}")  # fmt: skip
    for role, run in results.items():
        print(f"{role}: winner [{run['winner']}], compile {run['compile_s']:.3f} s, first run {run['first_run_s']:.4f} "
              f"s, handler after the first run {run['handler_after_first_run']}, while timing "
              f"{run['handler_during_timing']}")  # fmt: skip
        if "handler_after_remade_first_run" in run:
            print(f"{role}: handler after the re-made executable's first run {run['handler_after_remade_first_run']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--winner", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--diagnose", action="store_true", help="also time the handler's in-process tuning by stage")
    parser.add_argument("--dry", action="store_true", help="run on the CPU with a small matmul (no measurement)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.child:
        if args.dry:
            os.environ["JT_CPU_AUTOTUNE"] = "1"
            import jax

            jax.config.update("jax_platforms", "cpu")
        print(json.dumps(process(args.child, args.dry, args.rounds, args.calls, args.winner)))
        return
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "JT_CACHE_DIR": os.path.join(tmp, "jt"), "TRITON_CACHE_DIR": os.path.join(tmp, "t")}
        env.pop("JT_DISABLE_CACHE", None)
        env.pop("JT_TUNE_AHEAD", None)
        results["first"] = run_child("first", env, args, None)
        results["second"] = run_child("second", env, args, None)
        if args.diagnose:
            fresh = {**env, "JT_CACHE_DIR": os.path.join(tmp, "jt-in-handler"), "JT_TUNE_AHEAD": "0"}
            winner = next(i for i, c in enumerate(setting(args.dry)[1]) if label(c) == results["first"]["winner"])
            results["in-handler"] = run_child("in-handler", fresh, args, winner)
    print(f"8-config autotuned {results['first']['size']}^3 matmul on {results['first']['device']}"
          f"{' (dry run on the CPU: not a measurement)' if args.dry else ''}")  # fmt: skip
    table(results)
    for role in ("first", "second"):
        print(f"{role} process: tuned / fixed = {results[role]['ratios']['tuned']:.3f} (goal >= 0.98)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
