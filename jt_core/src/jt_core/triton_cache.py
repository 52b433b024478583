"""Triton's own compile cache, where Triton has no usable folder: jt's private ``triton`` folder, each file Triton
writes there checked by its integrity record before Triton reads it (`triton_cache_folder`)."""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jt_core.files import atomic_write, cache_folder, make_folders, report_fault, scratch_folder, unusable
from jt_core.integrity import integrity_problem, record_integrity

__all__ = ["checked_triton_cache", "triton_cache_folder"]

log = logging.getLogger("jt_core.files")

_triton_lock = threading.Lock()
_triton_users = 0
_triton_saved: dict[str, Any] = {}
_triton_usable: dict[str, bool] = {}
_triton_manager: list[type] = []
_UNSET = object()


def _usable_folder(path: str) -> bool:
    """Whether Triton can keep its cache in ``path``: it can be created, and a file can be made in it (once per
    folder and process)."""
    known = _triton_usable.get(path)
    if known is None:
        try:
            make_folders(Path(path))
            fd, probe = tempfile.mkstemp(dir=path, prefix=".jt-probe-")
            os.close(fd)
            os.unlink(probe)
            known = True
        except OSError as exc:
            log.info("Triton's cache folder %s cannot be used (%s); Triton uses jt's instead", path, exc)
            known = False
        _triton_usable[path] = known
    return known


def checked_triton_cache() -> type:
    """Triton's file cache manager as jt runs it in its own ``triton`` folder: each file Triton writes gets an
    integrity record beside it and is checked before Triton reads it (a file that fails is a miss: Triton compiles
    again), and a folder that cannot take a file (reported once) sends it to the process's scratch folder, since
    Triton reads back what it has just written."""
    if _triton_manager:
        return _triton_manager[0]
    from triton.runtime.cache import FileCacheManager

    class CheckedFileCacheManager(FileCacheManager):  # type: ignore[misc]
        cache_dir: str
        lock_path: str | None

        def __init__(self, key: str, override: bool = False, dump: bool = False) -> None:
            try:
                super().__init__(key, override, dump)
            except OSError as exc:
                report_fault(Path(self.cache_dir).parent, exc)  # the folder of the key's folder, once for all keys
                self.cache_dir = str(scratch_folder("triton") / key)
                self.lock_path = os.path.join(self.cache_dir, "lock")
                make_folders(Path(self.cache_dir))

        def has_file(self, filename: str) -> bool:
            if not super().has_file(filename):
                return False
            path = Path(self._make_path(filename))
            problem = integrity_problem(path)
            if problem is not None:
                unusable(path, problem)
            return problem is None

        def get_group(self, filename: str) -> dict[str, str] | None:
            group: dict[str, str] | None = super().get_group(filename)
            for child in (group or {}).values():
                problem = integrity_problem(Path(child))
                if problem is not None:
                    unusable(Path(child), problem)
                    return None
            return group

        def put(self, data: Any, filename: str, binary: bool = True) -> str:
            try:
                path: str = super().put(data, filename, binary)
                record_integrity(Path(path))  # without its record (reported), the next process compiles again
                return path
            except OSError as exc:
                report_fault(Path(self.cache_dir).parent, exc)
            target = scratch_folder("triton") / Path(self.cache_dir).name / filename
            make_folders(target.parent)
            atomic_write(target, data if isinstance(data, bytes) else str(data).encode())
            return str(target)

    _triton_manager.append(CheckedFileCacheManager)
    return CheckedFileCacheManager


def _override(knobs: Any, name: str, value: Any) -> None:
    _triton_saved[name] = knobs.__dict__.get(name, _UNSET)
    knobs.__dict__[name] = value


@contextmanager
def triton_cache_folder() -> Iterator[None]:
    """Gives Triton's compiler a cache folder for the duration of a compile, when it has no usable one.

    Triton keeps its own cache in ``TRITON_CACHE_DIR``, by default ``~/.triton/cache``. jax-triton 0.3 sets that
    variable to an empty string when it is imported, and a home folder may be missing or read-only; either way
    every ``triton.compile`` would fail ("Could not create or locate cache dir", ``PermissionError``). Inside this
    context, when Triton's cache folder setting (``triton.knobs.cache.dir``) is empty or names a folder that
    cannot be created or written, it reads jt's private ``triton`` folder instead, kept by
    `checked_triton_cache` (unless ``TRITON_CACHE_MANAGER`` names a manager of the user's own). The settings
    are overridden on Triton's settings object only (assigning a knob would write the environment), and restored
    when the last compile in the process leaves the context; the environment is never written.
    """
    global _triton_users
    from triton import knobs

    with _triton_lock:
        if _triton_users == 0:
            _triton_saved.clear()
            configured = knobs.cache.dir
            if not configured or not _usable_folder(str(configured)):
                try:
                    folder: str | None = str(cache_folder("triton"))
                except OSError:
                    folder = None  # nothing usable at all: Triton reports its own error
                if folder is not None:
                    _override(knobs.cache, "dir", folder)
                    if knobs.cache.manager_class is None:
                        _override(knobs.cache, "manager_class", checked_triton_cache())
        _triton_users += 1
    try:
        yield
    finally:
        with _triton_lock:
            _triton_users -= 1
            if _triton_users == 0:
                for name, previous in _triton_saved.items():
                    if previous is _UNSET:
                        knobs.cache.__dict__.pop(name, None)
                    else:
                        knobs.cache.__dict__[name] = previous
                _triton_saved.clear()
