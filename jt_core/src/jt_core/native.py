"""Building small C++ shared libraries (XLA FFI handlers) from sources shipped as package data.

A plugin ships its handler as C++ source and builds it at first use against the XLA FFI headers that the
installed jaxlib provides (``jax.ffi.include_dir()``), with the system C++ compiler. The library needs no Python
headers and no GPU toolkit, so a plain ``pip install`` works on any machine with a compiler.

Headers a library includes from outside the build's system folders are passed as ``headers=``: their contents
are part of the cache key, so a changed header rebuilds the libraries that include it (jt's GPU launch handler,
`jt_core.gpu.handler`, passes its shared headers).

Built libraries are cached per machine in the cache root's ``native`` folder (`jt_core.files`, checked to be
private before anything is loaded from it), keyed by what the build reads (`LibrarySpec.key_parts`): the
library's name, the contents of its sources, of the given headers and of every file in its include folders (not the
folders' paths, so a second virtualenv with the same jax finds the library the first one built), the flags, the jax
and jaxlib versions, and the compiler's identity (its command and version line).

A build happens once per machine and library, under the library's lock (`jt_core.files.file_lock`): processes
that need it at the same time wait for the one that builds, then load its result. It says on stderr what it builds,
then, on the same line, how long it took or why it failed and what jt does without it; a failure is also recorded
beside the library for ``python -m jt_core plugins``. The build writes to a private temporary file and renames it
into place, and records the library's size and SHA-256 beside it: before a library is loaded (``dlopen``), it is
checked against that record, and a library that fails the check (truncated, empty, overwritten) is built again
instead of being loaded. Temporary files of builds that were killed are removed. A ``native`` folder that cannot
take the library (a full disk, a read-only folder) is reported once, and the library is built into a private
temporary folder for the process instead.

Every library is compiled with one more source of jt's own, `BUILD_INFO_SOURCE`, which exports the XLA FFI
C API version of the headers it was compiled against (``jt_native_xla_ffi_api_version``).

Prebuilt libraries: a platform wheel (``JT_BUILD_PLATFORM_WHEEL=1``, `jt_core.native_setup`) carries each
library compiled against the XLA FFI headers of the oldest jaxlib jt supports, as ``lib<name>.so`` beside the spec's
first source (`LibrarySpec.prebuilt_path`) with a build record (``lib<name>.so.json``). `LibrarySpec.load`
loads it without a compiler and without building when it fits (`LibrarySpec.prebuilt`): it is the file the
wheel was built with (size and SHA-256), built from the installed sources (their digest), and its XLA FFI API version
is one the installed jaxlib takes (the same major version, a minor version not newer than jaxlib's, XLA's own rule).
Otherwise one line on stderr says why, and the library is built on this machine as from an sdist.
``JT_PREBUILT_NATIVE=0`` ignores prebuilt libraries.

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
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from jt_core import files, integrity, settings
from jt_core.compiler import NativeBuildError, compiler_identity, find_compiler, jax_version
from jt_core.errors import warn_in_user_code
from jt_core.prebuilt import (
    PREBUILT_VARIABLE,
    PrebuiltLibrary,
    check_prebuilt,
    write_prebuilt_record,
    xla_ffi_api_problem,
)

__all__ = [
    "BUILD_INFO_SOURCE",
    "PREBUILT_VARIABLE",
    "LibrarySpec",
    "LibraryStatus",
    "NativeBuildError",
    "NativeLibrary",
    "PrebuiltLibrary",
    "build_prebuilt",
    "build_shared_library",
    "cache_dir",
    "build_due",
    "find_compiler",
    "xla_ffi_api_problem",
]

#: jt's own source, compiled into every library: it exports the XLA FFI C API version the library was built for.
BUILD_INFO_SOURCE = Path(__file__).with_name("native_build_info.cc")


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
        path: The built file, or ``None`` when it is not built yet (or fails its integrity check).
        compiler: The compiler that builds it (``"/usr/bin/c++ | c++ (Debian 12.2.0) 12.2.0"``), or ``None``.
        error: Why it cannot be built here (no compiler), or ``None``.
        failure: Why the last build on this machine failed, or why the built file is unusable, when it is not built;
            ``None`` otherwise. The next use builds it again.
        prebuilt: Whether ``path`` is the library the installed wheel carries prebuilt (no compiler was asked).
        prebuilt_problem: Why the prebuilt library the installed wheel carries is not used here, or ``None``.
    """

    name: str
    path: Path | None
    compiler: str | None
    error: str | None
    failure: str | None = None
    prebuilt: bool = False
    prebuilt_problem: str | None = None


@dataclasses.dataclass(frozen=True)
class LibrarySpec:
    """How to build one library: what `build_shared_library` takes, kept to build or inspect it later.

    A launcher that needs a library returns its spec from ``native_library()``, so that
    ``python -m jt_core build-native`` can build it ahead of time and ``python -m jt_core plugins`` can say whether
    it is built. ``without_it`` says what jt does when the library cannot be built (it ends the build's message).
    """

    name: str
    sources: tuple[Path, ...]
    include_dirs: tuple[str, ...] = ()
    headers: tuple[Path, ...] = ()
    flags: tuple[str, ...] = ("-O2", "-std=c++17")
    libraries: tuple[str, ...] = ()
    without_it: str = ""

    def build(self, *, announce: bool = True) -> NativeLibrary:
        """Builds the library (or finds it in the cache); see `build_shared_library`."""
        return build_shared_library(
            self.name,
            self.sources,
            include_dirs=self.include_dirs,
            headers=self.headers,
            flags=self.flags,
            libraries=self.libraries,
            without_it=self.without_it,
            announce=announce,
        )

    @property
    def compiled_sources(self) -> tuple[Path, ...]:
        """The files the compiler is given: the spec's sources, then `BUILD_INFO_SOURCE`."""
        return (*self.sources, BUILD_INFO_SOURCE)

    @property
    def prebuilt_path(self) -> Path:
        """Where a platform wheel carries the library prebuilt: ``lib<name>.so`` beside the first source (its build
        record beside it, ``lib<name>.so.json``).

        Raises:
            ValueError: For a spec that lists no source (nothing to build, so nothing prebuilt).
        """
        if not self.sources:
            raise ValueError(f"native library {self.name!r} lists no sources: no prebuilt file goes with it")
        return self.sources[0].parent / f"lib{self.name}.so"

    def load(self) -> ctypes.CDLL:
        """Loads the library into the process: the prebuilt one where it fits (`prebuilt`), else the one built
        on this machine (built now, or found in the cache, checked).

        Raises:
            NativeBuildError: When it cannot be built, or the built file cannot be loaded; the message says why a
                prebuilt library that the wheel carries was not used.
        """
        prebuilt = self.prebuilt()
        if prebuilt.library is not None:
            _settled.add(self)
            return prebuilt.library
        if prebuilt.problem is not None:
            _say_once(
                f"{self.name} prebuilt",
                f"jt: not using the prebuilt {self.name}: {prebuilt.problem}; building it for this machine instead\n",
            )
        try:
            built = self.build()
        except NativeBuildError as exc:
            if prebuilt.problem is None:
                raise
            raise NativeBuildError(f"{exc} (the prebuilt library is not used: {prebuilt.problem})") from exc
        try:
            library = ctypes.CDLL(str(built.path))
        except OSError as exc:
            raise NativeBuildError(f"the built library {str(built.path)!r} cannot be loaded: {exc}") from exc
        _settled.add(self)
        return library

    def prebuilt(self) -> PrebuiltLibrary:
        """The library as the installed platform wheel carries it, checked (and loaded) for use in this process: it
        must be the file the wheel was built with, built from the installed sources and headers, and built for an
        XLA FFI API version the installed jaxlib takes (`xla_ffi_api_problem`). Asks no compiler."""
        if not self.sources or not settings.flag(PREBUILT_VARIABLE, default=True):
            return PrebuiltLibrary(None)
        return check_prebuilt(self.prebuilt_path, self.source_digest)

    def status(self) -> LibraryStatus:
        """Whether the library is prebuilt here (`prebuilt`) or built on this machine (and passes its
        integrity check), with which compiler (runs ``c++ --version``, unless it is prebuilt), and why the last
        build failed if it did."""
        prebuilt = self.prebuilt()
        if prebuilt.path is not None:
            return LibraryStatus(self.name, prebuilt.path, None, None, prebuilt=True)
        unused = prebuilt.problem
        try:
            compiler = compiler_identity(find_compiler())
        except NativeBuildError as exc:
            return LibraryStatus(self.name, None, None, str(exc), prebuilt_problem=unused)
        try:
            target = cache_dir() / _file_name(self.name, self._key(compiler))
        except OSError as exc:
            unusable = f"the native cache folder is unusable ({exc})"
            return LibraryStatus(self.name, None, compiler, None, unusable, prebuilt_problem=unused)
        problem = integrity.integrity_problem(target)
        if problem is None:
            return LibraryStatus(self.name, target, compiler, None, prebuilt_problem=unused)
        failed = integrity.read_record(_failure_path(target))
        failure: str | None = None
        if failed is not None:
            failure = f"the last build failed: {failed.get('error')}"
        elif target.exists():
            failure = f"the built file {str(target)!r} fails ({problem})"
        return LibraryStatus(self.name, None, compiler, None, failure, prebuilt_problem=unused)

    def source_parts(self) -> list[bytes]:
        """What the library is built from, wherever it is built: the name, the flags and linked libraries, then the
        name and contents of each compiled source and header. The include folders are left out: a prebuilt library
        is compiled against other XLA FFI headers than the installed ones, which `prebuilt` compares by
        version instead."""
        parts = [part.encode() for part in (self.name, *self.flags, *[f"-l{lib}" for lib in self.libraries])]
        for source in [*self.compiled_sources, *self.headers]:
            parts += [source.name.encode(), source.read_bytes()]
        return parts

    def source_digest(self) -> str:
        """The SHA-256 of `source_parts`: a prebuilt library's record holds the one it was built from."""
        return _digest(self.source_parts())

    def key_parts(self, compiler: str) -> list[bytes]:
        """What the cache key is the hash of: the compiler's identity, the jax and jaxlib versions, then
        `source_parts`, then every file in each include folder as its path inside the folder and its contents
        (a folder's own path is not part of it)."""
        parts = [compiler.encode(), jax_version().encode(), *self.source_parts()]
        for folder in self.include_dirs:
            parts += _folder_contents(Path(folder))
        return parts

    def _key(self, compiler: str) -> str:
        return _digest(self.key_parts(compiler))[:24]


def _digest(parts: Sequence[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


#: The libraries this process has loaded or asked `build_due` about.
_settled: set[LibrarySpec] = set()


def build_due(spec: LibrarySpec) -> bool:
    """Whether using ``spec`` now would build it (it is not built on this machine, or fails its integrity check,
    and a compiler is there), asked the first time only: later, and once the library is loaded, the answer is
    ``False`` at no cost."""
    if spec in _settled:
        return False
    _settled.add(spec)
    status = spec.status()
    return status.path is None and status.error is None


def _folder_contents(folder: Path) -> list[bytes]:
    """Every file under an include folder, as its relative path and contents, in a fixed order."""
    if not folder.is_dir():
        return [f"missing include folder {folder}".encode()]
    parts = [b"include folder"]
    for parent, dirs, names in sorted(os.walk(folder)):
        dirs.sort()
        for name in sorted(names):
            path = Path(parent) / name
            parts += [path.relative_to(folder).as_posix().encode(), path.read_bytes()]
    return parts


def _file_name(name: str, key: str) -> str:
    """The library's file name; the name is a plugin's, made fit for a file name (the key tells apart two names
    that become one)."""
    return f"lib{files.safe_name(name)}-{key}.so"


def _failure_path(target: Path) -> Path:
    """Where the last failed build of ``target`` is recorded (for ``python -m jt_core plugins``)."""
    return target.with_name(target.name + ".failed.json")


_locks_guard = threading.Lock()
_locks: dict[Path, threading.Lock] = {}


def _build_lock(target: Path) -> threading.Lock:
    """The lock of one library file for this process's threads (the file lock serves other processes, whose locks
    do not exclude threads): builds of different libraries run at once."""
    with _locks_guard:
        return _locks.setdefault(target, threading.Lock())


def cache_dir() -> Path:
    """The per-machine folder of built libraries (the cache root's ``native`` folder, created on demand)."""
    return files.cache_folder("native")


def build_shared_library(
    name: str,
    sources: Sequence[str | os.PathLike[str]],
    *,
    include_dirs: Sequence[str] = (),
    headers: Sequence[str | os.PathLike[str]] = (),
    flags: Sequence[str] = ("-O2", "-std=c++17"),
    libraries: Sequence[str] = (),
    directory: str | os.PathLike[str] | None = None,
    without_it: str = "",
    announce: bool = True,
) -> NativeLibrary:
    """Builds (or finds in the cache, checked against its integrity record) a shared library from C++ sources.

    Args:
        name: The library's base name (the file is ``lib<name>-<key>.so``).
        sources: The C++ source files; their contents are part of the cache key.
        include_dirs: ``-I`` folders (e.g. ``jax.ffi.include_dir()``); the contents of their files are part of the
            cache key, their paths are not.
        headers: Header files the sources include from elsewhere; their contents are part of the cache key.
        flags: Compiler flags (part of the cache key).
        libraries: ``-l`` libraries to link (e.g. ``dl``).
        directory: Where to keep the library; defaults to `cache_dir`.
        without_it: What jt does when the library cannot be built; ends the message of a failed build.
        announce: Whether a build says on stderr that it runs, how long it took or why it failed (one line); off
            where the caller reports builds itself (``python -m jt_core build-native``, whose builds run at once).

    Returns:
        The built library's path and cache key.

    Raises:
        NativeBuildError: When no compiler is found or the compile fails; the message holds the command and the
            compiler's output. Either way one line on stderr says so and what jt does instead.
    """
    spec = LibrarySpec(
        name,
        tuple(Path(source) for source in sources),
        tuple(str(d) for d in include_dirs),
        tuple(Path(h) for h in headers),
        tuple(flags),
        tuple(libraries),
        without_it,
    )
    for source in spec.compiled_sources:
        if not source.is_file():
            raise NativeBuildError(f"native source {str(source)!r} of {name!r} does not exist (broken install?)")
    try:
        compiler = find_compiler()
        identity = compiler_identity(compiler)
    except NativeBuildError as exc:
        if announce:
            _say_once(name, f"jt: cannot build {name}: {exc}{_instead(spec)}\n")
        raise
    key = spec._key(identity)
    folder = _library_folder(directory)
    target = folder / _file_name(name, key)
    if integrity.integrity_problem(target) is None:
        return NativeLibrary(name, target, key, built=False, compiler=identity)
    with _build_lock(target), files.file_lock(files.lock_path(target)):
        problem = integrity.integrity_problem(target)  # built by another process while this one waited?
        if problem is None:
            return NativeLibrary(name, target, key, built=False, compiler=identity)
        if target.exists():
            warn_in_user_code(
                f"jt: the built library {str(target)!r} is unusable ({problem}); it is built again instead of being "
                "loaded",
                RuntimeWarning,
            )
            files.discard(target)
        files.remove_stale_temporaries(folder, "native", prefix=f".{_file_name(name, key)}.")
        target = _compile(spec, compiler, identity, target, announce)
    return NativeLibrary(name, target, key, built=True, compiler=identity)


def _library_folder(directory: str | os.PathLike[str] | None) -> Path:
    folder = Path(directory) if directory is not None else None
    try:
        if folder is None:
            return cache_dir()
        files.make_folders(folder)
        return folder
    except OSError as exc:
        files.report_fault(folder or files.configured_root() / "native", exc, "create")
        return _scratch_folder()


def _scratch_folder() -> Path:
    """A private folder for this process's builds, when the cache folder cannot take them."""
    try:
        return files.scratch_folder("native")
    except OSError as exc:
        raise NativeBuildError(f"no folder can take a built library: {exc}") from exc


_said: set[str] = set()


def _say_once(name: str, line: str) -> None:
    if name not in _said:
        _said.add(name)
        sys.stderr.write(line)
        sys.stderr.flush()


def _instead(spec: LibrarySpec) -> str:
    return f"; without it, {spec.without_it}" if spec.without_it else ""


def _temporary(folder: Path, target: Path) -> str:
    """A private temporary file for the compiler's output beside ``target`` (or in the scratch folder when the
    cache folder cannot take it, which is reported once)."""
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        files.report_fault(folder, exc)
        fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=_scratch_folder())
    os.close(fd)
    return temporary


def _compile(spec: LibrarySpec, compiler: list[str], identity: str, target: Path, announce: bool = True) -> Path:
    """Runs the compiler into a temporary file, renames it to ``target`` and records its integrity; returns where
    the library lies (``target``, or the scratch folder when the cache folder cannot take it)."""
    folder = target.parent
    temporary = _temporary(folder, target)
    command = _command(spec, compiler, temporary)
    if announce:
        sys.stderr.write(f"jt: building {spec.name} for this machine (once; kept in {folder})... ")
        sys.stderr.flush()
    started = time.perf_counter()
    try:
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            what = f"the compiler did not run to the end: {exc}"
            raise _failed(spec, target, identity, what, command, announce=announce) from exc
        if result.returncode != 0:
            output = (result.stderr or result.stdout).strip()
            raise _failed(spec, target, identity, f"exit {result.returncode}", command, output, announce)
        os.chmod(temporary, 0o755)
        placed = _place(Path(temporary), target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    try:
        integrity.record_integrity(placed)
    except OSError as exc:
        files.report_fault(placed.parent, exc)
    files.discard(_failure_path(placed))
    if announce:
        sys.stderr.write(f"done in {time.perf_counter() - started:.1f} s with {identity}\n")
    return placed


def _command(spec: LibrarySpec, compiler: Sequence[str], output: str) -> list[str]:
    """The compiler's command line that builds ``spec`` into ``output``."""
    return [
        *compiler,
        *spec.flags,
        "-shared",
        "-fPIC",
        *[f"-I{d}" for d in spec.include_dirs],
        *[str(s) for s in spec.compiled_sources],
        "-o",
        output,
        *[f"-l{lib}" for lib in spec.libraries],
    ]


def build_prebuilt(spec: LibrarySpec, folder: str | os.PathLike[str]) -> Path:
    """Compiles ``spec`` for a platform wheel (`jt_core.native_setup`): into ``folder`` as the file
    `LibrarySpec.prebuilt_path` names, with the build record that `LibrarySpec.prebuilt` checks: the
    library's size and SHA-256, the digest of what it was built from (`LibrarySpec.source_digest`), and the
    XLA FFI API version it reports (it is loaded here to ask), with the jax version and the compiler, for people.

    Returns:
        The library's path.

    Raises:
        NativeBuildError: When no compiler is found or the compile fails (the command and the compiler's output).
    """
    compiler = find_compiler()
    identity = compiler_identity(compiler)
    target = Path(folder) / spec.prebuilt_path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    command = _command(spec, compiler, str(target))
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        output = (result.stderr or result.stdout).strip()
        raise NativeBuildError(
            f"building native library {spec.name!r} failed (exit {result.returncode}).\n"
            f"command: {shlex.join(command)}\n{output[-4000:]}".rstrip()
        )
    write_prebuilt_record(target, spec.name, spec.source_digest(), identity)
    return target


def _place(temporary: Path, target: Path) -> Path:
    """Renames the built file to ``target``; where the cache folder cannot take it (a folder in its place, a
    read-only folder: reported once), into the scratch folder instead. Returns where it lies."""
    if temporary.parent == target.parent:
        try:
            os.replace(temporary, target)
            return target
        except OSError as exc:
            files.report_fault(target.parent, exc)
    placed = _scratch_folder() / target.name
    shutil.move(temporary, placed)
    return placed


def _failed(
    spec: LibrarySpec,
    target: Path,
    identity: str,
    what: str,
    command: list[str],
    output: str = "",
    announce: bool = True,
) -> NativeBuildError:
    """Ends the build's line with why it failed and what jt does instead (when ``announce``), records the failure
    for ``python -m jt_core plugins``, and returns the error to raise."""
    lines = [line for line in output.splitlines() if "error" in line.lower()] or output.splitlines()
    summary = f"{what}: {lines[0].strip()[:300]}" if lines else what
    if announce:
        sys.stderr.write(f"failed ({summary}){_instead(spec)}. `python -m jt_core plugins` shows it again\n")
    message = f"building native library {spec.name!r} failed ({what}).\ncommand: {shlex.join(command)}\n"
    integrity.write_record(_failure_path(target), {"error": summary, "compiler": identity, "time": time.time()})
    return NativeBuildError((message + output[-4000:]).rstrip())
