"""The GPU launch layer that GPU plugins share, and the surface they import it by (``from jt_core.gpu import ...``).

Inside, one module per part:

* `jt_core.gpu.handler` -- jt's C++ launch handler (shared headers, built per runtime, registered with XLA);
* `jt_core.gpu.attributes` -- the attributes a call to that handler carries;
* `jt_core.gpu.jaxlib_call` -- the kernel-call message jaxlib's Triton handler reads;
* `jt_core.gpu.launchers` -- `HandlerLauncher` and
  `JaxlibLauncher`, the bases of every GPU plugin's launchers;
* `jt_core.gpu.xla` -- `XlaTritonLauncher`, the base of launchers that hand the
  kernel's Triton IR to XLA's own Triton call.

A plugin imports the names below from ``jt_core.gpu`` itself; each loads its module on first use, so that
importing the package costs nothing until a GPU call needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jt_core._surface import lazy_surface

if TYPE_CHECKING:
    from jt_core.gpu import jaxlib_call
    from jt_core.gpu.attributes import ENTRY_WAIT, DescriptorParam, DescriptorParams, scalar_bytes
    from jt_core.gpu.handler import TARGET_PREFIX, LaunchHandlerLibrary
    from jt_core.gpu.launchers import BufferPlan, HandlerLauncher, JaxlibLauncher
    from jt_core.gpu.xla import XlaTritonLauncher

#: The names of the GPU plugin surface, and the module of each.
_SURFACE = {
    "ENTRY_WAIT": "attributes",
    "DescriptorParam": "attributes",
    "DescriptorParams": "attributes",
    "scalar_bytes": "attributes",
    "LaunchHandlerLibrary": "handler",
    "TARGET_PREFIX": "handler",
    "BufferPlan": "launchers",
    "HandlerLauncher": "launchers",
    "JaxlibLauncher": "launchers",
    "XlaTritonLauncher": "xla",
    "jaxlib_call": "",
}

__all__ = [
    "ENTRY_WAIT",
    "BufferPlan",
    "DescriptorParam",
    "DescriptorParams",
    "HandlerLauncher",
    "JaxlibLauncher",
    "LaunchHandlerLibrary",
    "TARGET_PREFIX",
    "XlaTritonLauncher",
    "jaxlib_call",
    "scalar_bytes",
]


__getattr__, __dir__ = lazy_surface(__name__, _SURFACE, __all__)
