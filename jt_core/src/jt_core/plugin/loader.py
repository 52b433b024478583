"""The plugin loader: discovery, loading, isolation of broken plugins, and the ``JT_*`` plugin switches.

Entry points of the group ``jt`` are enumerated when the loader is created (cheap: no plugin module is imported)
and loaded on first use under a lock. Loading is jt's own loop, not pluggy's ``load_setuptools_entrypoints``, so
that a plugin that fails to import (``sys.exit()`` included), fails pluggy's validation (a hook with no spec, a
wrong signature), defines a function named like a hook without the ``hookimpl`` decorator (which pluggy would leave
uncalled without a word) or raises inside a registration hook is recorded, warned about once and skipped, while
every other plugin and the builtin CPU backend keep working. Blocked plugins are blocked in pluggy too
(``set_blocked``). The registries built from the loaded plugins live in `jt_core.plugin.registry`.

Loading is a transaction: when it is interrupted (``KeyboardInterrupt``) or fails (``JT_STRICT_PLUGINS``), every
plugin it registered is unregistered again and the records are dropped, so the exception reaches the caller and
the next use loads from the start. A plugin that raises later, while serving a call, is a `PluginFault`: the
registry sets the part that raised aside, and the fault is kept on this machine (`remember_fault`) so that
``python -m jt_core plugins`` shows it from any process.

Switches (read when the loader is created; see `jt_core.settings`):

* ``JT_LOAD_PLUGINS`` -- unset: load every plugin; empty: load none (builtins only); ``a,b``: only these.
* ``JT_DISABLE_PLUGINS`` -- ``a,b``: never load these (builtins are always loaded).
* ``JT_TRACE_PLUGINS`` -- non-empty: log loading and trace every hook call (registration hooks included) to stderr.
* ``JT_STRICT_PLUGINS`` -- non-empty: a plugin problem raises instead of being recorded (the test suite sets it).

A name in ``JT_LOAD_PLUGINS`` or ``JT_DISABLE_PLUGINS`` that no installed plugin has is warned about once, at the
first load.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import inspect
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pluggy

from jt_core import settings
from jt_core._compat import entry_points_for_group
from jt_core._version import __version__
from jt_core.errors import PluginFaultError, PluginLoadError, warn_in_user_code
from jt_core.plugin import specs
from jt_core.plugin.faults import KEPT_FAULTS, remember_fault
from jt_core.plugin.records import (
    BLOCKED,
    BROKEN,
    BUILTIN,
    FAILED,
    FAULTED,
    LOADED,
    PluginFault,
    PluginRecord,
    describe_exception,
)

__all__ = [
    "BUILTIN_DISTRIBUTION",
    "BUILTIN_PLUGINS",
    "ENTRY_POINT_GROUP",
    "EntryPointInfo",
    "PluginLoader",
    "discover_entry_points",
    "plugin_traceback",
]

log = logging.getLogger("jt_core.plugin.loader")

ENTRY_POINT_GROUP = "jt"
BUILTIN_DISTRIBUTION = "jt-core"

#: How alike (``difflib`` ratio) a hook implementation without a spec and a spec's name must be for the name to be
#: suggested: a letter added, dropped or swapped scores above 0.9; hook names that share only the ``jt_`` prefix
#: and a word score below 0.7.
HOOK_NAME_CUTOFF = 0.75

#: jt-core's own plugins, registered by module name like any plugin: the compile through the caches (and the dump
#: wrapper), the plain Triton dialect, and the CPU backend with its launchers.
BUILTIN_PLUGINS: tuple[tuple[str, str], ...] = (
    ("core", "jt_core._builtin_compile"),
    ("triton", "jt_core.triton_dialect"),
    ("cpu", "jt_core.cpu.plugin"),
)


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
            `BUILTIN_PLUGINS`.
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
        self._warned_faults: set[tuple[str, str]] = set()
        self._warned_deprecations: set[tuple[str, str]] = set()
        self._checked_names = False
        self._answered: set[tuple[str, str]] = set()
        self.pm = pluggy.PluginManager(specs.PROJECT_NAME)
        self.pm.add_hookspecs(specs)
        self.records: dict[str, PluginRecord] = {}
        if self.trace:
            self.pm.trace.root.setwriter(lambda msg: sys.stderr.write(f"[jt-plugins] {msg}"))
            self.pm.enable_tracing()

    def ensure_loaded(self) -> PluginLoader:
        """Imports and registers every plugin once (thread-safe).

        A load that raises (a ``KeyboardInterrupt``, or a plugin problem under ``JT_STRICT_PLUGINS``) is undone
        (`unload`) before the exception propagates, so the next call loads again from the start.
        """
        if self._loaded:
            return self
        with self._lock:
            if self._loaded:
                return self
            self._check_named_plugins()
            try:
                for name, module in self._builtins:
                    plugin = importlib.import_module(module) if isinstance(module, str) else module
                    self.pm.register(plugin, name=name)
                    self.records[name] = PluginRecord(name, BUILTIN_DISTRIBUTION, __version__, BUILTIN)
                for ep in self._entry_points:
                    self._load_entry_point(ep)
            except BaseException:
                self.unload()
                raise
            self._loaded = True
        return self

    def _check_named_plugins(self) -> None:
        """Warns, once, about names in ``JT_LOAD_PLUGINS`` and ``JT_DISABLE_PLUGINS`` that no installed plugin has
        (a misspelt name would otherwise do nothing without a word), and about built-in plugins named in
        ``JT_DISABLE_PLUGINS``, which are always loaded."""
        if self._checked_names:
            return
        self._checked_names = True
        installed = sorted({ep.name for ep in self._entry_points})
        builtins = [name for name, _ in self._builtins]
        for variable, named in (
            ("JT_LOAD_PLUGINS", self.load_only or []),
            ("JT_DISABLE_PLUGINS", sorted(self.disabled)),
        ):
            unknown = [name for name in named if name not in installed and name not in builtins]
            if unknown:
                _warn(_unknown_plugins_message(variable, unknown, installed))
        for name in sorted(self.disabled):
            if name in builtins:
                _warn(
                    f"JT_DISABLE_PLUGINS names {name!r}, a plugin built into jt-core, which is always loaded: the "
                    "name has no effect. Drop it from JT_DISABLE_PLUGINS."
                )

    def unload(self) -> None:
        """Unregisters every plugin, lifts every block and drops the records: the state before the first load.

        The warnings already given stay given (a plugin is warned about once per process).
        """
        with self._lock:
            for name, plugin in self.pm.list_name_plugin():
                if plugin is None:
                    self.pm.unblock(name)
                else:
                    self.pm.unregister(plugin, name=name)
            self.records.clear()
            self._answered.clear()
            self._loaded = False

    def _trace(self, message: str) -> None:
        if self.trace:
            sys.stderr.write(f"[jt-plugins] {message}\n")
        log.debug(message)

    def problem(self, record: PluginRecord, error: str) -> None:
        """Records a plugin failure: raises `PluginLoadError` in strict mode, else warns
        once per plugin.

        Args:
            record: The plugin's record; its status becomes ``"failed"``.
            error: What went wrong and the fix, without the plugin's name (the message puts it first).
        """
        record.status = FAILED
        record.error = error
        message = f"jt plugin {record.name!r} from {record.distribution} {record.version} {error}"
        if self.strict:
            raise PluginLoadError(message)
        if record.name not in self._warned:
            self._warned.add(record.name)
            _warn(message)

    def deprecated(self, record: PluginRecord, note: str) -> None:
        """Records that a plugin uses a name jt-core retires (it keeps working until the version that refuses it),
        and warns with a ``DeprecationWarning``, once per plugin and note.

        Args:
            record: The plugin's record; the note is added to its ``deprecations``.
            note: What it uses, the replacement and the version that refuses it, without the plugin's name (the
                message puts it first).
        """
        with self._lock:
            if note in record.deprecations:
                return
            record.deprecations.append(note)
            first = (record.name, note) not in self._warned_deprecations
            self._warned_deprecations.add((record.name, note))
        self._trace(f"{record.name}: {note}")
        if first:
            _warn(f"jt plugin {record.name!r} from {record.distribution} {record.version} {note}", DeprecationWarning)

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
                f"was skipped: the plugin name {ep.name!r} is declared by both {other.distribution} and "
                f"{ep.distribution}. Uninstall one of the two distributions.",
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
        except BROKEN as exc:
            what = (
                f"called sys.exit({exc.code!r}) while being imported ({ep.value})"
                if isinstance(exc, SystemExit)
                else f"failed to import ({ep.value}): {describe_exception(exc)}"
            )
            self.problem(record, f"{what}. Fix or uninstall it, or set JT_DISABLE_PLUGINS={ep.name}.")
            return
        problem = specs.api_version_problem(module)
        if problem is not None:
            self.problem(record, f"{problem}; until then set JT_DISABLE_PLUGINS={ep.name} to silence this.")
            return
        undecorated = self._undecorated_hooks(module)
        if undecorated:
            self.problem(record, _undecorated_problem(ep.name, undecorated))
            return
        try:
            self.pm.register(module, name=ep.name)
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            unknown = sorted(caller.name for caller in self.pm.get_hookcallers(module) or () if not caller.has_spec())
            if self.pm.is_registered(module):
                self.pm.unregister(module)
            self.problem(record, self._invalid(ep.name, unknown, exc))
            return
        except BROKEN as exc:
            self.problem(
                record,
                f"could not be registered: {describe_exception(exc)}. Set JT_DISABLE_PLUGINS={ep.name} to skip it.",
            )
            return
        self._trace(f"{ep.name}: loaded from {ep.distribution} {ep.version}")

    def _undecorated_hooks(self, plugin: object) -> list[str]:
        """The functions of ``plugin`` named exactly like a hook but not decorated with ``hookimpl``, as
        ``module.qualname``: pluggy registers a plugin without them and never calls them."""
        found = []
        for hook in sorted(caller.name for caller in vars(self.pm.hook).values() if caller.has_spec()):
            function = getattr(plugin, hook, None)
            if inspect.isroutine(function) and self.pm.parse_hookimpl_opts(plugin, hook) is None:
                module = getattr(function, "__module__", None) or getattr(plugin, "__name__", type(plugin).__name__)
                found.append(f"{module}.{getattr(function, '__qualname__', hook)}")
        return found

    def _invalid(self, name: str, unknown: Sequence[str], exc: pluggy.PluginValidationError) -> str:
        """What is wrong with a plugin pluggy refused: the hooks it implements that have no spec (each with the spec
        it most likely misspells), else pluggy's reason."""
        if not unknown:
            return f"is invalid: {exc}. It needs a newer jt-core or a fix; set JT_DISABLE_PLUGINS={name} to skip it."
        specs = [caller.name for caller in vars(self.pm.hook).values() if caller.has_spec()]
        described, misspelled = [], False
        for hook in unknown:
            close = difflib.get_close_matches(hook, specs, n=1, cutoff=HOOK_NAME_CUTOFF)
            misspelled = misspelled or bool(close)
            described.append(f"{hook} (did you mean {close[0]}?)" if close else hook)
        fix = "Correct the name in the plugin" if misspelled else "It needs a newer jt-core or a fix"
        return (
            f"implements hooks that have no spec: {', '.join(described)}. {fix}; set JT_DISABLE_PLUGINS={name} to "
            "skip it."
        )

    def call_each(self, hook_name: str, **arguments: Any) -> list[tuple[str, Any, dict[str, Any]]]:
        """Calls a registration hook one plugin at a time, so that a plugin that raises is isolated.

        Each call goes through pluggy (a subset caller holding only that plugin), so ``JT_TRACE_PLUGINS`` traces
        it like any other hook call. An implementation that takes none of ``arguments`` answers the same whatever
        they are, so it is called once per load and left out of later calls.

        Returns:
            ``(plugin name, item, the arguments its implementation took)`` for every item every plugin returned, in
            registration order.
        """
        self.ensure_loaded()
        results = []
        impls = getattr(self.pm.hook, hook_name).get_hookimpls()
        for impl in impls:
            name = impl.plugin_name
            record = self.records.get(name)
            if record is not None and record.status == FAILED:
                continue
            constant = not set(impl.argnames) & set(arguments)
            if constant and (hook_name, name) in self._answered:
                continue
            others = [other.plugin for other in impls if other.plugin_name != name]
            try:
                returned = self.pm.subset_hook_caller(hook_name, remove_plugins=others)(**arguments)
            except BROKEN as exc:
                if record is None:
                    raise
                self.problem(
                    record,
                    f"raised in {hook_name}: {describe_exception(exc)}. Set JT_DISABLE_PLUGINS={name} to skip it.",
                )
                self.pm.unregister(name=name)
                continue
            if constant:
                self._answered.add((hook_name, name))
            taken = {argument: arguments[argument] for argument in impl.argnames if argument in arguments}
            for items in returned:
                for item in items or ():
                    results.append((name, item, taken))
        return results

    def fault(self, record: PluginRecord, where: str, exc: BaseException, consequence: str) -> PluginFault:
        """Records that ``record``'s plugin raised ``exc`` in ``where`` while serving a call (its status becomes
        ``"faulted"``), and keeps the fault on this machine (`remember_fault`).

        Args:
            record: The plugin's record.
            where: What raised (``"launcher 'cpu:fast' lower()"``).
            exc: What it raised.
            consequence: What jt does about it (``"jt set it aside for this process; ..."``), or ``""`` when the
                call fails.
        """
        fault = PluginFault(
            plugin=record.name,
            distribution=record.distribution,
            version=record.version,
            where=where,
            error=describe_exception(exc),
            traceback=plugin_traceback(exc),
            consequence=consequence,
            pid=os.getpid(),
            time=time.time(),
        )
        with self._lock:
            record.faults = [*record.faults[-(KEPT_FAULTS - 1) :], fault]
            if record.status == LOADED:
                record.status = FAULTED
        remember_fault(fault)
        self._trace(f"{record.name}: raised in {where}: {fault.error}")
        return fault

    def warn_fault(self, fault: PluginFault, exc: BaseException) -> None:
        """Warns about a fault the call survives, once per plugin and place.

        Raises:
            PluginFaultError: Instead, under ``JT_STRICT_PLUGINS``.
        """
        message = (
            f"jt plugin {fault.plugin!r} ({fault.distribution} {fault.version}) raised in {fault.where}: "
            f"{fault.error}. {fault.consequence} `python -m jt_core plugins` shows the traceback. Fix or upgrade the "
            f"plugin, or set JT_DISABLE_PLUGINS={fault.plugin}."
        )
        if self.strict:
            raise PluginFaultError(message) from exc
        with self._lock:
            first = (fault.plugin, fault.where) not in self._warned_faults
            self._warned_faults.add((fault.plugin, fault.where))
        if first:
            _warn(message)


def _unknown_plugins_message(variable: str, unknown: Sequence[str], installed: Sequence[str]) -> str:
    """The warning for names in ``variable`` that no installed plugin has, each with the installed name it most
    likely misspells."""
    described = []
    for name in unknown:
        close = difflib.get_close_matches(name, installed, n=1)
        described.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    one = len(unknown) == 1
    listed = ", ".join(installed) if installed else "none besides jt-core's built-ins"
    return (
        f"{variable} names {'a plugin' if one else 'plugins'} that no installed distribution provides: "
        f"{', '.join(described)}; {'it has' if one else 'they have'} no effect. The installed jt plugins are: "
        f"{listed} (`python -m jt_core plugins` lists them). Correct the {'name' if one else 'names'} in {variable}."
    )


def _undecorated_problem(name: str, functions: Sequence[str]) -> str:
    """What is wrong with a plugin whose hook functions lack the ``hookimpl`` decorator."""
    one = len(functions) == 1
    return (
        f"defines {'the hook function' if one else 'the hook functions'} {', '.join(functions)} without the "
        f"@hookimpl decorator, so jt would never call {'it' if one else 'them'}. Decorate "
        f"{'it' if one else 'each'} with jt_core.plugin.hookimpl (`from jt_core.plugin import hookimpl`, then "
        f"`@hookimpl` above the def); set JT_DISABLE_PLUGINS={name} to skip the plugin."
    )


def _machinery() -> tuple[str, ...]:
    """The folders of the packages between a user's call and a plugin (jt-core, JAX, pluggy)."""
    return tuple(
        os.path.dirname(module.__file__) + os.sep
        for module in (sys.modules.get(name) for name in ("jt_core", "jax", "pluggy"))
        if module is not None and module.__file__
    )


def _warn(message: str, category: type[Warning] = RuntimeWarning) -> None:
    """Warns, pointing at the user's code that led here (not at jt's, JAX's or pluggy's)."""
    warn_in_user_code(message, category)


def plugin_traceback(exc: BaseException) -> str:
    """The traceback of what a plugin raised, from the plugin's first frame (jt's and pluggy's frames above it
    left out; all of it when none is the plugin's)."""
    machinery = _machinery()
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(machinery):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
