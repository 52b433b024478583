"""Triton's element-wise operations in JAX: what each ``arith``, ``math`` and value-level ``tt`` operation of a
kernel's TTIR computes, on JAX arrays.

TTIR's integers are signless: ``i32`` holds both ``int32`` and ``uint32`` values, and the operation says how to
read them (``arith.divui``, ``arith.cmpi ult``, ``arith.extui``). Here every integer is held as JAX's signed type of
its width and reinterpreted as unsigned where an operation asks; ``i1`` is ``bool``.

Scalars whose value is known when the kernel is traced (the call's integer arguments, constants, what is computed
from them alone) stay Python ints (`jt_core.translation.folding`), so that loop bounds and branch conditions built
from them are known to XLA too; everything else is a JAX array.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from jt_core.errors import UnsupportedKernelError
from jt_core.interpreter import libdevice
from jt_core.translation import floats
from jt_core.translation.folding import UNSIGNED, dtype_of, is_static, wrap
from jt_core.translation.program import TensorType

__all__ = [
    "as_array",
    "constant",
    "convert_float",
    "dtype_of",
    "is_static",
]

_BF16 = np.dtype(ml_dtypes.bfloat16)
#: Float8 formats with a single zero, whose bits 0x80 are NaN.
_UNSIGNED_ZERO = {np.dtype(ml_dtypes.float8_e4m3fnuz), np.dtype(ml_dtypes.float8_e5m2fnuz)}


def as_array(value: Any, ty: TensorType, opaque: bool = True) -> jax.Array:
    """``value`` as a JAX array of type ``ty``'s element type (scalars broadcast to its shape); a static ``+0.0``
    hidden from XLA's simplifier unless ``opaque`` is false (`jt_core.translation.floats.constant`)."""
    dtype = dtype_of(ty.element)
    if is_static(value):
        if ty.element.startswith("i"):
            value = wrap(int(value), ty.element)
        array = floats.constant(np.asarray(value, dtype=dtype), opaque)
        return jnp.broadcast_to(array, ty.shape) if ty.shape else array
    array = jnp.asarray(value)
    if array.dtype != dtype:
        array = array.astype(dtype)
    return array


def constant(text: str | None, value: Any, ty: TensorType, opaque: bool = True) -> Any:
    """The value of an ``arith.constant``: a Python scalar for a scalar, an array for a tensor.

    Args:
        text: The value as printed (``2.000000e+00``, ``0x7F800000``, ``dense<1.0>``, ``dense<[1, 2]>``).
        value: The value as Triton's bindings read it (``None`` where they cannot).
        ty: Its type.
        opaque: Whether a tensor of ``+0.0`` is hidden from XLA's simplifier (`jt_core.translation.floats`).
    """
    dtype = dtype_of(ty.element)
    if text is not None:
        body = text
        if body.startswith("dense<") and body.endswith(">"):
            body = body[len("dense<") : -1]
        if body.startswith("["):
            items = [_scalar(part, ty.element, dtype) for part in body.replace("[", " ").replace("]", " ").split(",")]
            return floats.constant(np.asarray(items, dtype=dtype).reshape(ty.shape), opaque)
        scalar = _scalar(body, ty.element, dtype)
    elif value is not None:
        scalar = wrap(int(value), ty.element) if ty.element.startswith("i") else value
    else:
        raise UnsupportedKernelError(f"a constant of type {ty.text} whose value cannot be read")
    if ty.shape:  # one broadcast of the typed scalar (jnp.full takes ten times as long to trace)
        return lax.broadcast_in_dim(floats.constant(np.asarray(scalar, dtype=dtype), opaque), ty.shape, ())
    return scalar


def _scalar(text: str, element: str, dtype: np.dtype) -> Any:
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if element.startswith("i"):
        return wrap(int(text, 0), element)
    if text.lower().startswith("0x"):
        bits = int(text, 16)
        return float(np.asarray(bits, dtype=UNSIGNED[dtype.itemsize * 8]).view(dtype).astype(np.float64))
    return float(text)


# -- element-wise operations on arrays --------------------------------------------------------------------------


def _asunsigned(x: jax.Array) -> jax.Array:
    if x.dtype == jnp.bool_:
        return x
    return lax.bitcast_convert_type(x, UNSIGNED[x.dtype.itemsize * 8])


def _as_signed(x: jax.Array, dtype: np.dtype) -> jax.Array:
    if x.dtype == dtype:
        return x
    return lax.bitcast_convert_type(x, dtype)


def compare_floats(predicate: int, a: jax.Array, b: jax.Array) -> jax.Array:
    def nan() -> jax.Array:
        return jnp.isnan(a) | jnp.isnan(b)

    def constant(value: bool) -> jax.Array:
        return jnp.full(jnp.broadcast_shapes(jnp.shape(a), jnp.shape(b)), value)

    table: list[Callable[[], jax.Array]] = [
        lambda: constant(False),
        lambda: a == b,
        lambda: a > b,
        lambda: a >= b,
        lambda: a < b,
        lambda: a <= b,
        lambda: (a != b) & ~nan(),
        lambda: ~nan(),
        lambda: (a == b) | nan(),
        lambda: (a > b) | nan(),
        lambda: (a >= b) | nan(),
        lambda: (a < b) | nan(),
        lambda: (a <= b) | nan(),
        lambda: a != b,
        nan,
        lambda: constant(True),
    ]
    return table[predicate]()


def convert_float(x: jax.Array, dtype: np.dtype, rounding: str | None) -> jax.Array:
    """A float conversion as the device makes it: to nearest even (or toward zero with ``rounding="RTZ"``),
    float8 results saturated to their largest finite value (``cvt.rn.satfinite``)."""
    if x.dtype == dtype:
        return x
    if x.dtype == jnp.float64 and dtype.itemsize < 4 and rounding != "RTZ":
        # XLA narrows float64 through float32, rounding twice (a float64 just past a tie of float16 lands on the tie
        # and then rounds to even): rounded to odd, the float32 keeps what decides the second rounding.
        x = _float64_to_float32(x, odd=True)
    is_fp8 = dtype.itemsize == 1
    if is_fp8:
        limit = float(ml_dtypes.finfo(dtype).max)
        wide = x.astype(jnp.float32) if x.dtype.itemsize < 4 else x
        saturated = jnp.where(jnp.isnan(wide), wide, jnp.clip(wide, -limit, limit))
        converted = saturated.astype(dtype)
        if rounding != "RTZ":
            return converted
        back = converted.astype(saturated.dtype)
        over = jnp.isfinite(back) & (jnp.abs(back) > jnp.abs(saturated))
        bits = lax.bitcast_convert_type(converted, jnp.uint8)
        stepped = jnp.where(over, bits - jnp.uint8(1), bits)
        if dtype in _UNSIGNED_ZERO:
            stepped = jnp.where(over & (stepped == 0x80), jnp.uint8(0), stepped)
        return lax.bitcast_convert_type(stepped, dtype)
    if rounding == "RTZ" and dtype.itemsize < x.dtype.itemsize:
        return _toward_zero(x, dtype)
    return x.astype(dtype)


def _toward_zero(x: jax.Array, dtype: np.dtype) -> jax.Array:
    """``x`` rounded toward zero to the narrower float type ``dtype`` (``cvt.rz``): the value of ``dtype`` nearest
    ``x`` that is no larger in magnitude, the largest finite value where ``x`` is finite and larger than it.

    The float64 and bfloat16 steps work on the bits, so that XLA's flushing of subnormal float32 values (which
    reads a float32 subnormal as zero when it is compared or widened) cannot change them; float16 subnormals are
    float32 normals, which the float32 step compares as they are. Every narrower type's values are float32 values,
    so rounding toward zero to float32 first changes nothing.
    """
    if x.dtype == jnp.float64:
        x = _float64_to_float32(x)
        if dtype == np.float32:
            return x
    if dtype == _BF16:
        bits = lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
        nan = (bits & jnp.uint32(0x7FFFFFFF)) > jnp.uint32(0x7F800000)
        high = (bits >> jnp.uint32(16)).astype(jnp.uint16)
        return lax.bitcast_convert_type(jnp.where(nan, high | jnp.uint16(0x0040), high), dtype)
    converted = x.astype(dtype)
    back = converted.astype(x.dtype)
    # Rounded away from zero, or to an infinity from a finite value: one step down in magnitude (sign and magnitude
    # bits), which from an infinity is the largest finite value. A NaN compares false.
    over = jnp.abs(back) > jnp.abs(x)
    bits = lax.bitcast_convert_type(converted, UNSIGNED[dtype.itemsize * 8])
    return lax.bitcast_convert_type(jnp.where(over, bits - 1, bits), dtype)


def _float64_to_float32(x: jax.Array, odd: bool = False) -> jax.Array:
    """float64 values rounded toward zero to float32, from their bits: the mantissa truncated (with the leading one,
    shifted, for a subnormal result), the largest finite value past float32's range, a quiet NaN for a NaN. With
    ``odd``, rounded to odd instead: an inexact result's last bit set, which keeps what a later rounding to a type of
    at most 22 bits of mantissa needs to round once."""
    bits = lax.bitcast_convert_type(x, jnp.uint64)
    sign = ((bits >> jnp.uint64(63)) << jnp.uint64(31)).astype(jnp.uint32)
    exponent = ((bits >> jnp.uint64(52)) & jnp.uint64(0x7FF)).astype(jnp.int32)
    mantissa = bits & jnp.uint64((1 << 52) - 1)
    rebased = exponent - (1023 - 127)
    normal = (rebased.astype(jnp.uint32) << jnp.uint32(23)) | (mantissa >> jnp.uint64(29)).astype(jnp.uint32)
    normal_dropped = (mantissa & jnp.uint64((1 << 29) - 1)) != 0
    # A float32 subnormal counts 2**-149s: the mantissa with its leading one, shifted right by 926 - exponent.
    shift = jnp.clip(926 - exponent, 0, 63).astype(jnp.uint64)
    significand = mantissa | jnp.uint64(1 << 52)
    reachable = exponent >= 926 - 63
    tiny = jnp.where(reachable, significand >> shift, jnp.uint64(0))
    tiny_dropped = jnp.where(reachable, (significand & ((jnp.uint64(1) << shift) - jnp.uint64(1))) != 0, True)
    magnitude = jnp.where(rebased >= 1, normal, tiny.astype(jnp.uint32))
    dropped = jnp.where(rebased >= 1, normal_dropped, tiny_dropped)
    magnitude = jnp.where(rebased > 254, jnp.uint32(0x7F7FFFFF), magnitude)
    dropped = dropped | (rebased > 254)
    zero = exponent == 0
    magnitude = jnp.where(zero, jnp.uint32(0), magnitude)
    dropped = jnp.where(zero, mantissa != 0, dropped)
    if odd:
        magnitude = magnitude | dropped.astype(jnp.uint32)
    special = exponent == 0x7FF
    magnitude = jnp.where(special & (mantissa == 0), jnp.uint32(0x7F800000), magnitude)
    magnitude = jnp.where(special & (mantissa != 0), jnp.uint32(0x7FC00000), magnitude)
    return lax.bitcast_convert_type(sign | magnitude, jnp.float32)


def _widen_fp8(x: jax.Array) -> jax.Array:
    return x.astype(jnp.float16) if x.dtype.itemsize == 1 and jnp.issubdtype(x.dtype, jnp.floating) else x


def float_cast(out: np.dtype, x: jax.Array) -> jax.Array:
    return convert_float(x, out, None)


def int_to_float(out: np.dtype, x: jax.Array) -> jax.Array:
    return x.astype(out)


def uint_to_float(out: np.dtype, x: jax.Array) -> jax.Array:
    return _asunsigned(x).astype(out)


def float_to_int(out: np.dtype, x: jax.Array) -> jax.Array:
    return x.astype(out)


def float_to_uint(out: np.dtype, x: jax.Array) -> jax.Array:
    return _as_signed(x.astype(UNSIGNED[out.itemsize * 8]), out) if out != np.bool_ else x.astype(out)


def bitcast(out: np.dtype, x: jax.Array) -> jax.Array:
    if x.dtype == out:
        return x
    if x.dtype == jnp.bool_ or out == np.bool_:
        return x.astype(out)
    return lax.bitcast_convert_type(x, out)


def mulhi(x: jax.Array, y: jax.Array) -> jax.Array:
    if x.dtype.itemsize == 8:  # no wider integer type: from 32-bit halves
        return libdevice.umulhi(libdevice.jax_arrays(), x, y)
    wide = {4: jnp.uint64, 2: jnp.uint32, 1: jnp.uint16}[x.dtype.itemsize]
    product = _asunsigned(x).astype(wide) * _asunsigned(y).astype(wide)
    high = (product >> (x.dtype.itemsize * 8)).astype(UNSIGNED[x.dtype.itemsize * 8])
    return _as_signed(high, x.dtype)


def round_half_away(x: jax.Array) -> jax.Array:
    return libdevice.round_half_away(libdevice.jax_arrays(), x)


def count_trailing_zeros(x: jax.Array) -> jax.Array:
    bits = x.dtype.itemsize * 8
    low = x & -x
    return jnp.where(x == 0, bits, bits - 1 - lax.clz(low)).astype(x.dtype)


def widen_fp8_source(x: jax.Array, out: np.dtype) -> jax.Array:
    # float8 -> float8 goes through float32, which holds every float8 value exactly.
    if x.dtype.itemsize == 1 and out.itemsize == 1:
        return x.astype(jnp.float32)
    return x


def widen_for_dot(x: jax.Array) -> jax.Array:
    """``tl.dot``'s float8 operands widened to float16 (which holds every float8 value), as the interpreter does."""
    return _widen_fp8(x)


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up (``b`` > 0)."""
    return -(-a // b)
