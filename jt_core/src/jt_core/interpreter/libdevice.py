"""libdevice on the CPU: what each function of NVIDIA's device library (``triton.language.extra.libdevice``, which
Triton maps to ``triton.language.extra.cuda.libdevice``) computes, by the symbol a kernel's call names
(``__nv_expf``), written once for NumPy (Triton's interpreter) and ``jax.numpy`` (the compiled path).

* Exactly rounded functions are exact on both paths: the rounding-mode variants (``add_rd``, ``fma_ru``,
  ``double2float_rz``, ``ll2float_rd``, ...), ``round`` (halves away from zero), ``rint``, ``fmod``, ``remainder``,
  ``ldexp``, the conversions to integers (saturating, NaN to 0, as NVIDIA's conversions do), the bit casts and the
  integer functions (``mulhi`` signed or not as named, ``brev``, ``ffs``, ``byte_perm``, ...).
* The elementary transcendental functions (``exp``, ``log``, ``tanh``, ``erf``, ``sin``, ...) are computed in the
  operands' type by the array library (XLA's float32 ones are within 5 ulps, libdevice's own within 1 to 4); the
  special functions (``lgamma``, ``tgamma``, ``erfinv``, ``normcdfinv``, ``erfcx``, ``cyl_bessel_i0``, ...),
  ``exp10``, ``pow`` and the ``norm`` family on float32 are computed in float64 and rounded, where XLA's float32
  versions are far off or missing; ``pow`` with an integer exponent (``powi``, what ``pow(x, 2)`` calls) by
  repeated squaring. Float64 results are within a few ulps. The ``fast_`` variants are computed as accurately.
  ``rcp64h`` approximates as NVIDIA's does: the reciprocal of the operand's high half, to its high half.
* Bessel functions of the first and second kind (``j0``, ``j1``, ``jn``, ``y0``, ``y1``, ``yn``) have no
  ``jax.numpy`` implementation: the compiled path hands a kernel using them to the interpreter, which computes them
  with SciPy (a dependency of JAX).

`implementation` names what a symbol computes; `evaluate` runs it and gives the result the type the call expects.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from jt_core.interpreter import _bits, _exact
from jt_core.interpreter._arrays import Arrays, jax_arrays, numpy_arrays

__all__ = [
    "FUNCTIONS",
    "NUMPY_ONLY",
    "Arrays",
    "evaluate",
    "exp2",
    "fused_multiply_add",
    "implementation",
    "jax_arrays",
    "libdevice_name",
    "mulhi",
    "numpy_arrays",
    "round_half_away",
    "umulhi",
]

#: The high half of the product of two integers (``mulhi(arrays, a, b, signed)``), for 32- and 64-bit operands.
mulhi = _bits.mulhi
#: Rounding to the nearest integer, halves away from zero (``round_half_away(arrays, x)``), exactly.
round_half_away = _exact.round_half_away

Function = Callable[..., Any]
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def _wide(fn: Function) -> Function:
    """``fn``, computed in float64 for float32 operands and rounded back."""

    def run(xp: Arrays, *args: Any) -> Any:
        narrow = any(a.dtype == _F32 for a in args)
        out = fn(xp, *[a.astype(_F64) if a.dtype == _F32 else a for a in args])
        return out.astype(_F32) if narrow and out.dtype == _F64 else out

    return run


def _numpy(name: str) -> Function:
    """The array library's own function, in the operands' type."""
    return lambda xp, *args: getattr(xp.np, name)(*args)


def _special(name: str) -> Function:
    """The special function, computed in float64 for float32 operands (XLA's float32 versions are far off, or
    missing)."""
    return _wide(lambda xp, *args: getattr(xp.special, name)(*args))


def _powi(xp: Arrays, x: Any, n: Any) -> Any:
    """``x ** n`` for an integer ``n``, by repeated squaring (in float64 for float32 ``x``, so that it is rounded
    once): as many steps as the largest ``|n|`` has bits, where XLA's ``pow`` costs thirty times a product."""
    wide = x.astype(_F64)
    e = xp.np.abs(n.astype(np.int64))
    if xp.name == "numpy":
        base, product = wide, np.ones_like(wide)
        while np.any(e != 0):
            product = np.where(e & 1 == 1, product * base, product)
            base, e = base * base, e >> 1
    else:
        from jax import lax

        def step(carry: tuple[Any, Any, Any]) -> tuple[Any, Any, Any]:
            base, product, rest = carry
            return base * base, xp.np.where(rest & 1 == 1, product * base, product), rest >> 1

        _, product, _ = lax.while_loop(lambda c: xp.np.any(c[2] != 0), step, (wide, xp.np.ones_like(wide), e))
    return xp.np.where(n < 0, 1 / product, product).astype(x.dtype)


def _constant(xp: Arrays, value: float, like: Any) -> Any:
    return xp.constant(value, like.dtype)


def _sinpi_cospi(xp: Arrays, x: Any, cosine: bool) -> Any:
    n = xp.np
    k = n.rint(x)
    r = x - k  # exact, in [-1/2, 1/2]
    odd = n.fmod(k, 2) != 0
    pi = _constant(xp, np.pi, x)
    near = n.abs(r) <= 0.25
    far = _constant(xp, 0.5, x) - n.abs(r)
    if cosine:
        value = n.where(near, n.cos(pi * r), n.sin(pi * far))
    else:
        value = n.where(near, n.sin(pi * r), n.copysign(n.cos(pi * far), r))
    value = n.where(odd, -value, value)
    return n.where(n.isinf(x), _constant(xp, np.nan, x), value)


def exp2(xp: Arrays, x: Any) -> Any:
    """``2**x`` as ``2**k * 2**f`` (``k`` whole, ``f`` in [0, 1)): XLA's ``exp2`` of a large argument lost digits
    before jaxlib 0.12.1 (it was ``exp(x * ln 2)``, ~35 ulps off near ``|x|`` = 100)."""
    n = xp.np
    k = n.floor(x)
    finite = n.isfinite(x)
    whole = n.where(finite, n.clip(k, -1100, 1100), 0).astype(np.int32)
    return n.where(finite, n.ldexp(n.exp2(x - n.where(finite, k, 0)), whole), n.exp2(x))


def _tanh(xp: Arrays, x: Any) -> Any:
    """``tanh`` as ``m / (m + 2)`` with ``m = expm1(2|x|)``: within 2.3 ulps everywhere, on both paths alike. XLA's
    float32 ``tanh`` (4.5 ulps) is 1 from ``|x|`` = 7.9 on, where ``1 + tanh(x)`` (in a GELU's gradient) is 1e-7, and
    its few ulps turn into percents wherever a kernel cancels ``1 + tanh(x)``; this costs 3.5 times XLA's."""
    n = xp.np
    a = n.abs(x)
    big = a > 20  # tanh is 1 in either type from there on
    m = n.expm1(2 * n.where(big, _constant(xp, 0, x), a))
    value = n.where(big, _constant(xp, 1, x), m / (m + 2))
    return n.where(n.isnan(x), x, n.copysign(value, x))


def _cosh_sinh(xp: Arrays, x: Any, cosine: bool) -> Any:
    """``cosh`` and ``sinh`` from ``exp`` and ``expm1`` (XLA's float64 versions are 10 ulps off near 20)."""
    n = xp.np
    a = n.abs(x)
    big = a > 709.0  # exp(a) overflows before cosh does: half of it, through exp(a - log 2)
    half = n.exp(n.where(big, a - np.log(2.0), 0))
    e = n.exp(n.where(big, 0, a))
    m = n.expm1(n.where(big, 0, a))
    if cosine:
        return n.where(big, half, 0.5 * (e + 1 / e))
    small = 0.5 * (m + m / (m + 1))  # for |x| < 1, without cancellation
    value = n.where(big, half, n.where(a < 1, small, 0.5 * (e - 1 / e)))
    return n.where(n.isnan(x), x, n.copysign(value, x))


def _erfcx(xp: Arrays, x: Any) -> Any:
    """``exp(x**2) * erfc(x)``; for negative ``x``, ``2 * exp(x**2) - erfcx(-x)`` with ``x**2`` split exactly in two
    (``exp`` of its rounded square is 100 ulps off where the result is near 1e100)."""
    n = xp.np
    a = n.abs(x)
    h, low = _exact.square(xp, n.where(n.isfinite(a), a, 0))
    grown = 2 * n.exp(h) * (1 + low) - xp.special.erfcx(a)
    return n.where(x < 0, n.where(n.isfinite(x), grown, _constant(xp, np.inf, x)), xp.special.erfcx(x))


def _norm(xp: Arrays, *args: Any) -> Any:
    """``sqrt(sum(a * a))`` with no overflow or underflow on the way."""
    n = xp.np
    magnitudes = [n.abs(a) for a in args]
    largest = functools.reduce(n.maximum, magnitudes)
    _, e = n.frexp(largest)
    e = n.where(n.isfinite(largest) & (largest != 0), e, 0).astype(np.int32)
    scaled = [n.ldexp(m, -e) for m in magnitudes]
    total = functools.reduce(lambda a, b: a + b, [s * s for s in scaled])
    out = n.ldexp(n.sqrt(total), e)
    infinite = functools.reduce(lambda a, b: a | b, [n.isinf(a) for a in args])
    return n.where(infinite, _constant(xp, np.inf, out), out)


def _ilogb(xp: Arrays, x: Any) -> Any:
    n = xp.np
    _, e = n.frexp(x)
    value = (e - 1).astype(np.int32)
    value = n.where(n.isinf(x), _INT_MAX, value)
    return n.where((x == 0) | n.isnan(x), _INT_MIN, value).astype(np.int32)


def _logb(xp: Arrays, x: Any) -> Any:
    n = xp.np
    _, e = n.frexp(x)
    value = (e - 1).astype(x.dtype)
    value = n.where(n.isinf(x), _constant(xp, np.inf, x), value)
    value = n.where(x == 0, _constant(xp, -np.inf, x), value)
    return n.where(n.isnan(x), x, value)


def _fdim(xp: Arrays, x: Any, y: Any) -> Any:
    n = xp.np
    value = n.where(x > y, x - y, _constant(xp, 0, x))
    return n.where(n.isnan(x) | n.isnan(y), x + y, value)


def _saturate(xp: Arrays, x: Any) -> Any:
    n = xp.np
    return n.where(n.isnan(x) | (x <= 0), _constant(xp, 0, x), n.minimum(x, _constant(xp, 1, x)))


def _rcp64h(xp: Arrays, x: Any) -> Any:
    high = xp.constant(0xFFFFFFFF00000000, np.uint64)
    top = xp.view(xp.unsigned(x) & high, np.float64)
    return xp.view(xp.unsigned(1.0 / top) & high, np.float64)


def _erfcinv(xp: Arrays, y: Any) -> Any:
    return -xp.special.ndtri(y / 2) / np.sqrt(2.0)


def _pow(xp: Arrays, x: Any, y: Any) -> Any:
    return xp.np.power(x, y.astype(x.dtype))


def _flag(test: Callable[[Any], Any]) -> Function:
    return lambda xp, x: test(xp.np)(x).astype(np.int32)


def _high_word(xp: Arrays, x: Any) -> Any:
    return (xp.unsigned(x) >> xp.constant(32, np.uint64)).astype(np.uint32)


def _low_word(xp: Arrays, x: Any) -> Any:
    return (xp.unsigned(x) & xp.constant(0xFFFFFFFF, np.uint64)).astype(np.uint32)


def _join_words(xp: Arrays, hi: Any, lo: Any) -> Any:
    joined = (xp.unsigned(hi).astype(np.uint64) << xp.constant(32, np.uint64)) | xp.unsigned(lo).astype(np.uint64)
    return xp.view(joined, np.float64)


def _both(name: str, fn: Function) -> dict[str, Function]:
    """libdevice's float32 and float64 symbols of ``name`` (``__nv_expf``, ``__nv_exp``)."""
    return {f"__nv_{name}f": fn, f"__nv_{name}": fn}


def _table() -> dict[str, Function]:
    table: dict[str, Function] = {}
    for name, numpy_name in {
        "acos": "arccos",
        "acosh": "arccosh",
        "asin": "arcsin",
        "asinh": "arcsinh",
        "atan": "arctan",
        "atanh": "arctanh",
        "cbrt": "cbrt",
        "cos": "cos",
        "exp": "exp",
        "expm1": "expm1",
        "log": "log",
        "log10": "log10",
        "log1p": "log1p",
        "log2": "log2",
        "sin": "sin",
        "tan": "tan",
        "atan2": "arctan2",
        "hypot": "hypot",
    }.items():
        table.update(_both(name, _numpy(numpy_name)))
    for name, special_name in {
        "erfinv": "erfinv",
        "lgamma": "gammaln",
        "tgamma": "gamma",
        "normcdf": "ndtr",
        "normcdfinv": "ndtri",
        "cyl_bessel_i0": "i0",
        "cyl_bessel_i1": "i1",
        "j0": "j0",
        "j1": "j1",
        "y0": "y0",
        "y1": "y1",
    }.items():
        table.update(_both(name, _special(special_name)))
    # XLA's float32 erf and erfc are within 5 ulps, and 60 times faster than its float64 ones.
    table.update(_both("erf", lambda xp, x: xp.special.erf(x)))
    table.update(_both("erfc", lambda xp, x: xp.special.erfc(x)))
    table.update(_both("erfcinv", _wide(_erfcinv)))
    table.update(_both("jn", _wide(lambda xp, n, x: xp.special.jn(n, x))))
    table.update(_both("yn", _wide(lambda xp, n, x: xp.special.yn(n, x))))
    table.update(_both("exp2", exp2))
    table.update(_both("tanh", _tanh))
    table.update(_both("erfcx", _wide(_erfcx)))
    table.update(_both("cosh", lambda xp, x: _cosh_sinh(xp, x, cosine=True)))
    table.update(_both("sinh", lambda xp, x: _cosh_sinh(xp, x, cosine=False)))
    table.update(_both("exp10", _wide(lambda xp, x: xp.np.power(_constant(xp, 10.0, x), x))))
    table.update(_both("rsqrt", lambda xp, x: 1 / xp.np.sqrt(x)))
    table.update(_both("rcbrt", _wide(lambda xp, x: 1 / xp.np.cbrt(x))))
    table.update(_both("sinpi", _wide(lambda xp, x: _sinpi_cospi(xp, x, cosine=False))))
    table.update(_both("cospi", _wide(lambda xp, x: _sinpi_cospi(xp, x, cosine=True))))
    table.update(_both("norm3d", _wide(_norm)))
    table.update(_both("norm4d", _wide(_norm)))
    table.update(_both("rnorm3d", _wide(lambda xp, *a: 1 / _norm(xp, *a))))
    table.update(_both("rnorm4d", _wide(lambda xp, *a: 1 / _norm(xp, *a))))
    table.update(_both("rhypot", _wide(lambda xp, x, y: 1 / _norm(xp, x, y))))
    table.update(_both("pow", _wide(_pow)))
    table.update({"__nv_powif": _powi, "__nv_powi": _powi})
    for name in ("cos", "sin", "tan", "exp", "log", "log2", "log10"):
        table[f"__nv_fast_{name}f"] = table[f"__nv_{name}f"]
    table["__nv_fast_exp10f"] = table["__nv_exp10f"]
    table["__nv_fast_powf"] = table["__nv_powf"]
    table["__nv_fast_fdividef"] = lambda xp, x, y: x / y

    # Exact functions.
    exact: dict[str, Function] = {
        "floor": lambda xp, x: xp.np.floor(x),
        "ceil": lambda xp, x: xp.np.ceil(x),
        "trunc": lambda xp, x: xp.np.trunc(x),
        "rint": lambda xp, x: xp.np.rint(x),
        "nearbyint": lambda xp, x: xp.np.rint(x),
        "round": _exact.round_half_away,
        "copysign": lambda xp, x, y: xp.np.copysign(x, y),
        "fmod": lambda xp, x, y: xp.np.fmod(x, y),
        "remainder": _exact.remainder,
        "nextafter": lambda xp, x, y: xp.np.nextafter(x, y),
        "fdim": _fdim,
        "ldexp": lambda xp, x, e: xp.np.ldexp(x, e),
        "scalbn": lambda xp, x, e: xp.np.ldexp(x, e),
        "logb": _logb,
        "ilogb": _ilogb,
        "sqrt": lambda xp, x: xp.np.sqrt(x),
        "fma": lambda xp, a, b, c: _exact.rounded(xp, "fma", "rn", a, b, c),
    }
    for name, fn in exact.items():
        table.update(_both(name, fn))
    table.update({"__nv_fabsf": lambda xp, x: xp.np.abs(x), "__nv_fabs": lambda xp, x: xp.np.abs(x)})
    table.update({"__nv_abs": lambda xp, x: xp.np.abs(x), "__nv_llabs": lambda xp, x: xp.np.abs(x)})
    table.update({"__nv_llrintf": lambda xp, x: _exact.float_to_int(xp, x, np.int64, "rn")})
    table["__nv_llrint"] = table["__nv_llrintf"]
    table["__nv_llroundf"] = lambda xp, x: _exact.float_to_int(xp, _exact.round_half_away(xp, x), np.int64, "rz")
    table["__nv_llround"] = table["__nv_llroundf"]
    table["__nv_saturatef"] = _saturate
    table["__nv_rcp64h"] = _rcp64h
    table["__nv_frsqrt_rn"] = _exact.rsqrt_rn
    for name, test in {
        "isinf": lambda n: n.isinf,
        "isnan": lambda n: n.isnan,
        "signbit": lambda n: n.signbit,
    }.items():
        table[f"__nv_{name}f"] = table[f"__nv_{name}d"] = _flag(test)
    table["__nv_finitef"] = table["__nv_isfinited"] = _flag(lambda n: n.isfinite)

    # Arithmetic in each rounding mode.
    for mode in _exact.MODES:
        for prefix, _dtype in (("f", _F32), ("d", _F64)):
            table[f"__nv_{prefix}add_{mode}"] = functools.partial(_arith, "add", mode)
            table[f"__nv_{prefix}sub_{mode}"] = functools.partial(_subtract, mode)
            table[f"__nv_{prefix}mul_{mode}"] = functools.partial(_arith, "mul", mode)
            table[f"__nv_{prefix}div_{mode}"] = functools.partial(_arith, "div", mode)
            table[f"__nv_{prefix}sqrt_{mode}"] = functools.partial(_arith, "sqrt", mode)
            table[f"__nv_{prefix}rcp_{mode}"] = functools.partial(_reciprocal, mode)
        table[f"__nv_fmaf_{mode}"] = table[f"__nv_fma_{mode}"] = functools.partial(_arith, "fma", mode)

    # Conversions.
    for mode in _exact.MODES:
        table[f"__nv_double2float_{mode}"] = functools.partial(_to_float, mode)
        for source in ("double", "float"):
            for target, dtype, unsigned in (
                ("int", np.int32, False),
                ("uint", np.int32, True),
                ("ll", np.int64, False),
                ("ull", np.int64, True),
            ):
                table[f"__nv_{source}2{target}_{mode}"] = functools.partial(_to_int, dtype, mode, unsigned)
        for source, unsigned in (("int", False), ("uint", True), ("ll", False), ("ull", True)):
            table[f"__nv_{source}2float_{mode}"] = functools.partial(_from_int, _F32, mode, unsigned)
            if source in ("ll", "ull") or mode == "rn":
                table[f"__nv_{source}2double_{mode}"] = functools.partial(_from_int, _F64, mode, unsigned)
    casts: dict[str, Any] = {
        "__nv_float_as_int": np.int32,
        "__nv_float_as_uint": np.uint32,
        "__nv_int_as_float": np.float32,
        "__nv_uint_as_float": np.float32,
        "__nv_double_as_longlong": np.int64,
        "__nv_longlong_as_double": np.float64,
    }
    for symbol, dtype in casts.items():
        table[symbol] = functools.partial(lambda dtype, xp, x: xp.view(x, dtype), dtype)
    table["__nv_double2hiint"] = _high_word
    table["__nv_double2loint"] = _low_word
    table["__nv_hiloint2double"] = _join_words

    # Integer functions.
    table["__nv_mulhi"] = table["__nv_mul64hi"] = lambda xp, a, b: _bits.mulhi(xp, a, b, signed=True)
    table["__nv_umulhi"] = table["__nv_umul64hi"] = lambda xp, a, b: _bits.mulhi(xp, a, b, signed=False)
    table["__nv_brev"] = table["__nv_brevll"] = _bits.reverse_bits
    table["__nv_clz"] = table["__nv_clzll"] = _bits.clz
    table["__nv_ffs"] = table["__nv_ffsll"] = _bits.ffs
    table["__nv_popc"] = table["__nv_popcll"] = _bits.popc
    table["__nv_byte_perm"] = _bits.byte_perm
    for symbol, signed, rounded in (
        ("__nv_hadd", True, False),
        ("__nv_uhadd", False, False),
        ("__nv_rhadd", True, True),
        ("__nv_urhadd", False, True),
    ):
        table[symbol] = functools.partial(lambda s, r, xp, a, b: _bits.halving_add(xp, a, b, s, r), signed, rounded)
    table["__nv_mul24"] = lambda xp, a, b: _bits.mul24(xp, a, b, signed=True)
    table["__nv_umul24"] = lambda xp, a, b: _bits.mul24(xp, a, b, signed=False)
    table["__nv_sad"] = lambda xp, a, b, c: _bits.sad(xp, a, b, c, signed=True)
    table["__nv_usad"] = lambda xp, a, b, c: _bits.sad(xp, a, b, c, signed=False)
    return table


def _arith(op: str, mode: str, xp: Arrays, *args: Any) -> Any:
    return _exact.rounded(xp, op, mode, *args)


def _subtract(mode: str, xp: Arrays, x: Any, y: Any) -> Any:
    return _exact.rounded(xp, "add", mode, x, -y)


def _reciprocal(mode: str, xp: Arrays, x: Any) -> Any:
    return _exact.rounded(xp, "div", mode, xp.np.ones_like(x), x)


def _to_float(mode: str, xp: Arrays, x: Any) -> Any:
    return _exact.float_to_float(xp, x, mode)


def _to_int(dtype: Any, mode: str, unsigned: bool, xp: Arrays, x: Any) -> Any:
    return _exact.float_to_int(xp, x, dtype, mode, unsigned)


def _from_int(dtype: Any, mode: str, unsigned: bool, xp: Arrays, x: Any) -> Any:
    return _exact.int_to_float(xp, x, dtype, mode, unsigned)


#: What each libdevice symbol computes: ``fn(arrays, *operands)``, the operands as arrays of the types the symbol
#: takes (integers possibly of the other signedness: the symbol says how to read them).
FUNCTIONS: dict[str, Function] = _table()

#: The symbols only NumPy (with SciPy) computes: the Bessel functions of the first and second kind.
NUMPY_ONLY = frozenset(f"__nv_{n}{s}" for n in ("j0", "j1", "jn", "y0", "y1", "yn") for s in ("f", ""))

#: The ROCm device library's functions (``__ocml_exp_f32``) that compute what libdevice's of the same name do.
_OCML_EXTRA: dict[str, Function] = {
    "fmax": lambda xp, x, y: xp.np.fmax(x, y),
    "fmin": lambda xp, x, y: xp.np.fmin(x, y),
    "isnan": _flag(lambda n: n.isnan),
    "isinf": _flag(lambda n: n.isinf),
    "signbit": _flag(lambda n: n.signbit),
}


def libdevice_name(symbol: str) -> str:
    """A symbol as the function a kernel calls: ``__nv_expf`` -> ``libdevice.exp``."""
    for prefix in ("__nv_", "__ocml_"):
        if symbol.startswith(prefix):
            return f"libdevice.{symbol[len(prefix) :]}"
    return symbol


def implementation(symbol: str, library: str = "numpy") -> Function | None:
    """What ``symbol`` computes, for ``library`` (``"numpy"`` or ``"jax"``), or ``None`` when that library cannot
    compute it (or the symbol is not libdevice's or the ROCm device library's)."""
    if library == "jax" and symbol in NUMPY_ONLY:
        return None
    found = FUNCTIONS.get(symbol)
    if found is not None:
        return found
    for prefix in ("__ocml_native_", "__ocml_", "__triton_hip_"):
        if symbol.startswith(prefix):
            base = symbol[len(prefix) :]
            for suffix in ("_f64", "_f32", "_f16"):
                base = base.removesuffix(suffix)
            if base in _OCML_EXTRA:
                return _OCML_EXTRA[base]
            if library == "jax" and f"__nv_{base}" in NUMPY_ONLY:
                return None
            return FUNCTIONS.get(f"__nv_{base}")
    return None


def evaluate(xp: Arrays, symbol: str, operands: list[Any], result: Any) -> Any:
    """``symbol`` applied to ``operands``, as an array of dtype ``result`` (integer bits of the other signedness
    are kept, as the compiled path's integers carry no sign).

    Raises:
        KeyError: For a symbol `implementation` does not know for ``xp``.
    """
    fn = implementation(symbol, xp.name)
    if fn is None:
        raise KeyError(symbol)
    out = xp.np.asarray(fn(xp, *operands))
    result = np.dtype(result)
    if out.dtype == result:
        return out
    if out.dtype.kind in "iu" and result.kind in "iu" and out.dtype.itemsize == result.itemsize:
        return xp.view(out, result)
    return out.astype(result)


def umulhi(xp: Arrays, a: Any, b: Any) -> Any:
    """``tl.umulhi``: the high half of the unsigned product of two integers' bits, as their own type."""
    return xp.view(_bits.mulhi(xp, a, b, signed=False), a.dtype)


def fused_multiply_add(xp: Arrays, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` rounded once to ``a``'s float type, as a GPU's ``fma.rn`` computes it (both CPU paths fuse a
    product into a sum with it, where Triton's compiler would)."""
    return _exact.fused(xp, a, b, c)
