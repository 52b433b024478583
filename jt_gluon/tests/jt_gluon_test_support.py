"""Helpers shared by the jt-gluon tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from jt_core.binding import KernelCall, bind_call


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
    call, _, _, _ = bind_call(
        kernel,
        (spec,) * n_inputs,
        dict(meta),
        out_spec=jax.ShapeDtypeStruct(out_shape, dtype),
        grid=grid,
        input_output_aliases=None,
        zeroed_outputs=(),
        explicit_options={},
        backend_options=backend_options,
        name=None,
        compute_capability=compute_capability,
        has_side_effect=False,
        launcher=None,
        serialized_metadata=b"",
        cost_estimate=None,
        bounds_check=True,
    )
    return call
