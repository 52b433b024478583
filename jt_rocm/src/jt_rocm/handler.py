"""jt-rocm's own XLA FFI handler: building the C++ library at first use and registering it with XLA.

The handler's source ships in ``jt_rocm/csrc``; it is the HIP driver for the launch handler jt_core shares between
GPU runtimes (``jt_launch_common.h``, see :func:`jt_core.native.common_include_dir`). :func:`library` builds it with
the system C++ compiler against ``jax.ffi.include_dir()`` (cached per machine by :mod:`jt_core.native`) and loads it
with ``ctypes``; :func:`register` registers the custom-call targets :data:`TARGET_NAME` and
:data:`PRELOADED_TARGET_NAME` for ROCm with XLA's command-buffer trait. Neither ROCm nor its headers are needed to
build it: the HIP runtime (``libamdhip64.so``) is opened with ``dlopen`` when a call first runs.

A process that runs a serialized module (``jax.export``) containing jt calls without calling ``triton_call`` itself
must call :func:`register` first.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from pathlib import Path
from typing import Any

from jt_rocm import _compat

#: The custom-call target name the launcher emits.
TARGET_NAME = "jt_rocm_launch"
#: The target of calls with a single config: modules are loaded when XLA instantiates the call (into every
#: device), so it has no initialize stage and XLA makes one handler call per launch instead of two.
PRELOADED_TARGET_NAME = "jt_rocm_launch_preloaded"
#: The FFI state type's registered name.
STATE_TYPE_NAME = "jt_rocm.KernelState"

_SOURCE = Path(__file__).parent / "csrc" / "jt_rocm_launch.cc"
_lock = threading.Lock()
_registered = False


def preload_enabled() -> bool:
    """Whether single-config calls use :data:`PRELOADED_TARGET_NAME` (``JT_ROCM_PRELOAD=0`` turns it off)."""
    return os.environ.get("JT_ROCM_PRELOAD", "1").strip().lower() not in ("0", "false", "no", "off")


def source_path() -> Path:
    """The handler's C++ source file."""
    return _SOURCE


@functools.cache
def library() -> ctypes.CDLL:
    """Builds (or finds in the cache) and loads the handler library.

    Raises:
        jt_core.native.NativeBuildError: Without a C++ compiler, or when the build fails.
    """
    import jax

    from jt_core.native import build_shared_library, common_include_dir

    built = build_shared_library(
        TARGET_NAME,
        [_SOURCE],
        include_dirs=[jax.ffi.include_dir(), str(common_include_dir())],
        flags=("-O2", "-std=c++17"),
        libraries=("dl",),
    )
    lib = ctypes.CDLL(str(built.path))
    for name in ("jt_rocm_launch_state_type_id", "jt_rocm_launch_state_type_info"):
        getattr(lib, name).restype = ctypes.c_void_p
    lib.jt_rocm_launch_driver_error.restype = ctypes.c_char_p
    lib.jt_rocm_launch_abi.restype = ctypes.c_int
    lib.jt_rocm_launch_abi.argtypes = (ctypes.POINTER(ctypes.c_int64), ctypes.c_int)
    return lib


def capsule(pointer: int) -> Any:
    """A ``PyCapsule`` of a pointer the library returned (for ``jax.ffi.register_ffi_type``)."""
    import jax

    return jax.ffi.pycapsule(ctypes.c_void_p(pointer))


def handler_capsules() -> dict[str, Any]:
    """The stage handlers of :data:`TARGET_NAME` as ``PyCapsule`` objects, keyed by stage name."""
    import jax

    lib = library()
    return {
        "instantiate": jax.ffi.pycapsule(lib.jt_rocm_launch_instantiate),
        "initialize": jax.ffi.pycapsule(lib.jt_rocm_launch_initialize),
        "execute": jax.ffi.pycapsule(lib.jt_rocm_launch_execute),
    }


def register() -> None:
    """Registers the handler with XLA for ROCm (once per process; later calls return at once).

    Raises:
        jt_core.native.NativeBuildError: When the library cannot be built.
    """
    import jax

    global _registered
    if _registered:
        return
    with _lock:
        if _registered:
            return
        lib = library()
        _compat.register_ffi_type(
            STATE_TYPE_NAME,
            capsule(lib.jt_rocm_launch_state_type_id()),
            capsule(lib.jt_rocm_launch_state_type_info()),
        )
        _compat.register_ffi_target(TARGET_NAME, handler_capsules(), command_buffer_compatible=True)
        _compat.register_ffi_target(
            PRELOADED_TARGET_NAME,
            {
                "instantiate": jax.ffi.pycapsule(lib.jt_rocm_launch_instantiate_preloaded),
                "execute": jax.ffi.pycapsule(lib.jt_rocm_launch_execute),
            },
            command_buffer_compatible=True,
        )
        _registered = True


def driver_error() -> str:
    """Why the library cannot use the HIP runtime in this process (empty when it can)."""
    return (library().jt_rocm_launch_driver_error() or b"").decode()


def abi_layout() -> list[int]:
    """The HIP constants the library was built with (for tests against ``hip_runtime_api.h``)."""
    lib = library()
    buffer = (ctypes.c_int64 * 16)()
    count = lib.jt_rocm_launch_abi(buffer, 16)
    return list(buffer[:count])
