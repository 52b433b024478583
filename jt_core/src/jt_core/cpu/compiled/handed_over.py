"""The kernels the compiled CPU path handed to Triton's interpreter on this machine, and why.

Each time a call's kernel runs in the interpreter because the compiled path cannot express it, one line says so,
naming the construct and the kernel's source line (file, number and text): logged at INFO (logger
``jt_core.lowering``), or with ``JT_CPU_FALLBACK=warn`` a `jt_core.errors.CpuFallbackWarning`, or with
``JT_CPU_FALLBACK=error`` an `jt_core.errors.UnsupportedKernelError` instead of the hand-over (`policy`). The
kernel, the construct and its source line are kept in the ``cpu`` cache folder, the most recent `KEPT` of them, so
that ``python -m jt_core cpu`` can list them later, from any process.
"""

from __future__ import annotations

import inspect
import os
import threading
import time
from typing import Any

from jt_core import files, integrity, memory, settings
from jt_core.interpreter import rewriting

__all__ = ["KEPT", "POLICIES", "forget", "located", "policy", "recorded", "remember"]

#: The values of ``JT_CPU_FALLBACK``, the default first.
POLICIES = ("info", "warn", "error")


def policy() -> str:
    """What a hand-over does (``JT_CPU_FALLBACK``): ``"info"`` (logged), ``"warn"`` or ``"error"``.

    Raises:
        ValueError: For another value of the variable.
    """
    return settings.choice("JT_CPU_FALLBACK", POLICIES)


def located(line: str | None, kernel: Any = None) -> str:
    """`` at FILE:LINE: TEXT``, the kernel source line an operation comes from (``line`` is ``"FILE:LINE"``), or
    where ``kernel`` (its Python function) is defined when no operation's line is known; empty when neither is."""
    if line is None and kernel is not None:
        try:
            source, first = inspect.getsourcelines(kernel)
            offset = next((i for i, text in enumerate(source) if text.lstrip().startswith("def ")), 0)
            line = f"{inspect.getsourcefile(kernel)}:{first + offset}"
        except (OSError, TypeError):
            return ""
    if not line:
        return ""
    path, _, number = line.rpartition(":")
    return f" at {rewriting.source_line(path, int(number)) if number.isdigit() else line}"


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
