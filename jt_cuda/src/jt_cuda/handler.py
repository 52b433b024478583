"""jt-cuda's own XLA FFI handler: building the C++ library at first use and registering it with XLA.

The handler's source ships in ``jt_cuda/csrc``. :func:`library` builds it with the system C++ compiler against
``jax.ffi.include_dir()`` (cached per machine by :mod:`jt_core.native`) and loads it with ``ctypes``;
:func:`register` registers the custom-call target :data:`TARGET_NAME` for CUDA with XLA's command-buffer trait, so
that chains of launches are captured into CUDA graphs.

A process that runs a serialized module (``jax.export``) containing jt calls without calling ``triton_call`` itself
must call :func:`jt_cuda.register_handlers` first.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from pathlib import Path
from typing import Any

from jt_cuda import _compat

#: The custom-call target name the launcher emits.
TARGET_NAME = "jt_cuda_launch"
#: The target of calls with a single config: modules are loaded when XLA instantiates the call (into every device's
#: primary context), so it has no initialize stage and XLA makes one handler call per launch instead of two.
PRELOADED_TARGET_NAME = "jt_cuda_launch_preloaded"


def preload_enabled() -> bool:
    """Whether single-config calls use :data:`PRELOADED_TARGET_NAME` (``JT_CUDA_PRELOAD=0`` turns it off)."""
    return os.environ.get("JT_CUDA_PRELOAD", "1").strip().lower() not in ("0", "false", "no", "off")


#: The FFI state type's registered name.
STATE_TYPE_NAME = "jt_cuda.KernelState"

_SOURCE = Path(__file__).parent / "csrc" / "jt_cuda_launch.cc"
_lock = threading.Lock()
_registered = False


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

    from jt_core.native import build_shared_library

    built = build_shared_library(
        TARGET_NAME,
        [_SOURCE],
        include_dirs=[jax.ffi.include_dir()],
        flags=("-O2", "-std=c++17"),
        libraries=("dl",),
    )
    lib = ctypes.CDLL(str(built.path))
    for name in ("jt_cuda_launch_state_type_id", "jt_cuda_launch_state_type_info"):
        getattr(lib, name).restype = ctypes.c_void_p
    lib.jt_cuda_launch_driver_error.restype = ctypes.c_char_p
    lib.jt_cuda_launch_abi.restype = ctypes.c_int
    lib.jt_cuda_launch_abi.argtypes = (ctypes.POINTER(ctypes.c_int64), ctypes.c_int)
    return lib


def _capsule(pointer: int) -> Any:
    import jax

    return jax.ffi.pycapsule(ctypes.c_void_p(pointer))


def handler_capsules() -> dict[str, Any]:
    """The stage handlers as ``PyCapsule`` objects, keyed by stage name."""
    import jax

    lib = library()
    return {
        "instantiate": jax.ffi.pycapsule(lib.jt_cuda_launch_instantiate),
        "initialize": jax.ffi.pycapsule(lib.jt_cuda_launch_initialize),
        "execute": jax.ffi.pycapsule(lib.jt_cuda_launch_execute),
    }


def register() -> None:
    """Registers the handler with XLA for CUDA (once per process; later calls return at once).

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
            _capsule(lib.jt_cuda_launch_state_type_id()),
            _capsule(lib.jt_cuda_launch_state_type_info()),
        )
        _compat.register_ffi_target(TARGET_NAME, handler_capsules(), command_buffer_compatible=True)
        _compat.register_ffi_target(
            PRELOADED_TARGET_NAME,
            {
                "instantiate": jax.ffi.pycapsule(lib.jt_cuda_launch_instantiate_preloaded),
                "execute": jax.ffi.pycapsule(lib.jt_cuda_launch_execute),
            },
            command_buffer_compatible=True,
        )
        _registered = True


def driver_error() -> str:
    """Why the library cannot use the CUDA driver in this process (empty when it can)."""
    return (library().jt_cuda_launch_driver_error() or b"").decode()


def abi_layout() -> list[int]:
    """Sizes, offsets and constants of the driver declarations the library was built with (for tests)."""
    lib = library()
    buffer = (ctypes.c_int64 * 64)()
    count = lib.jt_cuda_launch_abi(buffer, 64)
    return list(buffer[:count])
