"""What a long-running process keeps in memory: many calls over many shapes and many kernels made at run time.

The program makes a new kernel every ``calls / kernels`` calls (from a module of its own, as code that generates
kernels does) and drops the previous one; each call has one of ``shapes`` sizes (every kernel sees ten of them, so
calls repeat and JAX's caches are hit too); one call in ten goes through ``jax.vmap``; ``jax.clear_caches()`` runs
every ``--clear-every`` calls. At each clear the script measures, after ``gc.collect()``:

* the process's resident memory (``VmRSS``), and its growth since the first clear (the warm-up);
* how many entries jt's in-process stores hold (the CPU launcher's registry of lowered calls, the compiled
  variants, the rewritten kernels, the generated vmap wrappers);
* how many of the dropped kernels are still alive.

It runs the same on a jt without bounded stores (the counts it cannot find print as ``-``), so that the two can be
compared. Runs on the CPU (the interpreter); about 5 minutes for the defaults on a 2-core host.

Usage: ``python benchmarks/memory_soak.py [--calls 10000] [--shapes 500] [--kernels 200] [--clear-every 1000]``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import tempfile
import time
import uuid
import weakref
from pathlib import Path
from typing import Any


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def generated_kernel(folder: Path, factor: int) -> Any:
    """A kernel made at run time, ``out = x * factor + 1``, from a module of its own (one module name for all:
    Triton 3.9 keeps the newest kernel of each module and name)."""
    path = folder / f"soak_{uuid.uuid4().hex}.py"
    path.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def generated(x_ptr, n, out_ptr, BLOCK: tl.constexpr):\n"
        f"    # {uuid.uuid4().hex}\n"
        "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    mask = offsets < n\n"
        f"    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * {factor} + 1, mask=mask)\n"
    )
    spec = importlib.util.spec_from_file_location("jt_soak_kernels", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generated


def store_sizes() -> dict[str, Any]:
    """Entries held by each in-process store (``-`` where this jt has no such store)."""
    from jt_core import batching, cache
    from jt_core.cpu import ffi_launcher
    from jt_core.interpreter import runner

    registry = ffi_launcher.registry()
    return {
        "registry": len(registry),
        "released ids": registry.released_count() if hasattr(registry, "released_count") else "-",
        "variants": len(getattr(cache, "_memory", ())),
        "rewritten": len(getattr(runner, "_rewritten", ())),
        "wrappers": len(getattr(batching, "_wrappers", ())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--shapes", type=int, default=500)
    parser.add_argument("--kernels", type=int, default=200)
    parser.add_argument("--clear-every", type=int, default=1000)
    args = parser.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["JT_CACHE_DIR"] = tempfile.mkdtemp(prefix="jt-soak-")
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jt_core as jt

    folder = Path(tempfile.mkdtemp(prefix="jt-soak-kernels-"))

    def call(kernel: Any, x: Any) -> Any:
        return jt.triton_call(x, x.size, kernel=kernel, out_shape=x, grid=(x.size + 15) // 16, BLOCK=16)

    per_kernel = max(1, args.calls // args.kernels)
    dropped: list[weakref.ReferenceType[Any]] = []
    kernel: Any = None
    jitted: Any = None
    batched: Any = None
    rows = []
    started = time.perf_counter()
    baseline = None
    for i in range(args.calls):
        index = i // per_kernel
        if i % per_kernel == 0:
            if kernel is not None:
                dropped.append(weakref.ref(kernel))
            factor = 2 + index % 7
            kernel = generated_kernel(folder, factor)
            jitted = jax.jit(lambda v, k=kernel: call(k, v))
            batched = jax.jit(jax.vmap(lambda v, k=kernel: call(k, v)))
        size = 1 + (index * 10 + i % 10) % args.shapes
        if i % 10 == 9:
            out = batched(jnp.full((2, size), 1.0, jnp.float32))
        else:
            out = jitted(jnp.full((size,), 1.0, jnp.float32))
        if i % 97 == 0:
            np.testing.assert_allclose(np.asarray(out).reshape(-1)[0], factor + 1.0)
        if (i + 1) % args.clear_every == 0:
            jax.clear_caches()
            gc.collect()
            rss = rss_kib()
            baseline = rss if baseline is None else baseline
            alive = sum(ref() is not None for ref in dropped)
            rows.append((i + 1, rss, rss - baseline, alive, len(dropped), store_sizes(), time.perf_counter() - started))
            print(f"  {rows[-1][:5]} {rows[-1][5]} {rows[-1][6]:.0f} s", file=sys.stderr, flush=True)
    print(f"{args.calls} calls, {args.shapes} shapes, {len(dropped) + 1} kernels, jax.clear_caches() every "
          f"{args.clear_every} calls ({time.perf_counter() - started:.0f} s)")  # fmt: skip
    print("| calls | RSS MiB | growth since the first clear, MiB | dropped kernels alive | registry | released ids | "
          "variants | rewritten | wrappers | s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for calls, rss, grown, alive, total, sizes, seconds in rows:
        print(
            f"| {calls} | {rss / 1024:.1f} | {grown / 1024:+.1f} | {alive} of {total} | {sizes['registry']} | "
            f"{sizes['released ids']} | {sizes['variants']} | {sizes['rewritten']} | {sizes['wrappers']} | "
            f"{seconds:.0f} |"
        )


if __name__ == "__main__":
    main()
