"""Building small C++ shared libraries (XLA FFI handlers) from sources shipped as package data.

A plugin ships its handler as C++ source and builds it at first use against the XLA FFI headers that the
installed jaxlib provides (``jax.ffi.include_dir()``), with the system C++ compiler. The library needs no Python
headers and no GPU toolkit, so a plain ``pip install`` works on any machine with a compiler.

Headers a library includes from outside the build's system folders are passed as ``headers=``: their contents
are part of the cache key, so a changed header rebuilds the libraries that include it (jt's GPU launch handler,
:mod:`jt_core.gpu.handler`, passes its shared headers).

Built libraries are cached per machine in the cache root's ``native`` folder (:mod:`jt_core.files`, checked to be
private before anything is loaded from it), keyed by the hash of the sources, the shared headers, the flags, the jax
version and the compiler's identity. A build says on stderr what it builds and how long it took (it happens once
per machine and library). Each build writes to a private temporary file and renames it into place, so concurrent
processes building the same library are safe: the last rename wins and every reader sees a complete file.

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
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from jt_core import files, settings
from jt_core.errors import JtError

__all__ = [
    "LibrarySpec",
    "LibraryStatus",
    "NativeBuildError",
    "NativeLibrary",
    "build_shared_library",
    "cache_dir",
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
    compiler: str = ""


@dataclasses.dataclass(frozen=True)
class LibraryStatus:
    """Where a library stands on this machine, found without building it.

    Attributes:
        name: The library's base name.
        path: The built file, or ``None`` when it is not built yet.
        compiler: The compiler that builds it (``"/usr/bin/c++ | c++ (Debian 12.2.0) 12.2.0"``), or ``None``.
        error: Why it cannot be built here (no compiler), or ``None``.
    """

    name: str
    path: Path | None
    compiler: str | None
    error: str | None


@dataclasses.dataclass(frozen=True)
class LibrarySpec:
    """How to build one library: what :func:`build_shared_library` takes, kept to build or inspect it later.

    A launcher that needs a library returns its spec from ``native_library()``, so that
    ``python -m jt_core build-native`` can build it ahead of time and ``python -m jt_core plugins`` can say whether
    it is built.
    """

    name: str
    sources: tuple[Path, ...]
    include_dirs: tuple[str, ...] = ()
    headers: tuple[Path, ...] = ()
    flags: tuple[str, ...] = ("-O2", "-std=c++17")
    libraries: tuple[str, ...] = ()

    def build(self) -> NativeLibrary:
        """Builds the library (or finds it in the cache); see :func:`build_shared_library`."""
        return build_shared_library(
            self.name,
            self.sources,
            include_dirs=self.include_dirs,
            headers=self.headers,
            flags=self.flags,
            libraries=self.libraries,
        )

    def status(self) -> LibraryStatus:
        """Whether the library is built on this machine, and with which compiler (runs ``c++ --version``)."""
        try:
            compiler = _compiler_identity(find_compiler())
        except NativeBuildError as exc:
            return LibraryStatus(self.name, None, None, str(exc))
        target = cache_dir() / f"lib{self.name}-{self._key(compiler)}.so"
        return LibraryStatus(self.name, target if target.is_file() else None, compiler, None)

    def _key(self, compiler: str) -> str:
        linked = list(self.flags) + [f"-l{lib}" for lib in self.libraries]
        return _cache_key(self.name, self.sources, self.headers, linked, self.include_dirs, compiler)


_lock = threading.Lock()


def cache_dir() -> Path:
    """The per-machine folder of built libraries (the cache root's ``native`` folder, created on demand)."""
    return files.cache_folder("native")


def find_compiler() -> list[str]:
    """The C++ compiler command: ``$CXX`` if set, else the first of ``c++``, ``g++``, ``clang++`` on ``PATH``.

    Raises:
        NativeBuildError: When none is found, saying how to install one or set ``CXX``.
    """
    env = settings.text("CXX")
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
    name: str,
    sources: Sequence[Path],
    headers: Sequence[Path],
    flags: Sequence[str],
    include_dirs: Sequence[str],
    compiler: str,
) -> str:
    digest = hashlib.sha256()
    for part in (name, compiler, _jax_version(), *flags, *include_dirs):
        digest.update(part.encode())
        digest.update(b"\0")
    for source in [*sources, *headers]:
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
    headers: Sequence[str | os.PathLike[str]] = (),
    flags: Sequence[str] = ("-O2", "-std=c++17"),
    libraries: Sequence[str] = (),
    directory: str | os.PathLike[str] | None = None,
) -> NativeLibrary:
    """Builds (or finds in the cache) a shared library from C++ sources.

    Args:
        name: The library's base name (the file is ``lib<name>-<key>.so``).
        sources: The C++ source files; their contents are part of the cache key.
        include_dirs: ``-I`` folders (e.g. ``jax.ffi.include_dir()``).
        headers: Header files the sources include from those folders that belong to the caller (not the system's
            or jaxlib's); their contents are part of the cache key.
        flags: Compiler flags (part of the cache key).
        libraries: ``-l`` libraries to link (e.g. ``dl``).
        directory: Where to keep the library; defaults to :func:`cache_dir`.

    Returns:
        The built library's path and cache key.

    Raises:
        NativeBuildError: When no compiler is found or the compile fails; the message holds the command and the
            compiler's output.
    """
    spec = LibrarySpec(
        name,
        tuple(Path(source) for source in sources),
        tuple(str(d) for d in include_dirs),
        tuple(Path(h) for h in headers),
        tuple(flags),
        tuple(libraries),
    )
    for source in spec.sources:
        if not source.is_file():
            raise NativeBuildError(f"native source {str(source)!r} of {name!r} does not exist (broken install?)")
    compiler = find_compiler()
    identity = _compiler_identity(compiler)
    key = spec._key(identity)
    folder = Path(directory) if directory is not None else cache_dir()
    target = folder / f"lib{name}-{key}.so"
    if target.is_file():
        return NativeLibrary(name, target, key, built=False, compiler=identity)
    with _lock:
        if target.is_file():
            return NativeLibrary(name, target, key, built=False, compiler=identity)
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
            *[f"-I{d}" for d in spec.include_dirs],
            *[str(s) for s in spec.sources],
            "-o",
            temporary,
            *[f"-l{lib}" for lib in libraries],
        ]
        sys.stderr.write(f"jt: building {name} for this machine (once; kept in {folder})...\n")
        started = time.perf_counter()
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
        sys.stderr.write(f"jt: built {name} in {time.perf_counter() - started:.1f} s with {identity}\n")
    return NativeLibrary(name, target, key, built=True, compiler=identity)
