"""Caches of compiled kernels. In memory: one entry per (kernel, specialisation, target, options)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

_lock = threading.Lock()
_memory: dict[Hashable, Any] = {}
_per_kernel: dict[Any, set[Hashable]] = {}


def memoized(kernel: Any, key: Hashable, build: Callable[[], Any]) -> Any:
    """Returns the cached value for ``(kernel, key)``, building it once (the build runs outside the lock)."""
    full = (kernel, key)
    with _lock:
        if full in _memory:
            return _memory[full]
    value = build()
    with _lock:
        value = _memory.setdefault(full, value)
        _per_kernel.setdefault(kernel, set()).add(full)
    return value


def compiled_count(kernel: Any) -> int:
    """How many entries the in-memory cache holds for ``kernel``."""
    with _lock:
        return len(_per_kernel.get(kernel, ()))


def clear_memory() -> None:
    """Drops every in-memory entry."""
    with _lock:
        _memory.clear()
        _per_kernel.clear()
