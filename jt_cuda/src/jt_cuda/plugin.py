"""The jt plugin module of jt-cuda: only ``@hookimpl`` functions; heavy imports happen inside them."""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.plugin import Backend, Launcher, hookimpl

#: The plugin API version this plugin is written for (jt_core.plugin.API_VERSION).
JT_PLUGIN_API = 1


@hookimpl
def jt_register_backends(platform: str | None) -> Sequence[Backend]:
    """Registers the CUDA backend (Triton to cubin, target per device)."""
    if platform not in (None, "cuda"):
        return []  # another platform's call: nothing to import
    from jt_cuda.backend import CudaBackend

    return [CudaBackend()]


@hookimpl
def jt_register_launchers(platform: str | None) -> Sequence[Launcher]:
    """Registers jt's own launch handler (``"jt"``, preferred), jaxlib's Triton handler (``"jaxlib"``) and XLA's own
    Triton call (``"xla"``)."""
    if platform not in (None, "cuda"):
        return []  # another platform's call: nothing to import
    from jt_cuda.launchers import CudaJaxlibLauncher, CudaJtLauncher, CudaXlaLauncher

    return [CudaJtLauncher(), CudaJaxlibLauncher(), CudaXlaLauncher()]
