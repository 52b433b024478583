"""The kernels the compiled CPU path handed to Triton's interpreter on this machine, and why.

Each time a call's kernel runs in the interpreter because the compiled path cannot express it, one INFO line says
so (logger ``jt_core.lowering``), and the kernel, the construct and its source line are kept in the ``cpu`` cache
folder, the most recent `KEPT` of them, so that ``python -m jt_core cpu`` can list them later, from any
process.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from jt_core import files, integrity, memory

__all__ = ["KEPT", "forget", "recorded", "remember"]

#: How many handed-over kernels are kept.
KEPT = 50

_FILE = "handed-over.jt-cpu.json"
_lock = threading.Lock()
#: The pairs kept by this process, not kept again: bounded and emptied by ``jax.clear_caches()`` (`jt_core.memory`).
_seen: memory.BoundedStore[tuple[str, str], bool] = memory.BoundedStore("kernels handed to the interpreter")


def _path() -> Any:
    try:
        return files.entry_path("cpu", _FILE)
    except ValueError:
        return None


def remember(kernel: str, reason: str) -> None:
    """Keeps that ``kernel`` ran in the interpreter for ``reason`` (once per process for each pair). A record that
    cannot be kept (a full disk, an unusable folder) is left out: it never fails the call."""
    try:
        _remember(kernel, reason)
    except (OSError, ValueError):
        pass


def _remember(kernel: str, reason: str) -> None:
    key = (kernel, reason)
    with _lock:
        if key in _seen:
            return
        _seen.put(key, True)
        path = _path()
        if path is None:
            return
        with files.file_lock(files.lock_path(path)):  # unlocked where no lock can be had: a record may be lost
            entries = [e for e in recorded() if (e.get("kernel"), e.get("reason")) != key]
            entries.append({"kernel": kernel, "reason": reason, "time": time.time(), "pid": os.getpid()})
            integrity.write_record(path, {"handed_over": entries[-KEPT:]})


def recorded() -> list[dict[str, Any]]:
    """The kernels kept, oldest first: ``{"kernel", "reason", "time", "pid"}`` each."""
    path = _path()
    data = integrity.read_record(path) if path is not None else None
    entries = data.get("handed_over", []) if data else []
    return [e for e in entries if isinstance(e, dict) and isinstance(e.get("kernel"), str)]


def forget() -> int:
    """Forgets every kernel kept; returns how many there were."""
    count = len(recorded())
    path = _path()
    if path is not None:
        files.discard(path)
    _seen.cache_clear()
    return count
