"""The interpreter's integers as compiled Triton computes them (`IntegerFixes`): ``int1`` arithmetic, the type of a
comparison's result, an arithmetic shift in an unsigned type, and ``~x`` on unsigned integers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["IntegerFixes"]


class IntegerFixes:
    """The interpreter's integers as compiled Triton computes them, for one run: arithmetic on ``int1`` values wraps
    modulo 2, as compiled Triton's ``i1`` arithmetic does (`jt_core.translation.lang` computes the same), comparisons
    give ``int1`` values, an arithmetic shift in an unsigned type gives values of that type, and ``~x`` works on
    unsigned integers (before 3.9, Triton's interpreter made the all-ones operand it is an exclusive or with as
    ``np.full(1, -1, uint8)``, which NumPy 2 refuses).

    NumPy computes on booleans as logic (``True + True`` is ``True``) or refuses to (subtraction, and Triton 3.6's
    interpreter passes booleans to NumPy as they are). A sum or difference is an exclusive or, a product an and; a
    quotient is its dividend, a remainder zero and a shift its shifted operand: what the divisor 1 and the shift 0,
    the only ones defined, give, and what LLVM folds every ``i1`` division, remainder and shift to.

    Args:
        tl: ``triton.language``.
        interp: ``triton.runtime.interpreter``.
        builder: The interpreter's builder.
        binary_op: The builder's ``binary_op`` for every other operand type.
    """

    def __init__(self, tl: Any, interp: Any, builder: Any, binary_op: Callable[[Any, Any, Any], Any]) -> None:
        self.tl = tl
        self.interp = interp
        self.builder = builder
        self.other_binary_op = binary_op
        self.class_idiv = type(builder).create_idiv
        self.class_ashr = type(builder).create_ashr
        self.class_all_ones = type(builder).get_all_ones_value

    def patches(self) -> dict[str, Any]:
        """The builder methods to replace for the run, by name."""
        return {
            "binary_op": self.binary_op,
            "create_idiv": self.idiv,
            "create_ashr": self.ashr,
            "get_all_ones_value": self.all_ones,
        }

    @staticmethod
    def _both_int1(lhs: Any, rhs: Any) -> bool:
        return np.asarray(lhs.data).dtype == np.bool_ and np.asarray(rhs.data).dtype == np.bool_

    def _int1(self, lhs: Any, rhs: Any, op: Any) -> Any:
        x, y = np.broadcast_arrays(np.asarray(lhs.data), np.asarray(rhs.data))
        if op in (np.add, np.subtract):
            data = x ^ y
        elif op is np.multiply:
            data = x & y
        elif op is np.fmod:
            data = np.zeros_like(x)
        else:  # a quotient or a shift
            data = x.copy()
        return self.interp.TensorHandle(data, lhs.dtype.scalar)

    def binary_op(self, lhs: Any, rhs: Any, op: Any) -> Any:
        if self._both_int1(lhs, rhs) and op in _INT1_WRAPPED:
            return self._int1(lhs, rhs, op)
        result = self.other_binary_op(lhs, rhs, op)
        if op in _COMPARISONS:
            # The stock comparison keeps its operands' type on the result's handle, which a later splat of a scalar
            # condition reads: (offs < n) & (s != 0) would splat s != 0 as int32 ones (a store then refuses the
            # int32 mask; an int1 sum gives 2).
            return self.interp.TensorHandle(result.data, self.tl.int1)
        return result

    def idiv(self, lhs: Any, rhs: Any) -> Any:
        if self._both_int1(lhs, rhs):
            return self._int1(lhs, rhs, np.floor_divide)
        return self.class_idiv(self.builder, lhs, rhs)

    def ashr(self, lhs: Any, rhs: Any) -> Any:
        if self._both_int1(lhs, rhs):
            return self._int1(lhs, rhs, np.right_shift)
        result = self.class_ashr(self.builder, lhs, rhs)
        # The stock shift computes on the operands' bits as signed integers and keeps them so, where the operands
        # were promoted to an unsigned type (int8 >> uint8 shifts arithmetically in uint8): the result then compared
        # as numbers with uint8 values (-63 against 193) where the bits are the same.
        data = np.asarray(result.data)
        dtype = np.dtype(self.interp._get_np_dtype(result.dtype))
        if data.dtype != dtype and data.dtype.itemsize == dtype.itemsize:
            return self.interp.TensorHandle(data.view(dtype), result.dtype)
        return result

    def all_ones(self, type_: Any) -> Any:
        """The all-ones value of an integer type (``~x`` is ``x`` exclusive-or it): the largest unsigned one."""
        dtype = np.dtype(self.interp._get_np_dtype(type_))
        if dtype.kind == "u":
            return self.interp.TensorHandle(np.full(1, np.iinfo(dtype).max, dtype), type_.scalar)
        return self.class_all_ones(self.builder, type_)


#: The NumPy functions the interpreter compares with.
_COMPARISONS = (np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal)
#: The NumPy functions the interpreter computes integer arithmetic with whose ``int1`` meaning `IntegerFixes` gives.
_INT1_WRAPPED = (np.add, np.subtract, np.multiply, np.fmod, np.left_shift, np.right_shift)
