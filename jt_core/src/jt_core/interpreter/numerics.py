"""Floating-point types the stock interpreter gets wrong: bfloat16 and the float8 types.

Triton's interpreter holds bfloat16 and float8 values as their bits (``uint16``, ``uint8``) and then computes on
those bits as integers, and its own conversion to float8 drops the carry when rounding reaches the next power of two
(31.3 becomes 16, not 32). A run therefore:

* holds bfloat16 values as ``ml_dtypes.bfloat16``, so arithmetic on them is real bfloat16 arithmetic;
* converts to and from every float8 type with ``ml_dtypes``, rounding to nearest even (or toward zero when the
  kernel asks for it) and saturating to the largest finite value, as NVIDIA GPUs convert (``cvt.rn.satfinite``);
* refuses arithmetic, comparisons and other math on float8 values, as Triton's GPU compilers do (neither the
  CUDA nor the ROCm backend can lower ``x + y`` on float8 tensors): the kernel must widen them first. Loads,
  stores, ``tl.where``, ``tl.abs``, ``tl.dot`` and conversions are what float8 values support.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from jt_core.errors import UnsupportedKernelError

__all__ = ["FloatFixes"]

_BF16 = np.dtype(ml_dtypes.bfloat16)

#: The ml_dtypes type holding each Triton float8 type's values (``fp8e4b15`` has none: it is refused).
_FP8_TYPES = {
    "fp8e4nv": ml_dtypes.float8_e4m3fn,
    "fp8e5": ml_dtypes.float8_e5m2,
    "fp8e4b8": ml_dtypes.float8_e4m3fnuz,
    "fp8e5b16": ml_dtypes.float8_e5m2fnuz,
}
#: Formats with one zero only, whose bits 0x80 are NaN.
_UNSIGNED_ZERO = ("fp8e4b8", "fp8e5b16")

_WIDEN = "x.to(tl.float32)"


def _is_fp8(ty: Any) -> bool:
    return bool(getattr(ty, "is_fp8", lambda: False)())


def _fp8_dtype(ty: Any) -> np.dtype:
    name = str(ty)
    if name not in _FP8_TYPES:
        raise UnsupportedKernelError(
            f"Triton's {name} type cannot be run on the CPU (ml_dtypes has no matching type); use tl.float8e4nv or "
            "tl.float8e5"
        )
    return np.dtype(_FP8_TYPES[name])


class FloatFixes:
    """The bfloat16 and float8 fixes for one run, built over Triton's ``triton.language`` and interpreter modules.

    Args:
        tl: ``triton.language``.
        interp: ``triton.runtime.interpreter``.
        builder: The interpreter's builder (its class methods are the originals the fixes fall back to).
    """

    def __init__(self, tl: Any, interp: Any, builder: Any) -> None:
        self.tl = tl
        self.interp = interp
        self.builder = builder
        self.original_get_np_dtype = interp._get_np_dtype
        self.rtz = interp._ir.ROUNDING_MODE.RTZ
        builder_class = type(builder)
        self.class_cast = builder_class.cast_impl
        self.class_fp_to_fp = builder_class.create_fp_to_fp
        self.class_binary = builder_class.binary_op
        self.class_unary = builder_class.unary_op
        self.class_ternary = builder_class.ternary_op
        self.class_fma = builder_class.create_fma
        self.class_dot = builder_class.create_dot

    def patches(self) -> dict[str, Any]:
        """The builder methods to replace for the run, by name."""
        return {
            "cast_impl": self.cast_impl,
            "create_fp_to_fp": self.fp_to_fp,
            "binary_op": self.binary_op,
            "unary_op": self.unary_op,
            "ternary_op": self.ternary_op,
            "create_fma": self.fma,
            "create_dot": self.dot,
        }

    def get_np_dtype(self, tt_dtype: Any) -> Any:
        """The NumPy type holding values of a Triton type: bfloat16 as ``ml_dtypes.bfloat16``."""
        tl = self.tl
        scalar = getattr(tt_dtype, "element_ty", tt_dtype) if isinstance(tt_dtype, tl.block_type) else tt_dtype
        if scalar == tl.bfloat16:
            return _BF16
        return self.original_get_np_dtype(tt_dtype)

    # -- conversions -----------------------------------------------------------------------------------------

    def _values(self, data: Any, ty: Any) -> np.ndarray:
        """The values of ``data`` (held as Triton type ``ty``) as a NumPy array of a real floating type."""
        array = np.asarray(data)
        if _is_fp8(ty):
            return array.view(np.uint8).view(_fp8_dtype(ty))
        return array

    def _convert(self, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        s, d = src.dtype.scalar, dst_type.scalar
        values = self._values(src.data, s)
        if not _is_fp8(d):
            return self.interp.TensorHandle(values.astype(self.get_np_dtype(d)), d)
        target = _fp8_dtype(d)
        limit = float(ml_dtypes.finfo(target).max)
        wide = values.astype(np.float64) if values.dtype.itemsize < 8 else values
        saturated = np.where(np.isnan(wide), wide, np.clip(wide, -limit, limit))
        converted = saturated.astype(target)
        bits = converted.view(np.uint8).copy()
        if rounding_mode == self.rtz:
            # Rounded away from zero: step the magnitude (sign-magnitude bits) down by one.
            back = converted.astype(np.float64)
            over = np.isfinite(back) & (np.abs(back) > np.abs(saturated))
            bits[over] -= np.uint8(1)
            if str(d) in _UNSIGNED_ZERO:
                bits[over & (bits == 0x80)] = 0
        return self.interp.TensorHandle(bits, d)

    def _involves(self, src: Any, dst_type: Any) -> tuple[bool, bool]:
        s, d = src.dtype.scalar, dst_type.scalar
        return _is_fp8(s) or _is_fp8(d), s == self.tl.bfloat16 or d == self.tl.bfloat16

    def cast_impl(self, src: Any, dst_type: Any) -> Any:
        fp8, bf16 = self._involves(src, dst_type)
        if fp8 or bf16:
            return self._convert(src, dst_type, None)
        return self.class_cast(self.builder, src, dst_type)

    def fp_to_fp(self, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        fp8, bf16 = self._involves(src, dst_type)
        if fp8 or bf16:
            return self._convert(src, dst_type, rounding_mode)
        return self.class_fp_to_fp(self.builder, src, dst_type, rounding_mode)

    # -- arithmetic on float8 ----------------------------------------------------------------------------------

    def _refuse(self, what: str, *operands: Any) -> None:
        for operand in operands:
            ty = operand.dtype.scalar
            if _is_fp8(ty):
                raise UnsupportedKernelError(
                    f"{what} on {ty} values: Triton's GPU compilers cannot compile arithmetic, comparisons or math "
                    f"on float8 tensors, so jt's CPU backend refuses it too. Widen the values first ({_WIDEN}), "
                    f"compute, and convert the result back with .to(tl.float8{str(ty)[3:]})"
                )

    def binary_op(self, lhs: Any, rhs: Any, op: Any) -> Any:
        self._refuse(getattr(op, "__name__", "an operation"), lhs, rhs)
        return self.class_binary(self.builder, lhs, rhs, op)

    def unary_op(self, arg: Any, op: Any) -> Any:
        self._refuse(getattr(op, "__name__", "an operation"), arg)
        return self.class_unary(self.builder, arg, op)

    def ternary_op(self, lhs: Any, rhs: Any, other: Any, op: Any) -> Any:
        if op is not np.where:  # tl.where only picks values; clamping computes on them
            self._refuse(getattr(op, "__name__", "an operation"), lhs, rhs, other)
        return self.class_ternary(self.builder, lhs, rhs, other, op)

    def fma(self, x: Any, y: Any, z: Any) -> Any:
        self._refuse("fma", x, y, z)
        return self.class_fma(self.builder, x, y, z)

    def dot(self, a: Any, b: Any, d: Any, *rest: Any) -> Any:
        """``tl.dot``: float8 operands are widened to float16 (which holds every float8 value exactly)."""
        widened = [
            self._convert(operand, self.tl.float16, None) if _is_fp8(operand.dtype.scalar) else operand
            for operand in (a, b)
        ]
        return self.class_dot(self.builder, *widened, d, *rest)
