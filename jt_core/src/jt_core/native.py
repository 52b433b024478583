"""Building small C++ shared libraries (XLA FFI handlers) from sources shipped as package data.

A plugin ships its handler as C++ source and builds it at first use against the XLA FFI headers that the
installed jaxlib provides (``jax.ffi.include_dir()``), with the system C++ compiler. The library needs no Python
headers and no GPU toolkit, so a plain ``pip install`` works on any machine with a compiler.

jt_core ships the headers its plugins' handlers share (``jt_launch_common.h``: the GPU launch handler written
against a small driver interface, which jt-cuda and jt-rocm fill in). Their folder, :func:`common_include_dir`, is
on the include path of every library built here, and their contents are part of every cache key, so a changed
header rebuilds the libraries that may include it.

Built libraries are cached per machine under ``$JT_CACHE_DIR/native`` (default: ``$XDG_CACHE_HOME/jt/native`` or
``~/.cache/jt/native``), keyed by the hash of the sources, the shared headers, the flags, the jax version and the
compiler's identity.
Each build writes to a private temporary file and renames it into place, so concurrent processes building the same
library are safe: the last rename wins and every reader sees a complete file.

Example:
    >>> path = build_shared_library("jt_cuda_launch", [source_file], include_dirs=[jax.ffi.include_dir()])
    >>> lib = ctypes.CDLL(str(path))
"""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jt_core.errors import JtError

__all__ = [
    "NativeBuildError",
    "NativeLibrary",
    "build_shared_library",
    "cache_dir",
    "common_include_dir",
    "find_compiler",
]


class NativeBuildError(JtError, RuntimeError):
    """A native library could not be built (no compiler, or the compiler failed)."""


@dataclasses.dataclass(frozen=True)
class NativeLibrary:
    """A built shared library.

    Attributes:
        name: The library's base name.
        path: Where the built file lies.
        key: The cache key (hash of sources, flags, jax version and compiler).
        built: Whether this call compiled it (``False``: it came from the cache).
    """

    name: str
    path: Path
    key: str
    built: bool


_lock = threading.Lock()

_COMMON_INCLUDE_DIR = Path(__file__).parent / "csrc"


def common_include_dir() -> Path:
    """The folder of the C++ headers jt_core ships for its plugins' handlers (``jt_launch_common.h``).

    :func:`build_shared_library` always puts it on the include path; a plugin that builds its handler some other
    way passes it as ``-I``.
    """
    return _COMMON_INCLUDE_DIR


def _common_headers() -> list[Path]:
    return sorted(_COMMON_INCLUDE_DIR.glob("*.h"))


def cache_dir() -> Path:
    """The per-machine cache folder of built libraries (created on demand)."""
    root = os.environ.get("JT_CACHE_DIR")
    if root:
        base = Path(root)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        base = (Path(xdg) if xdg else Path.home() / ".cache") / "jt"
    return base / "native"


def find_compiler() -> list[str]:
    """The C++ compiler command: ``$CXX`` if set, else the first of ``c++``, ``g++``, ``clang++`` on ``PATH``.

    Raises:
        NativeBuildError: When none is found, saying how to install one or set ``CXX``.
    """
    env = os.environ.get("CXX")
    if env:
        command = shlex.split(env)
        if command and shutil.which(command[0]):
            return command
        raise NativeBuildError(f"CXX={env!r} does not name an executable compiler; set CXX to a C++17 compiler")
    for candidate in ("c++", "g++", "clang++"):
        found = shutil.which(candidate)
        if found:
            return [found]
    raise NativeBuildError(
        "no C++ compiler found (looked for $CXX, c++, g++, clang++ on PATH); install one (e.g. apt-get install "
        "g++) or set CXX to a C++17 compiler"
    )


def _compiler_identity(command: Sequence[str]) -> str:
    try:
        result = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        raise NativeBuildError(f"C++ compiler {command[0]!r} cannot be run: {exc}") from exc
    first_line = (result.stdout or result.stderr).strip().splitlines()[:1]
    return f"{' '.join(command)} | {first_line[0] if first_line else '?'}"


def _jax_version() -> str:
    import jax
    import jaxlib

    return f"jax {jax.__version__} jaxlib {getattr(jaxlib, '__version__', '?')}"


def _cache_key(
    name: str, sources: Sequence[Path], flags: Sequence[str], include_dirs: Sequence[str], compiler: str
) -> str:
    digest = hashlib.sha256()
    for part in (name, compiler, _jax_version(), *flags, *include_dirs):
        digest.update(part.encode())
        digest.update(b"\0")
    for source in [*sources, *_common_headers()]:
        digest.update(source.name.encode())
        digest.update(b"\0")
        digest.update(source.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def build_shared_library(
    name: str,
    sources: Sequence[str | os.PathLike[str]],
    *,
    include_dirs: Sequence[str] = (),
    flags: Sequence[str] = ("-O2", "-std=c++17"),
    libraries: Sequence[str] = (),
    directory: str | os.PathLike[str] | None = None,
) -> NativeLibrary:
    """Builds (or finds in the cache) a shared library from C++ sources.

    Args:
        name: The library's base name (the file is ``lib<name>-<key>.so``).
        sources: The C++ source files; their contents are part of the cache key.
        include_dirs: ``-I`` folders (e.g. ``jax.ffi.include_dir()``); :func:`common_include_dir` is always
            added after them.
        flags: Compiler flags (part of the cache key).
        libraries: ``-l`` libraries to link (e.g. ``dl``).
        directory: Where to keep the library; defaults to :func:`cache_dir`.

    Returns:
        The built library's path and cache key.

    Raises:
        NativeBuildError: When no compiler is found or the compile fails; the message holds the command and the
            compiler's output.
    """
    source_paths = [Path(s) for s in sources]
    for source in source_paths:
        if not source.is_file():
            raise NativeBuildError(f"native source {str(source)!r} of {name!r} does not exist (broken install?)")
    includes = [str(d) for d in include_dirs]
    if str(_COMMON_INCLUDE_DIR) not in includes:
        includes.append(str(_COMMON_INCLUDE_DIR))
    compiler = find_compiler()
    identity = _compiler_identity(compiler)
    key = _cache_key(name, source_paths, list(flags) + [f"-l{lib}" for lib in libraries], includes, identity)
    folder = Path(directory) if directory is not None else cache_dir()
    target = folder / f"lib{name}-{key}.so"
    if target.is_file():
        return NativeLibrary(name, target, key, built=False)
    with _lock:
        if target.is_file():
            return NativeLibrary(name, target, key, built=False)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise NativeBuildError(
                f"cannot create the native library cache folder {str(folder)!r}: {exc}; set JT_CACHE_DIR to a "
                "writable folder"
            ) from exc
        fd, temporary = tempfile.mkstemp(prefix=f".lib{name}-{key}.", suffix=".so.tmp", dir=folder)
        os.close(fd)
        command = [
            *compiler,
            *flags,
            "-shared",
            "-fPIC",
            *[f"-I{d}" for d in includes],
            *[str(s) for s in source_paths],
            "-o",
            temporary,
            *[f"-l{lib}" for lib in libraries],
        ]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
            if result.returncode != 0:
                output = (result.stderr or result.stdout).strip()
                raise NativeBuildError(
                    f"building native library {name!r} failed (exit {result.returncode}).\n"
                    f"command: {shlex.join(command)}\n{output[-4000:]}"
                )
            os.chmod(temporary, 0o755)
            os.replace(temporary, target)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    return NativeLibrary(name, target, key, built=True)


class LaunchHandlerLibrary:
    """A GPU launch handler built on ``jt_launch_common.h``: its library, its XLA targets and their registration.

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
        value = os.environ.get(self.preload_variable, "1").strip().lower()
        return value not in ("0", "false", "no", "off")

    def library(self) -> ctypes.CDLL:
        """Builds (or finds in the cache) and loads the library.

        Raises:
            NativeBuildError: Without a C++ compiler, or when the build fails.
        """
        with self._lock:
            if self._library is None:
                import jax

                built = build_shared_library(
                    self.prefix,
                    [self.source],
                    include_dirs=[jax.ffi.include_dir(), str(common_include_dir())],
                    flags=("-O2", "-std=c++17"),
                    libraries=("dl",),
                )
                lib = ctypes.CDLL(str(built.path))
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
