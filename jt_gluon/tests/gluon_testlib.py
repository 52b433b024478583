"""Helpers shared by the jt-gluon tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from jt_core.call import CallOptions, KernelCall
from jt_core.testing._calls import bind


def gluon_call(
    kernel: Any,
    size: int | tuple[int, ...],
    meta: Mapping[str, Any],
    *,
    n_inputs: int = 1,
    out_size: int | tuple[int, ...] | None = None,
    dtype: Any = np.float32,
    grid: Any = 1,
    backend_options: Mapping[str, Any] | None = None,
    compute_capability: int | None = None,
) -> KernelCall:
    """A bound call of ``kernel`` on ``n_inputs`` abstract arrays one output, no tracing."""
    shape = (size,) if isinstance(size, int) else size
    out_shape = shape if out_size is None else ((out_size,) if isinstance(out_size, int) else out_size)
    spec = jax.ShapeDtypeStruct(shape, dtype)
    options = CallOptions(
        jax.ShapeDtypeStruct(out_shape, dtype),
        grid=grid,
        backend_options=backend_options,
        compute_capability=compute_capability,
    )
    return bind(kernel, (spec,) * n_inputs, dict(meta), options)
