"""The jt plugin module of jt-tpu: only ``@hookimpl`` functions; heavy imports happen inside them."""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.plugin import Backend, Launcher, hookimpl

#: The plugin API version this plugin is written for (jt_core.plugin.API_VERSION).
JT_PLUGIN_API = 1


@hookimpl
def jt_register_backends(platform: str | None) -> Sequence[Backend]:
    """Registers the TPU backend."""
    if platform not in (None, "tpu"):
        return []  # another platform's call: nothing to import
    from jt_tpu.backend import TpuBackend

    return [TpuBackend()]


@hookimpl
def jt_register_launchers(platform: str | None) -> Sequence[Launcher]:
    """Registers the TPU launcher."""
    if platform not in (None, "tpu"):
        return []
    from jt_tpu.launcher import TpuLauncher

    return [TpuLauncher()]
