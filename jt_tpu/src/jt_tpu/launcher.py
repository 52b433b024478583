"""The TPU launcher: a call's kernel translated into XLA operations with a TPU's strategy (`TPU_STRATEGY`), and
what a TPU cannot run refused when the call is lowered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jt_core.plugin import CompiledKernel, KernelCall, UnsupportedKernelError
from jt_core.translation import XLA_NUMERICS, Strategy, TranslatingLauncher

__all__ = ["TPU_STRATEGY", "TpuLauncher"]

#: How a TPU runs a translated kernel: every program of the grid side by side while their largest value fits in
#: 1 GiB (a v5e chip holds 16), arithmetic as XLA's TPU compiler computes it (no float64: a TPU has none), loops
#: traced step by step only up to 256 operations (longer ones are XLA loops, whose lowering takes the same time
#: whatever their trip count), block accesses as strided slices however far apart their rows lie, a K-loop of
#: ``tl.dot`` as one product, and a load's stray lane read as zero rather than a fault (a kernel may read past an
#: array and never use the lanes that stray, as a GPU lets it); reads of a buffer written in place left for XLA to
#: order, a call's outputs made whole before the next call uses them (`Strategy.fenced_outputs`), and stores at
#: addresses loaded from memory scattered element by element (`Strategy.row_stores`).
TPU_STRATEGY = Strategy(
    numerics=XLA_NUMERICS,
    side_by_side_bytes=1 << 30,
    ordered_accumulation=False,
    unrolled_operations=256,
    slice_span=1 << 20,
    stray_loads_fault=False,
    ordered_window_reads=False,
    fenced_outputs=True,
    row_stores=False,
)

#: Element types a TPU has no arithmetic for: a call that passes or computes them is refused.
_REFUSED_TYPES = {"float64": "f64", "complex64": None, "complex128": None}


class TpuLauncher(TranslatingLauncher):
    """Lowers a call to XLA operations for a TPU; refuses what a TPU cannot run, naming it."""

    platform = "tpu"
    name = "xla"
    fallback_rules = (
        "none: a kernel the translation cannot express, or one that computes in float64, is refused with an error "
        "naming the construct and its source line",
    )

    def strategy(self) -> Strategy:
        return TPU_STRATEGY

    def tunes(self) -> bool:
        # Configurations are timed on the chip; lowered without one (jax.export on a host), the first runs.
        try:
            return bool(jax.devices("tpu"))
        except RuntimeError:
            return False

    def fallback_reason(self, call: KernelCall, kernels: Sequence[CompiledKernel], device: Any | None) -> str | None:
        for what, avals in (("operand", call.operand_avals), ("output", call.out_avals)):
            for index, aval in enumerate(avals):
                if np.dtype(aval.dtype).name in _REFUSED_TYPES:
                    raise UnsupportedKernelError(
                        f"triton_call {call.name!r}: {what} {index} is {np.dtype(aval.dtype).name}, which a TPU has "
                        "no arithmetic for; pass float32 (or bfloat16) values"
                    )
        for kernel in kernels:
            program = getattr(kernel.payload, "program", None)
            if program is not None and any("f64" in text for text in program.types.values()):
                raise UnsupportedKernelError(
                    f"triton_call {call.name!r}: its kernel computes in float64 (a tl.float64 value, or a float64 "
                    "scalar argument), which a TPU has no arithmetic for; compute in float32"
                )
        return super().fallback_reason(call, kernels, device)
