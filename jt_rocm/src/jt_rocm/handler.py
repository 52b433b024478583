"""jt-rocm's own XLA FFI handler: the HIP driver for jt's shared launch handler, built at first use.

The handler's source ships in ``jt_rocm/csrc``; it includes the launch logic jt_core shares between GPU runtimes
(``jt_launch_common.h``). :func:`library` builds it with the system C++ compiler against ``jax.ffi.include_dir()``
(cached per machine by :mod:`jt_core.native`) and loads it with ``ctypes``; :func:`register` registers the
custom-call targets :data:`TARGET_NAME` and :data:`PRELOADED_TARGET_NAME` for ROCm with XLA's command-buffer trait.
Neither ROCm nor its headers are needed to build it: the HIP runtime (``libamdhip64.so``) is opened with ``dlopen``
when a call first runs.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

from jt_core.native import LaunchHandlerLibrary

HANDLER = LaunchHandlerLibrary(
    prefix="jt_rocm_launch",
    source=Path(__file__).parent / "csrc" / "jt_rocm_launch.cc",
    platform="ROCM",
    preload_variable="JT_ROCM_PRELOAD",
)

#: The custom-call target of autotuned calls (instantiate, initialize and execute stages).
TARGET_NAME = HANDLER.target_name
#: The target of calls with a single config: modules are loaded when XLA instantiates the call, so it has no
#: initialize stage and XLA makes one handler call per launch instead of two.
PRELOADED_TARGET_NAME = HANDLER.preloaded_target_name
#: The FFI state type's registered name.
STATE_TYPE_NAME = HANDLER.state_type_name


def preload_enabled() -> bool:
    """Whether single-config calls use :data:`PRELOADED_TARGET_NAME` (``JT_ROCM_PRELOAD=0`` turns it off)."""
    return HANDLER.preload_enabled()


def source_path() -> Path:
    """The handler's C++ source file."""
    return HANDLER.source


def library() -> ctypes.CDLL:
    """Builds (or finds in the cache) and loads the handler library.

    Raises:
        jt_core.native.NativeBuildError: Without a C++ compiler, or when the build fails.
    """
    return HANDLER.library()


def capsule(pointer: int) -> Any:
    """A ``PyCapsule`` of a pointer the library returned (for ``jax.ffi.register_ffi_type``)."""
    return HANDLER.capsule(pointer)


def handler_capsules() -> dict[str, Any]:
    """The stage handlers of :data:`TARGET_NAME` as ``PyCapsule`` objects, keyed by stage name."""
    return HANDLER.handler_capsules()


def register() -> None:
    """Registers the handler with XLA (once per process; later calls return at once).

    Raises:
        jt_core.native.NativeBuildError: When the library cannot be built.
    """
    HANDLER.register()


def driver_error() -> str:
    """Why the library cannot use the GPU driver in this process (empty when it can)."""
    return HANDLER.driver_error()


def abi_layout() -> list[int]:
    """Sizes, offsets and constants of the driver declarations the library was built with (for tests)."""
    return HANDLER.abi_layout()
