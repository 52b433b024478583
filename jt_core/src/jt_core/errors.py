"""Exception types raised by jt.

User mistakes in a ``triton_call`` raise the built-in ``TypeError`` / ``ValueError`` families (subclassed here so
that callers can catch jt's own), with messages naming the argument, what was expected and what was given. Plugin
problems raise :class:`PluginError` subclasses naming the plugin, its distribution and the fix.
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = [
    "DuplicateBackendError",
    "JtError",
    "KernelCallTypeError",
    "KernelCallValueError",
    "KernelCompileError",
    "KernelRuntimeError",
    "NoBackendError",
    "NoDeviceError",
    "OutOfBoundsAccessError",
    "PluginError",
    "PluginLoadError",
    "UnsupportedKernelError",
    "short_repr",
]


class JtError(Exception):
    """Base class of every exception jt raises on purpose."""


class KernelCallTypeError(JtError, TypeError):
    """A ``triton_call`` argument has the wrong type or does not fit the kernel's signature."""


class KernelCallValueError(JtError, ValueError):
    """A ``triton_call`` argument has the right type but an unusable value."""


class KernelCompileError(JtError, RuntimeError):
    """Triton failed to compile a kernel; the message keeps Triton's own and names the call and config."""


class KernelRuntimeError(JtError, RuntimeError):
    """A kernel failed while running (CPU interpreter errors, out-of-bounds accesses)."""


class OutOfBoundsAccessError(KernelRuntimeError):
    """A kernel loaded or stored outside every buffer passed to it (detected by the CPU backend)."""


class NoDeviceError(JtError, RuntimeError):
    """A question about a device (``get_compute_capability``) on a machine where JAX sees none of that kind."""


class UnsupportedKernelError(JtError, NotImplementedError):
    """The selected platform cannot run this kind of kernel (e.g. Gluon or inline asm on the CPU)."""


class PluginError(JtError):
    """Base class of plugin problems."""


class PluginLoadError(PluginError):
    """A plugin failed to import, raised inside a hook, or implements a hook that has no spec."""


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
