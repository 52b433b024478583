"""Builtin plugin ``cpu``: registers the CPU backend and its launchers."""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.plugin.roles import Backend, Launcher
from jt_core.plugin.specs import PLUGIN_API_VERSION, hookimpl

JT_PLUGIN_API = PLUGIN_API_VERSION


@hookimpl
def jt_register_backends(platform: str | None) -> Sequence[Backend]:
    """Registers the CPU backend."""
    if platform not in (None, "cpu"):
        return []  # another platform's call: nothing to import
    from jt_core.cpu.backend import CpuBackend

    return [CpuBackend()]


@hookimpl
def jt_register_launchers(platform: str | None) -> Sequence[Launcher]:
    """Registers the CPU launchers: the compiled path (preferred where it takes the kernel), then Triton's
    interpreter through jt's FFI handler (where it builds) or through a host callback."""
    if platform not in (None, "cpu"):
        return []  # another platform's call: nothing to import
    from jt_core.cpu.compiled.launcher import CpuCompiledLauncher
    from jt_core.cpu.ffi_launcher import CpuFfiLauncher
    from jt_core.cpu.interpreter_launcher import CpuLauncher

    return [CpuCompiledLauncher(), CpuLauncher(), CpuFfiLauncher()]
