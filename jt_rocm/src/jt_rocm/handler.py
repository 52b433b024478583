"""jt-rocm's own XLA FFI handler: the HIP driver for jt's shared launch handler, built at first use.

The handler's source ships in ``jt_rocm/csrc``; it includes the launch logic jt_core shares between GPU runtimes
(``jt_launch_common.h``). :data:`HANDLER` builds it with the system C++ compiler against ``jax.ffi.include_dir()``
(cached per machine by :mod:`jt_core.native`), loads it with ``ctypes`` and registers the custom-call targets
:data:`TARGET_NAME` and :data:`PRELOADED_TARGET_NAME` for ROCm with XLA's command-buffer trait. Neither ROCm nor its
headers are needed to build it: the HIP runtime (``libamdhip64.so``) is opened with ``dlopen`` when a call first
runs. The module-level functions are :data:`HANDLER`'s methods.
"""

from __future__ import annotations

from pathlib import Path

from jt_core.native import LaunchHandlerLibrary

#: The handler library and its XLA targets.
HANDLER = LaunchHandlerLibrary(
    prefix="jt_rocm_launch",
    source=Path(__file__).parent / "csrc" / "jt_rocm_launch.cc",
    platform="ROCM",
    preload_variable="JT_ROCM_PRELOAD",
)

#: The custom-call target of autotuned calls (instantiate, initialize and execute stages).
TARGET_NAME = HANDLER.target_name
#: The target of single-config calls (no initialize stage; modules loaded when XLA instantiates the call).
PRELOADED_TARGET_NAME = HANDLER.preloaded_target_name
#: The FFI state type's registered name.
STATE_TYPE_NAME = HANDLER.state_type_name

preload_enabled = HANDLER.preload_enabled
library = HANDLER.library
capsule = HANDLER.capsule
handler_capsules = HANDLER.handler_capsules
register = HANDLER.register
driver_error = HANDLER.driver_error
abi_layout = HANDLER.abi_layout


def source_path() -> Path:
    """The handler's C++ source file."""
    return HANDLER.source
