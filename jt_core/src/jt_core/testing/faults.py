"""The faults jt must survive, made on purpose: a damaged file in the cache folder (`damage`), writes that fail
as on a full disk or a read-only folder (`failing_writes`), and a machine without a C or C++ compiler
(`no_compiler_path`)."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["CACHE_FAULTS", "damage", "failing_writes", "no_compiler_path"]

#: The faults every file jt keeps must survive: its bytes changed (same size), cut short, a folder in its place, a
#: full disk and a read-only folder (the last two for files not written yet).
CACHE_FAULTS = ("corrupt", "truncate", "folder", "full-disk", "read-only")


def damage(path: pathlib.Path, fault: str) -> None:
    """Damages the existing file ``path``: ``"corrupt"`` flips bytes in its middle, ``"truncate"`` keeps its first
    half, ``"folder"`` replaces it by a folder that is not empty."""
    data = path.read_bytes()
    if fault == "corrupt":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes(b ^ 0xA5 for b in data[middle : middle + 8]) + data[middle + 8 :])
    elif fault == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif fault == "folder":
        path.unlink()
        path.mkdir()
        (path / "left-here").write_bytes(b"not jt's")
    else:
        raise ValueError(f"unknown fault {fault!r}; damage() takes 'corrupt', 'truncate' or 'folder'")


@contextlib.contextmanager
def failing_writes(folder: pathlib.Path, error: int) -> Iterator[None]:
    """Makes every change of the file system under ``folder`` fail, in this process, with ``error`` (``errno.ENOSPC``:
    a full disk, where only creating files and folders fails; ``errno.EROFS``: a read-only folder, where every change
    fails), the way the kernel would. Reads are untouched.

    The operating system's calls are replaced in ``os`` and ``io`` (what ``open``, ``pathlib`` and ``tempfile`` use),
    so a test exercises the very path a real fault takes, even as root (whom permission bits do not stop).
    """
    import builtins
    import io
    import os

    root = os.path.realpath(folder)

    def inside(path: Any) -> bool:
        if isinstance(path, int):
            return False
        try:
            resolved = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return resolved == root or resolved.startswith(root + os.sep)

    def refuse(path: Any) -> OSError:
        return OSError(error, os.strerror(error), os.fsdecode(path))

    changes = ("open", "mkdir", "replace", "rename", "unlink", "rmdir", "utime", "chmod", "link", "symlink")
    real = {name: getattr(os, name) for name in changes}
    real_open = builtins.open
    creates = os.O_CREAT | os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND

    def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if inside(path) and flags & creates and (error != errno.ENOSPC or not os.path.exists(path)):
            raise refuse(path)
        return real["open"](path, flags, *args, **kwargs)

    def fake_mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if inside(path) and not os.path.exists(path):
            raise refuse(path)
        real["mkdir"](path, *args, **kwargs)

    def changing(name: str) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            targets = [path, *args[:1]] if name in ("replace", "rename", "link", "symlink") else [path]
            if error != errno.ENOSPC and any(inside(p) for p in targets if not isinstance(p, (dict, tuple))):
                raise refuse(path)
            return real[name](path, *args, **kwargs)

        return call

    def fake_builtin_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if inside(file) and any(c in mode for c in "wax+") and (error != errno.ENOSPC or not os.path.exists(file)):
            raise refuse(file)
        return real_open(file, mode, *args, **kwargs)

    patches: dict[str, Callable[..., Any]] = {"open": fake_open, "mkdir": fake_mkdir}
    patches |= {name: changing(name) for name in real if name not in patches}
    try:
        for name, fake in patches.items():
            setattr(os, name, fake)
        builtins.open = io.open = fake_builtin_open  # type: ignore[assignment]
        yield
    finally:
        for name, original in real.items():
            setattr(os, name, original)
        builtins.open = io.open = real_open  # type: ignore[assignment]


#: The names of C and C++ compilers: plain, with a version (``g++-12``) or a target (``x86_64-linux-gnu-g++``).
_COMPILER = re.compile(
    r"^(?:[\w.]+(?:-[\w.]+)*-)?(?:cc|c\+\+|cpp|gcc|g\+\+|clang|clang\+\+|c89|c99|tcc|icx|icpx|nvcc|hipcc)(?:-[\d.]+)?$"
)


def no_compiler_path(folder: str | os.PathLike[str], path: str | None = None) -> str:
    """A ``PATH`` on which no C or C++ compiler is found, for tests and benchmarks of a machine that has none:
    ``folder`` (created, emptied) filled with links to every command on ``path`` (default: this process's
    ``PATH``) except the compilers (``cc``, ``c++``, ``gcc``, ``g++``, ``clang++``, ... also with a version or a
    target in their names). Leave ``CXX`` and ``CC`` unset beside it.

    Returns:
        ``folder``, as a ``PATH`` value.
    """
    target = pathlib.Path(folder)
    if target.exists():
        for entry in target.iterdir():
            entry.unlink()
    target.mkdir(parents=True, exist_ok=True)
    for directory in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        try:
            commands = sorted(pathlib.Path(directory).iterdir()) if directory else []
        except OSError:
            continue
        for command in commands:
            link = target / command.name
            if _COMPILER.match(command.name) or link.exists() or link.is_symlink():
                continue
            if command.is_file() and os.access(command, os.X_OK):
                link.symlink_to(command)
    return str(target)
