"""Per-machine files: jt's cache folder, one subfolder per purpose, kept private and written atomically.

Everything jt keeps between processes lives under one root, ``JT_CACHE_DIR`` (default ``$XDG_CACHE_HOME/jt`` or
``~/.cache/jt``), in one subfolder per purpose (:data:`PURPOSES`). Some of it is executed: generated Python
modules are imported (``vmap``), built libraries are loaded into the process (``native``) and compiled kernels are
loaded onto the GPU (``kernels``, ``rocm-hsaco``). So before anything is read from the root or a subfolder, jt
checks that the folder belongs to the current user and that neither its group nor others may write to it. A folder
that fails the check is never used: jt warns once, saying why, and works from a private folder instead (the default
location when that one passes, else a fresh temporary folder for the process).

Files are written to a temporary file in the same folder and renamed into place, so readers in other threads and
processes never see a torn file, and two writers of the same file simply replace each other. Work that should
happen once per machine (building a native library, tuning a kernel) runs under :func:`file_lock`: one process
does it while the others on the host wait, then find the result.
"""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jt_core import settings

__all__ = [
    "PURPOSES",
    "atomic_write",
    "cache_folder",
    "cache_root",
    "configured_root",
    "file_lock",
    "folder_problem",
    "triton_cache_folder",
]

#: The subfolders of the cache root and what each holds.
PURPOSES: dict[str, str] = {
    "kernels": "compiled kernels (device code loaded onto the GPU)",
    "autotune": "autotuning winners",
    "vmap": "generated batching wrapper kernels (Python modules that are imported)",
    "native": "built launch-handler libraries (loaded into the process)",
    "rocm-hsaco": "HSACO files for jaxlib's ROCm handler (loaded onto the GPU)",
    "xla": "which Triton IR XLA compiled on this machine (records)",
    "triton": "Triton's own compile cache, when the environment empties TRITON_CACHE_DIR",
    "plugins": "what plugins raised while serving calls (shown by python -m jt_core plugins)",
}

_lock = threading.Lock()
_fallbacks: dict[Path, Path] = {}


def default_root() -> Path:
    """``$XDG_CACHE_HOME/jt``, else ``~/.cache/jt``."""
    xdg = settings.text("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "jt"


def configured_root() -> Path:
    """The root the environment asks for (``JT_CACHE_DIR`` or the default), before any check."""
    configured = settings.text("JT_CACHE_DIR")
    return Path(configured).expanduser() if configured else default_root()


def folder_problem(path: Path) -> str | None:
    """Why ``path`` must not be trusted (owned by someone else, writable by group or others), or ``None``."""
    try:
        info = path.stat()
    except OSError as exc:
        return f"it cannot be inspected ({exc})"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"it belongs to user id {info.st_uid}, not to this user ({os.getuid()})"
    loose = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if loose:
        who = " and ".join(w for w, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if loose & bit)
        return f"{who} may write to it (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def _make_private(path: Path) -> str | None:
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        return f"it cannot be created ({exc})"
    return folder_problem(path)


def _fallback(unsafe: Path, reason: str, candidates: tuple[Path, ...]) -> Path:
    """A private root to use instead of ``unsafe``: the first candidate that passes the check, else a fresh
    temporary folder. Warns once per unsafe folder."""
    with _lock:
        chosen = _fallbacks.get(unsafe)
        if chosen is not None:
            return chosen
        chosen = next((c for c in candidates if c != unsafe and _make_private(c) is None), None)
        if chosen is None:
            chosen = Path(tempfile.mkdtemp(prefix="jt-cache-"))
        _fallbacks[unsafe] = chosen
    warnings.warn(
        f"jt does not use the cache folder {str(unsafe)!r}: {reason}. jt executes code kept there (generated "
        f"kernels, built libraries), so it works from the private folder {str(chosen)!r} instead. Make the folder "
        "yours and private (chmod 700), or point JT_CACHE_DIR at one.",
        RuntimeWarning,
        stacklevel=3,
    )
    return chosen


def cache_root() -> Path:
    """The cache root, created private (mode 0700) if missing, and checked before use."""
    configured = configured_root()
    problem = _make_private(configured)
    return configured if problem is None else _fallback(configured, problem, (default_root(),))


def cache_folder(purpose: str) -> Path:
    """The subfolder of the cache root for ``purpose`` (one of :data:`PURPOSES`), created private and checked.

    Raises:
        ValueError: For an unknown purpose.
    """
    if purpose not in PURPOSES:
        raise ValueError(f"unknown cache folder {purpose!r}; known: {sorted(PURPOSES)}")
    folder = cache_root() / purpose
    problem = _make_private(folder)
    if problem is None:
        return folder
    folder = _fallback(folder, problem, ()) / purpose
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def atomic_write(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary file in the same folder and a rename."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


@contextmanager
def file_lock(path: Path) -> Iterator[bool]:
    """Holds an exclusive lock on the file ``path`` (created if missing), across processes and threads.

    The lock is the kernel's (``flock``): it is released when the holder exits or dies, so a killed process never
    leaves it held. Each use opens the file anew, so two threads of one process exclude each other too.

    Yields:
        ``True`` when the lock is held; ``False`` when the lock file cannot be created or locked (a read-only
        folder, say): the caller goes on unlocked, which costs at most duplicated work, never a failure.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing the only descriptor of this open file releases the lock


_triton_lock = threading.Lock()
_triton_users = 0
_triton_saved: list[Any] = []
_UNSET = object()


@contextmanager
def triton_cache_folder() -> Iterator[None]:
    """Gives Triton's compiler a cache folder for the duration of a compile, when the environment leaves it none.

    jax-triton 0.3 sets ``TRITON_CACHE_DIR`` to an empty string when it is imported, after which every
    ``triton.compile`` fails ("Could not create or locate cache dir"). Inside this context, when Triton's cache
    folder setting (``triton.knobs.cache.dir``) reads empty, it reads jt's private ``triton`` folder instead. The
    setting is overridden on Triton's settings object only (assigning the knob would write the environment), and
    restored when the last compile in the process leaves the context; the environment is never written.
    """
    global _triton_users
    from triton import knobs

    with _triton_lock:
        if _triton_users == 0:
            _triton_saved.clear()
            if not knobs.cache.dir:
                _triton_saved.append(knobs.cache.__dict__.get("dir", _UNSET))
                knobs.cache.__dict__["dir"] = str(cache_folder("triton"))
        _triton_users += 1
    try:
        yield
    finally:
        with _triton_lock:
            _triton_users -= 1
            if _triton_users == 0 and _triton_saved:
                previous = _triton_saved.pop()
                if previous is _UNSET:
                    knobs.cache.__dict__.pop("dir", None)
                else:
                    knobs.cache.__dict__["dir"] = previous
