"""A call's cost grows linearly with the kernel's parameters: binding, the CPU backend's compile (the rewrite for the
interpreter and Triton's front end as a check) and the run, counted in Python operations (function calls, those of
C functions included), which do not depend on the machine's load."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from jt_core.call import CallOptions
from jt_core.interpreter.backend import CpuBackend, execute
from jt_core.testing import bind, compile_request

F32_4 = jax.ShapeDtypeStruct((4,), np.float32)


def _copy_kernel(outputs: int, folder: Path) -> Any:
    """A kernel copying its input into each of ``outputs`` output pointers (Triton reads a kernel's source from
    its file, so the generated kernel gets a module of its own)."""
    names = ", ".join(f"out{i}" for i in range(outputs))
    stores = "".join(f"    tl.store(out{i} + offsets, x + {i})\n" for i in range(outputs))
    path = folder / f"copies_{outputs}.py"
    path.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        f"def copies_kernel(x_ptr, {names}, BLOCK: tl.constexpr):\n"
        "    offsets = tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + offsets)\n" + stores
    )
    spec = importlib.util.spec_from_file_location(f"copies_{outputs}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.copies_kernel


def _operations(work: Callable[[], Any]) -> tuple[int, Any]:
    """How many calls ``work`` makes (Python functions and C functions alike), and its result."""
    count = 0

    def tally(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        count += 1

    previous = sys.getprofile()
    sys.setprofile(tally)
    try:
        result = work()
    finally:
        sys.setprofile(previous)
    return count, result


def _call_operations(outputs: int, folder: Path) -> int:
    """The operations of binding, compiling (with the front end's check) and running a call with ``outputs``
    outputs; checks the results against the kernel's meaning."""
    kernel = _copy_kernel(outputs, folder)
    x = np.random.default_rng(outputs).standard_normal(4).astype(np.float32)
    bound, call = _operations(lambda: bind(kernel, (F32_4,), {"BLOCK": 4}, CallOptions([F32_4] * outputs, grid=1)))
    hashed, _ = _operations(lambda: hash(call))  # JAX's caches hash the call
    backend = CpuBackend()
    compiled_count, compiled = _operations(lambda: backend.compile(compile_request(backend, call)))
    ran, results = _operations(lambda: execute(call, compiled, [x]))
    for i, out in enumerate(results):
        np.testing.assert_array_equal(out, x + np.float32(i))
    return bound + hashed + compiled_count + ran


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_call_costs_operations_linear_in_its_outputs(tmp_path: Path) -> None:
    _call_operations(4, tmp_path)  # first uses (imports, caches) out of the way
    small, large = _call_operations(500, tmp_path), _call_operations(2000, tmp_path)
    # Linear growth gives four times the operations for four times the outputs (a little less: the fixed part);
    # each part that walks every parameter for each parameter gives sixteen times its share.
    assert large < 4.5 * small, f"500 outputs: {small} operations, 2000 outputs: {large} ({large / small:.1f}x)"
