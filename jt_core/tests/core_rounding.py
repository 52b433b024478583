"""Exact references of rounding, for the tests of how the CPU paths round: computed in rationals
(`fractions.Fraction`), rounded once to nearest even; and the reason the compiled path cannot round a product apart
from its sum where XLA contracts them (`PRODUCTS_CONTRACTED`)."""

from __future__ import annotations

import fractions
from typing import Any

import ml_dtypes
import numpy as np

from jt_core import _compat

__all__ = ["PRODUCTS_CONTRACTED", "rounded", "rounded_once"]

#: Why a test of a float32 product rounded apart from the sum that reads it skips on the compiled path, or ``None``
#: where that path can round them apart (`jt_core._compat.barriers_outlast_fusion`).
PRODUCTS_CONTRACTED = (
    None
    if _compat.barriers_outlast_fusion()
    else "jaxlib 0.10's XLA removes optimisation barriers before fusing, and its CPU code then contracts a float32 "
    "product and the sum that reads it into one multiply-add: the compiled path cannot round them apart there "
    "(jaxlib 0.11.2 and later can)"
)

#: Precision (bits) and smallest normal exponent of each float type.
FORMATS = {
    np.dtype(np.float32): (24, -126),
    np.dtype(np.float16): (11, -14),
    np.dtype(ml_dtypes.bfloat16): (8, -126),
    np.dtype(np.float64): (53, -1022),
}


def rounded(exact: fractions.Fraction, dtype: Any) -> float:
    """``exact`` rounded to nearest even in ``dtype`` (subnormals included), as a Python float."""
    precision, emin = FORMATS[np.dtype(dtype)]
    if exact == 0:
        return 0.0
    size = abs(exact)
    exponent = size.numerator.bit_length() - size.denominator.bit_length()
    if fractions.Fraction(2) ** exponent > size:
        exponent -= 1
    unit = fractions.Fraction(2) ** (max(exponent, emin) - precision + 1)
    whole, rest = divmod(size / unit, 1)
    if rest > fractions.Fraction(1, 2) or (rest == fractions.Fraction(1, 2) and whole % 2 == 1):
        whole += 1
    return float(whole * unit) * (1.0 if exact > 0 else -1.0)


def rounded_once(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype: Any) -> np.ndarray:
    """``a * b + c``, elementwise, computed exactly and rounded once to ``dtype``: a fused multiply-add."""
    out = []
    for x, y, z in zip(np.ravel(a), np.ravel(b), np.ravel(c), strict=True):
        exact = fractions.Fraction(float(x)) * fractions.Fraction(float(y)) + fractions.Fraction(float(z))
        out.append(_signed(rounded(exact, dtype), x, y, z))
    return np.asarray(out).astype(dtype).reshape(np.shape(a))


def _signed(result: float, x: Any, y: Any, z: Any) -> float:
    """A zero result of ``x * y + z`` with IEEE 754's sign (6.3): -0.0 where the product and ``z`` are both -0.0,
    +0.0 otherwise (to nearest)."""
    if result != 0:
        return result
    product_negative = bool(np.signbit(np.float64(x)) ^ np.signbit(np.float64(y)))
    both_negative_zeros = float(x) * float(y) == 0 and product_negative and float(z) == 0 and np.signbit(np.float64(z))
    return -0.0 if both_negative_zeros else 0.0
