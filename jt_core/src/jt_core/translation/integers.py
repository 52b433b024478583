"""What TTIR's integer operations compute, written once for every array library the translation computes them with:
JAX when it traces a kernel (`jt_core.translation.lang`), NumPy when it folds scalars known at trace time
(`jt_core.translation.folding`) and when it numbers a grid's tiles (`jt_core.translation.analysis.relabeling`).

TTIR's integers are signless: ``i32`` holds both ``int32`` and ``uint32`` values, and the operation says how to read
them (``arith.divui``, ``arith.cmpi ult``, ``arith.extui``). Every integer is held as the signed type of its width
(``i1`` as ``bool``), reinterpreted as unsigned where an operation asks, and wraps around as the device's does.
Integer arithmetic on ``i1`` wraps modulo 2: a sum or difference is an exclusive or, a product an and; a quotient is
its dividend, a remainder zero and a shift its shifted operand, which the divisor 1 and the shift 0 give, the only
ones defined (LLVM folds every ``i1`` division, remainder and shift to those).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["AFFINE_OPERATIONS", "INTEGER_OPERATIONS", "LINEAR_OPERATIONS", "JAX", "NUMPY", "Arrays", "apply", "form_of"]

_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class Arrays:
    """The few array operations the integer semantics need, from one array library."""

    def __init__(self, module: Any) -> None:
        self.xp = module
        self.is_jax = module is jnp

    def bitcast(self, x: Any, dtype: Any) -> Any:
        dtype = np.dtype(dtype)
        if x.dtype == dtype:
            return x
        return lax.bitcast_convert_type(x, dtype) if self.is_jax else x.view(dtype)

    def unsigned(self, x: Any) -> Any:
        return x if x.dtype == np.bool_ else self.bitcast(x, _UNSIGNED[x.dtype.itemsize])

    def astype(self, x: Any, dtype: Any) -> Any:
        return x.astype(dtype)

    def div(self, x: Any, y: Any) -> Any:
        """The quotient rounded toward zero (C's, the device's)."""
        if self.is_jax:
            return lax.div(x, y)
        quotient = np.abs(x) // np.abs(y)
        return np.where((x < 0) != (y < 0), -quotient, quotient).astype(x.dtype)

    def rem(self, x: Any, y: Any) -> Any:
        """The remainder of `div`: the dividend's sign."""
        if self.is_jax:
            return lax.rem(x, y)
        return (x - self.div(x, y) * y).astype(x.dtype)

    def shift(self, kind: str, x: Any, y: Any) -> Any:
        y = y.astype(x.dtype)
        if self.is_jax:
            fn = {"left": lax.shift_left, "arith": lax.shift_right_arithmetic, "logical": lax.shift_right_logical}
            return fn[kind](x, y)
        if kind == "left":
            return np.left_shift(x, y)
        if kind == "arith":
            return np.right_shift(x, y)
        return self.bitcast(np.right_shift(self.unsigned(x), self.unsigned(y)), x.dtype)


JAX = Arrays(jnp)
NUMPY = Arrays(np)


def _unsigned_op(fn: Callable[[Arrays, Any, Any], Any]) -> Callable[[Arrays, Any, Any], Any]:
    def apply(o: Arrays, x: Any, y: Any) -> Any:
        return o.bitcast(fn(o, o.unsigned(x), o.unsigned(y)), x.dtype)

    return apply


def _bool_or(fn: Callable[[Arrays, Any, Any], Any], on_bool: Callable[[Arrays, Any, Any], Any]) -> Any:
    """``fn``, or ``on_bool`` where the operands are ``i1`` (modulo 2)."""

    def apply(o: Arrays, x: Any, y: Any) -> Any:
        return on_bool(o, x, y) if x.dtype == np.bool_ else fn(o, x, y)

    return apply


def _left(o: Arrays, x: Any, y: Any) -> Any:
    return x


def _zero(o: Arrays, x: Any, y: Any) -> Any:
    return o.xp.zeros_like(x)


def _unsigned_div(o: Arrays, x: Any, y: Any) -> Any:
    return x // y


def _unsigned_rem(o: Arrays, x: Any, y: Any) -> Any:
    return x % y


def _ceil_div(o: Arrays, x: Any, y: Any) -> Any:
    quotient = o.div(x, y)
    exact = o.rem(x, y) == 0
    up = (x < 0) == (y < 0)
    return o.xp.where(~exact & up, quotient + 1, quotient).astype(x.dtype)


def _floor_div(o: Arrays, x: Any, y: Any) -> Any:
    quotient = o.div(x, y)
    exact = o.rem(x, y) == 0
    down = (x < 0) != (y < 0)
    return o.xp.where(~exact & down, quotient - 1, quotient).astype(x.dtype)


def _unsigned_max(o: Arrays, x: Any, y: Any) -> Any:
    return o.xp.where(o.unsigned(x) >= o.unsigned(y), x, y)


def _unsigned_min(o: Arrays, x: Any, y: Any) -> Any:
    return o.xp.where(o.unsigned(x) <= o.unsigned(y), x, y)


#: The binary integer operations, each ``fn(arrays, x, y)`` on operands of one type.
_BINARY: dict[str, Callable[[Arrays, Any, Any], Any]] = {
    "arith.addi": _bool_or(lambda o, x, y: x + y, lambda o, x, y: x ^ y),
    "arith.subi": _bool_or(lambda o, x, y: x - y, lambda o, x, y: x ^ y),
    "arith.muli": _bool_or(lambda o, x, y: x * y, lambda o, x, y: x & y),
    "arith.divsi": _bool_or(lambda o, x, y: o.div(x, y), _left),
    "arith.remsi": _bool_or(lambda o, x, y: o.rem(x, y), _zero),
    "arith.divui": _bool_or(_unsigned_op(_unsigned_div), _left),
    "arith.remui": _bool_or(_unsigned_op(_unsigned_rem), _zero),
    "arith.ceildivsi": _bool_or(_ceil_div, _left),
    "arith.floordivsi": _bool_or(_floor_div, _left),
    "arith.andi": lambda o, x, y: x & y,
    "arith.ori": lambda o, x, y: x | y,
    "arith.xori": lambda o, x, y: x ^ y,
    "arith.shli": _bool_or(lambda o, x, y: o.shift("left", x, y), _left),
    "arith.shrsi": _bool_or(lambda o, x, y: o.shift("arith", x, y), _left),
    "arith.shrui": _bool_or(lambda o, x, y: o.shift("logical", x, y), _left),
    "arith.maxsi": lambda o, x, y: o.xp.maximum(x, y),
    "arith.minsi": lambda o, x, y: o.xp.minimum(x, y),
    "arith.maxui": _unsigned_max,
    "arith.minui": _unsigned_min,
}

_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge", "lt", "le", "gt", "ge")


def _compare(o: Arrays, predicate: int, x: Any, y: Any) -> Any:
    if predicate >= 6:
        x, y = o.unsigned(x), o.unsigned(y)
    x, y = o.xp.broadcast_arrays(x, y)
    name = _COMPARISONS[predicate]
    return {
        "eq": x == y,
        "ne": x != y,
        "lt": x < y,
        "le": x <= y,
        "gt": x > y,
        "ge": x >= y,
    }[name]


def _cast(o: Arrays, x: Any, out: np.dtype, zero_extend: bool) -> Any:
    """An integer conversion to ``out``: sign- or zero-extended, truncated, ``i1`` from the lowest bit."""
    if out == np.bool_:
        return (x & 1).astype(bool) if x.dtype != np.bool_ else x
    if x.dtype == np.bool_:
        return x.astype(out)
    if zero_extend and out.itemsize > x.dtype.itemsize:
        return o.bitcast(o.unsigned(x).astype(_UNSIGNED[out.itemsize]), out)
    return x.astype(out)


def apply(o: Arrays, name: str, args: Sequence[Any], out: np.dtype, attr: Any = None) -> Any:
    """The integer operation ``name`` on ``args`` (of their TTIR types' signed dtypes), giving dtype ``out``.

    Raises:
        KeyError: For an operation that is not one of `INTEGER_OPERATIONS`.
    """
    if name == "arith.cmpi":
        return _compare(o, int(attr), args[0], args[1])
    if name == "arith.select":
        return o.xp.where(args[0], args[1], args[2])
    if name in ("arith.extsi", "arith.trunci", "arith.index_cast"):
        return _cast(o, args[0], out, False)
    if name in ("arith.extui", "arith.index_castui"):
        return _cast(o, args[0], out, True)
    if name == "arith.bitcast":
        x = args[0]
        return x if x.dtype == out else x.astype(out) if np.bool_ in (x.dtype, out) else o.bitcast(x, out)
    return _BINARY[name](o, args[0], args[1])


#: The operations `apply` computes.
INTEGER_OPERATIONS = frozenset(
    {*_BINARY, "arith.cmpi", "arith.select", "arith.extsi", "arith.trunci", "arith.index_cast", "arith.extui"}
    | {"arith.index_castui", "arith.bitcast"}
)


# -- what the operations do to affine forms ----------------------------------------------------------------------


def _is_constant(form: Any) -> bool:
    return bool(form.is_constant)


def form_of(
    name: str,
    forms: Sequence[Any],
    attr: Any,
    shape: tuple[int, ...],
    bounds: Callable[[Any], tuple[int, int] | None],
    width_of: Callable[[int], int],
) -> Any:
    """The affine form (`jt_core.translation.analysis.affine.Affine`) of an integer operation's result from its
    operands' forms, as unbounded integers (the address walk then checks it fits the result's width), or ``None``
    where the result is not affine in them.

    Args:
        name: The operation.
        forms: The operands' forms (``None`` where unknown).
        attr: The operation's predicate, where it has one.
        shape: The result's shape.
        bounds: The range a form takes over the grid, lanes and symbols (``None`` where unknown).
        width_of: The width in bits of operand ``i``'s type.
    """
    if name not in AFFINE_OPERATIONS or any(f is None for f in forms):
        return None
    a = forms[0]
    if name in ("arith.extsi", "arith.trunci", "arith.index_cast", "arith.bitcast"):
        return a
    if name in ("arith.extui", "arith.index_castui"):
        found = bounds(a)
        return a if found is not None and found[0] >= 0 else None
    b = forms[1]
    if name == "arith.addi":
        return a.plus(b)
    if name == "arith.subi":
        return a.plus(b, -1)
    if name == "arith.muli":
        if _is_constant(b):
            return a.times(b.const).broadcast(shape)
        return b.times(a.const).broadcast(shape) if _is_constant(a) else None
    if name == "arith.shli":
        if not _is_constant(b) or not 0 <= b.const < width_of(0):
            return None
        return a.times(1 << b.const).broadcast(shape)
    # A remainder or quotient by a constant of values known to lie in [0, constant): the values, or zero.
    found = bounds(a)
    if not _is_constant(b) or b.const <= 0 or found is None or found[0] < 0 or found[1] >= b.const:
        return None
    return a if name in ("arith.remsi", "arith.remui") else type(a).constant(0, shape)


#: The integer operations whose result is affine in affine operands (a product or shift by a constant): `form_of`.
LINEAR_OPERATIONS = frozenset(
    {"arith.addi", "arith.subi", "arith.muli", "arith.shli", "arith.extsi", "arith.trunci", "arith.index_cast"}
    | {"arith.bitcast", "arith.extui", "arith.index_castui"}
)
#: Those, and the ones affine only for some operands (a remainder by a constant larger than its dividend).
AFFINE_OPERATIONS = LINEAR_OPERATIONS | {"arith.remsi", "arith.remui", "arith.divsi", "arith.divui"}
