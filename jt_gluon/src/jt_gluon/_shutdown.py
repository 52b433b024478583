"""What a process that compiled Gluon kernels lets go of when it exits.

Triton's Gluon bindings turn an MLIR layout back into a Python layout object through classes they look up once
and keep for the life of the process, in a C++ static whose references are never released (``layoutToGluon`` in
Triton's ``python/src/gluon_ir.cc``; the first ``x[:, None]`` of a Gluon kernel calls it). Those classes outlive the
interpreter's teardown, and so does what their methods' globals hold: the dictionaries of the modules that define
them, which the interpreter clears only for modules still alive. Those dictionaries hold Triton's binding types
(``GluonOpBuilder``, ``ir.value``, ``ir.attribute``) and, through their methods' default arguments, binding
objects, so at exit Triton's nanobind bindings report them as leaked ("nanobind: leaked 4 instances!", then some
300 types and functions, with Triton 3.9) at the end of every process that compiled such a kernel. So, at exit, the
dictionaries of those modules are cleared, as the interpreter clears those of the modules it still holds. Nothing
else is touched: a leak of anything else is still reported. Triton 3.6's pybind11 bindings report nothing.
"""

from __future__ import annotations

import atexit
import sys
import threading

__all__ = ["PINNED_LAYOUT_MODULES", "clear_pinned_layout_modules", "release_at_exit"]

#: The modules whose layout classes Triton's Gluon bindings keep (every Triton version that has the module).
PINNED_LAYOUT_MODULES = (
    "triton.experimental.gluon.language._layouts",
    "triton.experimental.gluon.language.amd._layouts",
    "triton.experimental.gluon.language.amd.cdna5._layouts",
    "triton.experimental.gluon.language.nvidia.blackwell",
    "triton.experimental.gluon.language.nvidia.rubin",
)

_registered = False
_lock = threading.Lock()


def clear_pinned_layout_modules() -> list[str]:
    """Clears the dictionaries of the `PINNED_LAYOUT_MODULES` that are imported; returns their names."""
    cleared = []
    for name in PINNED_LAYOUT_MODULES:
        module = sys.modules.get(name)
        if module is not None:
            vars(module).clear()
            cleared.append(name)
    return cleared


def release_at_exit() -> None:
    """Registers `clear_pinned_layout_modules` to run at exit, once. Registered when jt-gluon is imported, before
    any Gluon kernel compiles, it runs after the exit handlers registered later (``atexit`` runs them last first),
    so that none of them finds the modules cleared."""
    global _registered
    with _lock:
        if not _registered:
            atexit.register(clear_pinned_layout_modules)
            _registered = True
