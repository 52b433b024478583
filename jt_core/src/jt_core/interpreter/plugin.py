"""Builtin plugin ``cpu``: registers the interpreter backend and its launchers."""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.contracts import Backend, Launcher
from jt_core.hookspecs import PLUGIN_API_VERSION, hookimpl

JT_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def jt_register_backends(platform: str | None) -> Sequence[Backend]:
    """Registers the CPU backend (Triton's interpreter)."""
    if platform not in (None, "cpu"):
        return []  # another platform's call: nothing to import
    from jt_core.interpreter.backend import CpuBackend

    return [CpuBackend()]


@hookimpl
def jt_register_launchers(platform: str | None) -> Sequence[Launcher]:
    """Registers the CPU launchers: jt's FFI handler (preferred where it builds) and the host callback."""
    if platform not in (None, "cpu"):
        return []  # another platform's call: nothing to import
    from jt_core.interpreter.backend import CpuLauncher
    from jt_core.interpreter.ffi_launcher import CpuFfiLauncher

    return [CpuLauncher(), CpuFfiLauncher()]
