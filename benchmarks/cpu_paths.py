"""jt's two CPU paths side by side: the compiled path (a kernel's TTIR compiled by XLA, launcher ``compiled``) and
Triton's interpreter (launcher ``ffi``), against Pallas's ``interpret=True`` and ``jax.numpy`` under ``jax.jit``.

Four kernels, each written once for Triton and once for Pallas, checked against NumPy before timing:

* ``add``: 1M float32, BLOCK 1024 (1024 programs);
* ``softmax``: a row softmax of 256 x 1024 float32, one program per row;
* ``matmul``: 256 x 256 x 256 float32, blocks 64 x 64 x 32, ``input_precision="ieee"``;
* ``tail``: a leaky ReLU on 1,000,003 float32 (a masked last block), BLOCK 1024.

Every case is timed in the same process, in interleaved rounds (each round times every case once, in turn), so a
change of load on the machine shows in all of them; a sample is the mean of ``--calls`` calls (the interpreter's,
and any path's slower than 50 ms per call: one call), and the figures are medians over the rounds. The matmul's
first call (Triton's front end, the trace, XLA's compile) is timed in a new process with an empty cache (jt's CPU
handler library built beforehand, as a wheel carries it).

``python benchmarks/cpu_paths.py`` prints, per kernel, the ms per call of each path (median and range over the
rounds) and the compiled path's time over Pallas's and over ``jnp``'s, taken round by round (median and range),
against the goal (at most 0.5x Pallas, within 3x ``jnp``). ``--rounds R`` (default 7), ``--interpreter-rounds R``
(default 2: the interpreter takes seconds per call; 0 leaves it out), ``--no-first-call``, ``--clock cpu`` (the
process's CPU time instead of wall time: on a busy machine, less disturbed by other jobs), ``--json FILE`` writes
every sample, ratio and the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl
from jax.experimental import pallas as pl

import jt_core as jt

ADD_N = 1 << 20
TAIL_N = 1_000_003
BLOCK = 1024
ROWS, COLS = 256, 1024
M = N = K = 256
BM, BN, BK = 64, 64, 32


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < cols
    x = tl.load(x_ptr + row * cols + offsets, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * cols + offsets, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(b_ptr + (k + ks)[:, None] * N + cols[None, :])
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc)


@triton.jit
def leaky_relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(x > 0, x, 0.01 * x), mask=mask)


def triton_cases(launcher: str) -> dict[str, Callable[..., jax.Array]]:
    """The four kernels through ``jt.triton_call`` with ``launcher``, jitted."""

    def add(x: jax.Array, y: jax.Array) -> jax.Array:
        return jt.triton_call(
            x, y, kernel=add_kernel, out_shape=x, grid=jt.cdiv(x.size, BLOCK), n=x.size, BLOCK=BLOCK, launcher=launcher
        )

    def softmax(x: jax.Array) -> jax.Array:
        return jt.triton_call(
            x, kernel=softmax_kernel, out_shape=x, grid=x.shape[0], cols=x.shape[1], BLOCK=COLS, launcher=launcher
        )

    def matmul(a: jax.Array, b: jax.Array) -> jax.Array:
        return jt.triton_call(
            a,
            b,
            kernel=matmul_kernel,
            out_shape=jax.ShapeDtypeStruct((M, N), jnp.float32),
            grid=(M // BM, N // BN),
            M=M,
            N=N,
            K=K,
            BLOCK_M=BM,
            BLOCK_N=BN,
            BLOCK_K=BK,
            launcher=launcher,
        )

    def tail(x: jax.Array) -> jax.Array:
        return jt.triton_call(
            x,
            kernel=leaky_relu_kernel,
            out_shape=x,
            grid=jt.cdiv(x.size, BLOCK),
            n=x.size,
            BLOCK=BLOCK,
            launcher=launcher,
        )

    return {"add": jax.jit(add), "softmax": jax.jit(softmax), "matmul": jax.jit(matmul), "tail": jax.jit(tail)}


def pallas_cases() -> dict[str, Callable[..., jax.Array]]:
    """The same four kernels in Pallas, with ``interpret=True``."""

    def add_body(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
        o_ref[...] = x_ref[...] + y_ref[...]

    def add(x: jax.Array, y: jax.Array) -> jax.Array:
        spec = pl.BlockSpec((BLOCK,), lambda i: (i,))
        return pl.pallas_call(
            add_body, out_shape=x, grid=(pl.cdiv(x.size, BLOCK),), in_specs=[spec, spec], out_specs=spec, interpret=True
        )(x, y)

    def softmax_body(x_ref: Any, o_ref: Any) -> None:
        x = x_ref[...]
        e = jnp.exp(x - jnp.max(x, axis=-1, keepdims=True))
        o_ref[...] = e / jnp.sum(e, axis=-1, keepdims=True)

    def softmax(x: jax.Array) -> jax.Array:
        spec = pl.BlockSpec((1, COLS), lambda i: (i, 0))
        return pl.pallas_call(
            softmax_body, out_shape=x, grid=(x.shape[0],), in_specs=[spec], out_specs=spec, interpret=True
        )(x)

    def matmul_body(a_ref: Any, b_ref: Any, o_ref: Any) -> None:
        def step(i: Any, acc: jax.Array) -> jax.Array:
            a = a_ref[:, pl.ds(i * BK, BK)]
            b = b_ref[pl.ds(i * BK, BK), :]
            return acc + jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST)

        o_ref[...] = jax.lax.fori_loop(0, K // BK, step, jnp.zeros((BM, BN), jnp.float32))

    def matmul(a: jax.Array, b: jax.Array) -> jax.Array:
        return pl.pallas_call(
            matmul_body,
            out_shape=jax.ShapeDtypeStruct((M, N), jnp.float32),
            grid=(M // BM, N // BN),
            in_specs=[pl.BlockSpec((BM, K), lambda i, j: (i, 0)), pl.BlockSpec((K, BN), lambda i, j: (0, j))],
            out_specs=pl.BlockSpec((BM, BN), lambda i, j: (i, j)),
            interpret=True,
        )(a, b)

    def tail_body(x_ref: Any, o_ref: Any) -> None:
        x = x_ref[...]
        o_ref[...] = jnp.where(x > 0, x, 0.01 * x)

    def tail(x: jax.Array) -> jax.Array:
        spec = pl.BlockSpec((BLOCK,), lambda i: (i,))
        return pl.pallas_call(
            tail_body, out_shape=x, grid=(pl.cdiv(x.size, BLOCK),), in_specs=[spec], out_specs=spec, interpret=True
        )(x)

    return {"add": jax.jit(add), "softmax": jax.jit(softmax), "matmul": jax.jit(matmul), "tail": jax.jit(tail)}


def jnp_cases() -> dict[str, Callable[..., jax.Array]]:
    """The same four computations in ``jax.numpy``."""
    return {
        "add": jax.jit(lambda x, y: x + y),
        "softmax": jax.jit(lambda x: jax.nn.softmax(x, axis=-1)),
        "matmul": jax.jit(lambda a, b: jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST)),
        "tail": jax.jit(lambda x: jnp.where(x > 0, x, 0.01 * x)),
    }


def inputs() -> dict[str, tuple[jax.Array, ...]]:
    keys = jax.random.split(jax.random.key(0), 6)
    return {
        "add": (jax.random.normal(keys[0], (ADD_N,)), jax.random.normal(keys[1], (ADD_N,))),
        "softmax": (jax.random.normal(keys[2], (ROWS, COLS)),),
        "matmul": (jax.random.normal(keys[3], (M, K)), jax.random.normal(keys[4], (K, N))),
        "tail": (jax.random.normal(keys[5], (TAIL_N,)),),
    }


def reference(name: str, args: Sequence[jax.Array]) -> np.ndarray:
    """What each kernel computes, in NumPy (float64 where it sums)."""
    a = [np.asarray(x, np.float64) for x in args]
    if name == "add":
        return a[0] + a[1]
    if name == "softmax":
        e = np.exp(a[0] - a[0].max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    if name == "matmul":
        return a[0] @ a[1]
    return np.where(a[0] > 0, a[0], 0.01 * np.asarray(args[0], np.float32).astype(np.float64))


def timed(
    fn: Callable[..., jax.Array],
    args: Sequence[jax.Array],
    calls: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """The mean time of ``calls`` calls, each waited for (dispatch and ``block_until_ready`` included), on ``clock``
    (wall time; ``time.process_time``: the CPU time of every thread of the process)."""
    start = clock()
    for _ in range(calls):
        jax.block_until_ready(fn(*args))
    return (clock() - start) / calls


def first_call_seconds() -> float:
    """The matmul's first call through the compiled path, in a new process with an empty jt cache: Triton's front
    end, the trace, XLA's compile and the run (the imports are not counted)."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        f"import time, sys; sys.path.insert(0, {here!r}); import cpu_paths as b, jax;"
        "args = b.inputs()['matmul']; jax.block_until_ready(args);"
        "fn = b.triton_cases('compiled')['matmul'];"
        "start = time.perf_counter(); jax.block_until_ready(fn(*args)); print(time.perf_counter() - start)"
    )
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, JT_CACHE_DIR=cache, TRITON_CACHE_DIR=os.path.join(cache, "triton"))
        # jt's CPU handler library, which the wheels carry, is built first (not timed): the figure is the kernel's.
        subprocess.run([sys.executable, "-m", "jt_core", "build-native"], env=env, capture_output=True, check=True)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"{model}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; python {platform.python_version()}, "
        f"jax {jax.__version__}, triton {triton.__version__}, jt-core {jt.__version__}"
    )


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _range(values: Sequence[float], digits: int) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


#: The goal: the compiled path within this many times ``jnp``, and at most this fraction of Pallas.
GOAL_JNP, GOAL_PALLAS = 3.0, 0.5


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--interpreter-rounds", type=int, default=2, help="0 leaves the interpreter out")
    parser.add_argument("--calls", type=int, default=10, help="calls per sample (one for a path slower than 50 ms)")
    parser.add_argument("--no-first-call", action="store_true", help="leave out the first call in a new process")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time (the default), or the process's CPU time, which other jobs on a busy machine disturb less "
        "(with XLA_FLAGS='--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1', the work of one thread)",
    )
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    jax.config.update("jax_platforms", "cpu")
    load_before = os.getloadavg()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    print(machine(), flush=True)
    data = inputs()
    paths = {
        "compiled": triton_cases("compiled"),
        "interpreter": triton_cases("ffi"),
        "pallas": pallas_cases(),
        "jnp": jnp_cases(),
    }
    if args.interpreter_rounds <= 0:
        del paths["interpreter"]
    tolerance = {"add": 0, "tail": 0, "softmax": 1e-6, "matmul": 1e-4}
    calls: dict[tuple[str, str], int] = {}
    for name, operands in data.items():
        want = reference(name, operands)
        for path, cases in paths.items():
            got = np.asarray(cases[name](*operands), np.float64)
            np.testing.assert_allclose(
                got, want, rtol=tolerance[name] or 1e-7, atol=tolerance[name], err_msg=f"{path} {name}"
            )
            slow = path == "interpreter" or timed(cases[name], operands) > 0.05
            calls[path, name] = 1 if slow else args.calls
    times: dict[str, dict[str, list[float]]] = {path: {name: [] for name in data} for path in paths}
    for round_index in range(args.rounds):
        for name, operands in data.items():
            for path, cases in paths.items():
                if path == "interpreter" and round_index >= args.interpreter_rounds:
                    continue
                times[path][name].append(timed(cases[name], operands, calls[path, name], clock) * 1e3)
    first = None if args.no_first_call else first_call_seconds()
    load_after = os.getloadavg()
    # Each round timed the compiled path and its references back to back: the ratio of one round's samples is
    # what load on the machine disturbs least.
    ratios = {
        reference: {name: [c / r for c, r in zip(times["compiled"][name], times[reference][name])] for name in data}
        for reference in ("pallas", "jnp")
    }
    print(
        f"\n{args.clock} ms per call over {args.rounds} interleaved rounds (a sample: the mean of {args.calls} calls, "
        f"or of one for a path slower than 50 ms; the interpreter: {args.interpreter_rounds} rounds): median [min-max]"
    )
    print(
        f"{'kernel':8} {'compiled':>22} {'pallas':>26} {'jnp':>22}"
        + (f" {'interpreter':>14}" if "interpreter" in paths else "")
    )
    for name in data:
        line = f"{name:8} {_range(times['compiled'][name], 3):>22} {_range(times['pallas'][name], 2):>26}"
        line += f" {_range(times['jnp'][name], 3):>22}"
        if "interpreter" in paths:
            line += f" {statistics.median(times['interpreter'][name]):14.1f}"
        print(line)
    print(
        f"\ncompiled / reference, per round: median [min-max]; goal <= {GOAL_PALLAS} x Pallas and <= {GOAL_JNP} x jnp"
    )
    print(f"{'kernel':8} {'/ pallas':>24} {'/ jnp':>20}  goal")
    for name in data:
        to_pallas, to_jnp = ratios["pallas"][name], ratios["jnp"][name]
        met = statistics.median(to_pallas) <= GOAL_PALLAS and statistics.median(to_jnp) <= GOAL_JNP
        print(f"{name:8} {_range(to_pallas, 3):>24} {_range(to_jnp, 2):>20}  {'met' if met else 'MISSED'}")
    print(f"\nload average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    if first is not None:
        print(f"matmul first call through the compiled path, new process, empty cache: {first:.2f} s")
    if args.json:
        figures = {
            "machine": machine(),
            "load_average": {"before": list(load_before), "after": list(load_after)},
            "rounds": args.rounds,
            "clock": args.clock,
            "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "calls_per_sample": {f"{path}/{name}": n for (path, name), n in calls.items()},
            "ms_per_call": {path: {name: _spread(v) for name, v in per.items() if v} for path, per in times.items()},
            "samples_ms": times,
            "compiled_over": {
                ref: {name: {**_spread(v), "rounds": v} for name, v in per.items()} for ref, per in ratios.items()
            },
            "goal": {"jnp": GOAL_JNP, "pallas": GOAL_PALLAS},
            "first_call_s": first,
        }
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
