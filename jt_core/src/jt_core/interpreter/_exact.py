"""libdevice's exactly rounded arithmetic and conversions: ``add_rd``, ``fma_ru``, ``double2float_rz``,
``ll2float_rd``, ``float2int_ru``, ``round``, ``remainder`` and the rest.

A directed rounding is the round-to-nearest result moved by one step where the exact result lies on the other side of
it: each operation computes that result and the sign of the exact result minus it. Float32 operations get both from
float64 arithmetic, where products are exact and double rounding is innocuous (53 >= 2 * 24 + 2 bits); float64
operations from error-free transformations (Knuth's two-sum, Dekker's product with Veltkamp's split, on operands
scaled by powers of two into [1, 2) so that nothing overflows) and Boldo and Melquiond's correctly rounded sum of
three numbers, which rounds to odd. Where XLA flushes subnormal numbers to zero, results and operands in that range
are flushed too.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import numpy as np

from jt_core.interpreter._arrays import Arrays

__all__ = [
    "MODES",
    "fused",
    "square",
    "float_to_float",
    "float_to_int",
    "int_to_float",
    "rounded",
    "round_half_away",
    "remainder",
    "rsqrt_rn",
]

#: The rounding modes, by libdevice's suffix.
MODES = ("rn", "rz", "rd", "ru")

_SPLIT = {4: 4097.0, 8: 134217729.0}  # 2**12 + 1, 2**27 + 1: Veltkamp's constants


def _directed(xp: Arrays, nearest: Any, error: Any, mode: str) -> Any:
    """``nearest`` (the result rounded to nearest) rounded as ``mode`` asks, given ``error``, whose sign is that of
    the exact result minus ``nearest`` (NaN: the result is exact or not a number)."""
    if mode == "rn":
        return nearest
    n = xp.np
    if mode == "ru":
        return n.where(error > 0, n.nextafter(nearest, xp.constant(np.inf, nearest.dtype)), nearest)
    if mode == "rd":
        return n.where(error < 0, n.nextafter(nearest, xp.constant(-np.inf, nearest.dtype)), nearest)
    inward = ((error < 0) & (nearest > 0)) | ((error > 0) & (nearest < 0))
    return n.where(inward, n.nextafter(nearest, xp.constant(0, nearest.dtype)), nearest)


def _two_sum(xp: Arrays, a: Any, b: Any) -> tuple[Any, Any]:
    """``(s, e)`` with ``s`` the rounded sum and ``s + e == a + b`` exactly (barring overflow)."""
    s = a + b
    back = s - a
    return s, (a - (s - back)) + (b - back)


def _split(xp: Arrays, a: Any) -> tuple[Any, Any]:
    # The one product whose fusion into the subtraction that reads it would change the result: c - a must round
    # c itself first.
    c = xp.settled(a * xp.constant(_SPLIT[a.dtype.itemsize], a.dtype))
    high = c - (c - a)
    return high, a - high


def _two_product(xp: Arrays, a: Any, b: Any) -> tuple[Any, Any]:
    """``(p, e)`` with ``p`` the rounded product and ``p + e == a * b`` exactly, for operands whose split does not
    overflow (below 2**995 in magnitude) and a product that is not subnormal. The halves' products are exact, so a
    multiply-add XLA fuses from them rounds as the sum alone does."""
    p = a * b
    ah, al = _split(xp, a)
    bh, bl = _split(xp, b)
    return p, (((ah * bh - p) + ah * bl) + al * bh) + al * bl


def square(xp: Arrays, a: Any) -> tuple[Any, Any]:
    """``(p, e)`` with ``p + e == a * a`` exactly (``a`` below 2**995 in magnitude, ``a * a`` not subnormal)."""
    return _two_product(xp, a, a)


def _odd_sum(xp: Arrays, a: Any, b: Any) -> Any:
    """``a + b`` rounded to odd: where inexact, the neighbour of the exact sum whose last bit is 1."""
    n = xp.np
    s, e = _two_sum(xp, a, b)
    s = n.where(b == 0, a, s)  # a + 0 is a, -0.0 included (the error term of an exact sum is a zero of either sign)
    even = (xp.unsigned(s) & xp.constant(1, xp.unsigned(s).dtype)) == 0
    toward = n.where(e > 0, xp.constant(np.inf, s.dtype), xp.constant(-np.inf, s.dtype))
    return n.where((e != 0) & even, n.nextafter(s, toward), s)


def _sum3(xp: Arrays, a: Any, b: Any, c: Any) -> tuple[Any, Any, Any, Any]:
    """``a + b + c`` rounded to nearest (Boldo and Melquiond), with the three parts ``th + tl + ul`` whose sum is
    exactly ``a + b + c``."""
    uh, ul = _two_sum(xp, b, c)
    th, tl = _two_sum(xp, a, uh)
    return th + _odd_sum(xp, tl, ul), th, tl, ul


def _sign3(xp: Arrays, a: Any, b: Any, c: Any) -> Any:
    """The sign of ``a + b + c``, exactly."""
    return xp.np.sign(_sum3(xp, a, b, c)[0])


def _exponent(xp: Arrays, x: Any) -> Any:
    """``e`` with ``|x| = m * 2**e``, ``m`` in [1, 2) (0 for zero, infinities and NaN)."""
    _, e = xp.np.frexp(x)
    finite = xp.np.isfinite(x) & (x != 0)
    return xp.np.where(finite, e - 1, 0).astype(np.int32)


def _scaled(xp: Arrays, x: Any, e: Any) -> Any:
    return xp.np.ldexp(x, (-e).astype(np.int32))


def _f64_error(xp: Arrays, op: str, args: list[Any], nearest: Any) -> Any:
    """The sign of the exact result minus ``nearest`` for a float64 operation (NaN where it does not apply)."""
    n = xp.np
    if op == "add":
        return _two_sum(xp, args[0], args[1])[1]
    if op == "mul":
        a, b = args
        ea, eb = _exponent(xp, a), _exponent(xp, b)
        hi, lo = _two_product(xp, _scaled(xp, a, ea), _scaled(xp, b, eb))
        return _sign3(xp, hi, -_scaled(xp, nearest, ea + eb), lo)
    if op == "div":
        a, b = args
        ea, eb = _exponent(xp, a), _exponent(xp, b)
        hi, lo = _two_product(xp, _scaled(xp, nearest, ea - eb), _scaled(xp, b, eb))
        return _sign3(xp, _scaled(xp, a, ea), -hi, -lo) * n.sign(b)
    if op == "sqrt":
        (x,) = args
        half = n.floor_divide(_exponent(xp, x), 2)
        hi, lo = _two_product(xp, _scaled(xp, nearest, half), _scaled(xp, nearest, half))
        return _sign3(xp, _scaled(xp, x, 2 * half), -hi, -lo)
    raise ValueError(op)


def _f32_nearest_and_error(xp: Arrays, op: str, args: list[Any]) -> tuple[Any, Any]:
    n = xp.np
    wide = [a.astype(np.float64) for a in args]
    if op == "add":
        s, t = _two_sum(xp, wide[0], wide[1])
    elif op == "mul":
        s, t = wide[0] * wide[1], n.zeros_like(wide[0])  # exact
    elif op == "div":
        s = wide[0] / wide[1]
        nearest = s.astype(np.float32)
        remainder = wide[0] - nearest.astype(np.float64) * wide[1]  # exact
        return nearest, remainder * n.sign(wide[1])
    elif op == "sqrt":
        s = n.sqrt(wide[0])
        nearest = s.astype(np.float32)
        back = nearest.astype(np.float64)
        return nearest, wide[0] - back * back  # exact
    elif op == "fma":
        product = wide[0] * wide[1]  # exact
        s, t = _two_sum(xp, product, wide[2])
        s = n.where(n.isfinite(s), _odd_sum(xp, s, t), s)
    else:
        raise ValueError(op)
    nearest = s.astype(np.float32)
    d = s - nearest.astype(np.float64)
    return nearest, n.where(d != 0, d, t)


def rounded(xp: Arrays, op: str, mode: str, *args: Any) -> Any:
    """``op`` (``"add"``, ``"mul"``, ``"div"``, ``"sqrt"`` or ``"fma"``) of float32 or float64 arrays, rounded as
    ``mode`` (``"rn"``, ``"rz"``, ``"rd"``, ``"ru"``) asks."""
    n = xp.np
    if args[0].dtype == np.float32:
        nearest, error = _f32_nearest_and_error(xp, op, list(args))
    else:
        if op == "add":
            nearest = args[0] + args[1]
        elif op == "mul":
            nearest = args[0] * args[1]
        elif op == "div":
            nearest = args[0] / args[1]
        elif op == "sqrt":
            nearest = n.sqrt(args[0])
        else:
            nearest, error = _fma64(xp, *args)
        if op != "fma":
            error = _f64_error(xp, op, list(args), nearest)
    ordinary = functools.reduce(operator.and_, [n.isfinite(a) for a in args])
    if op == "div":
        ordinary = ordinary & (args[1] != 0)  # x / 0 is an exact infinity
    error = n.where(ordinary & n.isinf(nearest), -nearest, n.where(ordinary, error, xp.constant(np.nan, nearest.dtype)))
    result = _directed(xp, nearest, error, mode)
    if mode == "rd" and op in ("add", "fma"):
        # An exact zero sum of terms that are not all +0 is -0 when rounding down (IEEE 754, 6.3).
        terms = [args[0] * args[1], args[2]] if op == "fma" else list(args)
        plus_zeros = functools.reduce(operator.and_, [(t == 0) & ~n.signbit(t) for t in terms])
        result = n.where((result == 0) & (error == 0) & ~plus_zeros, xp.constant(-0.0, result.dtype), result)
    return result


def fused(xp: Arrays, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` rounded once, to ``a``'s type (float16, bfloat16, float32 or float64): what a GPU's ``fma.rn``
    computes where Triton's compiler fuses a product into a sum.

    Float32 and float64 as ``fma_rn`` (`rounded`). The narrower floats' product is exact in float64, and their sum with
    ``c`` is rounded to odd there, then to float32 toward zero with the last bit set where inexact (odd again): 53
    and 24 bits are each at least twice the next precision plus two, so the last rounding, to nearest, is the one
    rounding of the exact result."""
    dtype = np.dtype(a.dtype)
    if dtype in (np.float32, np.float64):
        return rounded(xp, "fma", "rn", a, b, c)
    n = xp.np
    wide = [x.astype(np.float64) for x in (a, b, c)]
    product = wide[0] * wide[1]  # exact
    s, t = _two_sum(xp, product, wide[2])
    s = n.where(n.isfinite(s), _odd_sum(xp, s, t), s)
    toward_zero = float_to_float(xp, s, "rz")
    inexact = n.isfinite(s) & (toward_zero.astype(np.float64) != s)
    bits = xp.unsigned(toward_zero)
    odd = xp.view(n.where(inexact, bits | xp.constant(1, bits.dtype), bits), np.float32)
    return odd.astype(dtype)


def _fma64(xp: Arrays, a: Any, b: Any, c: Any) -> tuple[Any, Any]:
    """``a * b + c`` in float64 rounded to nearest, and the sign of the exact result minus it. The product's error
    is exact for operands below 2**995 in magnitude whose product is above 2**-969."""
    n = xp.np
    p, e = _two_product(xp, a, b)
    nearest, th, tl, ul = _sum3(xp, c, p, e)
    # A product that overflows leaves an error term of no meaning: the rounded result is then a * b + c itself.
    nearest = n.where(n.isfinite(p), nearest, p + c)
    return nearest, _sign3(xp, th - nearest, tl, ul)


def round_half_away(xp: Arrays, x: Any) -> Any:
    """Rounding to the nearest integer, halves away from zero (``round``); the sign of zero is kept."""
    n = xp.np
    t = n.trunc(x)
    step = n.where(n.abs(x - t) >= xp.constant(0.5, x.dtype), n.sign(x), xp.constant(0, x.dtype))
    return n.copysign(t + step, x)


def remainder(xp: Arrays, x: Any, y: Any) -> Any:
    """IEEE 754's remainder: ``x - q * y`` with ``q`` the integer nearest ``x / y``, halves to even (exact)."""
    n = xp.np
    ay = n.abs(y)
    # |x| modulo 2|y| leaves the remainder and the parity of the quotient; where 2|y| overflows, |x| < 2|y| already.
    big = ay > xp.constant(np.finfo(x.dtype).max / 2, x.dtype)
    r = n.where(big, n.abs(x), n.fmod(n.abs(x), n.where(big, ay, ay + ay)))
    odd = r >= ay
    r = n.where(odd, r - ay, r)
    rest = ay - r  # r > |y| / 2 exactly when r > |y| - r, which is exact there (Sterbenz)
    r = n.where((r > rest) | ((r == rest) & odd), r - ay, r)
    return n.where(n.isinf(y) & n.isfinite(x), x, n.where(n.signbit(x), -r, r))


def rsqrt_rn(xp: Arrays, x: Any) -> Any:
    """``1 / sqrt(x)`` rounded to nearest (float32): the float64 result rounded, moved where it lies past the
    midpoint the exact result is on the other side of."""
    n = xp.np
    wide = x.astype(np.float64)
    estimate = (1.0 / n.sqrt(wide)).astype(np.float32)
    # The exact result y = x**-0.5 against the midpoint m between the estimate and its neighbour toward the float64
    # value: y > m exactly when 1 > m * m * x, computed without rounding.
    r = (1.0 / n.sqrt(wide)).astype(np.float64)
    towards = n.where(r > estimate.astype(np.float64), xp.constant(np.inf, np.float32), xp.constant(0, np.float32))
    neighbour = n.nextafter(estimate, towards)
    middle = (estimate.astype(np.float64) + neighbour.astype(np.float64)) / 2
    square = middle * middle  # exact: 2 * 25 bits
    ex = _exponent(xp, square)
    hi, lo = _two_product(xp, _scaled(xp, square, ex), wide)
    beyond = _sign3(xp, xp.constant(1.0, np.float64), -_scaled(xp, hi, -ex), -_scaled(xp, lo, -ex))
    # beyond > 0: y > m, so y lies on the neighbour's side when the neighbour is above, and the other way round.
    flip = n.where(neighbour > estimate, beyond > 0, beyond < 0)
    special = ~n.isfinite(wide) | (wide <= 0)
    return n.where(special, (1.0 / n.sqrt(wide)).astype(np.float32), n.where(flip, neighbour, estimate))


def float_to_float(xp: Arrays, x: Any, mode: str) -> Any:
    """A float64 array as float32, rounded as ``mode`` asks."""
    n = xp.np
    nearest = x.astype(np.float32)
    error = x - nearest.astype(np.float64)
    error = n.where(n.isfinite(x), error, xp.constant(np.nan, np.float64))
    return _directed(xp, nearest, error, mode)


def int_to_float(xp: Arrays, x: Any, dtype: Any, mode: str, unsigned: bool = False) -> Any:
    """An integer array (its bits read as unsigned with ``unsigned``) as ``dtype``, rounded as ``mode`` asks."""
    n = xp.np
    x = xp.unsigned(x) if unsigned else xp.signed(x)
    nearest = x.astype(dtype)
    width = 8 * x.dtype.itemsize
    top = float(2 ** (width if unsigned else width - 1))
    past = nearest >= xp.constant(top, dtype)  # rounded up to a power of two the integer type cannot hold
    back = n.where(past, xp.constant(0, dtype), nearest).astype(x.dtype)
    error = n.where(past, -1, n.where(x > back, 1, n.where(x < back, -1, 0))).astype(dtype)
    return _directed(xp, nearest, error, mode)


_ROUNDERS = {"rn": "rint", "rz": "trunc", "rd": "floor", "ru": "ceil"}


def float_to_int(xp: Arrays, x: Any, dtype: Any, mode: str, unsigned: bool = False) -> Any:
    """A float array rounded to an integer as ``mode`` asks, saturated to the integer type as NVIDIA's conversions
    saturate (NaN gives 0), as ``dtype``'s bits (unsigned values held in a signed type of their width)."""
    n = xp.np
    dtype = np.dtype(dtype)
    width = 8 * dtype.itemsize
    low, high = (0.0, float(2**width)) if unsigned else (-float(2 ** (width - 1)), float(2 ** (width - 1)))
    whole = getattr(n, _ROUNDERS[mode])(x)
    target = np.dtype(f"u{dtype.itemsize}") if unsigned else np.dtype(f"i{dtype.itemsize}")
    inside = n.where((whole >= low) & (whole < high), whole, xp.constant(0, x.dtype)).astype(target)
    most = xp.constant(2**width - 1 if unsigned else 2 ** (width - 1) - 1, target)
    least = xp.constant(0 if unsigned else -(2 ** (width - 1)), target)
    value = n.where(whole >= high, most, n.where(whole < low, least, inside))
    value = n.where(n.isnan(x), xp.constant(0, target), value)
    return xp.view(value, dtype)
