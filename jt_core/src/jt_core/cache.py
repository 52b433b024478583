"""Caches of compiled kernels: one in memory per process, one on disk per machine.

The disk cache keeps every compiled kernel its backend lets it keep
(`may_keep_on_disk`), keyed on everything that changes the binary and nothing
else: the kernel's source together with the sources of the ``@triton.jit`` functions it calls (Triton's own
``cache_key``), its dialect, the specialisation, constants, target, options, the backend, where the kernel is defined (its file
and first line, which what is kept names), the Triton and jt versions, and the installed code of jt-core and of the
backend's distribution (each file's path, size and modification time: code changed under one version number
compiles afresh); values by their type and exact bits (`jt_core.options.exact_form`), so that two NaNs of other payloads,
or ``-0.0`` and ``0.0``, are other entries.

Configuration (read on every use, see `jt_core.settings`):

* ``JT_CACHE_DIR`` -- the cache root (`jt_core.files`); compiled kernels live in its ``kernels`` folder;
* ``JT_DISABLE_CACHE=1`` -- neither read nor write the disk cache;
* ``JT_CACHE_MAX_BYTES`` -- size bound of the compiled-kernel entries (default 2 GiB); the least recently used
  entries are evicted beyond it.

Entries are written atomically (`jt_core.files.atomic_write`), so concurrent processes never see a torn entry.
Each entry carries its integrity record, a SHA-256 checksum of its contents (the sizes of its parts are inside): a
corrupt or truncated entry is reported with a warning, deleted and rebuilt, never loaded. Entries are JSON plus raw
binary blobs; nothing is unpickled. The binary is device code that a launcher loads onto the GPU (for the CPU
backend, the kernel's Triton IR, which its compiled path turns into XLA operations), which is why the folder is
checked like every folder jt executes from. A compile that misses runs under the entry's lock
(`jt_core.files.file_lock`): processes of one machine compiling the same kernel at once compile it once, and the
others read the entry back. The cache only saves time: an entry that cannot be read is a miss, and one that cannot be
written (a full disk, a read-only folder) leaves the kernel compiled but uncached, with one warning for the folder.

`info` and `clear` cover every folder jt keeps (`jt_core.files.PURPOSES`), Triton's files under a
``triton`` folder jt created included, and count or delete nothing else (`jt_core.files.kept_files`).

The in-memory cache is one of jt's bounded stores (`jt_core.memory`): ``JT_MEMORY_CACHE_ENTRIES`` entries at
most, the kernel held weakly, emptied by ``jax.clear_caches()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import json
import logging
import os
import pathlib
import stat
import struct
import threading
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from jt_core import files, memory, settings
from jt_core._version import __version__
from jt_core.options import exact_form
from jt_core.plugin.roles import CompileRequest, invoke
from jt_core.plugin.values import CompiledKernel, Target

log = logging.getLogger("jt_core.cache")

_MAGIC = b"JTK1"
_SUFFIX = ".jtk"
_DEFAULT_MAX_BYTES = 2 << 30

_lock = threading.Lock()
#: The compiled variants of this process, by kernel (held weakly) and variant: bounded and emptied by
#: ``jax.clear_caches()`` (`jt_core.memory`).
_memory: memory.BoundedStore[tuple[Any, Hashable], Any] = memory.BoundedStore("compiled kernel variants")
memory.mourn_in(_memory)
_stats = {"memory_hits": 0, "disk_hits": 0, "disk_misses": 0, "disk_writes": 0, "corrupt": 0}


# -- in memory -------------------------------------------------------------------------------------------------


def memoized(kernel: Any, key: Hashable, build: Callable[[], Any]) -> Any:
    """Returns the cached value for ``(kernel, key)``, building it once (the build runs outside the lock).

    The entry holds ``kernel`` weakly: it goes when the kernel does, when it is the least recently used beyond
    ``JT_MEMORY_CACHE_ENTRIES``, and at ``jax.clear_caches()``; a later call builds it again."""
    full = (memory.kernel_key(kernel), key)
    value = _memory.get(full)
    if value is not None:
        with _lock:
            _stats["memory_hits"] += 1
        return value
    return _memory.setdefault(full, build())


def compiled_count(kernel: Any) -> int:
    """How many entries the in-memory cache holds for ``kernel``."""
    ref = memory.kernel_key(kernel)
    return sum(1 for kernel_ref, _ in _memory if kernel_ref == ref)


def clear_memory() -> None:
    """Drops every in-memory entry."""
    _memory.cache_clear()


def stats() -> dict[str, int]:
    """Counters of this process: memory hits, disk hits/misses/writes, corrupt entries found."""
    with _lock:
        return dict(_stats)


# -- on disk ---------------------------------------------------------------------------------------------------


def enabled() -> bool:
    """Whether the disk cache is used (``JT_DISABLE_CACHE`` unset or false)."""
    return not settings.flag("JT_DISABLE_CACHE")


def cache_dir() -> pathlib.Path:
    """The cache root (`jt_core.files.cache_root`)."""
    return files.cache_root()


def kernels_dir() -> pathlib.Path:
    """Where compiled kernels are kept."""
    return files.cache_folder("kernels")


def max_bytes() -> int:
    """The size bound of the compiled-kernel entries (``JT_CACHE_MAX_BYTES``)."""
    return settings.integer("JT_CACHE_MAX_BYTES", _DEFAULT_MAX_BYTES)


def source_key(kernel: Any) -> str:
    """The kernel's source identity, including the ``@triton.jit`` functions it calls."""
    key = getattr(kernel, "cache_key", None)
    if isinstance(key, str) and key:
        return key
    src = getattr(kernel, "src", None)
    if src is None:
        import inspect

        src = inspect.getsource(getattr(kernel, "fn", kernel))
    return hashlib.sha256(str(src).encode()).hexdigest()


@functools.cache
def code_stamp(package: str) -> str:
    """A digest of the ``.py`` files of the installed ``package`` (each one's path, size and modification time, not
    its content: under a millisecond for jt-core's files, once per process), so that a disk-cache entry compiled by other code under the
    same version number (a source checkout edited in place) is not taken for this code's."""
    stamps: list[tuple[str, int, int]] = []

    def walk(folder: str) -> None:
        with os.scandir(folder) as found:
            for entry in found:
                if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                    walk(entry.path)
                elif entry.name.endswith(".py"):
                    seen = entry.stat()
                    stamps.append((entry.path, seen.st_size, seen.st_mtime_ns))

    try:
        where = getattr(importlib.import_module(package), "__file__", None)  # None: __main__ of ``python -c``
        if where:
            walk(os.path.dirname(where))
    except (ImportError, OSError):
        return ""
    return hashlib.sha256(json.dumps(sorted(stamps)).encode()).hexdigest()


def defined_at(kernel: Any) -> str:
    """``FILE:LINE`` of the kernel's ``def`` (``""`` for a kernel without Python code)."""
    code = getattr(getattr(kernel, "fn", kernel), "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else ""


def compile_key(request: CompileRequest) -> str:
    """The disk-cache key of a compile request (hex SHA-256)."""
    import triton

    parts = {
        "jt": __version__,
        "triton": triton.__version__,
        "source": source_key(request.kernel),
        # Where the kernel is defined: what a compile keeps (messages, line tables) names its file and lines, and
        # the same source in another file or at another line must not be told it is where it was.
        "defined_at": defined_at(request.kernel),
        "dialect": request.dialect.name,
        "backend": f"{type(request.backend).__module__}.{type(request.backend).__qualname__}",
        "backend_tag": invoke(request.backend, "cache_tag"),
        "code": [code_stamp("jt_core"), code_stamp(type(request.backend).__module__.partition(".")[0])],
        # Values by their type and exact bits (`exact_form`), never by repr: every NaN prints "nan".
        "signature": exact_form(dict(request.specialization.signature)),
        "constexprs": exact_form(dict(request.specialization.constexprs)),
        "attrs": exact_form({k: [list(a) for a in v] for k, v in request.specialization.attrs.items()}),
        "target": exact_form(request.target),
        "options": exact_form(request.options),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _encode(kernel: CompiledKernel) -> bytes:
    blobs: list[bytes] = [kernel.binary]
    asm_index: dict[str, list[Any]] = {}
    for stage, value in kernel.asm.items():
        if isinstance(value, bytes):
            asm_index[stage] = ["bytes", len(blobs)]
            blobs.append(value)
        else:
            asm_index[stage] = ["str", len(blobs)]
            blobs.append(str(value).encode())
    header = {
        "name": kernel.name,
        "target": dataclasses.asdict(kernel.target),
        "asm": asm_index,
        "metadata": kernel.metadata,
        "num_warps": kernel.num_warps,
        "shared_mem": kernel.shared_mem,
        "cluster_dims": list(kernel.cluster_dims),
        "global_scratch_size": kernel.global_scratch_size,
        "global_scratch_align": kernel.global_scratch_align,
        "blob_sizes": [len(b) for b in blobs],
    }
    head = json.dumps(header, sort_keys=True).encode()
    body = struct.pack("<Q", len(head)) + head + b"".join(blobs)
    return _MAGIC + hashlib.sha256(body).digest() + body


def _decode(data: bytes) -> CompiledKernel:
    if len(data) < 4 + 32 + 8 or data[:4] != _MAGIC:
        raise ValueError("not a jt cache entry")
    digest, body = data[4:36], data[36:]
    if hashlib.sha256(body).digest() != digest:
        raise ValueError("checksum mismatch (truncated or corrupt)")
    (head_len,) = struct.unpack("<Q", body[:8])
    header = json.loads(body[8 : 8 + head_len])
    blobs, offset = [], 8 + head_len
    for size in header["blob_sizes"]:
        blobs.append(body[offset : offset + size])
        offset += size
    asm = {stage: (blobs[i] if kind == "bytes" else blobs[i].decode()) for stage, (kind, i) in header["asm"].items()}
    target = header["target"]
    return CompiledKernel(
        name=header["name"],
        target=Target(target["platform"], target["arch"], target["warp_size"]),
        binary=blobs[0],
        asm=asm,
        metadata=header["metadata"],
        num_warps=header["num_warps"],
        shared_mem=header["shared_mem"],
        cluster_dims=tuple(header["cluster_dims"]),  # type: ignore[arg-type]
        global_scratch_size=header["global_scratch_size"],
        global_scratch_align=header["global_scratch_align"],
    )


def _entry_path(key: str) -> pathlib.Path | None:
    return files.entry_path("kernels", key + _SUFFIX)


def load(key: str, *, count: bool = True) -> CompiledKernel | None:
    """The cached kernel for ``key``, or ``None``: missing, disabled, unreadable, or corrupt (then deleted with a
    warning). ``count=False`` leaves the hit and miss counters alone (a second look under the entry's lock)."""
    if not enabled():
        return None
    path = _entry_path(key)
    data = None if path is None else files.read_file(path)
    if path is None or data is None:
        if count:
            with _lock:
                _stats["disk_misses"] += 1
        return None
    try:
        kernel = _decode(data)
    except (ValueError, KeyError, IndexError, TypeError, struct.error, UnicodeDecodeError) as exc:
        with _lock:
            _stats["corrupt"] += 1
        files.unusable(path, str(exc))
        return None
    try:
        os.utime(path)
    except OSError:
        pass
    if count:
        with _lock:
            _stats["disk_hits"] += 1
    return kernel


def store(key: str, kernel: CompiledKernel) -> None:
    """Writes ``kernel`` under ``key`` (no-op when disabled or when its metadata is not JSON data). A folder that
    cannot take it is reported once (`jt_core.files.report_fault`) and the kernel stays uncached."""
    if not enabled():
        return
    try:
        data = _encode(kernel)
    except (TypeError, ValueError) as exc:
        log.debug("not caching %s: %s", kernel.name, exc)
        return
    path = _entry_path(key)
    if path is None or not files.write_file(path, data):
        return
    with _lock:
        _stats["disk_writes"] += 1
    try:
        evict()
    except OSError as exc:
        files.report_fault(path.parent, exc, "evict from")


def _entry_stats() -> list[tuple[pathlib.Path, os.stat_result]]:
    """The compiled-kernel entries with their stat results, least recently used first.

    Other threads and processes add, refresh and delete entries meanwhile: an entry that vanishes between the
    listing and its ``stat`` is skipped.
    """
    found = []
    for path in files.kept_files("kernels", kernels_dir()):
        try:
            info = path.lstat()
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            found.append((path, info))
    return sorted(found, key=lambda item: item[1].st_mtime)


def entries() -> list[pathlib.Path]:
    """The compiled-kernel entries, least recently used first."""
    return [path for path, _ in _entry_stats()]


def evict(limit: int | None = None) -> int:
    """Deletes least recently used entries until the total size is within ``limit``; returns how many."""
    bound = max_bytes() if limit is None else limit
    stats = _entry_stats()
    paths = [path for path, _ in stats]
    sizes = {path: st.st_size for path, st in stats}
    total = sum(sizes.values())
    removed = 0
    for path in paths:
        if total <= bound:
            break
        try:
            path.unlink()
            removed += 1
        except OSError:
            pass
        files.discard(files.lock_path(path))
        total -= sizes[path]
    return removed


def _folder_usage(purpose: str, folder: pathlib.Path) -> tuple[int, int]:
    count = size = 0
    for path in files.kept_files(purpose, folder):
        try:
            size += path.lstat().st_size
        except OSError:
            continue
        count += 1
    return count, size


def info() -> dict[str, Any]:
    """What the cache holds: the compiled-kernel entries, and the files and bytes jt keeps in each of its folders
    (`jt_core.files.kept_files`: files of the user's own there are not counted)."""
    stats = _entry_stats()
    folders = {}
    for purpose, what in files.PURPOSES.items():
        count, size = _folder_usage(purpose, cache_dir() / purpose)
        folders[purpose] = {"files": count, "bytes": size, "holds": what}
    return {
        "directory": str(cache_dir()),
        "enabled": enabled(),
        "kernels": len(stats),
        "bytes": sum(st.st_size for _, st in stats),
        "max_bytes": max_bytes(),
        "autotune_results": folders["autotune"]["files"],
        "folders": folders,
    }


def clear() -> int:
    """Deletes every file jt keeps (`jt_core.files.kept_files` of every folder of
    `jt_core.files.PURPOSES`: the files jt names as its own, and Triton's files in a ``triton`` folder jt
    created) and the in-memory entries; returns how many files were removed.

    Nothing else goes: files of the user's own in a folder ``JT_CACHE_DIR`` names, and whatever a symbolic link
    leads to (no link is followed). Lock files stay (deleting a lock that another process holds would let a third
    one in beside it), and so do the temporary files of writers at work (younger than
    `jt_core.files.STALE_SECONDS`). Libraries, modules and kernels already loaded by a process stay loaded and
    keep working; whatever a process needs again is made again."""
    removed = 0
    for purpose in files.PURPOSES:
        folder = cache_dir() / purpose
        removed += files.remove_stale_temporaries(folder, purpose)
        emptied: set[pathlib.Path] = set()
        for path in files.kept_files(purpose, folder):
            try:
                path.unlink()
                removed += 1
            except OSError:
                continue
            if path.parent != folder:
                emptied.add(path.parent)
        for parent in sorted(emptied, key=lambda p: len(p.parts), reverse=True):
            while parent != folder:
                try:
                    parent.rmdir()  # only an emptied folder of Triton's, one per kernel
                except OSError:
                    break
                parent = parent.parent
    clear_memory()
    return removed


def compile_cached(request: CompileRequest) -> CompiledKernel:
    """Compiles through the disk cache when the backend allows it: one process of the machine compiles a kernel
    that several want at once, under the entry's lock, while the others wait and read its entry back."""
    backend = request.backend
    if not invoke(backend, "may_keep_on_disk", request=request):
        return invoke(backend, "compile", request=request)
    key = compile_key(request)
    cached = load(key)
    if cached is not None:
        log.debug("disk cache hit for %s (%s)", request.call.name, key[:12])
        return invoke(backend, "restore", cached=cached, request=request)
    if not enabled():
        return invoke(backend, "compile", request=request)
    with _entry_lock(key):
        cached = load(key, count=False)  # compiled by another process while this one waited
        if cached is not None:
            return invoke(backend, "restore", cached=cached, request=request)
        compiled = invoke(backend, "compile", request=request)
        store(key, compiled)
    return compiled


@contextlib.contextmanager
def _entry_lock(key: str) -> Iterator[bool]:
    path = _entry_path(key)
    if path is None:
        yield False  # no folder: uncached, as load() and store() report
        return
    with files.file_lock(files.lock_path(path)) as held:
        yield held
