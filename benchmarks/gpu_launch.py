"""Per-kernel launch cost on a GPU: 100 chained 1024-element adds inside one ``jax.jit``.

Run on the GPU machine: ``python benchmarks/gpu_launch.py [--json FILE] [--reps N]``. For each jt launcher (and the
``jt`` launcher with its record stage off, so that XLA captures each call into a child graph), and for Pallas
(``jax.experimental.pallas``, lowered natively by XLA) as the reference measured in the same run, it times one call
of the jitted chain (dispatch and synchronisation included) and reports

* per kernel: median(chain) / 100;
* marginal: (median(chain) - median(one call)) / 99, the cost each further kernel adds.
"""

from __future__ import annotations

import argparse
import json
import os
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

CHAIN = 100
SIZE = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def jt_add(launcher: str, **environment: str) -> Callable[[Any, Any], Any]:
    """A jt add, lowered with ``environment`` set (``JT_CUDA_PRELOAD=0``: an initialize stage on every call;
    ``JT_CUDA_RECORD=0``: XLA captures each call into a child graph instead of adding it as a kernel node)."""

    def add(x: Any, y: Any) -> Any:
        previous = {name: os.environ.get(name) for name in environment}
        os.environ.update(environment)
        try:
            return jt.triton_call(x, y, kernel=add_kernel, out_shape=x, grid=1, n=SIZE, BLOCK=SIZE, launcher=launcher)
        finally:
            for name, value in previous.items():
                if value is None:
                    del os.environ[name]
                else:
                    os.environ[name] = value

    return add


def pallas_add() -> Callable[[Any, Any], Any]:
    from jax.experimental import pallas as pl

    def kernel(x_ref: Any, y_ref: Any, o_ref: Any) -> None:
        o_ref[...] = x_ref[...] + y_ref[...]

    def add(x: Any, y: Any) -> Any:
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)

    return add


def launch_paths() -> list[tuple[str, Callable[[Any, Any], Any]]]:
    """Every launch path of the add, by name; Pallas is the reference."""
    return [
        ("jt launcher 'jt' (own FFI handler)", jt_add("jt")),
        ("jt launcher 'jt', stream capture", jt_add("jt", JT_CUDA_RECORD="0")),
        ("jt launcher 'jt', initialize stage kept", jt_add("jt", JT_CUDA_PRELOAD="0")),
        ("jt launcher 'jaxlib' (jaxlib's handler)", jt_add("jaxlib")),
        ("jt launcher 'xla' (XLA's Triton call)", jt_add("xla")),
        ("Pallas (native XLA lowering)", pallas_add()),
    ]


def chain_of(add: Callable[[Any, Any], Any], length: int) -> Callable[[Any, Any], Any]:
    @jax.jit
    def run(x: Any, y: Any) -> Any:
        for _ in range(length):
            x = add(x, y)
        return x

    return run


def median_seconds(fn: Callable[[Any, Any], Any], x: Any, y: Any, reps: int) -> float:
    for _ in range(10):
        fn(x, y).block_until_ready()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn(x, y).block_until_ready()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, add: Callable[[Any, Any], Any], reps: int) -> dict[str, Any]:
    x = jax.random.normal(jax.random.key(0), (SIZE,), jnp.float32)
    y = jax.random.normal(jax.random.key(1), (SIZE,), jnp.float32) * 1e-3
    chain, one = chain_of(add, CHAIN), chain_of(add, 1)
    expected = np.asarray(x, np.float64) + CHAIN * np.asarray(y, np.float64)
    np.testing.assert_allclose(np.asarray(chain(x, y)), expected, rtol=1e-4, atol=1e-5)
    chain_s = median_seconds(chain, x, y, reps)
    one_s = median_seconds(one, x, y, reps)
    return {
        "path": name,
        "chain_us": chain_s * 1e6,
        "one_call_us": one_s * 1e6,
        "per_kernel_us": chain_s * 1e6 / CHAIN,
        "marginal_us": (chain_s - one_s) * 1e6 / (CHAIN - 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2, help="measure every path this many times, interleaved")
    args = parser.parse_args()
    paths = launch_paths()
    results = []
    for round_index in range(args.rounds):
        for name, add in paths:
            result = measure(name, add, args.reps)
            result["round"] = round_index
            results.append(result)
    print(f"{'path':44} {'round':>5} {'chain us':>9} {'1 call us':>9} {'per kernel':>10} {'marginal':>9}")
    for r in results:
        print(
            f"{r['path']:44} {r['round']:>5} {r['chain_us']:9.1f} {r['one_call_us']:9.1f} "
            f"{r['per_kernel_us']:10.2f} {r['marginal_us']:9.2f}"
        )
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
