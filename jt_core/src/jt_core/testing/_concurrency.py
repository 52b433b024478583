"""What jt's own suites use to load jt from many threads at once: `run_threads`, and `distinct_kernels`,
kernels whose every compile is a first one. Not part of the kit `jt_core.testing` offers plugin authors."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import threading
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["distinct_kernels", "run_threads"]


def distinct_kernels(folder: pathlib.Path, tag: str, count: int) -> list[Any]:
    """``count`` elementwise kernels ``(x_ptr, n, out_ptr, BLOCK)`` whose sources differ from each other's and from
    those of every earlier call, in this process or any other (kernel ``i`` computes ``x * (i + 2) + 1``; a random
    token in each body keeps Triton's own on-disk cache from serving a compile), so that every compile is a first
    one; written to a module in ``folder`` (Triton reads a kernel's source from its file) and imported. ``tag``
    keeps the module and kernel names apart."""
    token = uuid.uuid4().hex
    lines = ["import triton", "import triton.language as tl", ""]
    for i in range(count):
        lines += [
            "@triton.jit",
            f"def scale_{tag}_{i}(x_ptr, n, out_ptr, BLOCK: tl.constexpr):",
            f"    # variant {token}",
            "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
            "    mask = offsets < n",
            f"    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * {i + 2} + 1, mask=mask)",
            "",
        ]
    path = folder / f"jt_distinct_kernels_{tag}.py"
    path.write_text("\n".join(lines))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return [getattr(module, f"scale_{tag}_{i}") for i in range(count)]


def run_threads(work: Callable[[int], None], count: int) -> list[str]:
    """Runs ``work(i)`` for ``i`` in ``range(count)``, each on its own thread, all released at once; returns the
    failures as ``"thread i: Type: message"``."""
    barrier = threading.Barrier(count)
    failures: list[str] = []

    def target(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except Exception as exc:
            failures.append(f"thread {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures
