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

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

from jt_core.errors import UnsupportedKernelError
from jt_core.interpreter import libdevice
from jt_core.translation import floats
from jt_core.translation import strategy as strategies
from jt_core.translation.folding import UNSIGNED, dtype_of, is_float8, is_static, wrap
from jt_core.translation.program import TensorType

__all__ = [
    "ELEMENTWISE",
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


def _unsigned_op(fn: Callable[..., jax.Array]) -> Callable[..., jax.Array]:
    def apply(*xs: jax.Array) -> jax.Array:
        dtype = xs[0].dtype
        return _as_signed(fn(*(_asunsigned(x) for x in xs)), dtype)

    return apply


def _int_div(x: jax.Array, y: jax.Array) -> jax.Array:
    # Division by zero is undefined on the device; XLA's answer (-1 or the dividend's remainder) is kept.
    return lax.div(x, y)


def _shift(fn: Callable[[jax.Array, jax.Array], jax.Array]) -> Callable[[jax.Array, jax.Array], jax.Array]:
    def apply(x: jax.Array, y: jax.Array) -> jax.Array:
        return fn(x, y.astype(x.dtype))

    return apply


def _cmpf(predicate: int, a: jax.Array, b: jax.Array) -> jax.Array:
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


_INT_COMPARE: list[Callable[[jax.Array, jax.Array], jax.Array]] = [
    lax.eq,
    lax.ne,
    lax.lt,
    lax.le,
    lax.gt,
    lax.ge,
    lax.lt,
    lax.le,
    lax.gt,
    lax.ge,
]


def _cmpi(predicate: int, a: jax.Array, b: jax.Array) -> jax.Array:
    if predicate >= 6:
        a, b = _asunsigned(a), _asunsigned(b)
    a, b = jnp.broadcast_arrays(a, b)
    return _INT_COMPARE[predicate](a, b)


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


def _float_cast(out: np.dtype, x: jax.Array) -> jax.Array:
    return convert_float(x, out, None)


def _int_to_float(out: np.dtype, x: jax.Array) -> jax.Array:
    return x.astype(out)


def _uint_to_float(out: np.dtype, x: jax.Array) -> jax.Array:
    return _asunsigned(x).astype(out)


def _float_to_int(out: np.dtype, x: jax.Array) -> jax.Array:
    return x.astype(out)


def _float_to_uint(out: np.dtype, x: jax.Array) -> jax.Array:
    return _as_signed(x.astype(UNSIGNED[out.itemsize * 8]), out) if out != np.bool_ else x.astype(out)


def _extui(out: np.dtype, x: jax.Array) -> jax.Array:
    if x.dtype == jnp.bool_:
        return x.astype(out)
    return _as_signed(_asunsigned(x).astype(UNSIGNED[out.itemsize * 8]), out)


def _int_cast(out: np.dtype, x: jax.Array) -> jax.Array:
    if out == np.bool_:
        return (x & 1).astype(bool)
    return x.astype(out)


def _bitcast(out: np.dtype, x: jax.Array) -> jax.Array:
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


def fma(x: jax.Array, y: jax.Array, z: jax.Array) -> jax.Array:
    """``tl.fma``: rounded once, as the device's ``fma.rn``, where the strategy rounds as a GPU does; else as XLA
    computes ``x * y + z`` (a TPU has no float64 to round once through)."""
    if not strategies.active().exact_rounding or not jnp.issubdtype(x.dtype, jnp.floating):
        return x * y + z
    shape = jnp.broadcast_shapes(x.shape, y.shape, z.shape)
    x, y, z = (jnp.broadcast_to(v, shape).astype(x.dtype) for v in (x, y, z))
    return libdevice.fused_multiply_add(libdevice.jax_arrays(), x, y, z)


def _exp2(x: jax.Array) -> jax.Array:
    """``tl.math.exp2``: within a few ulps on every jaxlib where the strategy rounds as a GPU does (`libdevice.exp2`);
    else XLA's."""
    if not strategies.active().exact_rounding:
        return jnp.exp2(x)
    return libdevice.exp2(libdevice.jax_arrays(), x)


def _rsqrt(x: jax.Array) -> jax.Array:
    return lax.rsqrt(x)


def round_half_away(x: jax.Array) -> jax.Array:
    return libdevice.round_half_away(libdevice.jax_arrays(), x)


def _clz(x: jax.Array) -> jax.Array:
    return lax.clz(x)


def _cttz(x: jax.Array) -> jax.Array:
    bits = x.dtype.itemsize * 8
    low = x & -x
    return jnp.where(x == 0, bits, bits - 1 - lax.clz(low)).astype(x.dtype)


def _popcount(x: jax.Array) -> jax.Array:
    return lax.population_count(x)


def _fmax(x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.fmax(x, y)


def _fmin(x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.fmin(x, y)


#: Element-wise operations: name -> (function of the operand arrays, whether it takes the result dtype first).
ELEMENTWISE: dict[str, tuple[Callable[..., jax.Array], bool]] = {
    "arith.addf": (lax.add, False),
    "arith.subf": (lax.sub, False),
    "arith.mulf": (lax.mul, False),
    "arith.divf": (floats.divide, False),
    "arith.remf": (lax.rem, False),
    "arith.negf": (lax.neg, False),
    "arith.addi": (lax.add, False),
    "arith.subi": (lax.sub, False),
    "arith.muli": (lax.mul, False),
    "arith.divsi": (_int_div, False),
    "arith.remsi": (lax.rem, False),
    "arith.divui": (_unsigned_op(lax.div), False),
    "arith.remui": (_unsigned_op(lax.rem), False),
    "arith.andi": (lax.bitwise_and, False),
    "arith.ori": (lax.bitwise_or, False),
    "arith.xori": (lax.bitwise_xor, False),
    "arith.shli": (_shift(lax.shift_left), False),
    "arith.shrsi": (_shift(lax.shift_right_arithmetic), False),
    "arith.shrui": (_shift(lax.shift_right_logical), False),
    "arith.maxsi": (lax.max, False),
    "arith.minsi": (lax.min, False),
    "arith.maxui": (_unsigned_op(lax.max), False),
    "arith.minui": (_unsigned_op(lax.min), False),
    "arith.maxnumf": (_fmax, False),
    "arith.minnumf": (_fmin, False),
    "arith.maximumf": (jnp.maximum, False),
    "arith.minimumf": (jnp.minimum, False),
    "arith.extf": (_float_cast, True),
    "arith.truncf": (_float_cast, True),
    "arith.sitofp": (_int_to_float, True),
    "arith.uitofp": (_uint_to_float, True),
    "arith.fptosi": (_float_to_int, True),
    "arith.fptoui": (_float_to_uint, True),
    "arith.extsi": (_int_cast, True),
    "arith.extui": (_extui, True),
    "arith.trunci": (_int_cast, True),
    "arith.index_cast": (_int_cast, True),
    "arith.index_castui": (_extui, True),
    "arith.bitcast": (_bitcast, True),
    "tt.bitcast": (_bitcast, True),
    "tt.mulhiui": (mulhi, False),
    "tt.precise_sqrt": (lax.sqrt, False),
    "tt.precise_divf": (floats.divide, False),
    "math.exp": (jnp.exp, False),
    "math.exp2": (_exp2, False),
    "math.expm1": (jnp.expm1, False),
    "math.log": (jnp.log, False),
    "math.log2": (jnp.log2, False),
    "math.log10": (jnp.log10, False),
    "math.log1p": (jnp.log1p, False),
    "math.sqrt": (lax.sqrt, False),
    "math.rsqrt": (_rsqrt, False),
    "math.cbrt": (jnp.cbrt, False),
    "math.sin": (jnp.sin, False),
    "math.cos": (jnp.cos, False),
    "math.tan": (jnp.tan, False),
    "math.asin": (jnp.arcsin, False),
    "math.acos": (jnp.arccos, False),
    "math.atan": (jnp.arctan, False),
    "math.atan2": (jnp.arctan2, False),
    "math.sinh": (jnp.sinh, False),
    "math.cosh": (jnp.cosh, False),
    "math.tanh": (jnp.tanh, False),
    "math.asinh": (jnp.arcsinh, False),
    "math.acosh": (jnp.arccosh, False),
    "math.atanh": (jnp.arctanh, False),
    "math.erf": (lax.erf, False),
    "math.floor": (jnp.floor, False),
    "math.ceil": (jnp.ceil, False),
    "math.trunc": (jnp.trunc, False),
    "math.round": (round_half_away, False),
    "math.roundeven": (jnp.round, False),
    "math.absf": (jnp.abs, False),
    "math.absi": (jnp.abs, False),
    "math.copysign": (jnp.copysign, False),
    "math.powf": (jnp.power, False),
    "math.fma": (fma, False),
    "math.ctlz": (_clz, False),
    "math.cttz": (_cttz, False),
    "math.ctpop": (_popcount, False),
}


def elementwise(name: str, args: Sequence[jax.Array], result: TensorType, attr: Any) -> jax.Array:
    """Applies the element-wise operation ``name`` to arrays (broadcast as JAX does).

    Raises:
        UnsupportedKernelError: For an operation that is not element-wise, or not known here.
    """
    out = dtype_of(result.element)
    if name not in _PICKS_FLOAT8 and any(is_float8(a.dtype) for a in args):
        # Triton's GPU compilers cannot compile arithmetic on float8 values; the interpreter says so, naming the fix.
        raise UnsupportedKernelError(f"{name} on float8 values")
    if name == "arith.cmpi":
        return _cmpi(int(attr), args[0], args[1])
    if name == "arith.cmpf":
        return _cmpf(int(attr), args[0], args[1])
    if name == "arith.select":
        return jnp.where(args[0], args[1], args[2])
    if name == "tt.clampf":
        x, low, high = args
        clamped = jnp.minimum(jnp.maximum(x, low), high)
        return clamped if attr in ("ALL", 65535) else jnp.where(jnp.isnan(x), jnp.fmin(jnp.fmax(x, low), high), clamped)
    if name == "arith.truncf" or name == "tt.fp_to_fp":
        return convert_float(_widen_fp8_source(args[0], out), out, attr if isinstance(attr, str) else None)
    if out == np.bool_ and name in _INT1_ARITHMETIC:
        return _INT1_ARITHMETIC[name](*args)
    entry = ELEMENTWISE.get(name)
    if entry is None:
        raise UnsupportedKernelError(f"the operation {name}")
    fn, takes_dtype = entry
    if takes_dtype:
        return fn(out, *args)
    return floats.round_bfloat16(fn(*args))


def _left_operand(x: jax.Array, y: jax.Array) -> jax.Array:
    return x


def _zero_of(x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.zeros_like(x)


#: Integer arithmetic on ``i1`` (Triton's ``int1``, unsigned), which wraps modulo 2: a sum or difference is an
#: exclusive or, a product an and. A quotient is its dividend, a remainder zero and a shift its shifted operand, which
#: the divisor 1 and the shift 0 give, the only ones defined; LLVM folds every ``i1`` division, remainder and shift
#: to those (what a GPU computes whatever the divisor or shift).
_INT1_ARITHMETIC: dict[str, Callable[[jax.Array, jax.Array], jax.Array]] = {
    "arith.addi": lax.bitwise_xor,
    "arith.subi": lax.bitwise_xor,
    "arith.muli": lax.bitwise_and,
    "arith.divui": _left_operand,
    "arith.divsi": _left_operand,
    "arith.ceildivsi": _left_operand,
    "arith.floordivsi": _left_operand,
    "arith.remui": _zero_of,
    "arith.remsi": _zero_of,
    "arith.shli": _left_operand,
    "arith.shrui": _left_operand,
    "arith.shrsi": _left_operand,
}


#: Operations that take float8 values: conversions, and picking values without computing on them.
_PICKS_FLOAT8 = {
    "arith.select",
    "arith.bitcast",
    "tt.bitcast",
    "arith.extf",
    "arith.truncf",
    "tt.fp_to_fp",
    "math.absf",
}


def _widen_fp8_source(x: jax.Array, out: np.dtype) -> jax.Array:
    # float8 -> float8 goes through float32, which holds every float8 value exactly.
    if x.dtype.itemsize == 1 and out.itemsize == 1:
        return x.astype(jnp.float32)
    return x


def widen_for_dot(x: jax.Array) -> jax.Array:
    """``tl.dot``'s float8 operands widened to float16 (which holds every float8 value), as the interpreter does."""
    return _widen_fp8(x)


def round_to_tf32(x: jax.Array) -> jax.Array:
    """Float32 values rounded to TensorFloat-32 (10 mantissa bits), to nearest with ties away from zero, as the
    device's ``cvt.rna.tf32.f32`` rounds ``tl.dot`` operands with ``input_precision="tf32"``."""
    if x.dtype != jnp.float32:
        return x
    bits = lax.bitcast_convert_type(x, jnp.uint32)
    rounded = (bits + jnp.uint32(0x1000)) & jnp.uint32(0xFFFFE000)
    return jnp.where(jnp.isfinite(x), lax.bitcast_convert_type(rounded, jnp.float32), x)


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up (``b`` > 0)."""
    return -(-a // b)
