"""The plugin loader: discovery, loading, isolation of broken plugins, and the ``JT_*`` plugin switches.

Entry points of the group ``jt`` are enumerated when the loader is created (cheap: no plugin module is imported)
and loaded on first use under a lock. Loading is jt's own loop, not pluggy's ``load_setuptools_entrypoints``, so
that a plugin that fails to import, fails pluggy's validation (a hook with no spec, a wrong signature) or raises
inside a registration hook is recorded, warned about once and skipped, while every other plugin and the builtin
CPU backend keep working. Blocked plugins are blocked in pluggy too (``set_blocked``). The registries built from
the loaded plugins live in :mod:`jt_core.registry`.

Switches (read when the loader is created; see :mod:`jt_core.settings`):

* ``JT_LOAD_PLUGINS`` -- unset: load every plugin; empty: load none (builtins only); ``a,b``: only these.
* ``JT_DISABLE_PLUGINS`` -- ``a,b``: never load these.
* ``JT_TRACE_PLUGINS`` -- non-empty: log loading and trace every hook call (registration hooks included) to stderr.
* ``JT_STRICT_PLUGINS`` -- non-empty: a plugin problem raises instead of being recorded (the test suite sets it).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pluggy

from jt_core import hookspecs, settings
from jt_core._compat import entry_points_for_group
from jt_core._version import __version__
from jt_core.errors import PluginLoadError

__all__ = [
    "BLOCKED",
    "BUILTIN",
    "BUILTIN_PLUGINS",
    "FAILED",
    "LOADED",
    "EntryPointInfo",
    "PluginLoader",
    "PluginRecord",
    "discover_entry_points",
]

log = logging.getLogger("jt_core.plugins")

ENTRY_POINT_GROUP = "jt"
BUILTIN_DISTRIBUTION = "jt-core"

LOADED = "loaded"
BLOCKED = "blocked"
FAILED = "failed"
BUILTIN = "builtin"

#: jt-core's own plugins, registered by module name like any plugin: the compile through the caches (and the dump
#: wrapper), the plain Triton dialect, and the CPU backend with its launchers.
BUILTIN_PLUGINS: tuple[tuple[str, str], ...] = (
    ("core", "jt_core._builtin_compile"),
    ("triton", "jt_core.triton_dialect"),
    ("cpu", "jt_core.interpreter.plugin"),
)


@dataclasses.dataclass
class PluginRecord:
    """What is known about one plugin.

    Attributes:
        name: The entry-point name (or the builtin plugin's name).
        distribution: The distribution that declares it.
        version: That distribution's version.
        status: ``"loaded"``, ``"blocked"``, ``"failed"`` or ``"builtin"``.
        error: Why it failed or is blocked, or ``None``.
        platforms: Platforms it registered backends for.
        dialects: Dialects it registered.
        launchers: ``platform:name`` of the launchers it registered.
        launcher_details: For each of those, its ``priority`` and ``falls_back_for``: what makes a call go to the
            platform's next launcher (empty for launchers that take every call).
    """

    name: str
    distribution: str
    version: str
    status: str
    error: str | None = None
    platforms: list[str] = dataclasses.field(default_factory=list)
    dialects: list[str] = dataclasses.field(default_factory=list)
    launchers: list[str] = dataclasses.field(default_factory=list)
    launcher_details: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "provides": {
                "platforms": self.platforms,
                "dialects": self.dialects,
                "launchers": self.launchers,
                "launcher_details": self.launcher_details,
            },
            "error": self.error,
        }


@dataclasses.dataclass(frozen=True)
class EntryPointInfo:
    """An entry point as the loader sees it (real ones come from ``importlib.metadata``; tests make fakes)."""

    name: str
    value: str
    distribution: str
    version: str
    load: Callable[[], Any]


def discover_entry_points() -> list[EntryPointInfo]:
    """Enumerates the ``jt`` entry points of the installed distributions without importing them."""
    found = []
    for ep in entry_points_for_group(ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        found.append(
            EntryPointInfo(
                name=ep.name,
                value=ep.value,
                distribution=dist.metadata["Name"] if dist is not None else "?",
                version=dist.version if dist is not None else "?",
                load=ep.load,
            )
        )
    return sorted(found, key=lambda ep: (ep.name, ep.distribution))


class PluginLoader:
    """Loads jt plugins into a pluggy manager, isolating the broken ones.

    Args:
        entry_points: The entry points to consider; ``None`` enumerates the installed ones.
        environ: Where the ``JT_*`` variables are read; ``None`` uses ``os.environ``.
        builtins: The builtin plugins as ``(name, module or module name)`` pairs; ``None`` uses
            :data:`BUILTIN_PLUGINS`.
    """

    def __init__(
        self,
        entry_points: Iterable[EntryPointInfo] | None = None,
        environ: Mapping[str, str] | None = None,
        builtins: Sequence[tuple[str, Any]] | None = None,
    ) -> None:
        self.environ = environ
        self.load_only = settings.names("JT_LOAD_PLUGINS", environ)
        self.disabled = set(settings.names("JT_DISABLE_PLUGINS", environ) or ())
        self.trace = settings.flag("JT_TRACE_PLUGINS", environ=environ)
        self.strict = settings.flag("JT_STRICT_PLUGINS", environ=environ)
        self._entry_points = list(discover_entry_points() if entry_points is None else entry_points)
        self._builtins = BUILTIN_PLUGINS if builtins is None else tuple(builtins)
        self._lock = threading.RLock()
        self._loaded = False
        self._warned: set[str] = set()
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}
        if self.trace:
            self.pm.trace.root.setwriter(lambda msg: sys.stderr.write(f"[jt-plugins] {msg}"))
            self.pm.enable_tracing()

    def ensure_loaded(self) -> PluginLoader:
        """Imports and registers every plugin once (thread-safe)."""
        if self._loaded:
            return self
        with self._lock:
            if self._loaded:
                return self
            for name, module in self._builtins:
                plugin = importlib.import_module(module) if isinstance(module, str) else module
                self.pm.register(plugin, name=name)
                self.records[name] = PluginRecord(name, BUILTIN_DISTRIBUTION, __version__, BUILTIN)
            for ep in self._entry_points:
                self._load_entry_point(ep)
            self._loaded = True
        return self

    def _trace(self, message: str) -> None:
        if self.trace:
            sys.stderr.write(f"[jt-plugins] {message}\n")
        log.debug(message)

    def problem(self, record: PluginRecord, message: str) -> None:
        """Records a plugin failure: raises :class:`~jt_core.errors.PluginLoadError` in strict mode, else warns
        once per plugin."""
        record.status = FAILED
        record.error = message
        if self.strict:
            raise PluginLoadError(message)
        if record.name not in self._warned:
            self._warned.add(record.name)
            warnings.warn(message, RuntimeWarning, stacklevel=4)

    def _block(self, record: PluginRecord, reason: str) -> None:
        record.status, record.error = BLOCKED, reason
        self.pm.set_blocked(record.name)
        self._trace(f"{record.name}: blocked ({reason})")

    def _load_entry_point(self, ep: EntryPointInfo) -> None:
        if ep.name in self.records:
            record = PluginRecord(ep.name, ep.distribution, ep.version, FAILED)
            other = self.records[ep.name]
            self.records[f"{ep.name} ({ep.distribution})"] = record
            self.problem(
                record,
                f"jt plugin name {ep.name!r} is declared by both {other.distribution} and {ep.distribution}; "
                f"the one from {ep.distribution} was skipped. Uninstall one of the two distributions.",
            )
            return
        record = PluginRecord(ep.name, ep.distribution, ep.version, LOADED)
        self.records[ep.name] = record
        if self.load_only is not None and ep.name not in self.load_only:
            self._block(record, "not listed in JT_LOAD_PLUGINS")
            return
        if ep.name in self.disabled:
            self._block(record, "listed in JT_DISABLE_PLUGINS")
            return
        try:
            module = ep.load()
        except Exception as exc:
            self.problem(
                record,
                f"jt plugin {ep.name!r} from {ep.distribution} {ep.version} failed to import ({ep.value}): "
                f"{type(exc).__name__}: {exc}. Fix or uninstall it, or set JT_DISABLE_PLUGINS={ep.name}.",
            )
            return
        try:
            self.pm.register(module, name=ep.name)
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            unknown = sorted(caller.name for caller in self.pm.get_hookcallers(module) or () if not caller.has_spec())
            if self.pm.is_registered(module):
                self.pm.unregister(module)
            detail = f"implements hooks that have no spec: {', '.join(unknown)}" if unknown else f"is invalid: {exc}"
            self.problem(
                record,
                f"jt plugin {ep.name!r} from {ep.distribution} {ep.version} {detail}. It needs a newer jt-core or "
                f"a fix; set JT_DISABLE_PLUGINS={ep.name} to silence this.",
            )
            return
        except Exception as exc:
            self.problem(
                record,
                f"jt plugin {ep.name!r} from {ep.distribution} could not be registered: {exc}. "
                f"Set JT_DISABLE_PLUGINS={ep.name} to skip it.",
            )
            return
        self._trace(f"{ep.name}: loaded from {ep.distribution} {ep.version}")

    def call_each(self, hook_name: str) -> list[tuple[str, Any]]:
        """Calls a registration hook one plugin at a time, so that a plugin that raises is isolated.

        Each call goes through pluggy (a subset caller holding only that plugin), so ``JT_TRACE_PLUGINS`` traces
        it like any other hook call.

        Returns:
            ``(plugin name, item)`` for every item every plugin returned, in registration order.
        """
        self.ensure_loaded()
        results = []
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        for impl in impls:
            name = impl.plugin_name
            record = self.records.get(name)
            if record is not None and record.status == FAILED:
                continue
            others = [other.plugin for other in impls if other.plugin_name != name]
            try:
                returned = self.pm.subset_hook_caller(hook_name, remove_plugins=others)()
            except Exception as exc:
                if record is None:
                    raise
                self.problem(
                    record,
                    f"jt plugin {name!r} from {record.distribution} raised in {hook_name}: "
                    f"{type(exc).__name__}: {exc}. Set JT_DISABLE_PLUGINS={name} to skip it.",
                )
                self.pm.unregister(name=name)
                continue
            for items in returned:
                for item in items or ():
                    results.append((name, item))
        return results
