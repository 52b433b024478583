"""Triton's front end on its own: a kernel's Python source to Triton IR, without a GPU and without compiling further.

The CPU backend runs kernels with Triton's interpreter, which finds mistakes only when a program reaches them (a
block size that is not a power of two, a pointer used as a number). Triton's front end finds them all up front,
in milliseconds per kernel (6 for a vector add, 15 to 35 for a matrix product), so the CPU backend runs it when a
call is lowered and binding uses it to tell how a kernel uses an argument (:func:`refusal`).

The front end needs a target's code generation hooks; it takes Triton's own CUDA backend (shipped in every Triton
wheel, usable without a GPU) with one change: ``tl.dot`` may take any block size, as the interpreter does, where
real GPUs want at least 16 rows.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

__all__ = ["check", "refusal"]

#: The target whose front end stands in for every platform (Hopper: every language feature is available).
_ARCH = 90

_lock = threading.Lock()


@functools.cache
def _backend() -> tuple[Any, Any, Any, Any]:
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    target = GPUTarget("cuda", _ARCH, 32)
    backend = make_backend(target)
    options = backend.parse_options({"enable_fp_fusion": True})
    codegen = dict(backend.get_codegen_implementation(options))
    codegen["min_dot_size"] = lambda lhs, rhs: (1, 1, 1)
    return target, backend, options, codegen


def check(source: Any) -> None:
    """Runs Triton's front end on an ``ASTSource`` (what a dialect's ``make_source`` returns).

    Raises:
        Exception: Triton's own (``CompilationError`` with the source line), for a kernel the front end refuses.
    """
    from triton._C.libtriton import ir

    target, backend, options, codegen = _backend()
    with _lock:  # the front end's builder state is not shared between threads
        context = ir.context()
        ir.load_dialects(context)
        backend.load_dialects(context)
        source.make_ir(target, options, codegen, backend.get_module_map(), context)


def refusal(source: Any) -> str | None:
    """Why the front end refuses ``source`` (the last line of its message), or ``None`` when it accepts it.

    Any failure counts, Triton's or not (a Triton without the CUDA backend refuses everything).
    """
    try:
        check(source)
    except Exception as exc:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        return lines[-1].strip() if lines else type(exc).__name__
    return None
