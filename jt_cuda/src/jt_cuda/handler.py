"""jt-cuda's own XLA FFI handler: the CUDA driver for jt's shared launch handler, built at first use.

The handler's source ships in ``jt_cuda/csrc``; it includes the launch logic jt_core shares between GPU runtimes
(``jt_launch_common.h``). :data:`HANDLER` builds it with the system C++ compiler against ``jax.ffi.include_dir()``
(cached per machine by :mod:`jt_core.native`), loads it with ``ctypes`` and registers the custom-call targets
:data:`TARGET_NAME` and :data:`PRELOADED_TARGET_NAME` for CUDA with XLA's command-buffer trait, so that chains of
launches are captured into CUDA graphs. The module-level functions are :data:`HANDLER`'s methods.

A process that runs a serialized module (``jax.export``) containing jt calls without calling ``triton_call`` itself
must call :func:`jt_cuda.register_handlers` first.
"""

from __future__ import annotations

from pathlib import Path

from jt_core.native import LaunchHandlerLibrary

#: The handler library and its XLA targets.
HANDLER = LaunchHandlerLibrary(
    prefix="jt_cuda_launch",
    source=Path(__file__).parent / "csrc" / "jt_cuda_launch.cc",
    platform="CUDA",
    preload_variable="JT_CUDA_PRELOAD",
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
