"""The fixtures of jt's pytest plugin, and the same outside pytest: a fresh set of plugins for a test
(`using_plugins`, ``jt_plugin_manager``, ``jt_fake_entry_points``, ``jt_register_plugin``, with
`fake_entry_point`), the dialect chosen for a kernel (`dialect_for`), a recorder of hook calls
(``jt_hook_recorder``, `HookRecorder`), and the CPU path a test names taken as named (``jt_cpu_paths_by_name``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from jt_core.configs import unwrap_kernel
from jt_core.plugin import registry as registries
from jt_core.plugin.loader import EntryPointInfo, PluginLoader, discover_entry_points
from jt_core.plugin.registry import Registry
from jt_core.plugin.roles import Dialect
from jt_core.plugin.specs import PLUGIN_API_VERSION

__all__ = [
    "CPU_PATH_SWITCHES",
    "HookRecorder",
    "dialect_for",
    "fake_entry_point",
    "jt_cpu_paths_by_name",
    "jt_fake_entry_points",
    "jt_hook_recorder",
    "jt_plugin_manager",
    "jt_register_plugin",
    "make_registry",
    "using_plugins",
]


def make_registry(
    entry_points: Sequence[EntryPointInfo] | None = None, environ: Mapping[str, str] | None = None
) -> Registry:
    """A registry over a fresh plugin loader (``entry_points=None``: the installed ones)."""
    return Registry(PluginLoader(entry_points=entry_points, environ=environ))


@contextlib.contextmanager
def using_plugins(
    *entry_points: EntryPointInfo, environ: Mapping[str, str] | None = None, installed: bool = True
) -> Iterator[Registry]:
    """Makes jt use a fresh set of plugins while the block runs: the installed ones (unless ``installed=False``)
    and ``entry_points`` (made with `fake_entry_point`), loaded at the first call as jt loads its plugins,
    with ``environ`` in place of the process's ``JT_*PLUGINS`` and ``JT_LAUNCHER_*`` variables. The previous set is
    back when the block ends.

    Args:
        entry_points: The plugins to add, as entry points.
        environ: The variables the loader reads (none by default: every plugin loads).
        installed: Whether the installed plugins are loaded too (jt-core's built-ins always are).

    Yields:
        The registry in use (``registry.list_plugins()`` lists its plugins, as ``jt.list_plugins()`` does).
    """
    eps = [*discover_entry_points(), *entry_points] if installed else list(entry_points)
    registry = make_registry(eps, environ if environ is not None else {})
    previous = registries.set_registry(registry)
    try:
        yield registry
    finally:
        registries.set_registry(previous)


def dialect_for(kernel: Any) -> Dialect:
    """The dialect jt's plugins in use choose for ``kernel`` (the first that claims it), as a call of it is bound."""
    return registries.get_registry().dialect_for(unwrap_kernel(kernel).fn)


#: The environment variables that send CPU calls to another path than the one a call names, or add calls beside it.
CPU_PATH_SWITCHES = ("JT_CPU_DIFFERENTIAL", "JT_CPU_RACE_CHECK", "JT_CPU_UNWRITTEN", "JT_LAUNCHER_CPU")


@pytest.fixture
def jt_cpu_paths_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unsets `CPU_PATH_SWITCHES` for the test: its calls take the CPU path they name (or the default, the compiled
    path), with no comparison beside them, whatever the session's environment switched on."""
    for name in CPU_PATH_SWITCHES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def jt_plugin_manager() -> Iterator[Registry]:
    """A fresh registry over the installed entry points, installed as the process-wide one."""
    registry = make_registry()
    previous = registries.set_registry(registry)
    try:
        yield registry
    finally:
        registries.set_registry(previous)


def fake_entry_point(
    name: str,
    target: Any,
    distribution: str = "fake-dist",
    version: str = "0.0.0",
    first_load: BaseException | None = None,
    api_version: int | None = PLUGIN_API_VERSION,
) -> EntryPointInfo:
    """An entry point whose ``load()`` returns ``target``, or raises it when it is an exception instance.

    A ``target`` that declares no plugin API version (``JT_PLUGIN_API``) is given ``api_version``, the current one
    by default; ``None`` leaves it without.

    Args:
        name: The entry-point (plugin) name.
        target: The plugin module or object, or the exception its import raises.
        distribution: The distribution that declares it.
        version: That distribution's version.
        first_load: Raised by the first ``load()`` only, later ones go on as above: an import interrupted once
            (``KeyboardInterrupt()``), then retried.
    """
    pending = [first_load] if first_load is not None else []
    if api_version is not None and not isinstance(target, BaseException) and not hasattr(target, "JT_PLUGIN_API"):
        target.JT_PLUGIN_API = api_version

    def load() -> Any:
        if pending:
            raise pending.pop()
        if isinstance(target, BaseException):
            raise target
        return target

    return EntryPointInfo(name=name, value=f"{name}:fake", distribution=distribution, version=version, load=load)


@pytest.fixture
def jt_fake_entry_points() -> Iterator[Callable[..., Registry]]:
    """A factory: ``make(entry_points, environ=None, include_installed=False)`` -> an installed fresh registry.

    Each entry point is an `EntryPointInfo` (see `fake_entry_point`).
    """
    previous = registries.set_registry(None)

    def make(
        entry_points: Sequence[EntryPointInfo],
        environ: Mapping[str, str] | None = None,
        include_installed: bool = False,
    ) -> Registry:
        eps = list(entry_points)
        if include_installed:
            eps = discover_entry_points() + eps
        registry = make_registry(eps, environ if environ is not None else {})
        registries.set_registry(registry)
        return registry

    try:
        yield make
    finally:
        registries.set_registry(previous)


@pytest.fixture
def jt_register_plugin(jt_fake_entry_points: Callable[..., Registry]) -> Callable[..., Registry]:
    """``register(plugin, name="test-plugin")``: a fresh registry with the installed plugins plus ``plugin``."""

    def register(plugin: Any, name: str = "test-plugin", environ: Mapping[str, str] | None = None) -> Registry:
        return jt_fake_entry_points(
            [fake_entry_point(name, plugin, distribution=f"{name}-dist")], environ=environ, include_installed=True
        )

    return register


class HookRecorder:
    """Records every hook call made through a registry's plugins: ``calls`` holds ``(hook name, kwargs)`` pairs."""

    def __init__(self, registry: Registry) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._undo = registry.loader.pm.add_hookcall_monitoring(self._before, lambda *a: None)

    def _before(self, hook_name: str, hook_impls: Any, kwargs: Mapping[str, Any]) -> None:
        self.calls.append((hook_name, dict(kwargs)))

    def names(self) -> list[str]:
        """The hook names called, in order."""
        return [name for name, _ in self.calls]

    def close(self) -> None:
        """Stops recording."""
        self._undo()


@pytest.fixture
def jt_hook_recorder() -> Iterator[HookRecorder]:
    """Records the hook calls of a fresh process-wide registry for the duration of a test."""
    registry = make_registry()
    previous = registries.set_registry(registry)
    recorder = HookRecorder(registry)
    try:
        yield recorder
    finally:
        recorder.close()
        registries.set_registry(previous)
