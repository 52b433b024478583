"""The functions ``tt.extern_elementwise`` calls: libdevice's (``__nv_expf``) and the ROCm device library's
(``__ocml_exp_f32``), computed with ``jax.numpy`` as `jt_core.interpreter.libdevice` writes them for both CPU paths.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np

from jt_core.interpreter import libdevice

__all__ = ["computes", "extern_call"]


def computes(symbol: str) -> bool:
    """Whether the compiled path computes the function ``symbol`` names."""
    return libdevice.implementation(symbol, "jax") is not None


def extern_call(symbol: str, operands: Sequence[jax.Array], result: np.dtype) -> jax.Array:
    """``symbol`` applied to ``operands``, as an array of dtype ``result``.

    Raises:
        KeyError: For a function the compiled path does not compute (see `computes`).
    """
    return libdevice.evaluate(libdevice.jax_arrays(), symbol, list(operands), result)
