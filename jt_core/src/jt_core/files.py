"""Per-machine files: jt's cache folder, one subfolder per purpose, kept private, written atomically, checked on
every read, and never a reason for a call to fail.

Everything jt keeps between processes lives under one root, ``JT_CACHE_DIR`` (default ``$XDG_CACHE_HOME/jt`` or
``~/.cache/jt``), in one subfolder per purpose (`PURPOSES`). Some of it is executed: built libraries are
loaded into the process (``native``), compiled GPU kernels are loaded onto the GPU (``kernels``, ``rocm-hsaco``),
and the CPU backend's kernels (their Triton IR, in ``kernels``) are compiled into the computation.
So before anything is read from the root or a subfolder, jt checks that the folder belongs to the current user and
that neither its group nor others may write to it, and that it is no symbolic link of another user's (who could
point it elsewhere after the check). A folder that fails the check is never used: jt warns once, saying why, and
works from a private folder instead (the default location when that one passes, else a fresh temporary folder for
the process, removed when it exits). The same holds for a folder that cannot be created. jt creates its folders,
and the missing folders above them, with mode 0700 whatever the umask (`make_folders`).

The root may be a folder that also holds files of the user's own. jt's files are those named as it names them
(`ENTRY_NAMES`, `kept_files`); Triton's, which Triton names, count as jt's only in a ``triton`` folder
jt created, which holds jt's marker (`MARKER`). Names taken from the user's code are made fit for a file
name first (`safe_name`).

Files are written to a temporary file in the same folder and renamed into place, so readers in other threads and
processes never see a torn file, and two writers of the same file simply replace each other. Each file carries a
record of its size and SHA-256 (`jt_core.integrity`) or is named by its
contents, and is checked against it before every use: a file that fails the check is deleted with a warning and
made again. Work that should happen once per machine (building a native library, compiling a kernel) runs under
`file_lock`: one process does it while the others on the host wait, then find the result.

The cache only saves time, so no fault in it fails a call: a file that cannot be read is a miss, and a file that
cannot be written (a full disk, a read-only folder, a folder where the file should be) leaves the work uncached,
with one warning per folder (`report_fault`). Temporary files of writers that were killed are removed once
they are older than any write takes (`STALE_SECONDS`).
"""

from __future__ import annotations

import atexit
import errno
import fcntl
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jt_core import settings
from jt_core.errors import warn_in_user_code

__all__ = [
    "ENTRY_NAMES",
    "MARKER",
    "PURPOSES",
    "STALE_SECONDS",
    "atomic_write",
    "cache_folder",
    "cache_root",
    "configured_root",
    "created_by_jt",
    "discard",
    "entry_path",
    "file_lock",
    "folder_problem",
    "is_entry",
    "kept_files",
    "lock_path",
    "make_folders",
    "private_folder",
    "read_file",
    "remove_stale_temporaries",
    "report_fault",
    "safe_name",
    "scratch_folder",
    "unusable",
    "write_file",
]

#: The subfolders of the cache root and what each holds.
PURPOSES: dict[str, str] = {
    "kernels": "compiled kernels (GPU device code; the CPU backend's Triton IR, which its compiled path runs)",
    "autotune": "autotuning winners",
    "vmap": "generated batching wrapper kernels (Python sources, for reading; run from memory)",
    "native": "built launch-handler libraries (loaded into the process)",
    "rocm-hsaco": "HSACO files for jaxlib's ROCm handler (loaded onto the GPU)",
    "xla": "which Triton IR XLA compiled on this machine (records)",
    "triton": "Triton's own compile cache, when Triton has no usable folder of its own",
    "plugins": "what plugins raised while serving calls (shown by python -m jt_core plugins)",
    "cpu": "the kernels the compiled CPU path handed to Triton's interpreter, and why (python -m jt_core cpu)",
}

#: How jt names the files it keeps in each folder: ``cache info`` counts and ``cache clear`` removes only files
#: named so (the cache root may be a folder that holds files of the user's own). Triton's own files under the
#: ``triton`` folder have names of Triton's choosing: they count as jt's only in a folder jt created
#: (`created_by_jt`).
ENTRY_NAMES: dict[str, re.Pattern[str]] = {
    "kernels": re.compile(r"[0-9a-f]{64}\.jtk"),
    "autotune": re.compile(r"[0-9a-f]{64}\.json"),
    "vmap": re.compile(r"_jt_vmap_[A-Za-z0-9_]+_[0-9a-f]{16}\.py"),
    "native": re.compile(r"lib[A-Za-z0-9_-]+-[0-9a-f]{12,64}\.so(?:\.integrity\.json|\.failed\.json)?"),
    "rocm-hsaco": re.compile(r"[A-Za-z0-9_-]+-[0-9a-f]{64}\.hsaco"),
    "xla": re.compile(r"[0-9a-f]{64}\.json"),
    "triton": re.compile(r"[A-Za-z0-9_.-]+"),
    "plugins": re.compile(r"[A-Za-z0-9_-]+\.jt-faults\.json"),
    "cpu": re.compile(r"handed-over\.jt-cpu\.json"),
}

#: Age in seconds beyond which a temporary file is a killed writer's leftover (no write or build takes that long).
STALE_SECONDS = 3600.0

log = logging.getLogger("jt_core.files")

_lock = threading.Lock()
_fallbacks: dict[Path, Path] = {}
_faults: set[Path] = set()
_swept: set[Path] = set()


def default_root() -> Path:
    """``$XDG_CACHE_HOME/jt``, else ``~/.cache/jt``."""
    xdg = settings.text("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "jt"


def configured_root() -> Path:
    """The root the environment asks for (``JT_CACHE_DIR`` or the default), before any check."""
    configured = settings.text("JT_CACHE_DIR")
    return Path(configured).expanduser() if configured else default_root()


def folder_problem(path: Path) -> str | None:
    """Why ``path`` must not be trusted, or ``None``: a symbolic link owned by someone else (it may be pointed
    elsewhere at any time), or a folder owned by someone else or writable by its group or others."""
    try:
        link = path.lstat()
        info = path.stat()
    except OSError as exc:
        return f"it cannot be inspected ({exc})"
    if stat.S_ISLNK(link.st_mode) and hasattr(os, "getuid") and link.st_uid != os.getuid():
        return (
            f"it is a symbolic link owned by user id {link.st_uid}, not by this user ({os.getuid()}), who may point "
            "it elsewhere at any time"
        )
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"it belongs to user id {info.st_uid}, not to this user ({os.getuid()})"
    loose = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if loose:
        who = " and ".join(w for w, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if loose & bit)
        return f"{who} may write to it (mode {stat.S_IMODE(info.st_mode):o})"
    return None


#: The file jt puts in each folder it creates: Triton's files count as jt's only in a folder that holds it.
MARKER = ".jt-folder"
_MARKER_TEXT = b"jt created this folder; python -m jt_core cache clear removes only what jt keeps in it\n"


def make_folders(path: Path, mode: int = 0o700) -> bool:
    """Creates ``path`` and every missing folder above it, each with ``mode`` whatever the umask (``Path.mkdir``
    gives the folders above the default mode, world-writable under ``umask 000``).

    Returns:
        Whether ``path`` itself was created by this call.

    Raises:
        OSError: When a folder cannot be created (a file in the way, no permission).
    """
    missing = []
    folder = path
    while not os.path.lexists(folder) and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    created = False
    for folder in reversed(missing):
        try:
            os.mkdir(folder, mode)
        except FileExistsError:
            created = False
            continue
        os.chmod(folder, mode)  # the umask may have taken bits that mode gives
        created = True
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "it is not a folder", str(path))
    return created


def _mark(folder: Path) -> None:
    """Leaves `MARKER` in a folder jt has just created (a folder without it is taken as someone else's)."""
    try:
        atomic_write(folder / MARKER, _MARKER_TEXT)
    except OSError as exc:
        log.debug("no marker in %s: %s", folder, exc)


def created_by_jt(folder: Path) -> bool:
    """Whether jt created ``folder`` (it holds `MARKER` as a plain file, and is itself no link)."""
    try:
        return stat.S_ISDIR(folder.lstat().st_mode) and stat.S_ISREG((folder / MARKER).lstat().st_mode)
    except OSError:
        return False


def _make_private(path: Path, marked: bool = False) -> str | None:
    """Creates ``path`` private (0700, its missing parents too), marked as jt's when ``marked`` and created here,
    and returns why it must not be used, or ``None``."""
    try:
        created = make_folders(path)
    except OSError as exc:
        return f"it cannot be created ({exc})"
    problem = folder_problem(path)
    if created and marked and problem is None:
        _mark(path)
    return problem


def _temporary_root() -> Path:
    """A fresh private folder for this process, removed when the process exits."""
    folder = Path(tempfile.mkdtemp(prefix="jt-cache-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _fallback(refused: Path, reason: str, candidates: tuple[Path, ...]) -> Path:
    """A private root to use instead of ``refused``: the first candidate that passes the check, else a fresh
    temporary folder. Warns once per refused folder.

    Raises:
        OSError: When not even a temporary folder can be created (the caller works uncached).
    """
    with _lock:
        chosen = _fallbacks.get(refused)
        if chosen is not None:
            return chosen
        chosen = next((c for c in candidates if c != refused and _make_private(c) is None), None)
        if chosen is None:
            chosen = _temporary_root()
        _fallbacks[refused] = chosen
    if reason.startswith("it cannot be created"):
        why = "It works from"
    else:
        why = "jt executes code kept there (built libraries, compiled kernels), so it works from"
    warn_in_user_code(
        f"jt does not use the cache folder {str(refused)!r}: {reason}. {why} the private folder {str(chosen)!r} "
        "instead. Make the folder yours, private (chmod 700) and writable, or point JT_CACHE_DIR at one.",
        RuntimeWarning,
    )
    return chosen


def cache_root() -> Path:
    """The cache root, created private (mode 0700) if missing, and checked before use.

    Raises:
        OSError: When no folder at all can be had (not even a temporary one): the caller works uncached.
    """
    configured = configured_root()
    problem = _make_private(configured)
    return configured if problem is None else _fallback(configured, problem, (default_root(),))


def cache_folder(purpose: str) -> Path:
    """The subfolder of the cache root for ``purpose`` (one of `PURPOSES`), created private and checked.

    The first use in a process also removes killed writers' temporary files from it
    (`remove_stale_temporaries`).

    Raises:
        ValueError: For an unknown purpose.
        OSError: When no folder at all can be had: the caller works uncached.
    """
    if purpose not in PURPOSES:
        raise ValueError(f"unknown cache folder {purpose!r}; known: {sorted(PURPOSES)}")
    folder = cache_root() / purpose
    problem = _make_private(folder, marked=True)
    if problem is not None:
        folder = _fallback(folder, problem, ()) / purpose
        if make_folders(folder):
            _mark(folder)
    if folder not in _swept:
        _swept.add(folder)
        remove_stale_temporaries(folder, purpose)
    return folder


_scratch: list[Path] = []


def scratch_folder(purpose: str) -> Path:
    """A private folder of this process for ``purpose``, removed when the process exits: where jt puts what it
    needs as a file (a built library, an HSACO) when the cache folder cannot take it.

    Raises:
        OSError: When not even a temporary folder can be created.
    """
    with _lock:
        if not _scratch:
            _scratch.append(_temporary_root())
        folder = _scratch[0] / purpose
    make_folders(folder)
    return folder


def entry_path(purpose: str, name: str) -> Path | None:
    """Where the file ``name`` of the ``purpose`` folder lies, or ``None`` when no folder can be had at all (a full
    disk, say): then the fault is reported once (`report_fault`) and the caller works uncached.

    Raises:
        ValueError: When ``name`` is not named as jt names the entries of that folder (`is_entry`): a name
            holding a path separator or ``..`` never reaches the file system.
    """
    if not is_entry(purpose, name):
        raise ValueError(f"{name!r} is not the name of an entry of jt's {purpose!r} folder")
    try:
        return cache_folder(purpose) / name
    except OSError as exc:
        report_fault(configured_root() / purpose, exc, "create")
        return None


def safe_name(text: str, limit: int = 80) -> str:
    """``text`` (a kernel's, a call's or a plugin's name) made fit to be part of a file name: every character but
    ASCII letters, digits, ``_`` and ``-`` becomes ``_`` (so no ``/``, no ``..``, nothing a file system or UTF-8
    refuses), cut to ``limit`` characters; ``"kernel"`` when nothing is left."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", text)[:limit] or "kernel"


def is_entry(purpose: str, name: str) -> bool:
    """Whether ``name`` is named as jt names the files of its ``purpose`` folder (`ENTRY_NAMES`)."""
    pattern = ENTRY_NAMES.get(purpose)
    return pattern is not None and pattern.fullmatch(name) is not None and name not in (".", "..")


def _is_plain_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def kept_files(purpose: str, folder: Path) -> list[Path]:
    """The files jt keeps in ``folder``, the cache root's ``purpose`` folder: those named as jt names them, and in
    the ``triton`` folder, when jt created it, Triton's files in their per-kernel folders. Symbolic links are
    neither followed nor listed, and neither are lock files and the temporary files of writers at work.

    Nothing else is listed: a folder the user pointed ``JT_CACHE_DIR`` at may hold files of their own.
    """
    if not _is_plain_folder(folder):
        return []  # a link in place of the folder leads out of jt's folder
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    if purpose != "triton":
        return [folder / name for name in names if is_entry(purpose, name) and _is_plain_file(folder / name)]
    if not created_by_jt(folder):
        return []
    found = []
    for name in names:
        if name.startswith(".") or not _is_plain_folder(folder / name):
            continue
        for parent, _, children in os.walk(folder / name):  # os.walk follows no link to a folder
            for child in sorted(children):
                path = Path(parent) / child
                if not child.startswith(".") and not child.endswith(".lock") and _is_plain_file(path):
                    found.append(path)
    return found


def _is_plain_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False


def private_folder(path: Path, purpose: str) -> Path:
    """``path`` (a folder named by the user, such as ``JT_ROCM_HSACO_DIR``), created private and given the same
    check as the cache folders; when it fails, jt warns once and uses the cache root's ``purpose`` folder."""
    problem = _make_private(path)
    if problem is None:
        return path
    instead = cache_folder(purpose)
    with _lock:
        known = _fallbacks.setdefault(path, instead)
    if known is instead:
        warn_in_user_code(
            f"jt does not use the folder {str(path)!r}: {problem}. jt loads code kept there onto the GPU, so it "
            f"uses its private folder {str(instead)!r} instead. Make the folder yours, private (chmod 700) and "
            "writable, or unset the variable that names it.",
            RuntimeWarning,
        )
    return known


# -- faults ----------------------------------------------------------------------------------------------------


def report_fault(folder: Path, exc: OSError, doing: str = "write to", consequence: str = "") -> None:
    """Says, once per folder and process, that jt cannot use ``folder`` (its ``doing`` failed with ``exc``) and what
    it does instead: by default, it works uncached there."""
    with _lock:
        if folder in _faults:
            return
        _faults.add(folder)
    reason = "a folder is where a file should be" if exc.errno == errno.EISDIR else exc.strerror or str(exc)
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(folder) else ""
    consequence = consequence or (
        "What jt would keep there is made again when needed instead (calls give the same results, only the time "
        "the cache saves is lost). Free space or make the folder writable, or point JT_CACHE_DIR at another folder."
    )
    warn_in_user_code(f"jt cannot {doing} the folder {str(folder)!r}: {reason}{where}. {consequence}", RuntimeWarning)


def read_file(path: Path) -> bytes | None:
    """The contents of ``path``, or ``None`` when it is missing or cannot be read (a folder in its place, an I/O
    error): for a cache, a miss."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.debug("cache file %s cannot be read: %s", path, exc)
        return None


def discard(path: Path) -> None:
    """Removes a bad or stale cache file; an empty folder in a file's place goes too. Never raises."""
    try:
        path.unlink()
    except (IsADirectoryError, PermissionError):
        try:
            path.rmdir()  # only an empty folder: anything else found in jt's folder is left alone
        except OSError:
            pass
    except OSError:
        pass


def write_file(path: Path, data: bytes) -> bool:
    """Writes ``data`` to ``path`` atomically (`atomic_write`); an empty folder in its place is replaced.

    Returns:
        ``True`` when written; ``False`` when the folder cannot take it (full disk, read-only, a non-empty folder
        in the file's place...), after `report_fault`: the caller goes on uncached.
    """
    try:
        if path.is_dir():
            discard(path)
        atomic_write(path, data)
        return True
    except OSError as exc:
        report_fault(path.parent, exc)
        return False


def unusable(path: Path, reason: str) -> None:
    """Warns that the cache file ``path`` fails its check (``reason``) and deletes it, so it is made again."""
    warn_in_user_code(
        f"jt cache file {str(path)!r} is unusable ({reason}); it is deleted and made again", RuntimeWarning
    )
    discard(path)


# -- temporary files and locks ---------------------------------------------------------------------------------


_TEMPORARY = re.compile(r"\.(?P<entry>.+)\.[A-Za-z0-9_]+\.(?:part|tmp)")


def _is_temporary(name: str, purpose: str | None) -> bool:
    """Whether ``name`` is a temporary file of a jt writer (`atomic_write`, a native build) of an entry of the
    ``purpose`` folder (of any entry when ``purpose`` is ``None``)."""
    match = _TEMPORARY.fullmatch(name)
    if match is None:
        return False
    entry = match.group("entry")
    if purpose is None:
        return any(is_entry(p, entry) for p in ENTRY_NAMES if p != "triton")
    return is_entry(purpose, entry)


def remove_stale_temporaries(folder: Path, purpose: str | None = None, prefix: str | None = None) -> int:
    """Removes the temporary files left in ``folder`` by jt writers that were killed; returns how many.

    Only temporary files of jt's own entries count (`_is_temporary`; ``purpose``: the folder's, ``None``
    for a folder of no single purpose). One is stale once it is older than `STALE_SECONDS`; one whose name
    starts with ``prefix`` goes whatever its age (the caller holds the lock of the entry it belongs to, so no live
    writer uses it). Never raises.
    """
    removed = 0
    now = time.time()
    if not _is_plain_folder(folder):
        return 0  # a link in place of the folder leads out of it
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    for name in names:
        if not _is_temporary(name, purpose):
            continue
        path = folder / name
        try:
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode):
                continue
            if not (prefix is not None and name.startswith(prefix)) and now - info.st_mtime < STALE_SECONDS:
                continue
            path.unlink()
            removed += 1
        except OSError:
            continue
    return removed


def atomic_write(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary file in the same folder and a rename.

    Raises:
        OSError: When the folder cannot take the file (see `write_file` for the form that does not raise).
    """
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


def lock_path(path: Path) -> Path:
    """The lock file of the entry ``path``: ``.<name>.lock`` beside it."""
    return path.with_name(f".{path.name}.lock")


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
