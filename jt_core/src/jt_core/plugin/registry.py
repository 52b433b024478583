"""The registries: backends per platform, launchers per platform, dialects, and the choice among them.

A `Registry` asks the plugins a `PluginLoader` loaded for their backends,
launchers and dialects (the registration hooks, one plugin at a time), checks what they return against their role's
contract (`contract_problems`: a plugin whose component breaks it is refused as a
whole; one that still uses names of an earlier contract is warned, until the version that refuses them), and answers
the questions lowering asks: which backend serves a platform, which launcher lowers a call there, which dialect a
kernel is written in. Selection is explicit and deterministic: the ``launcher=`` argument, else
``JT_LAUNCHER_<PLATFORM>``, else the available launcher of highest priority (ties broken by name); plugin dialects
before the builtin Triton dialect.

A plugin's backend, launcher or dialect that raises while serving a call (`Registry.serve`), or a plugin's
``jt_compile_kernel`` that raises (`Registry.compile_fault`), is a fault of that plugin: it is recorded with its
traceback (`PluginFault`). When the call can go on without it (a launcher chosen by
priority, a dialect among several, an observer of compiles), the part that raised is set aside for the process, with
one warning, and the call goes on; when the call needs it (the launcher it names, its backend), the call fails with
a `PluginFaultError` naming the plugin and the fix. jt's own builtins are not isolated: an
exception of theirs is a bug in jt, and propagates as it is. Errors of jt's own types (``JtError``) are a plugin's
deliberate answer and pass unchanged.

Loading and collecting the registrations is one transaction: when it raises (a ``KeyboardInterrupt``, a plugin
problem under ``JT_STRICT_PLUGINS``), the registries are emptied and the plugins unloaded before the exception
propagates, and the next query starts again.

The process-wide registry (`get_registry`) is created on first use; `jt_core.plugin.facade` is the only
module of the call path that reads it.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any

from jt_core import _version as jt_version
from jt_core import settings
from jt_core.errors import DuplicateBackendError, JtError, KernelCallTypeError, NoBackendError, PluginFaultError
from jt_core.plugin.loader import PluginLoader
from jt_core.plugin.records import BLOCKED, BROKEN, BUILTIN, FAILED, PluginFault, PluginRecord
from jt_core.plugin.retired import Retired, is_removed
from jt_core.plugin.roles import Backend, Dialect, Launcher, keeps_default, prepare_call
from jt_core.plugin.validation import contract_problems, retired_uses

__all__ = ["SET_ASIDE", "Registry", "get_registry", "list_plugins", "set_registry"]


class _SetAside:
    def __repr__(self) -> str:
        return "SET_ASIDE"


#: What `Registry.serve` returns for a part of a plugin that raised and was set aside.
SET_ASIDE: Any = _SetAside()

COMPILE_HOOK = "jt_compile_kernel"
#: What `Registry.collect_dialects` collects, beside platforms' registrations.
_DIALECTS = object()

_INSTALL_HINTS = {"cuda": "pip install jt-cuda", "rocm": "pip install jt-rocm"}


class Registry:
    """The backends, launchers and dialects of the loaded plugins, and the selection among them.

    Args:
        loader: The plugin loader; ``None`` makes one over the installed entry points and ``os.environ``.
    """

    def __init__(self, loader: PluginLoader | None = None) -> None:
        self.loader = loader if loader is not None else PluginLoader()
        self._lock = threading.RLock()
        self._reset()

    @property
    def launcher_overrides(self) -> dict[str, str]:
        """``JT_LAUNCHER_<PLATFORM>`` by platform, read when asked (a program or a test may change it)."""
        return settings.launcher_overrides(self.loader.environ)

    def _reset(self) -> None:
        self.backends: dict[str, tuple[str, Backend]] = {}
        self.backend_conflicts: dict[str, list[str]] = {}
        self.launchers: dict[str, list[tuple[str, Launcher]]] = {}
        self.dialects: list[tuple[str, Dialect]] = []
        self._collected: set[object] = set()
        self._registered: set[tuple[str, ...]] = set()
        self._owners: dict[int, str] = {}
        self._set_aside: dict[int, tuple[str, PluginFault]] = {}
        self._compile_aside: set[str] = set()
        self._compile_caller: Any = None

    @property
    def records(self) -> dict[str, PluginRecord]:
        """The loader's plugin records, by name."""
        return self.loader.records

    def ensure_loaded(self) -> Registry:
        """Loads the plugins and collects every registration: the dialects, and the backends and launchers of every
        platform (thread-safe, once). Lowering collects only what a call needs (`collect`)."""
        return self.collect(None)

    def collect(self, platform: str | None) -> Registry:
        """Loads the plugins and collects the backends and launchers registered for ``platform`` (``None``: every
        platform, and the dialects), once (thread-safe).

        The registration hooks are asked for the platform a call needs, so that a plugin for other platforms need
        not import its backend. When this raises (a ``KeyboardInterrupt``, a plugin problem under
        ``JT_STRICT_PLUGINS``), nothing of the registrations nor of the load stays: the exception propagates and the
        next call starts again.
        """
        return self._collect(platform)

    def collect_dialects(self) -> Registry:
        """Loads the plugins and collects the dialects, once (thread-safe, as `collect`)."""
        return self._collect(_DIALECTS)

    def _collect(self, part: object) -> Registry:
        if part in self._collected or None in self._collected:
            return self
        with self._lock:
            if part in self._collected or None in self._collected:
                return self
            try:
                self.loader.ensure_loaded()
                if (part is None or part is _DIALECTS) and _DIALECTS not in self._collected:
                    self._collect_dialects()
                    self._collected.add(_DIALECTS)
                if part is not _DIALECTS:
                    self._collect_platform(part if isinstance(part, str) else None)
                self._collected.add(part)
            except BaseException:
                self._reset()
                self.loader.unload()
                raise
        return self

    def _accepted(self, hook: str, kind: type, what: str, **arguments: Any) -> list[tuple[str, Any]]:
        """What the plugins return from a registration hook that keeps the contract of ``kind``
        (`contract_problems`). A plugin that returns anything else fails as a
        whole; one that uses retired names keeps working, with a deprecation warning, until the version that refuses
        them."""
        accepted = []
        for name, item, taken in self.loader.call_each(hook, **arguments):
            record = self.records[name]
            if record.status == FAILED:
                continue
            if not isinstance(item, kind):
                self.loader.problem(
                    record, f"registered {item!r}, not a {what}. Fix the plugin, or set JT_DISABLE_PLUGINS={name}."
                )
                continue
            problems = contract_problems(item, registered_for=taken.get("platform"))
            retired = retired_uses(item)
            removed = [(used, entry) for used, entry in retired if is_removed(entry)]
            if problems or removed:
                self.loader.problem(record, _component_problem(name, what, item, problems, removed))
                continue
            if retired:
                self.loader.deprecated(record, _deprecation(what, item, retired))
            accepted.append((name, item))
        return accepted

    def _first(self, key: tuple[str, ...], name: str, item: Any) -> bool:
        """Whether ``key`` is registered for the first time (a plugin asked again, for every platform, returns what
        it gave before anew); if so, ``item`` is ``name``'s."""
        if key in self._registered:
            return False
        self._registered.add(key)
        self._owners[id(item)] = name
        return True

    def _collect_platform(self, platform: str | None) -> None:
        # Built aside and put in place at the end: lowerings on other threads read the registries meanwhile.
        registered_backends = self._accepted("jt_register_backends", Backend, "Backend", platform=platform)
        registered_launchers = self._accepted("jt_register_launchers", Launcher, "Launcher", platform=platform)
        backends = dict(self.backends)
        launchers = {name: list(entries) for name, entries in self.launchers.items()}
        for name, backend in registered_backends:
            failed = self.records[name].status == FAILED  # raised in the other hook
            if failed or not self._first(("backend", name, backend.platform), name, backend):
                continue
            platform_name = backend.platform
            self.records[name].platforms.append(platform_name)
            if platform_name in backends:
                first = backends[platform_name][0]
                self.backend_conflicts.setdefault(platform_name, [first]).append(name)
                if self.loader.strict:
                    raise self.duplicate_error(platform_name)
                continue
            backends[platform_name] = (name, backend)
        for name, launcher in registered_launchers:
            label = f"{launcher.platform}:{launcher.name}"
            if self.records[name].status == FAILED or not self._first(("launcher", name, label), name, launcher):
                continue
            self.records[name].launchers.append(label)
            self.records[name].launcher_details[label] = {
                "priority": launcher.priority,
                "falls_back_for": list(launcher.fallback_rules),
            }
            launchers.setdefault(launcher.platform, []).append((name, launcher))
        for platform_launchers in launchers.values():
            platform_launchers.sort(key=lambda item: (-item[1].priority, item[1].name))
        self.backends, self.launchers = backends, launchers
        self._drop_failed()

    def _collect_dialects(self) -> None:
        plugin_dialects: list[tuple[str, Dialect]] = []
        builtin_dialects: list[tuple[str, Dialect]] = []
        for name, dialect in self._accepted("jt_register_dialects", Dialect, "Dialect"):
            if not self._first(("dialect", name, dialect.name), name, dialect):
                continue
            self.records[name].dialects.append(dialect.name)
            (builtin_dialects if self.records[name].status == BUILTIN else plugin_dialects).append((name, dialect))
        self.dialects = plugin_dialects + builtin_dialects
        self._drop_failed()

    def _drop_failed(self) -> None:
        """Forgets what plugins that failed since registered (a plugin that raises in one registration hook is
        skipped as a whole)."""
        failed = {name for name, record in self.records.items() if record.status == FAILED}
        if not failed:
            return
        self.backends = {p: entry for p, entry in self.backends.items() if entry[0] not in failed}
        self.launchers = {p: [e for e in entries if e[0] not in failed] for p, entries in self.launchers.items()}
        self.dialects = [entry for entry in self.dialects if entry[0] not in failed]

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
        """One line per plugin: what it provides (every platform's registrations) and its status, for errors."""
        self.ensure_loaded()
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
        self.collect(platform)
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
        self.collect(platform)
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
                    needed = self.requested(platform, launcher, name)
                    reason = self.serve(launcher, "unavailable_reason", needed=needed)
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
            reason = self.unavailable_reason(launcher)
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
            if candidate is not launcher and self.unavailable_reason(candidate) is None:
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
        self.collect_dialects()
        for _, dialect in self.dialects:
            claimed = self.serve(dialect, "claims", kernel=kernel)
            if claimed is not SET_ASIDE and claimed:
                return dialect
        aside = [dialect for _, dialect in self.dialects if id(dialect) in self._set_aside]
        if aside:
            raise self.fault_error(f"no dialect claims kernel={kernel!r}, and it may be written in", aside[0])
        raise KernelCallTypeError(
            f"kernel={kernel!r} is not a kernel any installed dialect understands "
            f"({[d.name for _, d in self.dialects]}); decorate it with @triton.jit"
        )

    # -- faults ----------------------------------------------------------------------------------------------

    def owner(self, component: Any) -> PluginRecord | None:
        """The record of the plugin that registered ``component`` (a backend, launcher or dialect), if any."""
        name = self._owners.get(id(component))
        return self.records.get(name) if name is not None else None

    def requested(self, platform: str, launcher: Launcher, name: str | None = None) -> str | None:
        """What names ``launcher`` for a call (``"launcher='fast' names"``, ``"JT_LAUNCHER_CPU=fast names"``),
        making the call need it; ``None`` when it is chosen by priority, so that the call may go on without it."""
        if name:
            return f"launcher={name!r} names" if launcher.name == name else None
        if self.launcher_overrides.get(platform) == launcher.name:
            return f"JT_LAUNCHER_{platform.upper()}={launcher.name} names"
        return None

    def serve(self, component: Any, method: str, *, needed: str | None = None, **arguments: Any) -> Any:
        """``component.method(...)`` for a call (with the ``arguments`` it names: `jt_core.plugin.roles.invoke`),
        with what a plugin's component raises made a fault of it.

        Args:
            component: A backend, launcher or dialect of the registry.
            method: The method to call.
            **arguments: What jt offers it, by name.
            needed: Why the call cannot go on without ``component`` (``"launcher='fast' names"``), or ``None``
                when it can.

        Returns:
            What the method returned, or `SET_ASIDE` when the component is set aside: it raised, now or
            earlier, and the call does not need it. The caller goes on without it.

        Raises:
            PluginFaultError: The component raised, or was set aside, and the call needs it (under
                ``JT_STRICT_PLUGINS``: whenever it raises).
        """
        aside = self._set_aside.get(id(component))
        if aside is not None:
            if needed:
                raise self.fault_error(needed, component)
            return SET_ASIDE
        call = prepare_call(component, method, **arguments)
        try:
            return call()
        except JtError:
            raise
        except BROKEN as exc:
            record = self.owner(component)
            if record is None or record.status == BUILTIN:
                raise
            label = _label(component)
            if needed:
                fault = self.loader.fault(record, f"{label} {method}()", exc, "")
                raise self._fault_error(needed, component, method, fault) from exc
            consequence = f"jt set {label} aside for this process; calls that do not need it go on without it."
            fault = self.loader.fault(record, f"{label} {method}()", exc, consequence)
            with self._lock:
                self._set_aside[id(component)] = (method, fault)
            self.loader.warn_fault(fault, exc)
            return SET_ASIDE

    def unavailable_reason(self, launcher: Launcher) -> str | None:
        """``launcher.unavailable_reason()``, or why it is set aside (`serve`)."""
        reason = self.serve(launcher, "unavailable_reason")
        return self.aside_reason(launcher) if reason is SET_ASIDE else reason

    def aside_reason(self, component: Any) -> str:
        """Why ``component`` is set aside, for messages."""
        method, fault = self._set_aside[id(component)]
        return f"set aside after its {method}() raised {fault.error}"

    def fault_error(self, subject: str, component: Any) -> PluginFaultError:
        """The error for a call that needs ``component``, which is set aside."""
        method, fault = self._set_aside[id(component)]
        return self._fault_error(subject, component, method, fault)

    def _fault_error(self, subject: str, component: Any, method: str, fault: PluginFault) -> PluginFaultError:
        hint = ""
        if isinstance(component, Launcher):
            others = [other.name for other in self.launchers_for(component.platform) if other is not component]
            hint = f"Name another launcher (platform {component.platform!r} has {others}), or fix"
        return PluginFaultError(
            f"{subject} {_label(component)} of jt plugin {fault.plugin!r} ({fault.distribution} {fault.version}), "
            f"whose {method}() raised {fault.error}. `python -m jt_core plugins` shows the traceback. "
            f"{hint or 'Fix'} or upgrade the plugin, or set JT_DISABLE_PLUGINS={fault.plugin}."
        )

    def compile_hook(self) -> Any:
        """The ``jt_compile_kernel`` hook caller, without the plugins whose implementation raised."""
        caller = self._compile_caller
        if caller is None:
            pm = self.loader.ensure_loaded().pm
            aside = [pm.get_plugin(name) for name in sorted(self._compile_aside)]
            caller = pm.subset_hook_caller(COMPILE_HOOK, [plugin for plugin in aside if plugin is not None])
            self._compile_caller = caller
        return caller

    def compile_fault(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by the ``jt_compile_kernel`` hook, came from a plugin's implementation (not
        jt's own): then that implementation is set aside, with the fault recorded, and the compile may be retried.

        The implementation blamed is the innermost one on the exception's traceback, so an error raised by the
        compile itself and passed on by a wrapping observer is not blamed on the observer.

        Raises:
            PluginFaultError: Under ``JT_STRICT_PLUGINS``, when a plugin is blamed.
        """
        codes = {}
        for impl in getattr(self.loader.pm.hook, COMPILE_HOOK).get_hookimpls():
            code = getattr(getattr(impl.function, "__func__", impl.function), "__code__", None)
            if code is not None:
                codes[code] = impl.plugin_name
        culprit = None
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            culprit = codes.get(frame.f_code, culprit)
        record = self.records.get(culprit) if culprit is not None else None
        if record is None or record.status == BUILTIN:
            return False
        with self._lock:
            if culprit in self._compile_aside:
                return True  # set aside by another thread meanwhile
            self._compile_aside.add(record.name)
            self._compile_caller = None
        consequence = f"jt set the plugin's {COMPILE_HOOK} aside for this process; kernels compile without it."
        self.loader.warn_fault(self.loader.fault(record, COMPILE_HOOK, exc, consequence), exc)
        return True

    def list_plugins(self) -> list[PluginRecord]:
        """Every plugin, builtin ones first, with status and what it provides."""
        self.ensure_loaded()
        return list(self.records.values())


def _component_problem(
    name: str, what: str, component: Any, problems: list[str], removed: list[tuple[str, Retired]]
) -> str:
    """What is wrong with a registered component: how it breaks its role's contract
    (`contract_problems`), and the names of earlier contracts it still uses that this
    jt-core refuses (an attribute, or a parameter as ``method(argument)``)."""
    cls = type(component)
    parts = list(problems)
    attributes = [(used, entry.replacement) for used, entry in removed if "(" not in used]
    parameters = [(used, entry.replacement) for used, entry in removed if "(" in used]
    if attributes:
        described = "; ".join(f"{attribute}, replaced by {replacement}" for attribute, replacement in attributes)
        parts.append(
            f"sets {'an attribute' if len(attributes) == 1 else 'attributes'} jt-core no longer reads: {described}. "
            "Move what it declares to the replacement and drop the attribute"
        )
    if parameters:
        described = "; ".join(f"{method}, replaced by {replacement}" for method, replacement in parameters)
        parts.append(
            f"has {'a method that takes an argument' if len(parameters) == 1 else 'methods that take arguments'} "
            f"jt-core no longer offers: {described}. Take the arguments of the replacement"
        )
    return (
        f"registered the {what} {cls.__module__}.{cls.__qualname__}, which {'; and '.join(parts)}; set "
        f"JT_DISABLE_PLUGINS={name} to skip the plugin."
    )


def _deprecation(what: str, component: Any, retired: list[tuple[str, Retired]]) -> str:
    """What a registered component still uses of earlier contracts, each name with its replacement, whether this
    jt-core honours it, and the version that refuses it."""
    cls = type(component)
    described = []
    for used, entry in retired:
        if "(" in used:
            honoured = f"jt-core {jt_version.__version__} still offers it"
        elif entry.unhonoured:
            honoured = f"jt-core cannot honour it: {entry.unhonoured}"
        elif entry.answer is not None and not keeps_default(component, entry.question):
            honoured = f"ignored, since {cls.__qualname__} answers {entry.question}() itself"
        else:
            honoured = f"jt-core {jt_version.__version__} still honours it"
        described.append(f"{used}, replaced by {entry.replacement} ({honoured}; {entry.removed_in} refuses it)")
    one = len(described) == 1
    return (
        f"registered the {what} {cls.__module__}.{cls.__qualname__}, which uses {'a name' if one else 'names'} of "
        f"an earlier jt contract: {'; '.join(described)}. Move to the {'replacement' if one else 'replacements'} "
        f"while jt-core {jt_version.__version__} still takes {'it' if one else 'them'}."
    )


def _label(component: Any) -> str:
    if isinstance(component, Launcher):
        return f"launcher '{component.platform}:{component.name}'"
    if isinstance(component, Dialect):
        return f"dialect {component.name!r}"
    if isinstance(component, Backend):
        return f"backend {component.platform!r}"
    return repr(component)


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
