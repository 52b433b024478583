"""What Triton's operations mean, computed with NumPy: the reference side of the CPU fuzzer.

Written from Triton's documented rules (``triton/language/semantic.py``, ``core.py``, ``random.py``, LLVM's
instruction semantics) and independent of both CPU paths: implicit type promotion (tensors, Python literals and
kernel scalars promote differently), integer arithmetic that wraps, C-style division and remainder (truncation),
arithmetic and logical shifts chosen by the left operand's signedness, conversions rounded to nearest even in one
step, and Philox as ``tl.randint`` draws it.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import ml_dtypes
import numpy as np
import triton.language as tl
from triton.language import semantic

#: Whether this Triton promotes bfloat16 operands to float32 in minimum, maximum, clamp, max/min reductions and
#: cumsum/cumprod (Triton 3.6 does; later releases keep bfloat16).
PROMOTES_BF16 = hasattr(tl.core, "_promote_bfloat16_to_float32")
#: Whether this Triton negates a float as ``0 - x`` (Triton 3.6: ``-0.0`` becomes ``+0.0``) rather than by flipping its
#: sign bit.
NEGATES_BY_SUBTRACTION = "fneg" not in inspect.getsource(semantic.TritonSemantic.minus)

BOOL, UINT, INT, FLOAT = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class Ty:
    """A Triton scalar type: its name (``"int8"``, ``"fp16"``), kind, width and NumPy dtype."""

    name: str
    kind: int
    bits: int
    tl: str

    @property
    def np(self) -> np.dtype:
        return np.dtype(ml_dtypes.bfloat16) if self.name == "bf16" else np.dtype(_NP[self.name])

    @property
    def is_float(self) -> bool:
        return self.kind == FLOAT

    @property
    def is_int(self) -> bool:
        return self.kind in (INT, UINT, BOOL)

    @property
    def signed(self) -> bool:
        return self.kind in (INT, BOOL)

    def __repr__(self) -> str:
        return self.name


_NP = {
    "int1": np.bool_,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "fp16": np.float16,
    "fp32": np.float32,
    "fp64": np.float64,
    "fp8e4nv": ml_dtypes.float8_e4m3fn,
    "fp8e5": ml_dtypes.float8_e5m2,
}
TYPES = {
    t.name: t
    for t in [
        Ty("int1", BOOL, 1, "tl.int1"),
        Ty("int8", INT, 8, "tl.int8"),
        Ty("int16", INT, 16, "tl.int16"),
        Ty("int32", INT, 32, "tl.int32"),
        Ty("int64", INT, 64, "tl.int64"),
        Ty("uint8", UINT, 8, "tl.uint8"),
        Ty("uint16", UINT, 16, "tl.uint16"),
        Ty("uint32", UINT, 32, "tl.uint32"),
        Ty("uint64", UINT, 64, "tl.uint64"),
        Ty("fp16", FLOAT, 16, "tl.float16"),
        Ty("bf16", FLOAT, 16, "tl.bfloat16"),
        Ty("fp32", FLOAT, 32, "tl.float32"),
        Ty("fp64", FLOAT, 64, "tl.float64"),
        Ty("fp8e4nv", FLOAT, 8, "tl.float8e4nv"),
        Ty("fp8e5", FLOAT, 8, "tl.float8e5"),
    ]
}
#: The nine element types the fuzzer's buffers hold.
DATA_TYPES = ("int8", "int32", "int64", "uint8", "uint32", "fp16", "bf16", "fp32", "fp64")
I1, I32, I64, U32, F32, F64 = (TYPES[n] for n in ("int1", "int32", "int64", "uint32", "fp32", "fp64"))


def ty(name: str) -> Ty:
    return TYPES[name]


# -- promotion ------------------------------------------------------------------------------------------------------


def literal_type(value: Any) -> Ty:
    """The type Triton gives a Python literal: bool is int1; ints by range; floats fp32 unless out of its range."""
    if isinstance(value, bool):
        return I1
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return I32
        if 2**31 <= value < 2**32:
            return U32
        return I64 if -(2**63) <= value < 2**63 else TYPES["uint64"]
    magnitude = abs(value)
    if magnitude in (0.0, float("inf")) or value != value or 2.0**-126 <= magnitude <= 3.4028234663852886e38:
        return F32
    return F64


def integer_promote(a: Ty, b: Ty) -> Ty:
    """C's usual arithmetic conversions between two integer types."""
    if a.signed == b.signed:
        return a if a.bits > b.bits else b
    unsigned, signed = (a, b) if not a.signed else (b, a)
    return unsigned if unsigned.bits >= signed.bits else signed


def _rank(t: Ty) -> int:
    return {BOOL: 0, UINT: 1, INT: 1, FLOAT: 2}[t.kind]


def computation_type(a: Ty, a_literal: bool, b: Ty, b_literal: bool, div_or_mod: bool = False) -> Ty:
    """The type a binary operation computes in. A Python literal of a kind no higher than the tensor's (bool <
    integer < float) takes the tensor's type; kernel scalars are tensors here."""
    if a_literal != b_literal:
        literal, tensor = (a, b) if a_literal else (b, a)
        if _rank(literal) <= _rank(tensor):
            a = b = tensor
    names = {a.name, b.name}
    if "fp64" in names:
        return F64
    if div_or_mod and (a.is_float or b.is_float):
        return F32
    if "fp32" in names:
        return F32
    if "fp16" in names:
        return TYPES["fp16"]
    if names == {"bf16"}:
        return TYPES["bf16"]
    if "bf16" in names:
        return F32
    if div_or_mod and a.signed != b.signed:
        raise TypeError(f"{a} and {b}: different signedness in / // %")
    return integer_promote(a, b)


def literal_fits(value: Any, target: Ty) -> bool:
    """Whether Triton accepts ``value`` converted to ``target`` (it refuses out-of-range or negative-unsigned)."""
    if not target.is_int or isinstance(value, float):
        return True
    if target.name == "int1":
        return value in (0, 1)
    low, high = (-(2 ** (target.bits - 1)), 2 ** (target.bits - 1) - 1) if target.signed else (0, 2**target.bits - 1)
    return low <= value <= high


# -- conversions ----------------------------------------------------------------------------------------------------


def _to_odd_f32(x: np.ndarray) -> np.ndarray:
    """float64 to float32 rounded to odd: a later rounding to a narrower type is then a single correct rounding."""
    y = x.astype(np.float32)
    inexact = np.isfinite(x) & (y.astype(np.float64) != x) & np.isfinite(y)
    even = (y.view(np.uint32) & 1) == 0
    fix = inexact & even
    if fix.any():
        toward = np.where(x > y.astype(np.float64), np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
        y = np.where(fix, np.nextafter(y, toward), y)
    return y


def round_f64(x: np.ndarray, target: Ty) -> np.ndarray:
    """float64 values rounded once, to nearest even, to ``target`` (a float type)."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if target.name == "fp64":
            return x.copy()
        if target.name == "fp32":
            return x.astype(np.float32)
        return _to_odd_f32(x).astype(target.np)


def _int_to_f64_odd(x: np.ndarray) -> np.ndarray:
    """Integers to float64, rounded to odd (exact below 2**53, where every test value lies but wrapped ones)."""
    shape = np.shape(x)
    x = np.atleast_1d(x)
    wide = x.astype(np.float64)
    big = np.abs(x.astype(np.float64)) >= 2.0**53
    for index in zip(*np.nonzero(big), strict=True):
        exact = int(x[index])
        near = float(exact)  # Python rounds to nearest even
        if int(near) != exact and (np.float64(near).view(np.uint64) & 1) == 0:
            near = float(np.nextafter(near, np.inf if exact > int(near) else -np.inf))
        wide[index] = near
    return wide.reshape(shape)


def convert(x: np.ndarray, source: Ty, target: Ty) -> np.ndarray:
    """``x.to(target)`` (value conversion) as Triton means it. Float to integer conversions must be in range (the
    fuzzer's programs keep them so): out-of-range ones are undefined."""
    x = np.asarray(x)
    if source.name == target.name:
        return x.astype(target.np)
    with np.errstate(over="ignore", invalid="ignore"):
        if target.name == "int1":
            return x != 0
        if source.is_int and target.is_int:
            wide = x.astype(np.int64) if source.name != "uint64" else x
            return wide.astype(target.np) if source.signed or source.name == "int1" else x.astype(target.np)
        if source.is_float and target.is_float:
            if target.bits > source.bits:
                return x.astype(np.float64).astype(target.np)
            return round_f64(x.astype(np.float64), target)
        if source.is_int and target.is_float:
            if source.name == "int1":
                return x.astype(np.float64).astype(target.np)
            wide = x.astype(np.int64) if source.signed else x
            if target.name == "fp64":
                return wide.astype(np.float64)  # rounded to nearest even once
            return round_f64(_int_to_f64_odd(wide), target)
        truncated = np.trunc(x.astype(np.float64))
        truncated = np.where(np.isfinite(truncated), truncated, 0)
        if target.signed:
            return truncated.astype(np.int64).astype(target.np)
        return np.where(truncated < 0, 0, truncated).astype(np.uint64).astype(target.np)


def narrow(x: np.ndarray, target: Ty, toward_zero: bool) -> np.ndarray:
    """``x`` (a float array) converted to the narrower float type ``target`` as Triton's ``fp_downcast_rounding``
    asks, by the definition: whole multiples of the spacing of ``target``'s values at ``|x|``, rounded to the even
    multiple (``"rtne"``) or truncated (``"rtz"``, ``cvt.rz``). Past the largest finite value, rounding to nearest
    gives an infinity and rounding toward zero the largest finite value; a float8 result saturates to it either way
    (``cvt.rn.satfinite``, infinities included), as the CPU paths convert to float8."""
    info = ml_dtypes.finfo(target.np)
    wide = np.abs(np.asarray(x).astype(np.float64))
    with np.errstate(invalid="ignore", over="ignore"):
        _, exponent = np.frexp(wide)
        spacing = np.ldexp(1.0, np.maximum(exponent - 1, int(info.minexp)) - int(info.nmant))
        whole = np.floor(wide / spacing) if toward_zero else np.rint(wide / spacing)
        value = np.where(np.isfinite(wide), whole * spacing, wide)
        largest = float(info.max)
        if target.bits == 8:
            value = np.minimum(value, largest)
        elif toward_zero:
            value = np.where(np.isfinite(wide), np.minimum(value, largest), value)
        else:
            value = np.where(value > largest, np.inf, value)
        return np.copysign(value, np.asarray(x).astype(np.float64)).astype(target.np)


def bitcast(x: np.ndarray, target: Ty) -> np.ndarray:
    return np.ascontiguousarray(x).view(target.np)


# -- integer arithmetic ---------------------------------------------------------------------------------------------


def trunc_div(a: np.ndarray, b: np.ndarray, t: Ty) -> np.ndarray:
    """C's ``a / b`` on integers (toward zero); ``b`` is never 0, and never -1 where ``a`` is the type's minimum."""
    if not t.signed:
        return (a // b).astype(t.np)
    q = np.floor_divide(a.astype(np.int64), b.astype(np.int64)) if t.bits < 64 else np.floor_divide(a, b)
    r = a.astype(q.dtype) - q * b.astype(q.dtype)
    q = np.where((r != 0) & ((a < 0) != (b < 0)), q + 1, q)
    return q.astype(t.np)


def trunc_rem(a: np.ndarray, b: np.ndarray, t: Ty) -> np.ndarray:
    """C's ``a % b`` on integers: the sign of the dividend."""
    with np.errstate(over="ignore"):
        return (a - trunc_div(a, b, t) * b).astype(t.np)


def shift_right(a: np.ndarray, amount: np.ndarray, t: Ty, arithmetic: bool) -> np.ndarray:
    """``a >> amount`` in type ``t``: arithmetic (sign-filling) or logical, as Triton picks by the left operand."""
    signed = np.dtype(f"int{t.bits}")
    unsigned = np.dtype(f"uint{t.bits}")
    view = a.astype(t.np).view(signed if arithmetic else unsigned)
    return np.right_shift(view, amount.astype(view.dtype)).view(t.np)


def mulhi(a: np.ndarray, b: np.ndarray, t: Ty) -> np.ndarray:
    """The high half of the full product (``tl.umulhi``: both operands as unsigned bit patterns)."""
    unsigned = np.dtype(f"uint{t.bits}")
    a, b = (np.ascontiguousarray(v) for v in np.broadcast_arrays(np.asarray(a), np.asarray(b)))
    ua, ub = a.astype(t.np).view(unsigned), b.astype(t.np).view(unsigned)
    if t.bits == 32:
        return ((ua.astype(np.uint64) * ub.astype(np.uint64)) >> np.uint64(32)).astype(np.uint32).view(t.np)
    out = np.array([(int(x) * int(y)) >> 64 for x, y in zip(ua.ravel(), ub.ravel(), strict=True)], dtype=np.uint64)
    return out.reshape(ua.shape).view(t.np)


# -- floating point -------------------------------------------------------------------------------------------------


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 ``a * b + c`` rounded once: the product is exact in float64, and the sum rounded to odd there."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = c.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)  # two-sum: s + err is exactly p + c
        fix = np.isfinite(s) & (err != 0) & ((s.view(np.uint64) & 1) == 0)
        s = np.where(fix, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
        return s.astype(np.float32)


def ulp(x: np.ndarray, t: Ty) -> np.ndarray:
    """The spacing of ``t``'s values at ``x`` (as float64)."""
    mantissa = {"fp16": 10, "bf16": 7, "fp32": 23, "fp64": 52}[t.name]
    smallest = {"fp16": 2.0**-24, "bf16": 2.0**-133, "fp32": 2.0**-149, "fp64": 2.0**-1074}[t.name]
    with np.errstate(divide="ignore", invalid="ignore"):
        magnitude = np.abs(np.asarray(x, np.float64))
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
        spacing = np.exp2(exponent - mantissa)
    return np.where(np.isfinite(spacing), np.maximum(spacing, smallest), np.inf)


def smallest_normal(t: Ty) -> float:
    return {"fp16": 2.0**-14, "bf16": 2.0**-126, "fp32": 2.0**-126, "fp64": 2.0**-1022}[t.name]


def largest(t: Ty) -> float:
    return float(np.finfo(np.float32).max) if t.name == "bf16" else float(np.finfo(t.np).max)


# -- Philox, as tl.randint draws it ---------------------------------------------------------------------------------

_KEY_A, _KEY_B = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
_ROUND_A, _ROUND_B = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)


def philox(seed: int, offsets: np.ndarray, offset_type: Ty, rounds: int = 10) -> tuple[np.ndarray, ...]:
    """``tl.randint4x(seed, offsets)``: Philox-4x32 with the seed's two halves as key and the offset's low and
    high halves as the first two counters."""
    seed64 = np.int64(seed).astype(np.uint64) if seed < 2**63 else np.uint64(seed)
    k0 = np.full(offsets.shape, np.uint32(int(seed64) & 0xFFFFFFFF), np.uint32)
    k1 = np.full(offsets.shape, np.uint32(int(seed64) >> 32), np.uint32)
    wide = offsets.astype(offset_type.np)
    c0 = wide.astype(np.uint32) if offset_type.bits <= 32 else (wide.view(np.uint64) & 0xFFFFFFFF).astype(np.uint32)
    if offset_type.bits > 32:
        high = wide >> 32 if offset_type.signed else wide >> np.uint64(32)
        c1 = high.astype(np.int64).astype(np.uint32) if offset_type.signed else high.astype(np.uint32)
    else:
        c1 = np.zeros(offsets.shape, np.uint32)
    c2 = np.zeros(offsets.shape, np.uint32)
    c3 = np.zeros(offsets.shape, np.uint32)
    with np.errstate(over="ignore"):
        for _ in range(rounds):
            p0 = _ROUND_B * c2.astype(np.uint64)
            p2 = _ROUND_A * c0.astype(np.uint64)
            c0, c1, c2, c3 = (
                (p0 >> np.uint64(32)).astype(np.uint32) ^ c1 ^ k0,
                p0.astype(np.uint32),
                (p2 >> np.uint64(32)).astype(np.uint32) ^ c3 ^ k1,
                p2.astype(np.uint32),
            )
            k0 = k0 + _KEY_A
            k1 = k1 + _KEY_B
    return c0, c1, c2, c3


def uniform(bits: np.ndarray) -> np.ndarray:
    """``tl.rand``'s float32 in [0, 1) from a uint32: the bits as int32, negatives complemented, times a scale."""
    signed = bits.view(np.int32)
    folded = np.where(signed < 0, ~signed, signed)
    return folded.astype(np.float32) * np.float32(4.6566127342e-10)
