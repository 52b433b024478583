"""jt's GPU launch handler: the shared C++ handler, built per runtime, and its registration with XLA.

jt_core ships the runtime-neutral handler as headers (``csrc/jt_launch_state.h``: the call's state, the
attribute schema, remembered tuning winners; ``csrc/jt_launch_tune.h``: choosing among the configurations, with
the coverage check and the configurations the driver will not launch set aside; ``csrc/jt_launch_common.h``: module
loading, launching, tuning on XLA's buffers and the XLA FFI stages; ``csrc/jt_launch_record.h``: the record stage,
which makes each call one kernel node of XLA's command buffers). A GPU plugin ships one C++ file that supplies its
runtime's driver (entry points loaded with ``dlopen``, so no toolkit is needed to build it) and includes them;
`LaunchHandlerLibrary` builds that file with `jt_core.native.build_shared_library` against
``jax.ffi.include_dir()`` and registers the handler with XLA, with the command-buffer trait so that chains of
launches are captured into CUDA graphs.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from pathlib import Path
from typing import Any

from jt_core import settings
from jt_core.errors import PluginError
from jt_core.native import LibrarySpec

__all__ = ["TARGET_PREFIX", "WITHOUT_HANDLER", "LaunchHandlerLibrary", "headers", "include_dir"]

_log = logging.getLogger(__name__)

_INCLUDE_DIR = Path(__file__).parent / "csrc"

#: How the names of jt's custom-call targets start: as jax-triton's and jaxlib's (``triton_kernel_call``,
#: ``triton_kernel_call_ffi``), so that a search of a lowered module for Triton kernel calls finds them.
TARGET_PREFIX = "triton_kernel_call"

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
    ``_state_type_info``, ``_driver_error``, ``_modules_loaded`` and ``_abi``. This class builds it, and registers
    two targets with XLA: ``<target>`` (all three stages, for autotuned calls) and ``<target>_preloaded`` (no
    initialize stage: the module is loaded when XLA instantiates the call, so a single-config call costs one
    handler call per launch).

    A driver file that also exports ``<prefix>_record``, ``_register_record`` and ``_record_counts``
    (``jt_launch_record.h``) gets two more targets, ``<target>_record`` and ``<target>_record_preloaded``: the same
    stages plus a record stage, with which XLA adds each call to its command buffers as one kernel node (and updates
    it when buffers move) instead of capturing the execute stage into a child graph. XLA's plugin interface
    registers four stages only, so these two are registered through the XLA FFI API that XLA passed to the library
    while registering the first two. Lowering uses them whenever they are registered (`custom_call_target`).

    The targets' names start with ``triton_kernel_call``, the target of jax-triton's and jaxlib's Triton calls, so
    that code looking for Triton kernel calls in a lowered module (``text.count("triton_kernel_call")``) finds them.

    Args:
        prefix: The library's symbol prefix (``"jt_cuda_launch"``).
        source: The driver's C++ file.
        platform: XLA's platform name (``"CUDA"``, ``"ROCM"``).
        preload_variable: The environment variable that turns the preloaded target off when set to ``0``.
        record_variable: The environment variable that turns the record-stage targets off when set to ``0``;
            ``None`` for a driver without a record stage.
        target_name: The name of the first target, the others' names start with (default
            ``triton_kernel_call_<prefix>``).

    Raises:
        PluginError: For a ``target_name`` that does not start with ``triton_kernel_call``.
    """

    def __init__(
        self,
        prefix: str,
        source: Path,
        platform: str,
        preload_variable: str,
        record_variable: str | None = None,
        target_name: str | None = None,
    ) -> None:
        target = f"{TARGET_PREFIX}_{prefix}" if target_name is None else target_name
        if not target.startswith(TARGET_PREFIX):
            raise PluginError(
                f"target_name={target_name!r}: jt's custom-call targets start with {TARGET_PREFIX!r} (e.g. "
                f"{TARGET_PREFIX + '_' + prefix!r}), so that code looking for Triton kernel calls finds them"
            )
        self.prefix = prefix
        self.source = source
        self.platform = platform
        self.preload_variable = preload_variable
        self.record_variable = record_variable
        self.target_name = target
        self.preloaded_target_name = f"{target}_preloaded"
        self.record_target_name = f"{target}_record"
        self.record_preloaded_target_name = f"{target}_record_preloaded"
        self.state_type_name = f"{prefix.split('_launch')[0]}.KernelState"
        # Re-entrant: register() holds it while building the capsules, which load the library.
        self._lock = threading.RLock()
        self._library: ctypes.CDLL | None = None
        self._registered = False
        self._recording = False
        self._record_pending = False  # registration waits for XLA's first call into the library
        #: Why the record-stage targets are not registered (``None`` once they are, or before registration).
        self.record_unavailable: str | None = None

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
            # The handler is glue around a few driver calls, most of it XLA FFI binding templates: -O1 builds it in
            # three quarters of -O2's time, which the first call on a fresh machine waits for.
            flags=("-O1", "-std=c++17"),
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
                getattr(lib, f"{self.prefix}_modules_loaded").restype = ctypes.c_int64
                for name in ("abi", "record_counts"):
                    entry = getattr(lib, f"{self.prefix}_{name}", None)
                    if entry is not None:
                        entry.restype = ctypes.c_int
                        entry.argtypes = (ctypes.POINTER(ctypes.c_int64), ctypes.c_int)
                register_record = getattr(lib, f"{self.prefix}_register_record", None)
                if register_record is not None:
                    register_record.restype = ctypes.c_char_p
                    register_record.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p)
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
        """Registers the state type and the targets with XLA, with the command-buffer trait (once per process).

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
            self._register_record(lib)
            self._registered = True

    def _register_record(self, lib: ctypes.CDLL) -> None:
        """Registers the record-stage targets, or says in `record_unavailable` why not."""
        register = getattr(lib, f"{self.prefix}_register_record", None)
        if self.record_variable is None or register is None:
            self.record_unavailable = "this runtime's handler has no record stage"
        elif not self.record_enabled():
            self.record_unavailable = f"{self.record_variable}=0"
        else:
            names = (self.record_target_name, self.record_preloaded_target_name)
            why = register(names[0].encode(), names[1].encode(), self.platform.encode())
            self._record_pending = why is None
            self._recording = why == b""
            self.record_unavailable = (
                "XLA has not called the handler library yet" if why is None else why.decode() or None
            )
        if not self._recording:
            _log.debug("%s: record-stage targets not registered: %s", self.prefix, self.record_unavailable)

    def record_enabled(self) -> bool:
        """Whether calls may lower to the record-stage targets (``<record_variable>=0`` turns them off)."""
        return self.record_variable is not None and settings.flag(self.record_variable, default=True)

    def custom_call_target(self, single_config: bool, for_export: bool = False) -> str:
        """The custom-call target a call lowers to: with a record stage when registered in this process (and
        neither exporting, since the exported module may run where they are not, nor turned off), without an
        initialize stage for a single-config call (unless ``<preload_variable>=0``)."""
        preloaded = single_config and self.preload_enabled()
        if self._record_pending:
            with self._lock:
                if self._record_pending:
                    self._register_record(self.library())
        if self._recording and not for_export and self.record_enabled():
            return self.record_preloaded_target_name if preloaded else self.record_target_name
        return self.preloaded_target_name if preloaded else self.target_name

    def record_counts(self) -> tuple[int, int, int]:
        """What the record stage did in this process: kernel nodes created, kernel nodes updated, and fallbacks to
        XLA's stream capture; zeros for a library without a record stage."""
        counts = getattr(self.library(), f"{self.prefix}_record_counts", None)
        if counts is None:
            return (0, 0, 0)
        buffer = (ctypes.c_int64 * 3)()
        counts(buffer, 3)
        return (int(buffer[0]), int(buffer[1]), int(buffer[2]))

    def modules_loaded(self) -> int:
        """How many code objects the library has loaded into a GPU context in this process (each kernel binary
        once per context, however many calls launch it)."""
        return int(getattr(self.library(), f"{self.prefix}_modules_loaded")())

    def driver_error(self) -> str:
        """Why the library cannot use the GPU driver in this process (empty when it can)."""
        return (getattr(self.library(), f"{self.prefix}_driver_error")() or b"").decode()

    def abi_layout(self, count: int = 64) -> list[int]:
        """The driver constants and struct layouts the library was built with (for tests against the headers)."""
        buffer = (ctypes.c_int64 * count)()
        written = getattr(self.library(), f"{self.prefix}_abi")(buffer, count)
        return list(buffer[:written])
