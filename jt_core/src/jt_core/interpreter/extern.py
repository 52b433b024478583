"""libdevice in Triton's interpreter: what a run patches so that ``libdevice.exp(x)`` and its siblings compute.

Compiled Triton reads ``triton.language.extra.libdevice`` (a module of empty stand-ins) as the backend's library,
``triton.language.extra.cuda.libdevice``, whose functions pick a symbol (``__nv_expf``) by the operands' types and
emit an external call. Triton's interpreter does neither: the stand-ins return ``None`` and the backend's functions
refuse to run without a compile. For a run, each public function of the three libdevice modules (the stand-ins,
CUDA's and ROCm's) calls the backend's own function with the interpreter's semantic, so that Triton itself promotes
the operands and picks the symbol, and the interpreter's builder computes the external call with
`jt_core.interpreter.libdevice`, the same functions the compiled path computes.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from jt_core.errors import UnsupportedKernelError
from jt_core.interpreter import libdevice

__all__ = ["LIBDEVICE_MODULES", "patches"]

#: The libdevice modules a kernel may call, with the module whose functions stand for theirs.
LIBDEVICE_MODULES = {
    "triton.language.extra.libdevice": "triton.language.extra.cuda.libdevice",
    "triton.language.extra.cuda.libdevice": "triton.language.extra.cuda.libdevice",
    "triton.language.extra.hip.libdevice": "triton.language.extra.hip.libdevice",
}


@functools.cache
def _functions(module_name: str) -> tuple[tuple[str, Callable[..., Any]], ...]:
    module = importlib.import_module(module_name)
    return tuple(
        (name, value)
        for name, value in vars(module).items()
        if not name.startswith("_") and inspect.isfunction(value) and value.__module__ == module_name
    )


def _bound(backend: Callable[..., Any] | None, name: str, semantic: Any) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        if backend is None:
            raise UnsupportedKernelError(
                f"libdevice.{name} has no NVIDIA implementation in this Triton, so it cannot run on the CPU"
            )
        kwargs.pop("_semantic", None)
        return backend(*args, _semantic=semantic, **kwargs)

    return call


def _compute(interp: Any) -> Callable[..., Any]:
    """The interpreter builder's ``create_extern_elementwise``."""

    def create_extern_elementwise(
        lib_name: str, lib_path: str, symbol: str, args: list[Any], ret_type: Any, is_pure: bool
    ) -> Any:
        if libdevice.implementation(symbol) is None:
            raise UnsupportedKernelError(
                f"{libdevice.libdevice_name(symbol)} (the external function {symbol!r}) cannot run on the CPU"
            )
        dtype = np.dtype(interp._get_np_dtype(ret_type))
        with np.errstate(all="ignore"):
            out = libdevice.evaluate(libdevice.numpy_arrays(), symbol, [np.asarray(a.data) for a in args], dtype)
        return interp.TensorHandle(np.asarray(out), getattr(ret_type, "scalar", ret_type))

    return create_extern_elementwise


def _umulhi(interp: Any) -> Callable[..., Any]:
    """The interpreter builder's ``create_umulhi`` (Triton 3.6's overflows on negative 64-bit operands)."""

    def create_umulhi(lhs: Any, rhs: Any) -> Any:
        with np.errstate(all="ignore"):
            out = libdevice.umulhi(libdevice.numpy_arrays(), np.asarray(lhs.data), np.asarray(rhs.data))
        return interp.TensorHandle(np.asarray(out), lhs.dtype.scalar)

    return create_umulhi


def patches(interp: Any) -> list[tuple[Any, str, Any]]:
    """``(object, name, value)`` for each attribute a run replaces: the builder's external call and ``umulhi``, and
    every public function of the libdevice modules that import (a Triton without ROCm's has no module for it)."""
    builder = interp.interpreter_builder
    found: list[tuple[Any, str, Any]] = [
        (builder, "create_extern_elementwise", _compute(interp)),
        (builder, "create_umulhi", _umulhi(interp)),
    ]
    semantic = interp.interpreter_semantic
    for module_name, backend_name in LIBDEVICE_MODULES.items():
        try:
            module = importlib.import_module(module_name)
            backend = dict(_functions(backend_name))
        except ImportError:
            continue
        for name, _ in _functions(module_name):
            found.append((module, name, _bound(backend.get(name), name, semantic)))
    return found
