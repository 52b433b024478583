"""jt's GPU launch handler: the shared C++ handler, built per runtime, and its registration with XLA.

jt_core ships the runtime-neutral handler as two headers (``csrc/jt_launch_state.h``: the call's state, the
attribute schema, remembered tuning winners; ``csrc/jt_launch_common.h``: module loading, launching, autotuning
and the XLA FFI stages). A GPU plugin ships one C++ file that supplies its runtime's driver (entry points loaded
with ``dlopen``, so no toolkit is needed to build it) and includes them; :class:`LaunchHandlerLibrary` builds that
file with :func:`jt_core.native.build_shared_library` against ``jax.ffi.include_dir()`` and registers the handler
with XLA, with the command-buffer trait so that chains of launches are captured into CUDA graphs.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

from jt_core import settings
from jt_core.native import LibrarySpec

__all__ = ["WITHOUT_HANDLER", "LaunchHandlerLibrary", "headers", "include_dir"]

_INCLUDE_DIR = Path(__file__).parent / "csrc"

#: What jt does where the handler library cannot be built.
WITHOUT_HANDLER = (
    "launcher 'jt' is unavailable where the device is, so calls go to 'jaxlib' (which cannot pass host-side "
    "tensor descriptors) unless another launcher is named"
)


def include_dir() -> Path:
    """The folder of the shared handler headers (``jt_launch_common.h``, ``jt_launch_state.h``)."""
    return _INCLUDE_DIR


def headers() -> list[Path]:
    """The shared handler headers (their contents are part of every handler library's cache key)."""
    return sorted(_INCLUDE_DIR.glob("*.h"))


class LaunchHandlerLibrary:
    """jt's GPU launch handler for one runtime: its library, its XLA targets and their registration.

    Each GPU plugin ships a driver file (``csrc/<prefix>.cc``) that includes the shared header and exports the
    symbols ``<prefix>_instantiate``, ``_instantiate_preloaded``, ``_initialize``, ``_execute``, ``_state_type_id``,
    ``_state_type_info``, ``_driver_error`` and ``_abi``. This class builds it, and registers two targets with XLA:
    ``<prefix>`` (all three stages, for autotuned calls) and ``<prefix>_preloaded`` (no initialize stage: the
    module is loaded when XLA instantiates the call, so a single-config call costs one handler call per launch).

    Args:
        prefix: The library's symbol prefix and target name (``"jt_cuda_launch"``).
        source: The driver's C++ file.
        platform: XLA's platform name (``"CUDA"``, ``"ROCM"``).
        preload_variable: The environment variable that turns the preloaded target off when set to ``0``.
    """

    def __init__(self, prefix: str, source: Path, platform: str, preload_variable: str) -> None:
        self.prefix = prefix
        self.source = source
        self.platform = platform
        self.preload_variable = preload_variable
        self.target_name = prefix
        self.preloaded_target_name = f"{prefix}_preloaded"
        self.state_type_name = f"{prefix.split('_launch')[0]}.KernelState"
        # Re-entrant: register() holds it while building the capsules, which load the library.
        self._lock = threading.RLock()
        self._library: ctypes.CDLL | None = None
        self._registered = False

    def preload_enabled(self) -> bool:
        """Whether single-config calls use the preloaded target (``<preload_variable>=0`` turns it off)."""
        return settings.flag(self.preload_variable, default=True)

    def spec(self) -> LibrarySpec:
        """How the library is built: the driver file over the shared headers, against the installed jaxlib's XLA
        FFI headers."""
        import jax

        return LibrarySpec(
            self.prefix,
            (self.source,),
            include_dirs=(str(jax.ffi.include_dir()), str(include_dir())),
            headers=tuple(headers()),
            libraries=("dl",),
            without_it=WITHOUT_HANDLER,
        )

    def library(self) -> ctypes.CDLL:
        """Builds (or finds in the cache, checked against its integrity record) and loads the library.

        Raises:
            NativeBuildError: Without a C++ compiler, or when the build fails.
        """
        with self._lock:
            if self._library is None:
                lib = self.spec().load()
                for suffix in ("state_type_id", "state_type_info"):
                    getattr(lib, f"{self.prefix}_{suffix}").restype = ctypes.c_void_p
                getattr(lib, f"{self.prefix}_driver_error").restype = ctypes.c_char_p
                abi = getattr(lib, f"{self.prefix}_abi")
                abi.restype = ctypes.c_int
                abi.argtypes = (ctypes.POINTER(ctypes.c_int64), ctypes.c_int)
                self._library = lib
            return self._library

    @staticmethod
    def capsule(pointer: int) -> Any:
        """A ``PyCapsule`` of a pointer the library returned (for ``jax.ffi.register_ffi_type``)."""
        import jax

        return jax.ffi.pycapsule(ctypes.c_void_p(pointer))

    def handler_capsules(self, preloaded: bool = False) -> dict[str, Any]:
        """The stage handlers of one target as ``PyCapsule`` objects, keyed by stage name."""
        import jax

        lib = self.library()
        if preloaded:
            return {
                "instantiate": jax.ffi.pycapsule(getattr(lib, f"{self.prefix}_instantiate_preloaded")),
                "execute": jax.ffi.pycapsule(getattr(lib, f"{self.prefix}_execute")),
            }
        return {
            stage: jax.ffi.pycapsule(getattr(lib, f"{self.prefix}_{stage}"))
            for stage in ("instantiate", "initialize", "execute")
        }

    def register(self) -> None:
        """Registers the state type and both targets with XLA, with the command-buffer trait (once per process).

        Raises:
            NativeBuildError: When the library cannot be built.
        """
        if self._registered:
            return
        import jax
        from jaxlib import xla_client

        lib = self.library()
        with self._lock:
            if self._registered:
                return
            jax.ffi.register_ffi_type(
                self.state_type_name,
                {
                    "type_id": self.capsule(getattr(lib, f"{self.prefix}_state_type_id")()),
                    "type_info": self.capsule(getattr(lib, f"{self.prefix}_state_type_info")()),
                },
                platform=self.platform,
            )
            traits = getattr(xla_client, "CustomCallTargetTraits", None)
            extra = {"traits": traits.COMMAND_BUFFER_COMPATIBLE} if traits is not None else {}
            for name, preloaded in ((self.target_name, False), (self.preloaded_target_name, True)):
                jax.ffi.register_ffi_target(
                    name, self.handler_capsules(preloaded), platform=self.platform, api_version=1, **extra
                )
            self._registered = True

    def driver_error(self) -> str:
        """Why the library cannot use the GPU driver in this process (empty when it can)."""
        return (getattr(self.library(), f"{self.prefix}_driver_error")() or b"").decode()

    def abi_layout(self, count: int = 64) -> list[int]:
        """The driver constants and struct layouts the library was built with (for tests against the headers)."""
        buffer = (ctypes.c_int64 * count)()
        written = getattr(self.library(), f"{self.prefix}_abi")(buffer, count)
        return list(buffer[:written])
