"""What jt keeps in memory between calls: bounded stores, emptied by ``jax.clear_caches()``.

A long-running process (a server, a notebook) sees ever new shapes and kernels. Everything jt keeps in memory for
them (compiled variants, the interpreter's rewritten kernels, the generated ``vmap`` wrappers) lives in a
`BoundedStore`, which

* keeps at most ``JT_MEMORY_CACHE_ENTRIES`` entries (default `DEFAULT_ENTRIES`), dropping the least recently
  used one beyond that (``0``: none is kept);
* holds kernels weakly where a kernel is part of the key (`kernel_key`): a kernel the program no longer
  holds takes its entries with it;
* is emptied, with JAX's own caches, by ``jax.clear_caches()`` (`jt_core._compat.on_clear_caches`).

``jax.clear_caches()`` also makes Triton's registry of ``@triton.jit`` functions hold them weakly (Triton 3.9 keeps
the newest kernel of each module and name there for good): a kernel the program dropped is then freed.

Dropping an entry costs only time: what is needed again is made again (compiled, rewritten, generated).
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

from jt_core import _compat, settings

__all__ = [
    "DEFAULT_ENTRIES",
    "ENTRIES_VARIABLE",
    "BoundedStore",
    "KernelRef",
    "entries_limit",
    "kernel_key",
    "mourn_in",
    "sizes",
]

#: The variable bounding every store.
ENTRIES_VARIABLE = "JT_MEMORY_CACHE_ENTRIES"
#: Entries each store keeps by default: room for the variants of a few hundred kernels at a few shapes each, at
#: a few KB to a few tens of KB per entry.
DEFAULT_ENTRIES = 1024


def entries_limit() -> int:
    """How many entries each store keeps (``JT_MEMORY_CACHE_ENTRIES``, read on every insertion).

    Raises:
        ValueError: For a value that is not a whole number, or a negative one, naming the variable.
    """
    limit = settings.integer(ENTRIES_VARIABLE, DEFAULT_ENTRIES)
    if limit < 0:
        raise ValueError(f"environment variable {ENTRIES_VARIABLE} must be 0 or more, got {limit}")
    return limit


K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedStore(Generic[K, V]):
    """A thread-safe least-recently-used map, bounded by `entries_limit` and emptied by
    ``jax.clear_caches()``.

    Args:
        name: What the store holds (JAX lists it among its caches).
        on_drop: Called with each key and value the store drops (evicted, cleared or taken by a dead kernel),
            outside the store's lock: to release what lives beside the entry (a module in ``sys.modules``).
    """

    def __init__(self, name: str, on_drop: Callable[[K, V], None] | None = None) -> None:
        self.name = name
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.RLock()
        self._on_drop = on_drop
        _compat.on_clear_caches(self, f"jt: {name}")
        _stores.append(weakref.ref(self))

    def get(self, key: K) -> V | None:
        """The value under ``key`` (now the most recently used), or ``None``."""
        with self._lock:
            value = self._entries.get(key)
            if value is not None:
                self._entries.move_to_end(key)
            return value

    def setdefault(self, key: K, value: V) -> V:
        """The value under ``key``; stores ``value`` there first when there is none. Evicts beyond the bound."""
        with self._lock:
            known = self._entries.get(key)
            if known is not None:
                self._entries.move_to_end(key)
                return known
            self._entries[key] = value
            dropped = self._evict(entries_limit())
        self._dropped(dropped)
        return value

    def put(self, key: K, value: V) -> None:
        """Stores ``value`` under ``key`` (replacing what was there; now the most recently used). Evicts beyond the
        bound."""
        with self._lock:
            replaced = self._entries.pop(key, None)
            self._entries[key] = value
            dropped = self._evict(entries_limit())
        if replaced is not None and replaced is not value:
            dropped.append((key, replaced))
        self._dropped(dropped)

    def pop(self, key: K) -> V | None:
        """Takes the value under ``key`` out of the store and returns it, or ``None``."""
        with self._lock:
            return self._entries.pop(key, None)

    def drop_where(self, predicate: Callable[[K], bool]) -> int:
        """Drops every entry whose key satisfies ``predicate``; returns how many."""
        with self._lock:
            dropped = [(k, v) for k, v in self._entries.items() if predicate(k)]
            for key, _ in dropped:
                del self._entries[key]
        self._dropped(dropped)
        return len(dropped)

    def values(self) -> list[V]:
        """The values, least recently used first."""
        with self._lock:
            return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def __iter__(self) -> Iterator[K]:
        with self._lock:
            return iter(list(self._entries))

    def cache_clear(self) -> None:
        """Drops every entry (``jax.clear_caches()`` calls this)."""
        with self._lock:
            dropped = list(self._entries.items())
            self._entries.clear()
        self._dropped(dropped)

    # JAX's cache registry also asks these.
    def cache_info(self) -> dict[str, int]:
        return {"currsize": len(self), "maxsize": entries_limit()}

    def cache_keys(self) -> list[K]:
        return list(self)

    def _evict(self, limit: int) -> list[tuple[K, V]]:
        dropped = []
        while len(self._entries) > limit:
            dropped.append(self._entries.popitem(last=False))
        return dropped

    def _dropped(self, dropped: list[tuple[K, V]]) -> None:
        if self._on_drop is not None:
            for key, value in dropped:
                self._on_drop(key, value)


class KernelRef:
    """A kernel held weakly, as part of a store's key: equal for the same live kernel, hashed like it, and, when the
    kernel dies, the cue to drop its entries from the stores that asked (`kernel_key`)."""

    __slots__ = ("__weakref__", "_hash", "_ref")

    def __init__(self, kernel: Any, on_death: Callable[[KernelRef], None] | None) -> None:
        self._hash = hash(kernel)
        callback = None if on_death is None else (lambda _: on_death(self))
        self._ref = weakref.ref(kernel, callback)

    def __call__(self) -> Any:
        return self._ref()

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KernelRef):
            return NotImplemented
        mine = self._ref()
        return self is other or (mine is not None and mine is other._ref())


_stores: list[weakref.ReferenceType[BoundedStore[Any, Any]]] = []


class _TritonRegistry:
    """Has ``jax.clear_caches()`` let go of the kernels a program dropped that Triton's own registry of
    ``JITFunction`` objects still holds (`jt_core._compat.hold_jit_functions_weakly`)."""

    def cache_clear(self) -> None:
        _compat.hold_jit_functions_weakly()


_triton_registry = _TritonRegistry()
_compat.on_clear_caches(_triton_registry, "jt: Triton's registry of jit functions, held weakly")


def sizes() -> dict[str, int]:
    """How many entries each store of the process holds, by what it holds."""
    return {store.name: len(store) for store in (ref() for ref in list(_stores)) if store is not None}


_refs_lock = threading.Lock()
_refs: weakref.WeakKeyDictionary[Any, KernelRef] = weakref.WeakKeyDictionary()
_mourners: list[weakref.ReferenceType[BoundedStore[Any, Any]]] = []


def kernel_key(kernel: Any) -> Any:
    """What stands for ``kernel`` in a store's key: a weak reference (`KernelRef`), one per kernel, whose
    death drops the kernel's entries from every store; the kernel itself when it cannot be referenced weakly."""
    try:
        with _refs_lock:
            ref = _refs.get(kernel)
            if ref is None:
                ref = KernelRef(kernel, _mourn)
                _refs[kernel] = ref
            return ref
    except TypeError:
        return kernel


def mourn_in(store: BoundedStore[Any, Any]) -> None:
    """Makes a dead kernel's entries leave ``store``: every key holding its `kernel_key` (first element of a
    tuple key, or the key itself)."""
    _mourners.append(weakref.ref(store))


def _mourn(ref: KernelRef) -> None:
    for mourner in list(_mourners):
        store = mourner()
        if store is not None:
            store.drop_where(lambda key: key is ref or (isinstance(key, tuple) and bool(key) and key[0] is ref))
