"""How a platform computes a kernel's floating-point arithmetic: `Numerics`, the one place the translation decides
between a GPU's bits and the platform's XLA's own way (a `jt_core.translation.strategy.Strategy` holds one).

* `GPU_NUMERICS` (the CPU backend's): arithmetic rounds as Triton's GPU compilers round it, whatever the host's own
  compiler would do: a product and a sum fused into one rounding where Triton fuses them, quotients correctly
  rounded through float64, ``tl.fma`` and ``exp2`` as the device's, bfloat16 results rounded after each operation,
  float sums and products in one fixed pairwise order (the interpreter's), ``tl.dot``'s float32 operands rounded to
  TF32 where its input precision says so.
* `XLA_NUMERICS` (a TPU's): as the platform's XLA computes, without float64 (a TPU has none): XLA's own reductions
  and cumulative sums, ``tl.dot``'s input precisions as XLA precision configs (``"ieee"`` highest, ``"tf32"``
  high), float atomics summed in XLA's order; but bfloat16 results rounded after each operation, as Triton rounds
  them, and ``tl.fma`` fused (from float32's own error-free transformations).

Both keep what IEEE arithmetic keeps and XLA's simplifier would lose: a sum of ``-0.0`` is ``-0.0``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from jt_core.interpreter import libdevice
from jt_core.translation import floats

__all__ = ["GPU_NUMERICS", "XLA_NUMERICS", "Numerics"]

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

#: ``tl.dot``'s input precisions as XLA's precision configs (a TPU: ``HIGH`` is three passes of bfloat16 products,
#: about TF32's precision; ``HIGHEST`` six, about float32's).
XLA_PRECISIONS = {"IEEE": lax.Precision.HIGHEST, "TF32": lax.Precision.HIGH, "TF32x3": lax.Precision.HIGHEST}


def _negative_zero_sum(x: jax.Array, axis: int) -> jax.Array:
    """A float sum in XLA's order that keeps ``-0.0``: XLA's reductions start from ``+0.0``, which makes a sum of
    ``-0.0``\\ s ``+0.0``; ``-0.0`` is addition's identity. (Given `lax.add` itself, `lax.reduce` makes it JAX's sum,
    which starts from +0.0 whatever the initial value: the same addition under another name is kept as given.)"""
    return lax.reduce(x, np.array(-0.0, x.dtype), _add, (axis,))


def _add(a: jax.Array, b: jax.Array) -> jax.Array:
    return lax.add(a, b)


class Numerics:
    """XLA's own arithmetic, without float64 (`XLA_NUMERICS`); `GpuNumerics` overrides where a GPU's bits differ.

    Attributes:
        name: What the choices are called (in a plan's printout).
        float64: Whether float64 arithmetic is native (quotients are then rounded through it).
        exact: Whether arithmetic rounds as Triton's GPU compilers round it (products fused where Triton fuses
            them; the translation's products analysis runs only then).
    """

    name = "xla"
    float64 = False
    exact = False

    def round_bfloat16(self, x: jax.Array) -> jax.Array:
        """A bfloat16 result rounded to bfloat16, as Triton rounds each operation's: XLA computes bfloat16 arithmetic
        in float32 and may keep the excess precision into the next operation (a TPU does). A reduce-precision is
        one elementwise operation on the vector unit, fused with the operation it follows."""
        if x.dtype != _BFLOAT16:
            return x
        return lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7)

    def divide(self, x: jax.Array, y: jax.Array) -> jax.Array:
        """``x / y``: the platform's float32 quotient, narrower floats divided in float32."""
        if x.dtype.itemsize < 4:
            return lax.div(x.astype(jnp.float32), y.astype(jnp.float32)).astype(x.dtype)
        return lax.div(x, y)

    def fma(self, x: jax.Array, y: jax.Array, z: jax.Array) -> jax.Array:
        """``tl.fma``: the product and the sum rounded once, without a wider type (a TPU has no float64). The product
        is split exactly into a float32 and its error (Dekker's product, from halves of 12 bits), the sum of the
        rounded product and ``z`` with its error (Knuth's two-sum); the result is their sum with the errors added
        once: the fused result but where a tie of the final rounding falls between the two errors. Where the
        operands are too large to split without overflow, ``x * y + z``."""
        if x.dtype != jnp.float32 or not jnp.issubdtype(x.dtype, jnp.floating):
            wide = jnp.float32 if jnp.issubdtype(x.dtype, jnp.floating) else x.dtype
            out = x.astype(wide) * y.astype(wide) + z.astype(wide)
            return out.astype(x.dtype)
        shape = jnp.broadcast_shapes(x.shape, y.shape, z.shape)
        x, y, z = (jnp.broadcast_to(v, shape).astype(jnp.float32) for v in (x, y, z))
        product = x * y
        error = _product_error(x, y, product)
        total = product + z
        bent = total - product
        lost = (product - (total - bent)) + (z - bent)
        fused = total + (error + lost)
        splittable = (jnp.abs(x) < 2.0**100) & (jnp.abs(y) < 2.0**100) & jnp.isfinite(fused)
        return jnp.where(splittable, fused, product + z)

    def exp2(self, x: jax.Array) -> jax.Array:
        return jnp.exp2(x)

    def reducer(self, combiner: str) -> Callable[[jax.Array, int], jax.Array] | None:
        """XLA's own reduction for a float sum or product, or ``None`` (a pairwise tree in a fixed order)."""
        if combiner == "arith.addf":
            return _negative_zero_sum
        if combiner == "arith.mulf":
            return lambda x, axis: jnp.prod(x, axis=axis, dtype=x.dtype)
        return None

    def cumsum(self, x: jax.Array, axis: int, reverse: bool) -> jax.Array | None:
        """A float cumulative sum in XLA's order, keeping ``-0.0`` (a prefix of ``-0.0``\\ s stays ``-0.0``), or
        ``None`` where it must be combined in a fixed order."""
        summed = lax.cumsum(x, axis=axis, reverse=reverse)
        negative_zero = (x == 0) & jnp.signbit(x)
        # The prefixes of -0.0s end before the first other element: one reduction, where a second cumulative
        # operation would be a second window as long as the axis (a TPU compiles each one).
        index = lax.broadcasted_iota(jnp.int32, x.shape, axis)
        if reverse:
            last_other = jnp.max(jnp.where(negative_zero, -1, index), axis=axis, keepdims=True)
            all_negative_zero = index > last_other
        else:
            first_other = jnp.min(jnp.where(negative_zero, x.shape[axis], index), axis=axis, keepdims=True)
            all_negative_zero = index < first_other
        return jnp.where(all_negative_zero, jnp.array(-0.0, x.dtype), summed)

    def dot(self, a: jax.Array, b: jax.Array, dtype: Any, precision: str) -> jax.Array:
        """``a @ b`` in ``dtype``, batched over leading axes, at the XLA precision ``precision`` maps to."""
        # Narrower floats' products are exact in float32 at XLA's default precision (one pass of the matrix unit).
        if a.dtype == jnp.float32 or b.dtype == jnp.float32:
            config = XLA_PRECISIONS.get(precision, lax.Precision.HIGHEST)
        else:
            config = lax.Precision.DEFAULT
        return _dot_general(a, b, dtype, config)

    def splits_tf32x3(self) -> bool:
        """Whether ``input_precision="tf32x3"`` is computed as three TF32 products (a GPU's way)."""
        return False

    def orderless_float_atomics(self) -> bool:
        """Whether float atomic sums may be combined in any order (one scatter)."""
        return True


class GpuNumerics(Numerics):
    """A GPU's bits (`GPU_NUMERICS`)."""

    name = "gpu"
    float64 = True
    exact = True

    def round_bfloat16(self, x: jax.Array) -> jax.Array:
        """A bfloat16 result rounded to bfloat16 where XLA would skip it: XLA computes bfloat16 arithmetic in
        float32 and, with its excess precision on (the default, which cannot be turned off once JAX has started),
        drops the rounding between an operation and a following conversion to float32. Triton rounds each."""
        if x.dtype != _BFLOAT16:
            return x
        return lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7)

    def divide(self, x: jax.Array, y: jax.Array) -> jax.Array:
        return floats.divide_exactly(x, y)

    def fma(self, x: jax.Array, y: jax.Array, z: jax.Array) -> jax.Array:
        """``tl.fma`` rounded once, as the device's ``fma.rn``."""
        if not jnp.issubdtype(x.dtype, jnp.floating):
            return x * y + z
        shape = jnp.broadcast_shapes(x.shape, y.shape, z.shape)
        x, y, z = (jnp.broadcast_to(v, shape).astype(x.dtype) for v in (x, y, z))
        return libdevice.fused_multiply_add(libdevice.jax_arrays(), x, y, z)

    def exp2(self, x: jax.Array) -> jax.Array:
        """``tl.math.exp2`` within a few ulps on every jaxlib (`libdevice.exp2`)."""
        return libdevice.exp2(libdevice.jax_arrays(), x)

    def reducer(self, combiner: str) -> Callable[[jax.Array, int], jax.Array] | None:
        return None

    def cumsum(self, x: jax.Array, axis: int, reverse: bool) -> jax.Array | None:
        return None

    def dot(self, a: jax.Array, b: jax.Array, dtype: Any, precision: str) -> jax.Array:
        """``a @ b`` exactly rounded, the operands rounded to TF32 first where ``precision`` says so."""
        if precision == "TF32":
            a, b = round_to_tf32(a), round_to_tf32(b)
        return _dot_general(a, b, dtype, lax.Precision.HIGHEST)

    def splits_tf32x3(self) -> bool:
        return True

    def orderless_float_atomics(self) -> bool:
        return False


def _split(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``x`` as the exact sum of two float32 values of 12 significant bits each (Veltkamp's split)."""
    scaled = x * np.float32(4097.0)
    high = scaled - (scaled - x)
    return high, x - high


def _product_error(x: jax.Array, y: jax.Array, product: jax.Array) -> jax.Array:
    """``x * y - product`` exactly, for the rounded ``product`` (Dekker's product, without a fused multiply-add)."""
    x_high, x_low = _split(x)
    y_high, y_low = _split(y)
    return ((x_high * y_high - product) + x_high * y_low + x_low * y_high) + x_low * y_low


def _dot_general(a: jax.Array, b: jax.Array, dtype: Any, config: Any) -> jax.Array:
    return lax.dot_general(
        a,
        b,
        (((a.ndim - 1,), (b.ndim - 2,)), (tuple(range(a.ndim - 2)), tuple(range(b.ndim - 2)))),
        precision=config,
        preferred_element_type=dtype,
    )


def round_to_tf32(x: jax.Array) -> jax.Array:
    """Float32 values rounded to TensorFloat-32 (10 mantissa bits), to nearest with ties away from zero, as the
    device's ``cvt.rna.tf32.f32`` rounds ``tl.dot`` operands with ``input_precision="tf32"``."""
    if x.dtype != jnp.float32:
        return x
    bits = lax.bitcast_convert_type(x, jnp.uint32)
    rounded = (bits + jnp.uint32(0x1000)) & jnp.uint32(0xFFFFE000)
    return jnp.where(jnp.isfinite(x), lax.bitcast_convert_type(rounded, jnp.float32), x)


#: XLA's own arithmetic (a TPU's).
XLA_NUMERICS = Numerics()
#: A GPU's bits (the CPU backend's).
GPU_NUMERICS = GpuNumerics()
