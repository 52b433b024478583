"""The jt plugin module of jt-rocm: only ``@hookimpl`` functions; heavy imports happen inside them."""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.plugin import Backend, Launcher, hookimpl

#: The plugin API version this plugin is written for (jt_core.plugin.API_VERSION).
JT_PLUGIN_API = 1


@hookimpl
def jt_register_backends(platform: str | None) -> Sequence[Backend]:
    """Registers the ROCm backend (Triton's AMD compiler, HSACO)."""
    if platform not in (None, "rocm"):
        return []  # another platform's call: nothing to import
    from jt_rocm.backend import RocmBackend

    return [RocmBackend()]


@hookimpl
def jt_register_launchers(platform: str | None) -> Sequence[Launcher]:
    """Registers jt's own launch handler (``"jt"``, preferred), jaxlib's ROCm Triton handler (``"jaxlib"``) and XLA's
    own Triton call (``"xla"``)."""
    if platform not in (None, "rocm"):
        return []  # another platform's call: nothing to import
    from jt_rocm.launchers import RocmJaxlibLauncher, RocmJtLauncher, RocmXlaLauncher

    return [RocmJtLauncher(), RocmJaxlibLauncher(), RocmXlaLauncher()]
