"""Helpers shared by the jt-rocm tests: binding calls without tracing, choosing the launcher, a kernel (in a module,
so that Triton can read its source)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import triton
import triton.language as tl

from jt_core.call import CallOptions, KernelCall
from jt_core.testing import sample_add_kernel
from jt_core.testing._calls import bind


def bound_call(
    kernel: Any = sample_add_kernel,
    args: tuple[Any, ...] | None = None,
    meta: Mapping[str, Any] | None = None,
    out: Any = None,
    grid: Any = 2,
    backend_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> KernelCall:
    """A bound call (defaults: the sample add kernel on 64 float32 elements)."""
    spec = jax.ShapeDtypeStruct((64,), np.float32)
    call_options = CallOptions(
        out if out is not None else spec, grid=grid, compile_options=options, backend_options=backend_options
    )
    return bind(
        kernel,
        args if args is not None else (spec, spec),
        dict(meta) if meta is not None else {"n": 64, "BLOCK": 32},
        call_options,
    )


def use_launcher(monkeypatch: Any, name: str) -> None:
    """Makes ``name`` the ROCm launcher for the rest of the test: ``JT_LAUNCHER_ROCM`` and a fresh registry that
    reads it (``monkeypatch`` restores both)."""
    from jt_core.plugin import registry
    from jt_core.testing.fixtures import make_registry

    monkeypatch.setenv("JT_LAUNCHER_ROCM", name)
    monkeypatch.setattr(registry, "_registry", make_registry())


@triton.jit
def add_one_kernel(x_ptr, n, BLOCK: tl.constexpr):
    """``x += 1`` through the input pointer (the output aliased to ``x``)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)
