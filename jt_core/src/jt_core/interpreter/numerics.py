"""What the stock interpreter computes differently from compiled Triton, and how a run corrects it: bfloat16 and the
float8 types, conversions to integers, selections of bits, ``tl.dot``'s input precisions, the order of
reductions, and the thread's floating-point mode.

Triton's interpreter holds bfloat16 and float8 values as their bits (``uint16``, ``uint8``) and then computes on
those bits as integers, and its own conversion to float8 drops the carry when rounding reaches the next power of two
(31.3 becomes 16, not 32). A run therefore:

* holds bfloat16 values as ``ml_dtypes.bfloat16``, so arithmetic on them is real bfloat16 arithmetic;
* converts to and from every float8 type with ``ml_dtypes``, rounding to nearest even (or toward zero when the
  kernel asks for it) and saturating to the largest finite value, as NVIDIA GPUs convert (``cvt.rn.satfinite``);
* refuses arithmetic, comparisons and other math on float8 values, as Triton's GPU compilers do (neither the
  CUDA nor the ROCm backend can lower ``x + y`` on float8 tensors): the kernel must widen them first. Loads,
  stores, ``tl.where``, ``tl.abs``, ``tl.dot`` and conversions are what float8 values support;
* converts floats to integers saturating, NaN to zero, as PTX's ``cvt`` and the compiled path do (NumPy gives
  the smallest integer);
* selects (``tl.where``) the bits of its operands in the result's type (Triton 3.6 builds a float atomic
  minimum from a select of an ``int64`` and a ``uint64``, which NumPy would convert as numbers to float64);
* rounds ``tl.dot``'s float32 operands to TF32 with ``input_precision="tf32"``, and splits them into three TF32
  products with ``"tf32x3"``, as the device and the compiled path do (the stock interpreter multiplies in
  float32 whatever is asked);
* computes on ``int1`` values as compiled Triton's ``i1`` arithmetic wraps, types comparisons ``int1`` and keeps
  an arithmetic shift in an unsigned type in that type (`jt_core.interpreter.integers`);
* reduces in the order the compiled path reduces (`ReductionOrder`);
* runs with the thread's flushing of subnormal floats off (`subnormals_kept`).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import ml_dtypes
import numpy as np

from jt_core.errors import UnsupportedKernelError
from jt_core.interpreter import _exact
from jt_core.interpreter._arrays import numpy_arrays

__all__ = [
    "FloatFixes",
    "ReductionOrder",
    "new_stretch",
    "saturating_int",
    "subnormals_kept",
    "tf32_rna",
]


class _Stretch:
    """Which stretch of straight-line code the interpreter runs (a number changed at every loop iteration, branch
    and call): a product fuses into a sum only within one, as LLVM fuses them only within one basic block."""

    current = 0


def new_stretch() -> None:
    """Starts a new stretch of straight-line code (a loop's iteration, a branch, a call, what follows them)."""
    _Stretch.current += 1


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

    def __init__(self, tl: Any, interp: Any, builder: Any, fuse: bool = False) -> None:
        self.tl = tl
        self.interp = interp
        self.builder = builder
        #: Whether products fuse into the sums that read them, as Triton's compiler fuses them with
        #: ``enable_fp_fusion`` (`jt_core.translation.products` says where).
        self.fuse = fuse
        self.original_get_np_dtype = interp._get_np_dtype
        self.rtz = interp._ir.ROUNDING_MODE.RTZ
        builder_class = type(builder)
        self.class_cast = builder_class.cast_impl
        self.class_binary = builder_class.binary_op
        self.class_unary = builder_class.unary_op
        self.class_ternary = builder_class.ternary_op
        self.class_fma = builder_class.create_fma
        self.class_dot = builder_class.create_dot
        self.class_splat = builder_class.create_splat
        self.class_broadcast = builder_class.create_broadcast
        self.class_expand_dims = builder_class.create_expand_dims

    def patches(self) -> dict[str, Any]:
        """The builder methods to replace for the run, by name."""
        patches = {
            "cast_impl": self.cast_impl,
            "create_fp_to_fp": self.fp_to_fp,
            "binary_op": self.binary_op,
            "unary_op": self.unary_op,
            "ternary_op": self.ternary_op,
            "create_fma": self.fma,
            "create_dot": self.dot,
        }
        if not hasattr(type(self.builder), "get_bf16"):
            patches["get_bf16"] = self.bf16_constant  # Triton 3.6's interpreter has none: x * 0.5 on bfloat16 fails
        if self.fuse:
            patches.update(
                {"create_splat": self.splat, "create_broadcast": self.broadcast, "create_expand_dims": self.expand_dims}
            )
        return patches

    def bf16_constant(self, value: float) -> Any:
        """A bfloat16 constant, rounded from float32 as Triton rounds it."""
        return self.interp.TensorHandle(np.array([value], np.float32).astype(_BF16), self.tl.bfloat16)

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
            return self.interp.TensorHandle(narrowed(values, self.get_np_dtype(d), rounding_mode == self.rtz), d)
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
        s, d = src.dtype.scalar, dst_type.scalar
        if s.is_floating() and d.is_int() and not d.is_bool():
            return self.interp.TensorHandle(saturating_int(self._values(src.data, s), self.get_np_dtype(d)), d)
        fp8, bf16 = self._involves(src, dst_type)
        if fp8 or bf16:
            return self._convert(src, dst_type, None)
        return self.class_cast(self.builder, src, dst_type)

    def fp_to_fp(self, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        # Every float conversion: the stock one rounds toward zero by dropping bits, which turns values past the
        # target's range into NaN and misreads zeros and subnormals.
        return self._convert(src, dst_type, rounding_mode)

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
        if self.fuse and op in (np.add, np.subtract) and lhs.dtype.scalar.is_floating():
            fused = self._fused(lhs, rhs, op is np.subtract)
            if fused is not None:
                return fused
        result = self.class_binary(self.builder, lhs, rhs, op)
        if self.fuse and op is np.multiply and lhs.dtype.scalar.is_floating():
            result.jt_factors = (np.asarray(lhs.data), np.asarray(rhs.data), _Stretch.current)
        return result

    def _fused(self, lhs: Any, rhs: Any, subtract: bool) -> Any:
        """A sum or difference of a product of this stretch of code (the left operand first), rounded once."""
        for index, handle in enumerate((lhs, rhs)):
            factors = getattr(handle, "jt_factors", None)
            if factors is None or factors[2] != _Stretch.current:
                continue
            a, b, _ = factors
            other = np.asarray((rhs if index == 0 else lhs).data)
            if subtract:
                if index == 0:
                    other = -other  # a * b - c
                else:
                    a = -a  # c - a * b
            shape = np.broadcast_shapes(np.shape(a), np.shape(other))
            a, b, other = (np.broadcast_to(x, shape) for x in (a, b, other))
            result = libdevice_fused(a, b, other.astype(a.dtype))
            return self.interp.TensorHandle(np.asarray(result), lhs.dtype.scalar)
        return None

    def unary_op(self, arg: Any, op: Any) -> Any:
        self._refuse(getattr(op, "__name__", "an operation"), arg)
        result = self.class_unary(self.builder, arg, op)
        factors = getattr(arg, "jt_factors", None)
        if self.fuse and op is np.negative and factors is not None:
            result.jt_factors = (-factors[0], factors[1], factors[2])
        return result

    # -- a product passed on unchanged but for its shape: its factors with it -----------------------------------

    def splat(self, ret_ty: Any, arg: Any) -> Any:
        result = self.class_splat(self.builder, ret_ty, arg)
        factors = getattr(arg, "jt_factors", None)
        if factors is not None:
            shape = tuple(ret_ty.shape)
            a, b = (np.broadcast_to(np.asarray(x).reshape(-1)[0], shape) for x in factors[:2])
            result.jt_factors = (a, b, factors[2])
        return result

    def broadcast(self, arg: Any, shape: Any) -> Any:
        result = self.class_broadcast(self.builder, arg, shape)
        factors = getattr(arg, "jt_factors", None)
        if factors is not None:
            result.jt_factors = (np.broadcast_to(factors[0], shape), np.broadcast_to(factors[1], shape), factors[2])
        return result

    def expand_dims(self, arg: Any, axis: int) -> Any:
        result = self.class_expand_dims(self.builder, arg, axis)
        factors = getattr(arg, "jt_factors", None)
        if factors is not None:
            a, b = (np.expand_dims(x, axis) for x in factors[:2])
            result.jt_factors = (a, b, factors[2])
        return result

    def ternary_op(self, lhs: Any, rhs: Any, other: Any, op: Any) -> Any:
        if op is not np.where:  # tl.where only picks values; clamping computes on them
            self._refuse(getattr(op, "__name__", "an operation"), lhs, rhs, other)
            return self.class_ternary(self.builder, lhs, rhs, other, op)
        # A selection picks bits: both sides are taken as the result's type, never converted as numbers.
        dtype = np.dtype(self.get_np_dtype(other.dtype.scalar))
        picked = [
            self.interp.TensorHandle(np.asarray(side.data).view(dtype), side.dtype)
            if np.asarray(side.data).dtype != dtype and np.asarray(side.data).dtype.itemsize == dtype.itemsize
            else side
            for side in (rhs, other)
        ]
        return self.class_ternary(self.builder, lhs, picked[0], picked[1], op)

    def fma(self, x: Any, y: Any, z: Any) -> Any:
        """``tl.fma``: rounded once, as the device's ``fma.rn`` (the stock interpreter rounds twice on float32)."""
        self._refuse("fma", x, y, z)
        if not x.dtype.scalar.is_floating():
            return self.class_fma(self.builder, x, y, z)
        a, b, c = (np.asarray(v.data) for v in (x, y, z))
        shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
        a, b, c = (np.broadcast_to(v, shape) for v in (a, b, c))
        return self.interp.TensorHandle(np.asarray(libdevice_fused(a, b, c.astype(a.dtype))), x.dtype.scalar)

    def dot(self, a: Any, b: Any, d: Any, precision: Any = None, *rest: Any) -> Any:
        """``tl.dot``: float8 operands are widened to float16 (which holds every float8 value exactly); float32
        operands are rounded to TF32 as ``input_precision`` asks."""
        widened = [
            self._convert(operand, self.tl.float16, None) if _is_fp8(operand.dtype.scalar) else operand
            for operand in (a, b)
        ]
        name = str(getattr(precision, "name", precision)).upper()
        floats = all(operand.dtype.scalar == self.tl.float32 for operand in widened)
        if name not in ("TF32", "TF32X3") or not floats:
            return self.class_dot(self.builder, *widened, d, precision, *rest)
        x, y = (np.asarray(operand.data, np.float32) for operand in widened)
        acc = np.asarray(d.data)
        if name == "TF32":
            acc = _tf32_product(x, y, acc)
        else:  # as Triton's GPU compiler rewrites it: a TF32 part and the rest, three products, smallest first
            x_big, y_big = tf32_rna(x), tf32_rna(y)
            acc = _tf32_product(x - x_big, y_big, acc)
            acc = _tf32_product(x_big, y - y_big, acc)
            acc = _tf32_product(x_big, y_big, acc)
        return self.interp.TensorHandle(acc, d.dtype.scalar)


def narrowed(values: np.ndarray, dtype: np.dtype, toward_zero: bool = False) -> np.ndarray:
    """Floats converted to the float type ``dtype``: rounded to nearest even, or toward zero (``cvt.rz``: the value
    of ``dtype`` nearest each that is no larger in magnitude, the largest finite value past ``dtype``'s range).

    float64 values become bfloat16 through float32 rounded to odd, which makes the second rounding a correct one
    (``ml_dtypes`` rounds float64 to float32 and then to bfloat16, twice to nearest).
    """
    dtype = np.dtype(dtype)
    values = np.asarray(values)
    with np.errstate(over="ignore", invalid="ignore"):
        if values.dtype == np.float64 and dtype == _BF16:
            converted = _to_odd_float32(values).astype(dtype)
        else:
            converted = values.astype(dtype)
        if not toward_zero or dtype.itemsize >= values.dtype.itemsize:
            return converted
        # Rounded away from zero, or to an infinity from a finite value: one step down in magnitude (sign and
        # magnitude bits), which from an infinity is the largest finite value. A NaN compares false.
        over = np.abs(converted.astype(np.float64)) > np.abs(values.astype(np.float64))
    bits = converted.view(f"u{dtype.itemsize}").copy()
    bits[over] -= 1
    return bits.view(dtype)


def _to_odd_float32(values: np.ndarray) -> np.ndarray:
    """float64 values rounded to float32 with an inexact result's last bit set (rounding to odd)."""
    near = values.astype(np.float32)
    bits = near.view(np.uint32).copy()
    back = near.astype(np.float64)
    inexact = np.isfinite(values) & np.isfinite(back) & (back != values)
    toward = inexact & (np.abs(back) > np.abs(values))
    bits[toward] -= 1  # toward zero first, then the last bit set
    bits[inexact] |= 1
    return bits.view(np.float32)


def _tf32_product(x: np.ndarray, y: np.ndarray, acc: np.ndarray) -> np.ndarray:
    return np.matmul(tf32_rna(x), tf32_rna(y), dtype=acc.dtype) + acc


def tf32_rna(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to TensorFloat-32 (10 mantissa bits), to nearest with ties away from zero, as the
    compiled path rounds ``tl.dot``'s operands (`jt_core.translation.lang.round_to_tf32`); infinities and NaNs
    are kept."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)
    finite = (bits & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    return np.where(finite, rounded, bits).view(np.float32)


def saturating_int(values: np.ndarray, dtype: Any) -> np.ndarray:
    """Floats converted to the integer type ``dtype`` toward zero, saturating at its limits, NaN to zero: what
    PTX's ``cvt.rzi`` gives for 32-bit integers and XLA for every width (NumPy gives the smallest integer)."""
    info = np.iinfo(dtype)
    wide = np.trunc(np.asarray(values).astype(np.float64))
    nan = np.isnan(wide)
    high = wide >= float(info.max) + 1  # a power of two, exact in float64
    low = wide < float(info.min)
    out = np.where(nan | high | low, 0, wide).astype(dtype)
    out[np.broadcast_to(high, out.shape)] = info.max
    out[np.broadcast_to(low, out.shape)] = info.min
    return out


# -- the order of reductions -----------------------------------------------------------------------------------


def _halves(values: list[np.ndarray], axis: int, combine: Callable[[list[Any], list[Any]], list[np.ndarray]]) -> list:
    """``values`` reduced along ``axis`` as the compiled path reduces (`jt_core.translation.reductions`): element
    ``i`` of the first half combined with element ``i`` of the second, first half on the left, until one is left."""
    while values[0].shape[axis] > 1:
        size = values[0].shape[axis]
        half = size // 2
        left = [np.take(v, np.arange(half), axis=axis) for v in values]
        right = [np.take(v, np.arange(half, 2 * half), axis=axis) for v in values]
        combined = combine(left, right)
        if size % 2:
            last = [np.take(v, [size - 1], axis=axis) for v in values]
            combined = [np.concatenate([c, odd], axis=axis) for c, odd in zip(combined, last, strict=True)]
        values = combined
    return [np.squeeze(v, axis=axis) for v in values]


class ReductionOrder:
    """The interpreter's ``tl.reduce`` made to combine in the compiled path's order, for one run.

    The stock interpreter sums floats with ``np.sum`` (pairwise in NumPy's own blocks, float16 in float32) and
    applies any other combining function element after element, left to right. The compiled path combines the
    halves of the block pairwise (XLA's own order depends on the shape it sees). So that a result does not depend
    on the path, a run combines as the compiled path does: float sums and any other combining function as halves
    (the function called once per level on half blocks), ``tl.argmin``/``tl.argmax`` through Triton's own
    combining function where NaNs or ties could make the order matter. Integer sums go by halves too, wrapping in
    their type (Triton 3.6's ``np.sum`` widens them and then fails to convert a total outside their range);
    ``tl.max`` and ``tl.min`` (which give the same whatever the order) keep NumPy's.

    Args:
        tl: ``triton.language``.
        interp: ``triton.runtime.interpreter``.
    """

    def __init__(self, tl: Any, interp: Any) -> None:
        self.tl = tl
        self.stock = interp.ReduceOps.apply_impl
        standard = tl.standard
        self.tie_left = {
            getattr(standard, "_argmin_combine_tie_break_left", None),
            getattr(standard, "_argmax_combine_tie_break_left", None),
        } - {None}
        self.arg = self.tie_left | {
            getattr(standard, "_argmin_combine_tie_break_fast", None),
            getattr(standard, "_argmax_combine_tie_break_fast", None),
        } - {None}
        self.order_free = {getattr(standard, "_elementwise_max", None), getattr(standard, "_elementwise_min", None)}
        self.sum = getattr(standard, "_sum_combine", None)

    def patches(self) -> list[tuple[Any, str, Any]]:
        """``(object, name, value)`` for each attribute to replace for the run."""
        from triton.runtime import interpreter as interp

        order = self

        def apply_impl(reduce: Any, inputs: Sequence[Any]) -> Any:
            return order.apply(reduce, inputs)

        return [(interp.ReduceOps, "apply_impl", apply_impl)]

    def apply(self, reduce: Any, inputs: Sequence[Any]) -> Any:
        fn = reduce.combine_fn
        data = np.asarray(inputs[0].handle.data)
        floating = data.dtype.kind == "f" or data.dtype == np.dtype(ml_dtypes.bfloat16)
        if reduce.axis is None and len(inputs) > 1:
            return self._halves(reduce, inputs)  # the stock interpreter flattens only the first of several
        if fn in self.order_free:
            return self.stock(reduce, inputs)
        if fn in self.tie_left and not (floating and np.isnan(data.astype(np.float32)).any()):
            return self.stock(reduce, inputs)  # NumPy's first extreme is what the halves give
        return self._halves(reduce, inputs)

    def _halves(self, reduce: Any, inputs: Sequence[Any]) -> list[Any]:
        original_axis = reduce.axis
        if original_axis is None:
            inputs, axis = [reduce.to_tensor(i.handle.data.flatten(), i.dtype) for i in inputs], 0
        else:
            axis = original_axis
        shape = inputs[0].handle.data.shape
        fn = reduce.combine_fn
        if fn is self.sum:

            def combine(left: list[Any], right: list[Any]) -> list[np.ndarray]:
                return [np.add(left[0], right[0])]

        else:

            def combine(left: list[Any], right: list[Any]) -> list[np.ndarray]:
                halves = [reduce.to_tensor(v, t.dtype) for v, t in zip([*left, *right], [*inputs, *inputs])]
                results = fn(*halves)
                results = results if isinstance(results, tuple) else (results,)
                out = []
                for result, like in zip(results, left):
                    value = result.handle.data if isinstance(result, self.tl.core.tensor) else result
                    out.append(np.broadcast_to(np.asarray(value).astype(like.dtype), like.shape))
                return out

        reduced = _halves([np.asarray(i.handle.data) for i in inputs], axis, combine)
        ret = []
        for data, tensor in zip(reduced, inputs):
            if reduce.keep_dims:
                if original_axis is not None:
                    data = np.expand_dims(data, axis)
                else:
                    for _ in range(len(shape)):
                        data = np.expand_dims(data, 0)
            elif original_axis is None:
                data = data.item() if data.ndim == 0 else data
            ret.append(reduce.to_tensor(data, tensor.dtype))
        return ret


# -- the thread's floating-point mode --------------------------------------------------------------------------


@contextmanager
def subnormals_kept() -> Iterator[None]:
    """Runs the body with the thread's floating-point environment at its defaults (subnormal floats kept, as a GPU
    keeps them outside its ``ftz`` instructions), and restores it after.

    XLA runs its CPU threads, and so the interpreter inside its custom calls and host callbacks, with subnormal
    inputs read as zero and subnormal results flushed to zero (x86's MXCSR DAZ and FTZ bits, AArch64's FPCR FZ).
    C's ``fesetenv(FE_DFL_ENV)`` clears them; where the C library cannot be reached, the body runs as it is.
    """
    env = _fenv()
    if env is None:
        yield
        return
    libc, default = env
    saved = (ctypes.c_byte * 1024)()
    if libc.fegetenv(saved) != 0:
        yield
        return
    libc.fesetenv(default)
    try:
        yield
    finally:
        libc.fesetenv(saved)


_FENV: list[Any] = []


def _fenv() -> tuple[Any, Any] | None:
    """The C library and its ``FE_DFL_ENV``, or ``None`` where they cannot be found."""
    if not _FENV:
        found: tuple[Any, Any] | None = None
        try:
            libc = ctypes.CDLL(None)
            if sys.platform == "darwin":
                default: Any = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.in_dll(libc, "_FE_DFL_ENV")))
            elif sys.platform.startswith("linux"):
                default = ctypes.c_void_p(-1)  # glibc and musl: ((const fenv_t *) -1)
            else:
                default = None
            if default is not None:
                libc.fegetenv.argtypes = (ctypes.c_void_p,)
                libc.fesetenv.argtypes = (ctypes.c_void_p,)
                found = (libc, default)
        except (OSError, AttributeError, ValueError):
            found = None
        _FENV.append(found)
    return _FENV[0]


def libdevice_fused(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` rounded once, on NumPy arrays of one float type (`jt_core.interpreter._exact.fused`)."""
    if a.dtype == np.float64 or a.dtype == np.float32:
        return np.asarray(_exact.fused(numpy_arrays(), a, b, c))
    return np.asarray(_exact.fused(numpy_arrays(), a, b, c)).astype(a.dtype)
