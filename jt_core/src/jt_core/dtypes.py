"""Mapping JAX/NumPy dtypes and Python values to Triton type strings."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from jt_core.errors import KernelCallTypeError, KernelCallValueError

_DTYPE_TO_TRITON: dict[np.dtype, str] = {
    np.dtype(np.bool_): "i1",
    np.dtype(np.int8): "i8",
    np.dtype(np.int16): "i16",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64",
    np.dtype(np.uint8): "u8",
    np.dtype(np.uint16): "u16",
    np.dtype(np.uint32): "u32",
    np.dtype(np.uint64): "u64",
    np.dtype(np.float16): "fp16",
    np.dtype(np.float32): "fp32",
    np.dtype(np.float64): "fp64",
    np.dtype(ml_dtypes.bfloat16): "bf16",
    np.dtype(ml_dtypes.float8_e4m3fn): "fp8e4nv",
    np.dtype(ml_dtypes.float8_e5m2): "fp8e5",
    np.dtype(ml_dtypes.float8_e4m3fnuz): "fp8e4b8",
    np.dtype(ml_dtypes.float8_e5m2fnuz): "fp8e5b16",
    np.dtype(ml_dtypes.float8_e4m3b11fnuz): "fp8e4b15",
}


def triton_scalar_type(dtype: Any, what: str = "dtype") -> str:
    """The Triton element type string of a NumPy/JAX dtype (``bfloat16`` -> ``"bf16"``).

    Raises:
        KernelCallTypeError: For dtypes Triton has no type for (complex, strings, ...), naming ``what``.
    """
    try:
        key = np.dtype(dtype)
    except TypeError:
        raise KernelCallTypeError(f"{what} has dtype {dtype!r}, which is not a NumPy/JAX dtype") from None
    if key not in _DTYPE_TO_TRITON:
        supported = ", ".join(sorted(str(d) for d in _DTYPE_TO_TRITON))
        raise KernelCallTypeError(f"{what} has dtype {key}, which Triton kernels cannot take; supported: {supported}")
    return _DTYPE_TO_TRITON[key]


def int_type(value: int, what: str = "value") -> str:
    """Triton's type for a Python integer, chosen by range like Triton's launcher does."""
    if -(2**31) <= value < 2**31:
        return "i32"
    if 2**31 <= value < 2**32:
        return "u32"
    if -(2**63) <= value < 2**63:
        return "i64"
    if 2**63 <= value < 2**64:
        return "u64"
    raise KernelCallValueError(f"{what}={value} does not fit a 64-bit integer, the widest a Triton kernel takes")


def get_type_id(obj: Any) -> str:
    """The Triton type string of a value or dtype.

    Arrays and dtypes give their element type (``bfloat16`` -> ``"bf16"``, ``float8_e4m3fn`` -> ``"fp8e4nv"``);
    Python ``int`` gives ``i32``/``u32``/``i64``/``u64`` by range; ``bool`` gives ``i1``; ``float`` gives ``fp32``;
    NumPy scalars give their dtype's type; a ``jt.TensorDescriptor`` gives its parameter type
    (``tensordesc<fp16[64, 64]>``).

    Raises:
        KernelCallTypeError: For values Triton cannot take.
    """
    if isinstance(obj, bool):
        return "i1"
    if isinstance(obj, int):
        return int_type(obj)
    if isinstance(obj, float):
        return "fp32"
    if isinstance(obj, np.generic):
        return triton_scalar_type(obj.dtype, what=f"scalar {obj!r}")
    spec = getattr(obj, "spec", None)
    if callable(spec) and hasattr(obj, "block_shape"):  # a jt.TensorDescriptor: the parameter type it gets
        return str(spec().type_str)
    if hasattr(obj, "dtype"):
        return triton_scalar_type(obj.dtype, what=f"argument {type(obj).__name__}")
    try:
        return triton_scalar_type(obj, what=repr(obj))
    except KernelCallTypeError:
        raise KernelCallTypeError(f"get_type_id: {obj!r} is neither a scalar, an array nor a dtype") from None
