"""Cost of Triton's interpreter on jt's CPU backend (launcher ``ffi``) inside ``jax.jit``: per call and per program
instance. (The compiled path, the CPU default, is measured side by side with it by ``benchmarks/cpu_paths.py``.)

Measures, on JAX's CPU platform:

* the per-call overhead: a kernel with one program on 16 floats, one ``triton_call`` per jitted call, median of
  many calls; next to it the same jitted function doing ``x + 1`` in ``jax.numpy`` (JAX's own dispatch) and a
  ``jax.pure_callback`` returning its input (the host-callback floor), so that the net figure is
  ``raw - jnp baseline``; plus the marginal cost of one more call in a chain of calls inside one ``jax.jit``;
* the per-program cost of a 1M-element float32 add: the same total work split over more and more programs; the
  slope of the least-squares line ``time = a + b * programs`` is the cost of one program instance;
* a 256 x 256 x 256 float32 matmul with ``tl.dot`` for a few block sizes (time per call and per program);

each with the bounds check on (the default), off, and with the race check on top of it (``jt.cpu_checks``).

``python benchmarks/cpu_interpreter.py`` prints a table; ``--profile`` also prints where the time of one
overhead call goes (cProfile); ``--quick`` uses fewer repetitions.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import dataclasses
import io
import os
import platform
import pstats
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import jt_core as jt

TARGET_CALL_MS = 1.5
TARGET_PROGRAM_MS = 0.6


@triton.jit
def add_kernel(x_ptr, y_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.full((BLOCK_M, BLOCK_N), 0.0, tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rows[:, None] * K + (k + ks)[None, :])
        b = tl.load(b_ptr + (k + ks)[:, None] * N + cols[None, :])
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc)


#: The checks a case runs with: the bounds check on (the default), off, or the race check on top of it.
MODES = ("on", "off", "races")


@contextlib.contextmanager
def checks(mode: str) -> Iterator[None]:
    """Chooses the CPU backend's checks (one of `MODES`) for the calls traced inside the block."""
    with jt.cpu_checks(bounds=mode != "off", races=mode == "races", unwritten="error"):
        yield


@dataclasses.dataclass
class Case:
    """One thing to time: a jitted function and its arguments."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    #: The checks (one of MODES) it runs with: part of jax.jit's cache key, so each call is made inside them.
    mode: str = "on"
    times: list[float] = dataclasses.field(default_factory=list)
    cpu_times: list[float] = dataclasses.field(default_factory=list)

    def __call__(self) -> Any:
        with checks(self.mode):
            return jax.block_until_ready(self.fn(*self.args))

    @property
    def median(self) -> float:
        return statistics.median(self.times) * 1e3

    @property
    def cpu_median(self) -> float:
        """Median CPU time of the process (all its threads) per call: what other processes' load inflates least."""
        return statistics.median(self.cpu_times) * 1e3

    @property
    def best(self) -> float:
        return min(self.times) * 1e3


def time_interleaved(cases: Sequence[Case], rounds: int, calls_per_round: int = 1) -> None:
    """Times every case ``rounds`` times, one case after the other in each round, so that a change of load on
    the machine affects all of them alike. Each sample is the mean of ``calls_per_round`` calls (dispatch and
    ``block_until_ready`` included). The cases are already compiled (each was called once to check it)."""
    for case in cases:
        case()
    for _ in range(rounds):
        for case in cases:
            start, cpu_start = time.perf_counter(), time.process_time()
            for _ in range(calls_per_round):
                case()
            case.times.append((time.perf_counter() - start) / calls_per_round)
            case.cpu_times.append((time.process_time() - cpu_start) / calls_per_round)


def add(x: jax.Array, y: jax.Array, grid: int) -> jax.Array:
    block = jt.next_power_of_2(jt.cdiv(x.size, grid))
    return jt.triton_call(x, y, x.size, kernel=add_kernel, out_shape=x, grid=grid, BLOCK=block)


def overhead_cases(chain: int) -> dict[str, Case]:
    """Per-call cases for a one-program kernel (bounds check on, the default), checked once."""
    x = jnp.arange(16, dtype=jnp.float32)
    y = jnp.ones(16, jnp.float32)

    def chained(x: jax.Array, y: jax.Array) -> jax.Array:
        for _ in range(chain):
            x = add(x, y, 1)
        return x

    cases = {
        "raw": Case(jax.jit(lambda x, y: add(x, y, 1)), (x, y)),
        "chain": Case(jax.jit(chained), (x, y)),
        "jnp_baseline": Case(jax.jit(lambda x, y: x + 1.0), (x, y)),
        "callback_baseline": Case(
            jax.jit(
                lambda x, y: jax.pure_callback(lambda a: np.asarray(a) + 1, jax.ShapeDtypeStruct((16,), x.dtype), x)
            ),
            (x, y),
        ),
    }
    np.testing.assert_array_equal(np.asarray(cases["raw"].fn(x, y)), np.arange(16) + 1.0)
    np.testing.assert_array_equal(np.asarray(cases["chain"].fn(x, y)), np.arange(16) + float(chain))
    return cases


def fit_slope(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``; returns ``(a, b)``."""
    b, a = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(a), float(b)


def add_cases(grids: Sequence[int], mode: str) -> dict[int, Case]:
    """A 1M-element add split over each grid size, checked once."""
    size = 1 << 20
    x = jax.random.normal(jax.random.key(0), (size,), jnp.float32)
    y = jax.random.normal(jax.random.key(1), (size,), jnp.float32)
    cases = {}
    for grid in grids:
        cases[grid] = Case(jax.jit(lambda x, y, grid=grid: add(x, y, grid)), (x, y), mode)
        np.testing.assert_array_equal(np.asarray(cases[grid]()), np.asarray(x + y))
    return cases


def matmul_cases(blocks: Sequence[tuple[int, int, int]], mode: str) -> dict[tuple[int, int, int], Case]:
    """A 256^3 float32 matmul per block size, checked once against NumPy in float64."""
    m = n = k = 256
    a = jax.random.normal(jax.random.key(2), (m, k), jnp.float32)
    b = jax.random.normal(jax.random.key(3), (k, n), jnp.float32)
    want = np.asarray(a, np.float64) @ np.asarray(b, np.float64)
    cases = {}
    for bm, bn, bk in blocks:

        def fn(a: jax.Array, b: jax.Array, bm: int = bm, bn: int = bn, bk: int = bk) -> jax.Array:
            return jt.triton_call(
                a,
                b,
                kernel=matmul_kernel,
                out_shape=jax.ShapeDtypeStruct((m, n), jnp.float32),
                grid=(m // bm, n // bn),
                M=m,
                N=n,
                K=k,
                BLOCK_M=bm,
                BLOCK_N=bn,
                BLOCK_K=bk,
            )

        cases[(bm, bn, bk)] = Case(jax.jit(fn), (a, b), mode)
        np.testing.assert_allclose(np.asarray(cases[(bm, bn, bk)]()), want, rtol=1e-4, atol=1e-3)
    return cases


def matmul_programs(block: tuple[int, int, int]) -> int:
    return (256 // block[0]) * (256 // block[1])


PROFILE_GROUPS = (
    ("jt_core/interpreter", "jt-core: CPU backend (runner, bounds check, buffers)"),
    ("jt_core", "jt-core: the rest"),
    ("triton/runtime/interpreter", "triton: interpreter (numpy ops)"),
    ("triton/language", "triton: language front end (semantic, types)"),
    ("triton", "triton: other"),
    ("numpy", "numpy (Python level)"),
    ("jax", "jax (dispatch, callback plumbing)"),
)


def profile(fn: Callable[..., Any], args: Sequence[Any], calls: int, top: int) -> str:
    """cProfile of ``calls`` calls of an already compiled ``fn``: own time per package, then the top functions.

    The host callback runs on the calling thread, so the profile sees the interpreter.
    """
    jax.block_until_ready(fn(*args))
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    for _ in range(calls):
        jax.block_until_ready(fn(*args))
    profiler.disable()
    wall = (time.perf_counter() - start) / calls * 1e3
    stats = pstats.Stats(profiler)
    groups: dict[str, float] = {}
    total = 0.0
    for (filename, _, _), (_, _, own, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        total += own
        path = filename.replace(os.sep, "/")
        label = next(
            (label for key, label in PROFILE_GROUPS if f"/{key}/" in path or path.endswith(f"/{key}.py")),
            "other (builtins, C calls)",
        )
        groups[label] = groups.get(label, 0.0) + own
    lines = [f"  wall time under the profiler {wall:.2f} ms per call; own time by package, per call:"]
    for label, own in sorted(groups.items(), key=lambda item: -item[1]):
        lines.append(f"    {label:54} {own / calls * 1e3:8.3f} ms  {100 * own / total:5.1f} %")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    text = out.getvalue()
    lines.append(text[text.index("ncalls") - 3 :] if "ncalls" in text else text)
    return "\n".join(lines)


def environment() -> str:
    return (
        f"python {platform.python_version()}, jax {jax.__version__}, jaxlib {jax.lib.__version__}, "
        f"triton {triton.__version__}, numpy {np.__version__}, jt-core {jt.__version__}; "
        f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}; load average "
        f"{os.getloadavg()[0]:.1f} (other processes' load inflates the wall-clock figures)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Per-call and per-program cost of jt's CPU backend.")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run, noisier figures)")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one-program calls")
    args = parser.parse_args(argv)
    jax.config.update("jax_platforms", "cpu")
    # The interpreter's costs: the compiled path (the CPU default) is measured by benchmarks/cpu_paths.py.
    os.environ["JT_LAUNCHER_CPU"] = "ffi"
    call_rounds, rounds = (10, 3) if args.quick else (40, 7)
    grids = (8, 32, 128) if args.quick else (16, 64, 256, 1024)
    blocks = ((64, 64, 64),) if args.quick else ((32, 32, 32), (64, 64, 32), (64, 64, 64), (128, 128, 64))

    print(environment())
    chain = 20
    overhead = overhead_cases(chain)
    time_interleaved(list(overhead.values()), rounds=call_rounds, calls_per_round=10)
    raw, base = overhead["raw"], overhead["jnp_baseline"]
    per_chain = overhead["chain"]
    print(f"\nPer call (one-program kernel on 16 floats, bounds check on); median and best of {call_rounds} samples")
    print(f"  {'':44}{'median':>8}  {'best':>7}")
    rows = [
        ("triton_call in its own jax.jit call, raw", raw.median, raw.best),
        ("jnp x + 1 in its own jax.jit call (baseline)", base.median, base.best),
        (
            "jax.pure_callback x + 1 (host callback floor)",
            overhead["callback_baseline"].median,
            overhead["callback_baseline"].best,
        ),
        ("triton_call, net of the jnp baseline", raw.median - base.median, raw.best - base.best),
        (f"chain of {chain} calls in one jax.jit, per call", per_chain.median / chain, per_chain.best / chain),
        (
            f"chain of {chain}: marginal cost of one more call",
            (per_chain.median - raw.median) / (chain - 1),
            (per_chain.best - raw.best) / (chain - 1),
        ),
    ]
    for label, median, best in rows:
        print(f"  {label:44}{median:8.3f}  {best:7.3f} ms")
    print(f"  target: <= {TARGET_CALL_MS} ms per call")

    adds = {mode: add_cases(grids, mode) for mode in MODES}
    time_interleaved([case for cases in adds.values() for case in cases.values()], rounds=rounds)
    print(f"\n1M-element float32 add: ms per call by number of programs (same total work); median/best of {rounds}")
    print(f"  {'programs':>8}  {'bounds check':>17}  {'no check':>17}  {'race check':>17}  {'races/bounds':>12}")
    for grid in grids:
        on, off, races = (adds[mode][grid] for mode in MODES)
        print(
            f"  {grid:>8}  {on.median:8.2f}/{on.best:8.2f}  {off.median:8.2f}/{off.best:8.2f}  "
            f"{races.median:8.2f}/{races.best:8.2f}  {races.median / on.median:11.2f}x"
        )
    for mode, label in zip(MODES, ("bounds check", "no check    ", "race check  ")):
        cases = adds[mode]
        _, slope_median = fit_slope(grids, [cases[g].median for g in grids])
        intercept, slope_best = fit_slope(grids, [cases[g].best for g in grids])
        _, slope_cpu = fit_slope(grids, [cases[g].cpu_median for g in grids])
        print(
            f"  {label}: per program instance (slope of the fit) "
            f"{slope_median:.3f} ms (medians), {slope_best:.3f} ms (best), {slope_cpu:.3f} ms of process CPU time "
            f"(medians); fixed part {intercept:.1f} ms"
        )
    print(f"  target: <= {TARGET_PROGRAM_MS} ms per program instance (bounds check); race check <= 2x bounds check")

    mms = {mode: matmul_cases(blocks, mode) for mode in MODES}
    time_interleaved([case for cases in mms.values() for case in cases.values()], rounds=rounds)
    print(f"\n256x256x256 float32 matmul (tl.dot): median ms per call and per program (of {rounds})")
    print(
        f"  {'BM,BN,BK':>12}  {'programs':>8}  {'K steps':>7}  {'bounds':>8}  {'/prog':>7}  {'none':>8}  {'/prog':>7}"
        f"  {'races':>8}  {'/prog':>7}  {'races/bounds':>12}"
    )
    for block in blocks:
        on, off, races = (mms[mode][block].median for mode in MODES)
        programs = matmul_programs(block)
        print(
            f"  {','.join(map(str, block)):>12}  {programs:>8}  {256 // block[2]:>7}  {on:8.2f}  "
            f"{on / programs:7.3f}  {off:8.2f}  {off / programs:7.3f}  {races:8.2f}  {races / programs:7.3f}  "
            f"{races / on:11.2f}x"
        )

    print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    if args.profile:
        print("\ncProfile of 50 one-program calls, sorted by own time:")
        print(profile(overhead["raw"].fn, overhead["raw"].args, 50, 20))
        print(f"cProfile of one 1M-element add on {grids[0]} programs (bounds check on), sorted by own time:")
        print(profile(adds["on"][grids[0]].fn, adds["on"][grids[0]].args, 1, 12))
        print(f"cProfile of one matmul with blocks {blocks[-1]} (bounds check on), sorted by own time:")
        print(profile(mms["on"][blocks[-1]].fn, mms["on"][blocks[-1]].args, 1, 15))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
