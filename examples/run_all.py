"""Runs every example on JAX's default platform and prints a table: kernel, platform, max error, time.

``python examples/run_all.py`` (add ``--only NAME`` to run some of them). Each example checks itself against
``jax.numpy`` and raises when the error exceeds its tolerance; the exit status is 1 if any example failed.
On the CPU the problems are small (Triton's interpreter runs each program instance in Python); on a GPU they
are full size.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import default_platform_is_gpu

EXAMPLES = ("vector_add", "fused_softmax", "matmul_autotune", "layer_norm", "fused_attention")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=EXAMPLES, help="run only this example (repeatable)")
    args = parser.parse_args(argv)
    names = args.only or EXAMPLES
    is_gpu = default_platform_is_gpu()

    rows = []
    failures = 0
    for name in names:
        start = time.perf_counter()
        try:
            result = importlib.import_module(name).run(is_gpu)
        except Exception as exc:
            failures += 1
            traceback.print_exc()
            rows.append((name, "-", "FAILED", f"{type(exc).__name__}", f"{time.perf_counter() - start:.1f}"))
            continue
        rows.append(
            (
                result["kernel"],
                result["platform"],
                f"{result['max_error']:.2e}",
                f"{result['time_ms']:.3f}",
                f"{time.perf_counter() - start:.1f}",
            )
        )

    header = ("kernel", "platform", "max error", "time (ms)", "total incl. compile (s)")
    widths = [max(len(str(row[i])) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, tuple("-" * w for w in widths), *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))
    if failures:
        print(f"\n{failures} of {len(names)} examples FAILED", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
