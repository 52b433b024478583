"""Values a kernel's TTIR holds that are known when the kernel is traced: the call's integer arguments, constants,
and what is computed from them alone (`fold` for integer scalars, `evaluate` for the one value of an element-wise
operation on such values), with the TTIR element types' NumPy types (`dtype_of`).

TTIR's integers are signless; a Python int here holds the signed value of its type (`wrap`), read as unsigned where
an operation asks (`unsigned`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import ml_dtypes
import numpy as np

from jt_core.errors import UnsupportedKernelError
from jt_core.interpreter import numerics
from jt_core.translation import integers
from jt_core.translation.program import TensorType
from jt_core.translation.rules import rule_of

__all__ = ["UNSIGNED", "dtype_of", "evaluate", "fold", "is_float8", "is_static", "unsigned", "width", "wrap"]

_DTYPES: dict[str, Any] = {
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "f32": np.float32,
    "f64": np.float64,
    "f8E4M3FN": ml_dtypes.float8_e4m3fn,
    "f8E5M2": ml_dtypes.float8_e5m2,
    "f8E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
    "f8E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
    "f8E4M3B11FNUZ": ml_dtypes.float8_e4m3b11fnuz,
}
#: The unsigned NumPy type of each integer width.
UNSIGNED = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def dtype_of(element: str) -> np.dtype:
    """The NumPy/JAX type holding values of a TTIR element type (signed for integers)."""
    try:
        return np.dtype(_DTYPES[element])
    except KeyError:
        raise UnsupportedKernelError(f"values of type {element}") from None


def itemsize(element: str) -> int:
    """The bytes of a TTIR element type's value (``i1`` one, a float8 one); 0 for a type a buffer holds no values of
    (a pointer, a descriptor)."""
    return int(np.dtype(_DTYPES[element]).itemsize) if element in _DTYPES else 0


def is_static(value: Any) -> bool:
    """Whether ``value`` is known when the kernel is traced (a Python scalar)."""
    return isinstance(value, (bool, int, float))


def width(element: str) -> int:
    """The number of bits of a TTIR integer type."""
    return 1 if element == "i1" else int(element[1:])


def wrap(value: int, element: str) -> int | bool:
    """A Python int as the signed value of a TTIR integer type holds it."""
    if element == "i1":
        return bool(value & 1)
    bits = width(element)
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def unsigned(value: int, element: str) -> int:
    """A Python int holding a TTIR integer's value read as unsigned."""
    return int(value) & ((1 << width(element)) - 1)


def fold(name: str, args: Sequence[Any], types: Sequence[TensorType], result: TensorType, attr: Any) -> Any:
    """The value of an integer operation on scalars known at trace time, or ``None`` when it is not one of those
    (or, like a division by zero or a shift past the type's width, what it gives is left to run time, as on the
    device).

    Args:
        name: The operation.
        args: Its operands (all static).
        types: The operands' types.
        result: The result's type.
        attr: The predicate, for comparisons.
    """
    if result.shape or any(t.shape for t in types) or not all(t.element.startswith("i") for t in types):
        return None
    if not result.element.startswith("i") or name not in integers.INTEGER_OPERATIONS:
        return None
    element = types[-1].element if types else result.element
    if name in DIVISIONS and int(args[1]) == 0:
        return None
    if name in _SHIFTS and not 0 <= unsigned(int(args[1]), element) < width(element):
        return None
    arrays = [np.asarray(wrap(int(v), t.element), dtype_of(t.element)) for v, t in zip(args, types, strict=True)]
    with np.errstate(all="ignore"):
        found = integers.apply(integers.NUMPY, name, arrays, dtype_of(result.element), attr)
    value = np.asarray(found)[()]
    return bool(value) if result.element == "i1" else int(value)


DIVISIONS = frozenset({"arith.divsi", "arith.remsi", "arith.divui", "arith.remui", "arith.ceildivsi"})
DIVISIONS |= {"arith.floordivsi"}
_SHIFTS = frozenset({"arith.shli", "arith.shrsi", "arith.shrui"})


# -- the one value of a block known at trace time ---------------------------------------------------------------

_CMPF_NUMPY: list[Callable[[Any, Any], Any]] = [
    lambda a, b: False,
    lambda a, b: a == b,
    lambda a, b: a > b,
    lambda a, b: a >= b,
    lambda a, b: a < b,
    lambda a, b: a <= b,
    lambda a, b: (a != b) & ~(np.isnan(a) | np.isnan(b)),
    lambda a, b: ~(np.isnan(a) | np.isnan(b)),
    lambda a, b: (a == b) | np.isnan(a) | np.isnan(b),
    lambda a, b: (a > b) | np.isnan(a) | np.isnan(b),
    lambda a, b: (a >= b) | np.isnan(a) | np.isnan(b),
    lambda a, b: (a < b) | np.isnan(a) | np.isnan(b),
    lambda a, b: (a <= b) | np.isnan(a) | np.isnan(b),
    lambda a, b: a != b,
    lambda a, b: np.isnan(a) | np.isnan(b),
    lambda a, b: True,
]


def evaluate(name: str, values: Sequence[Any], types: Sequence[TensorType], result: TensorType, attr: Any) -> Any:
    """The one value an element-wise operation gives, each operand holding one value known at trace time (a scalar,
    or a block of equal elements): `fold` for integers, NumPy for floats; ``None`` for what it does not compute.

    What it gives for a float decides whether XLA, which computes the same from the same constants when it
    compiles, sees a zero there (`jt_core.translation.floats`); a transcendental function's last bits may differ
    from XLA's, which matters only for a result at zero.
    """
    scalars = [TensorType((), t.element, None, t.element) for t in types]
    element = TensorType((), result.element, None, result.element)
    if all(t.element.startswith("i") for t in types) and result.element.startswith("i"):
        return fold(name, values, scalars, element, attr)
    if result.is_pointer or any(t.is_pointer for t in types):
        return None
    try:
        dtypes = [dtype_of(t.element) for t in types]
        out = dtype_of(result.element)
    except UnsupportedKernelError:
        return None
    if any(is_float8(d) for d in (*dtypes, out)):
        return None
    try:
        xs = [np.asarray(v).astype(d) for v, d in zip(values, dtypes, strict=True)]
        with np.errstate(all="ignore"):
            return _evaluated(name, xs, out, attr)
    except (TypeError, ValueError, OverflowError, IndexError):
        return None  # not known, then: XLA computes it as it would


def _evaluated(name: str, xs: list[np.ndarray], out: np.dtype, attr: Any) -> Any:
    if name == "arith.select":
        return (xs[1] if bool(xs[0]) else xs[2]).astype(out)[()]
    if name in ("arith.bitcast", "tt.bitcast"):
        if xs[0].dtype == np.bool_ or out == np.bool_:
            return None
        return xs[0].view(out)[()]
    if name in ("arith.sitofp", "arith.uitofp"):
        unsigned = name == "arith.uitofp" and xs[0].dtype != np.bool_
        return (xs[0].view(UNSIGNED[xs[0].itemsize * 8]) if unsigned else xs[0]).astype(out)[()]
    if name in ("arith.fptosi", "arith.fptoui"):
        if out == np.bool_:
            return None
        target = out if name == "arith.fptosi" else np.dtype(UNSIGNED[out.itemsize * 8])
        return int(numerics.saturating_int(xs[0], target).view(out)[()])
    if name in ("arith.extf", "arith.truncf", "tt.fp_to_fp"):
        return numerics.narrowed(xs[0], out, attr == "RTZ")[()]
    if name == "arith.cmpf":
        return bool(_CMPF_NUMPY[int(attr)](*(x.astype(np.float64) for x in xs)))
    found = rule_of(name)
    fn = None if found is None else found.evaluate
    if fn is None:
        return None
    wide = np.float64 if any(x.dtype == np.float64 for x in xs) else np.float32
    return numerics.narrowed(np.asarray(fn(*(x.astype(wide) for x in xs))), out)[()]


def is_float8(dtype: Any) -> bool:
    """Whether ``dtype`` is one of the float8 types."""
    return np.dtype(dtype).itemsize == 1 and bool(jnp.issubdtype(dtype, jnp.floating))
