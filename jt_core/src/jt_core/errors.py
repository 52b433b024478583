"""Exception types raised by jt.

User mistakes in a ``triton_call`` raise the built-in ``TypeError`` / ``ValueError`` families (subclassed here so
that callers can catch jt's own), with messages naming the argument, what was expected and what was given. Plugin
problems raise `PluginError` subclasses naming the plugin, its distribution and the fix.

Errors raised while a kernel runs (`KernelRuntimeError`, `OutOfBoundsAccessError`,
`DataRaceError`, `UnwrittenOutputError`, `DifferentialMismatchError`, and
`UnsupportedKernelError` from the CPU interpreter) cross XLA's host callback and reach the caller as
``jax.errors.JaxRuntimeError``, whose message carries the jt error's type and text; `from_runtime_error`
rebuilds the jt error from it.
"""

from __future__ import annotations

import os
import re
import reprlib
import sys
import warnings
from typing import Any

__all__ = [
    "ConfigSkippedWarning",
    "DataRaceError",
    "DifferentialMismatchError",
    "DuplicateBackendError",
    "JtError",
    "KernelCallTypeError",
    "KernelCallValueError",
    "KernelCompileError",
    "KernelRuntimeError",
    "NoBackendError",
    "NoUsableConfigError",
    "NoDeviceError",
    "OutOfBoundsAccessError",
    "OutOfResourcesError",
    "PluginError",
    "PluginFaultError",
    "PluginLoadError",
    "ProcessAgreementError",
    "CpuFallbackWarning",
    "UnsupportedKernelError",
    "UnwrittenOutputError",
    "UnwrittenOutputWarning",
    "from_runtime_error",
    "short_repr",
    "warn_in_user_code",
]


class JtError(Exception):
    """Base class of every exception jt raises on purpose."""


class KernelCallTypeError(JtError, TypeError):
    """A ``triton_call`` argument has the wrong type or does not fit the kernel's signature."""


class KernelCallValueError(JtError, ValueError):
    """A ``triton_call`` argument has the right type but an unusable value."""


class KernelCompileError(JtError, RuntimeError):
    """Triton failed to compile a kernel; the message keeps Triton's own and names the call and config."""


class OutOfResourcesError(KernelCallValueError):
    """A configuration needs more of a resource than the target has (shared memory per block, tensor memory,
    threads per block), as Triton's ``OutOfResources`` says at launch. A backend raises it from ``compile`` (or
    ``restore``); an autotuned call then runs without that configuration (`ConfigSkippedWarning`), as Triton's
    autotuner skips it."""


class NoUsableConfigError(KernelCallValueError):
    """Every configuration of an autotuned call was set aside: it cannot compile or launch on the target, or it
    leaves part of an output unwritten. The message lists each configuration and why."""


class ConfigSkippedWarning(JtError, UserWarning):
    """A configuration of an autotuned call was set aside, and the call runs one of the others: it cannot compile or
    launch on the target, or it left part of an output unwritten when it ran into an output filled with sentinels."""


class KernelRuntimeError(JtError, RuntimeError):
    """A kernel failed while running (CPU interpreter errors, out-of-bounds accesses)."""


class OutOfBoundsAccessError(KernelRuntimeError):
    """A kernel loaded or stored outside every buffer passed to it (detected by the CPU backend)."""


class DifferentialMismatchError(KernelRuntimeError):
    """The compiled CPU path and Triton's interpreter computed different results for one call
    (``JT_CPU_DIFFERENTIAL=1``)."""


class DataRaceError(KernelRuntimeError):
    """Two program instances of one launch touched the same element, at least one writing, not both atomically
    (detected by the CPU backend's race check)."""


class UnwrittenOutputError(KernelRuntimeError):
    """An output that is neither aliased nor zeroed has elements no program wrote (CPU race check, asked to
    raise)."""


class UnwrittenOutputWarning(JtError, RuntimeWarning):
    """An output that is neither aliased nor zeroed has elements no program wrote (CPU race check)."""


class NoDeviceError(JtError, RuntimeError):
    """A question about a device (``get_compute_capability``) on a machine where JAX sees none of that kind."""


class UnsupportedKernelError(JtError, NotImplementedError):
    """The selected platform cannot run this kind of kernel (e.g. Gluon or inline asm on the CPU)."""


class CpuFallbackWarning(JtError, RuntimeWarning):
    """A kernel the compiled CPU path cannot express runs in Triton's interpreter (``JT_CPU_FALLBACK=warn``)."""


class ProcessAgreementError(JtError, RuntimeError):
    """The processes of a ``jax.distributed`` job would compile a call differently (launcher, configuration), or one
    of them failed to lower it or did not answer in time; the message names the processes and their hosts."""


class PluginError(JtError):
    """Base class of plugin problems."""


class PluginLoadError(PluginError):
    """A plugin failed to import, raised inside a hook, or implements a hook that has no spec."""


class PluginFaultError(PluginError):
    """A plugin's backend, launcher, dialect or hook raised while serving a call that needs it (the message names
    the plugin, what raised, and the fix); or, under ``JT_STRICT_PLUGINS``, any call."""


class DuplicateBackendError(PluginError):
    """Two plugins registered a backend for the same platform."""


class NoBackendError(PluginError):
    """No installed plugin provides a backend (or launcher) for the platform being lowered for."""


_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = _SHORT.maxfrozenset = _SHORT.maxdeque = _SHORT.maxarray = 4
_SHORT.maxdict = 4
_SHORT.maxstring = 60
_SHORT.maxother = 80
_SHORT.maxlevel = 3


def short_repr(value: Any) -> str:
    """``repr(value)`` cut for an error message: at most four items of a container (``[0, 1, 2, 3, ...]``, with the
    length when it is long), strings and other values to a line."""
    text = _SHORT.repr(value)
    if isinstance(value, (list, tuple, set, frozenset, dict)) and len(value) > 4:
        text += f" ({len(value)} items)"
    return text


def from_runtime_error(error: BaseException) -> JtError | None:
    """The jt error that a ``jax.errors.JaxRuntimeError`` carries, rebuilt; ``None`` when it carries none.

    XLA passes an error raised inside a kernel's run back as a ``JaxRuntimeError`` whose message holds the jt
    error's type name and text. The rebuilt error has that type and text, so it can be tested with
    ``isinstance`` or raised again (``raise jt.errors.from_runtime_error(err) from err``).
    """
    message = str(error)
    carried: tuple[type[JtError], ...] = (
        KernelRuntimeError,
        OutOfBoundsAccessError,
        DataRaceError,
        UnwrittenOutputError,
        DifferentialMismatchError,
        UnsupportedKernelError,
        KernelCompileError,
        ProcessAgreementError,
    )
    first: tuple[int, type[JtError], int] | None = None
    for kind in carried:
        match = re.search(rf"\b{kind.__name__}: ", message)
        if match is not None and (first is None or match.start() < first[0]):
            first = (match.start(), kind, match.end())
    if first is None:
        return None
    _, found, end = first
    return found(message[end:].strip())


#: The packages between a user's code and the line of jt that warns: jt's own distributions, JAX, pluggy.
MACHINERY = ("jt_core", "jt_cuda", "jt_rocm", "jt_gluon", "jt_tpu", "jax", "jaxlib", "pluggy")


def _machinery_folders() -> tuple[str, ...]:
    files = [getattr(sys.modules.get(name), "__file__", None) for name in MACHINERY]
    return tuple(os.path.dirname(file) + os.sep for file in files if file)


def warn_in_user_code(message: str, category: type[Warning]) -> None:
    """Warns with the warning attributed to the user's code: the innermost frame outside jt, JAX and pluggy (the
    line that called the jitted function, or ``triton_call`` outside ``jax.jit``), not jt's line that warns.

    ``warnings`` filters (``module=``, ``lineno``), ``-W`` options, IDEs and the "shown once per location" rule all
    read that attribution. Python 3.12's ``skip_file_prefixes`` does the same; this walks the stack itself so that
    Python 3.11 works too. Where no frame is the user's (a thread of XLA's), the caller's frame is named.
    """
    caller = sys._getframe(1)
    folders = _machinery_folders()
    frame: Any = caller
    while frame is not None and (
        frame.f_code.co_filename.startswith(folders) or frame.f_code.co_filename.startswith("<frozen ")
    ):
        frame = frame.f_back
    if frame is None:
        frame = caller
    module_globals = frame.f_globals
    warnings.warn_explicit(
        message,
        category,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=module_globals.get("__name__", "<string>"),
        registry=module_globals.setdefault("__warningregistry__", {}),
    )
