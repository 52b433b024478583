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
