"""The plugin manager: discovery, loading, isolation of broken plugins, registries and listing.

Entry points of the group ``jt`` are enumerated when the manager is created (cheap: no plugin module is imported)
and loaded on first use under a lock. Loading is jt's own loop, not pluggy's ``load_setuptools_entrypoints``, so
that a plugin that fails to import, raises inside a registration hook or implements an unknown hook is recorded,
warned about once and skipped, while every other plugin and the builtin CPU backend keep working.

Environment variables (read when the manager is created):

* ``JT_LOAD_PLUGINS`` -- unset: load every plugin; empty: load none (builtins only); ``a,b``: only these.
* ``JT_DISABLE_PLUGINS`` -- ``a,b``: never load these.
* ``JT_TRACE_PLUGINS`` -- non-empty: log loading and trace every hook call to stderr.
* ``JT_STRICT_PLUGINS`` -- non-empty: a plugin problem raises instead of being recorded (the test suite sets it).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pluggy

from jt_core import hookspecs
from jt_core._compat import entry_points_for_group
from jt_core.backend import Backend, Dialect, Launcher
from jt_core.errors import DuplicateBackendError, NoBackendError, PluginLoadError

log = logging.getLogger("jt_core.plugins")

ENTRY_POINT_GROUP = "jt"
BUILTIN_DISTRIBUTION = "jt-core"

LOADED = "loaded"
BLOCKED = "blocked"
FAILED = "failed"
BUILTIN = "builtin"


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
    """

    name: str
    distribution: str
    version: str
    status: str
    error: str | None = None
    platforms: list[str] = dataclasses.field(default_factory=list)
    dialects: list[str] = dataclasses.field(default_factory=list)
    launchers: list[str] = dataclasses.field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.status,
            "provides": {"platforms": self.platforms, "dialects": self.dialects, "launchers": self.launchers},
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


def _env_list(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def _flag(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off")


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


def _builtin_plugins() -> list[tuple[str, Any]]:
    from jt_core import _builtin_compile, triton_dialect
    from jt_core.interpreter import plugin as cpu_plugin

    return [("core", _builtin_compile), ("triton", triton_dialect), ("cpu", cpu_plugin)]


class PluginManager:
    """Loads jt plugins and holds the registries built from their hooks.

    Args:
        entry_points: The entry points to consider; ``None`` enumerates the installed ones.
        environ: Where the ``JT_*`` variables are read; ``None`` uses ``os.environ``.
        builtins: The builtin plugins as ``(name, module)`` pairs; ``None`` uses jt-core's own.
    """

    def __init__(
        self,
        entry_points: Iterable[EntryPointInfo] | None = None,
        environ: Mapping[str, str] | None = None,
        builtins: Sequence[tuple[str, Any]] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.load_only = _env_list(env.get("JT_LOAD_PLUGINS"))
        self.disabled = set(_env_list(env.get("JT_DISABLE_PLUGINS")) or ())
        self.trace = _flag(env.get("JT_TRACE_PLUGINS"))
        self.strict = _flag(env.get("JT_STRICT_PLUGINS"))
        self.launcher_overrides = {
            key[len("JT_LAUNCHER_") :].lower(): value for key, value in env.items() if key.startswith("JT_LAUNCHER_")
        }
        self._entry_points = list(discover_entry_points() if entry_points is None else entry_points)
        self._builtins = builtins
        self._lock = threading.RLock()
        self._loaded = False
        self._warned: set[str] = set()
        self.pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self.pm.add_hookspecs(hookspecs)
        self.records: dict[str, PluginRecord] = {}
        self.backends: dict[str, tuple[str, Backend]] = {}
        self.backend_conflicts: dict[str, list[str]] = {}
        self.launchers: dict[str, list[tuple[str, Launcher]]] = {}
        self.dialects: list[tuple[str, Dialect]] = []
        if self.trace:
            self.pm.trace.root.setwriter(lambda msg: sys.stderr.write(f"[jt-plugins] {msg}"))
            self.pm.enable_tracing()

    # -- loading ---------------------------------------------------------------------------------------------

    def ensure_loaded(self) -> PluginManager:
        """Loads every plugin once (thread-safe) and builds the registries."""
        if self._loaded:
            return self
        with self._lock:
            if self._loaded:
                return self
            builtins = _builtin_plugins() if self._builtins is None else self._builtins
            for name, module in builtins:
                self.pm.register(module, name=name)
                self.records[name] = PluginRecord(name, BUILTIN_DISTRIBUTION, _core_version(), BUILTIN)
            for ep in self._entry_points:
                self._load_entry_point(ep)
            self._collect()
            self._loaded = True
        return self

    def _trace(self, message: str) -> None:
        if self.trace:
            sys.stderr.write(f"[jt-plugins] {message}\n")
        log.debug(message)

    def _problem(self, record: PluginRecord, message: str) -> None:
        """Records a plugin failure: raises in strict mode, else warns once."""
        record.status = FAILED
        record.error = message
        if self.strict:
            raise PluginLoadError(message)
        if record.name not in self._warned:
            self._warned.add(record.name)
            warnings.warn(message, RuntimeWarning, stacklevel=4)

    def _load_entry_point(self, ep: EntryPointInfo) -> None:
        if ep.name in self.records:
            record = PluginRecord(ep.name, ep.distribution, ep.version, FAILED)
            other = self.records[ep.name]
            key = f"{ep.name} ({ep.distribution})"
            self.records[key] = record
            self._problem(
                record,
                f"jt plugin name {ep.name!r} is declared by both {other.distribution} and {ep.distribution}; "
                f"the one from {ep.distribution} was skipped. Uninstall one of the two distributions.",
            )
            return
        record = PluginRecord(ep.name, ep.distribution, ep.version, LOADED)
        self.records[ep.name] = record
        if self.load_only is not None and ep.name not in self.load_only:
            record.status, record.error = BLOCKED, "not listed in JT_LOAD_PLUGINS"
            self._trace(f"{ep.name}: blocked (JT_LOAD_PLUGINS)")
            return
        if ep.name in self.disabled:
            record.status, record.error = BLOCKED, "listed in JT_DISABLE_PLUGINS"
            self._trace(f"{ep.name}: blocked (JT_DISABLE_PLUGINS)")
            return
        try:
            module = ep.load()
        except Exception as exc:
            self._problem(
                record,
                f"jt plugin {ep.name!r} from {ep.distribution} {ep.version} failed to import ({ep.value}): "
                f"{type(exc).__name__}: {exc}. Fix or uninstall it, or set JT_DISABLE_PLUGINS={ep.name}.",
            )
            return
        unknown = sorted(
            attr
            for attr in dir(module)
            if attr.startswith("jt_")
            and callable(getattr(module, attr, None))
            and not hasattr(self.pm.hook, attr)
            and _is_hookimpl(getattr(module, attr))
        )
        if unknown:
            self._problem(
                record,
                f"jt plugin {ep.name!r} from {ep.distribution} {ep.version} implements hooks that have no spec: "
                f"{', '.join(unknown)}. It needs a newer jt-core or a fix; set JT_DISABLE_PLUGINS={ep.name} "
                "to silence this.",
            )
            return
        try:
            self.pm.register(module, name=ep.name)
        except Exception as exc:
            self._problem(
                record,
                f"jt plugin {ep.name!r} from {ep.distribution} could not be registered: {exc}. "
                f"Set JT_DISABLE_PLUGINS={ep.name} to skip it.",
            )
            return
        self._trace(f"{ep.name}: loaded from {ep.distribution} {ep.version}")

    def _call_each(self, hook_name: str) -> list[tuple[str, Any]]:
        """Calls a registration hook plugin by plugin, so that one that raises is isolated."""
        results = []
        caller = getattr(self.pm.hook, hook_name)
        for impl in caller.get_hookimpls():  # registration order
            name = impl.plugin_name
            record = self.records.get(name)
            if record is not None and record.status == FAILED:
                continue
            try:
                items = impl.function()
            except Exception as exc:
                if record is None:
                    raise
                self._problem(
                    record,
                    f"jt plugin {name!r} from {record.distribution} raised in {hook_name}: "
                    f"{type(exc).__name__}: {exc}. Set JT_DISABLE_PLUGINS={name} to skip it.",
                )
                self.pm.unregister(name=name)
                continue
            for item in items or ():
                results.append((name, item))
        return results

    def _collect(self) -> None:
        backends = self._call_each("jt_register_backends")
        launchers = self._call_each("jt_register_launchers")
        dialects = self._call_each("jt_register_dialects")
        failed = {name for name, rec in self.records.items() if rec.status == FAILED}
        for name, backend in backends:
            if name in failed:
                continue
            if not isinstance(backend, Backend):
                self._problem(self.records[name], f"jt plugin {name!r} registered {backend!r}, not a Backend")
                continue
            platform = backend.platform
            self.records[name].platforms.append(platform)
            if platform in self.backends:
                first = self.backends[platform][0]
                self.backend_conflicts.setdefault(platform, [first]).append(name)
                if self.strict:
                    raise self.duplicate_error(platform)
                continue
            self.backends[platform] = (name, backend)
        for name, launcher in launchers:
            if name in failed:
                continue
            if not isinstance(launcher, Launcher):
                self._problem(self.records[name], f"jt plugin {name!r} registered {launcher!r}, not a Launcher")
                continue
            self.records[name].launchers.append(f"{launcher.platform}:{launcher.name}")
            self.launchers.setdefault(launcher.platform, []).append((name, launcher))
        for platform_launchers in self.launchers.values():
            platform_launchers.sort(key=lambda item: (-item[1].priority, item[1].name))
        builtin_dialects: list[tuple[str, Dialect]] = []
        for name, dialect in dialects:
            if name in failed:
                continue
            if not isinstance(dialect, Dialect):
                self._problem(self.records[name], f"jt plugin {name!r} registered {dialect!r}, not a Dialect")
                continue
            self.records[name].dialects.append(dialect.name)
            target = builtin_dialects if self.records[name].status == BUILTIN else self.dialects
            target.append((name, dialect))
        self.dialects.extend(builtin_dialects)

    # -- queries ---------------------------------------------------------------------------------------------

    def duplicate_error(self, platform: str) -> DuplicateBackendError:
        """The error for a platform served by several plugins."""
        names = self.backend_conflicts[platform]
        described = ", ".join(f"{n!r} ({self.records[n].distribution})" for n in names)
        return DuplicateBackendError(
            f"several jt plugins register a backend for platform {platform!r}: {described}. "
            f"Keep one: set JT_DISABLE_PLUGINS={names[-1]} (or uninstall a distribution)."
        )

    def describe(self) -> str:
        """One line per plugin: what it provides and its status, for error messages."""
        lines = []
        for rec in self.records.values():
            provides = ", ".join(
                part
                for part in (
                    f"platforms {rec.platforms}" if rec.platforms else "",
                    f"dialects {rec.dialects}" if rec.dialects else "",
                    f"launchers {rec.launchers}" if rec.launchers else "",
                )
                if part
            )
            line = f"  - {rec.name} ({rec.distribution} {rec.version}): {rec.status}"
            if provides:
                line += f"; provides {provides}"
            if rec.error:
                line += f"; error: {rec.error}"
            lines.append(line)
        return "\n".join(lines)

    def backend(self, platform: str) -> Backend:
        """The backend for ``platform``.

        Raises:
            DuplicateBackendError: Two plugins serve it.
            NoBackendError: None does; the message lists every plugin, what it provides and its errors.
        """
        self.ensure_loaded()
        if platform in self.backend_conflicts:
            raise self.duplicate_error(platform)
        if platform not in self.backends:
            hint = {
                "cuda": "pip install jt-cuda",
                "rocm": "pip install jt-rocm",
            }.get(platform, "install a jt plugin that provides it")
            raise NoBackendError(
                f"no jt backend for platform {platform!r} ({hint}). Installed plugins:\n{self.describe()}"
            )
        return self.backends[platform][1]

    def launcher(self, platform: str, name: str | None = None) -> Launcher:
        """The launcher for ``platform``: ``name`` if given, else ``JT_LAUNCHER_<PLATFORM>``, else by priority.

        Raises:
            NoBackendError: No usable launcher, or the named one is unknown or unavailable.
        """
        self.ensure_loaded()
        candidates = self.launchers.get(platform, [])
        wanted = name or self.launcher_overrides.get(platform)
        if wanted:
            for _, launcher in candidates:
                if launcher.name == wanted:
                    reason = launcher.unavailable_reason()
                    if reason:
                        raise NoBackendError(f"launcher {wanted!r} for platform {platform!r} is unavailable: {reason}")
                    return launcher
            known = [launcher.name for _, launcher in candidates]
            source = "launcher=" if name else f"JT_LAUNCHER_{platform.upper()}"
            raise NoBackendError(f"{source} names launcher {wanted!r}, but platform {platform!r} has launchers {known}")
        reasons = []
        for _, launcher in candidates:
            reason = launcher.unavailable_reason()
            if reason is None:
                return launcher
            reasons.append(f"{launcher.name}: {reason}")
        raise NoBackendError(
            f"no usable jt launcher for platform {platform!r}"
            + (f" ({'; '.join(reasons)})" if reasons else "")
            + f". Installed plugins:\n{self.describe()}"
        )

    def dialect_for(self, kernel: Any) -> Dialect:
        """The first registered dialect that claims ``kernel`` (plugins first, builtin Triton last)."""
        self.ensure_loaded()
        for _, dialect in self.dialects:
            if dialect.claims(kernel):
                return dialect
        from jt_core.errors import KernelCallTypeError

        raise KernelCallTypeError(
            f"kernel={kernel!r} is not a kernel any installed dialect understands "
            f"({[d.name for _, d in self.dialects]}); decorate it with @triton.jit"
        )

    def list_plugins(self) -> list[PluginRecord]:
        """Every plugin, builtin ones first, with status and what it provides."""
        self.ensure_loaded()
        return list(self.records.values())


def _is_hookimpl(obj: Any) -> bool:
    return hasattr(obj, f"{hookspecs.PROJECT_NAME}_impl")


def _core_version() -> str:
    from jt_core import __version__

    return __version__


_manager: PluginManager | None = None
_manager_lock = threading.Lock()


def get_plugin_manager() -> PluginManager:
    """The process-wide manager (created on first use; plugins load on first query)."""
    global _manager
    if _manager is None:
        with _manager_lock:
            if _manager is None:
                _manager = PluginManager()
    return _manager


def set_plugin_manager(manager: PluginManager | None) -> PluginManager | None:
    """Replaces the process-wide manager (``None`` resets it); returns the previous one. Used by tests."""
    global _manager
    with _manager_lock:
        previous, _manager = _manager, manager
    return previous


def list_plugins() -> list[PluginRecord]:
    """Every known plugin with its distribution, version, status, error and what it provides."""
    return get_plugin_manager().list_plugins()


__all__ = [
    "BLOCKED",
    "BUILTIN",
    "FAILED",
    "LOADED",
    "EntryPointInfo",
    "NoBackendError",
    "PluginManager",
    "PluginRecord",
    "get_plugin_manager",
    "list_plugins",
    "set_plugin_manager",
]
