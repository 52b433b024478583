"""Per-kernel launch cost on a GPU: 100 chained 1024-element adds inside one ``jax.jit``.

Run on the GPU machine: ``python benchmarks/gpu_launch.py [--json FILE] [--reps N]``. For each jt launcher (and the
``jt`` launcher with its record stage off, so that XLA captures each call into a child graph, and with its kernels
compiled without the wait at entry, so that they are launched plainly instead of as programmatic dependents), and
for Pallas (``jax.experimental.pallas``, lowered natively by XLA) as the reference measured in the same run, it
times one call of the jitted chain (dispatch and synchronisation included) and reports

* per kernel: median(chain) / 100;
* marginal: (median(chain) - median(one call)) / 99, the cost each further kernel adds;
* the first execution of the compiled chain (XLA builds its command buffer then, and loads the kernels it adds).

With ``--fresh K`` every timed call takes the next of K inputs, so the input buffer's address changes on every call
and XLA updates the commands that read it before replaying its command buffer.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import jt_core as jt

CHAIN = 100
SIZE = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def jt_add(launcher: str) -> Callable[[Any, Any], Any]:
    def add(x: Any, y: Any) -> Any:
        return jt.triton_call(x, y, kernel=add_kernel, out_shape=x, grid=1, n=SIZE, BLOCK=SIZE, launcher=launcher)

    return add


def pallas_add() -> Callable[[Any, Any], Any]:
    from jax.experimental import pallas as pl

    def kernel(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
        o_ref[...] = x_ref[...] + y_ref[...]

    def add(x: Any, y: Any) -> Any:
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)

    return add


#: A launch path: its name, the add, and the environment it is lowered in (jt reads its switches while lowering:
#: ``JT_CUDA_RECORD=0`` makes XLA capture each call into a child graph instead of adding it as a kernel node,
#: ``JT_CUDA_PRELOAD=0`` keeps an initialize stage on every call, ``JT_CUDA_PDL=0`` compiles the kernel without the
#: wait at entry, which jt then launches plainly instead of as a programmatic dependent).
LaunchPath = tuple[str, Callable[[Any, Any], Any], dict[str, str]]


def launch_paths() -> list[LaunchPath]:
    """Every launch path of the add; Pallas is the reference."""
    return [
        ("jt launcher 'jt' (own FFI handler)", jt_add("jt"), {}),
        ("jt launcher 'jt', no PDL (JT_CUDA_PDL=0)", jt_add("jt"), {"JT_CUDA_PDL": "0"}),
        ("jt launcher 'jt', stream capture", jt_add("jt"), {"JT_CUDA_RECORD": "0"}),
        ("jt launcher 'jt', initialize stage kept", jt_add("jt"), {"JT_CUDA_PRELOAD": "0"}),
        ("jt launcher 'jaxlib' (jaxlib's handler)", jt_add("jaxlib"), {}),
        ("jt launcher 'xla' (XLA's Triton call)", jt_add("xla"), {}),
        ("Pallas (native XLA lowering)", pallas_add(), {}),
    ]


@contextlib.contextmanager
def environment_set(environment: dict[str, str]) -> Iterator[None]:
    previous = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


def chain_of(add: Callable[[Any, Any], Any], length: int, environment: dict[str, str] | None = None) -> Any:
    """``length`` chained adds in one ``jax.jit``, lowered and compiled (with ``environment`` set)."""

    @jax.jit
    def run(x: Any, y: Any) -> Any:
        for _ in range(length):
            x = add(x, y)
        return x

    spec = jax.ShapeDtypeStruct((SIZE,), jnp.float32)
    with environment_set(environment or {}):
        return run.lower(spec, spec).compile()


def median_seconds(fn: Callable[[Any, Any], Any], inputs: list[tuple[Any, Any]], reps: int) -> float:
    """Median time of one synchronised call; call i takes ``inputs[i % len(inputs)]``."""
    for i in range(10):
        fn(*inputs[i % len(inputs)]).block_until_ready()
    times = []
    for i in range(reps):
        x, y = inputs[i % len(inputs)]
        start = time.perf_counter()
        fn(x, y).block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class Measured:
    """One launch path's compiled chain and single call, checked against NumPy on their first execution."""

    def __init__(self, path: LaunchPath) -> None:
        self.name, add, environment = path
        self.x = jax.random.normal(jax.random.key(0), (SIZE,), jnp.float32)
        self.y = jax.random.normal(jax.random.key(1), (SIZE,), jnp.float32) * 1e-3
        self.chain, self.one = chain_of(add, CHAIN, environment), chain_of(add, 1, environment)
        start = time.perf_counter()
        first = np.asarray(self.chain(self.x, self.y))  # the first execution builds XLA's command buffer
        self.first_run_s = time.perf_counter() - start
        expected = np.asarray(self.x, np.float64) + CHAIN * np.asarray(self.y, np.float64)
        np.testing.assert_allclose(first, expected, rtol=1e-4, atol=1e-5)

    def measure(self, reps: int, fresh: int = 0) -> dict[str, Any]:
        """Times the chain and the single call; with ``fresh`` > 0, each call takes the next of ``fresh`` inputs
        (all alive, so the input's address changes on every call and XLA updates the commands that read it)."""
        inputs = [(self.x, self.y)]
        if fresh:
            inputs = [(self.x + i, self.y) for i in range(fresh)]
        chain_s = median_seconds(self.chain, inputs, reps)
        one_s = median_seconds(self.one, inputs, reps)
        return {
            "path": self.name,
            "first_run_ms": self.first_run_s * 1e3,
            "chain_us": chain_s * 1e6,
            "one_call_us": one_s * 1e6,
            "per_kernel_us": chain_s * 1e6 / CHAIN,
            "marginal_us": (chain_s - one_s) * 1e6 / (CHAIN - 1),
        }


def print_summary(results: list[dict[str, Any]]) -> None:
    """Per path over the rounds: median (range) per kernel and marginal, and the ratio to Pallas's medians."""
    by_path: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_path.setdefault(r["path"], []).append(r)

    def median(path: str, key: str) -> float:
        return statistics.median(r[key] for r in by_path[path])

    reference = next((path for path in by_path if path.startswith("Pallas")), None)
    print(f"\n{'path':44} {'per kernel us (range)':>22} {'marginal us (range)':>22} {'vs Pallas':>16}")
    for path, rows in by_path.items():
        cells = []
        for key in ("per_kernel_us", "marginal_us"):
            values = [r[key] for r in rows]
            cells.append(f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})")
        ratio = ""
        if reference is not None:
            ratio = "/".join(f"{median(path, k) / median(reference, k):.2f}" for k in ("per_kernel_us", "marginal_us"))
        print(f"{path:44} {cells[0]:>22} {cells[1]:>22} {ratio:>16}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2, help="measure every path this many times, interleaved")
    parser.add_argument("--fresh", type=int, default=0, help="rotate among this many inputs (new addresses)")
    args = parser.parse_args()
    paths = [Measured(path) for path in launch_paths()]
    results = []
    for round_index in range(args.rounds):
        for path in paths:
            result = path.measure(args.reps, args.fresh)
            result["round"] = round_index
            results.append(result)
    header = f"{'path':44} {'round':>5} {'1st run ms':>10} {'chain us':>9} {'1 call us':>9}"
    print(f"{header} {'per kernel':>10} {'marginal':>9}")
    for r in results:
        print(
            f"{r['path']:44} {r['round']:>5} {r['first_run_ms']:10.2f} {r['chain_us']:9.1f} {r['one_call_us']:9.1f} "
            f"{r['per_kernel_us']:10.2f} {r['marginal_us']:9.2f}"
        )
    print_summary(results)
    from jt_cuda.launchers import HANDLER

    created, updated, captured = HANDLER.record_counts()
    print(f"jt record stage: {created} kernel nodes created, {updated} updated, {captured} calls captured instead")
    if args.json:
        with open(args.json, "w") as handle:
            record = {"created": created, "updated": updated, "captured": captured}
            json.dump({"device": str(jax.devices()[0].device_kind), "results": results, "record": record}, handle,
                      indent=2)  # fmt: skip


if __name__ == "__main__":
    main()
