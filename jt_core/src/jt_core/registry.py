"""The registries: backends per platform, launchers per platform, dialects, and the choice among them.

A :class:`Registry` asks the plugins a :class:`~jt_core.plugins.PluginLoader` loaded for their backends, launchers
and dialects (the registration hooks, one plugin at a time), checks what they return, and answers the questions
lowering asks: which backend serves a platform, which launcher lowers a call there, which dialect a kernel is
written in. Selection is explicit and deterministic: the ``launcher=`` argument, else ``JT_LAUNCHER_<PLATFORM>``,
else the available launcher of highest priority (ties broken by name); plugin dialects before the builtin Triton
dialect.

The process-wide registry (:func:`get_registry`) is created on first use; :mod:`jt_core.hooks` is the only module
of the call path that reads it.
"""

from __future__ import annotations

import threading
from typing import Any

from jt_core import settings
from jt_core.contracts import Backend, Dialect, Launcher
from jt_core.errors import DuplicateBackendError, KernelCallTypeError, NoBackendError
from jt_core.plugins import BLOCKED, BUILTIN, FAILED, PluginLoader, PluginRecord

__all__ = ["Registry", "get_registry", "list_plugins", "set_registry"]

_INSTALL_HINTS = {"cuda": "pip install jt-cuda", "rocm": "pip install jt-rocm"}


class Registry:
    """The backends, launchers and dialects of the loaded plugins, and the selection among them.

    Args:
        loader: The plugin loader; ``None`` makes one over the installed entry points and ``os.environ``.
    """

    def __init__(self, loader: PluginLoader | None = None) -> None:
        self.loader = loader if loader is not None else PluginLoader()
        self.launcher_overrides = settings.launcher_overrides(self.loader.environ)
        self.backends: dict[str, tuple[str, Backend]] = {}
        self.backend_conflicts: dict[str, list[str]] = {}
        self.launchers: dict[str, list[tuple[str, Launcher]]] = {}
        self.dialects: list[tuple[str, Dialect]] = []
        self._lock = threading.RLock()
        self._ready = False

    @property
    def records(self) -> dict[str, PluginRecord]:
        """The loader's plugin records, by name."""
        return self.loader.records

    def ensure_loaded(self) -> Registry:
        """Loads the plugins and collects their registrations, once (thread-safe)."""
        if self._ready:
            return self
        with self._lock:
            if not self._ready:
                self.loader.ensure_loaded()
                self._collect()
                self._ready = True
        return self

    def _accepted(self, hook: str, kind: type, what: str) -> list[tuple[str, Any]]:
        accepted = []
        for name, item in self.loader.call_each(hook):
            record = self.records[name]
            if record.status == FAILED:
                continue
            if not isinstance(item, kind):
                self.loader.problem(record, f"jt plugin {name!r} registered {item!r}, not a {what}")
                continue
            accepted.append((name, item))
        return accepted

    def _collect(self) -> None:
        backends = self._accepted("jt_register_backends", Backend, "Backend")
        launchers = self._accepted("jt_register_launchers", Launcher, "Launcher")
        dialects = self._accepted("jt_register_dialects", Dialect, "Dialect")
        failed = {name for name, record in self.records.items() if record.status == FAILED}
        for name, backend in backends:
            if name in failed:
                continue
            platform = backend.platform
            self.records[name].platforms.append(platform)
            if platform in self.backends:
                first = self.backends[platform][0]
                self.backend_conflicts.setdefault(platform, [first]).append(name)
                if self.loader.strict:
                    raise self.duplicate_error(platform)
                continue
            self.backends[platform] = (name, backend)
        for name, launcher in launchers:
            if name in failed:
                continue
            label = f"{launcher.platform}:{launcher.name}"
            self.records[name].launchers.append(label)
            self.records[name].launcher_details[label] = {
                "priority": launcher.priority,
                "falls_back_for": list(launcher.fallback_rules),
            }
            self.launchers.setdefault(launcher.platform, []).append((name, launcher))
        for platform_launchers in self.launchers.values():
            platform_launchers.sort(key=lambda item: (-item[1].priority, item[1].name))
        builtin_dialects: list[tuple[str, Dialect]] = []
        for name, dialect in dialects:
            if name in failed:
                continue
            self.records[name].dialects.append(dialect.name)
            (builtin_dialects if self.records[name].status == BUILTIN else self.dialects).append((name, dialect))
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

    def _unloaded_plugins(self) -> str:
        """For a launcher nobody registered: the plugins that failed to load or were blocked (it may be theirs)."""
        missing = [rec for rec in self.records.values() if rec.status in (FAILED, BLOCKED)]
        if not missing:
            return ""
        described = "; ".join(
            f"{rec.name!r} ({rec.distribution} {rec.version}) {rec.status}: {str(rec.error).rstrip('.')}"
            for rec in missing
        )
        return (
            f". These plugins registered nothing, so the launcher may be one of theirs: {described}. Fix the error "
            "(python -m jt_core plugins shows every plugin) or choose another launcher"
        )

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
            hint = _INSTALL_HINTS.get(platform, "install a jt plugin that provides it")
            raise NoBackendError(
                f"no jt backend for platform {platform!r} ({hint}). Installed plugins:\n{self.describe()}"
            )
        return self.backends[platform][1]

    def launchers_for(self, platform: str) -> list[Launcher]:
        """The launchers registered for ``platform``, highest priority first."""
        self.ensure_loaded()
        return [launcher for _, launcher in self.launchers.get(platform, [])]

    def launcher(self, platform: str, name: str | None = None) -> Launcher:
        """The launcher for ``platform``: ``name`` if given, else ``JT_LAUNCHER_<PLATFORM>``, else by priority.

        Raises:
            NoBackendError: No usable launcher, or the named one is unknown or unavailable.
        """
        candidates = self.launchers_for(platform)
        wanted = name or self.launcher_overrides.get(platform)
        if wanted:
            for launcher in candidates:
                if launcher.name == wanted:
                    reason = launcher.unavailable_reason()
                    if reason:
                        raise NoBackendError(f"launcher {wanted!r} for platform {platform!r} is unavailable: {reason}")
                    return launcher
            known = [launcher.name for launcher in candidates]
            source = "launcher=" if name else f"JT_LAUNCHER_{platform.upper()}"
            raise NoBackendError(
                f"{source} names launcher {wanted!r}, but platform {platform!r} has launchers {known}"
                + self._unloaded_plugins()
            )
        reasons = []
        for launcher in candidates:
            reason = launcher.unavailable_reason()
            if reason is None:
                return launcher
            reasons.append(f"{launcher.name}: {reason}")
        raise NoBackendError(
            f"no usable jt launcher for platform {platform!r}"
            + (f" ({'; '.join(reasons)})" if reasons else "")
            + f". Installed plugins:\n{self.describe()}"
        )

    def next_launcher(self, platform: str, launcher: Launcher) -> Launcher:
        """The launcher to use instead of ``launcher``: the first available one after it in ``platform``'s priority
        order, else (for a launcher at the end of the order, one used only when asked for) the first available one
        before it.

        Raises:
            NoBackendError: When no other launcher is available.
        """
        candidates = self.launchers_for(platform)
        position = candidates.index(launcher) + 1 if launcher in candidates else 0
        for candidate in candidates[position:] + candidates[:position]:
            if candidate is not launcher and candidate.unavailable_reason() is None:
                return candidate
        raise NoBackendError(
            f"launcher {launcher.name!r} for platform {platform!r} cannot express the call and no launcher after it "
            f"is available. Installed plugins:\n{self.describe()}"
        )

    def dialect_for(self, kernel: Any) -> Dialect:
        """The first registered dialect that claims ``kernel`` (plugins first, builtin Triton last).

        Raises:
            KernelCallTypeError: When no dialect claims it.
        """
        self.ensure_loaded()
        for _, dialect in self.dialects:
            if dialect.claims(kernel):
                return dialect
        raise KernelCallTypeError(
            f"kernel={kernel!r} is not a kernel any installed dialect understands "
            f"({[d.name for _, d in self.dialects]}); decorate it with @triton.jit"
        )

    def list_plugins(self) -> list[PluginRecord]:
        """Every plugin, builtin ones first, with status and what it provides."""
        self.ensure_loaded()
        return list(self.records.values())


_registry: Registry | None = None
_registry_lock = threading.Lock()


def get_registry() -> Registry:
    """The process-wide registry (created on first use; plugins load on first query)."""
    global _registry
    if _registry is None:
        with _registry_lock:
            if _registry is None:
                _registry = Registry()
    return _registry


def set_registry(registry: Registry | None) -> Registry | None:
    """Replaces the process-wide registry (``None`` resets it); returns the previous one. Used by tests."""
    global _registry
    with _registry_lock:
        previous, _registry = _registry, registry
    return previous


def list_plugins() -> list[PluginRecord]:
    """Every known plugin with its distribution, version, status, error and what it provides."""
    return get_registry().list_plugins()
