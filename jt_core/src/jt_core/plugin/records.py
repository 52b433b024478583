"""What jt knows of each plugin: its `PluginRecord` (distribution, status, what it provides, why it failed),
and the `PluginFault` records of what it raised while serving calls."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = [
    "BLOCKED",
    "BROKEN",
    "BUILTIN",
    "FAILED",
    "FAULTED",
    "LOADED",
    "PluginFault",
    "PluginRecord",
    "describe_exception",
]

LOADED = "loaded"
BLOCKED = "blocked"
FAILED = "failed"
BUILTIN = "builtin"
FAULTED = "faulted"

#: What a broken plugin raises: any error, and ``SystemExit`` (a plugin must not end the user's program).
#: ``KeyboardInterrupt`` is not among them: a Ctrl-C reaches the program, and leaves the load retryable.
BROKEN: tuple[type[BaseException], ...] = (Exception, SystemExit)


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` of an exception, with ``sys.exit(code)`` for a ``SystemExit``."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: sys.exit({exc.code!r}) was called"
    return f"{type(exc).__name__}: {exc}"


@dataclasses.dataclass(frozen=True)
class PluginFault:
    """A plugin's code that raised while jt served a call, after the plugin had loaded.

    Attributes:
        plugin: The plugin's name.
        distribution: The distribution that declares it.
        version: That distribution's version.
        where: What raised: ``"jt_compile_kernel"``, ``"launcher 'cpu:fast' lower()"``,
            ``"dialect 'gluon' claims()"``.
        error: The exception as ``Type: message``.
        traceback: The exception's traceback, formatted.
        consequence: What jt did about it.
        pid: The process it happened in.
        time: When, in seconds since the epoch.
    """

    plugin: str
    distribution: str
    version: str
    where: str
    error: str
    traceback: str
    consequence: str
    pid: int
    time: float

    def as_dict(self) -> dict[str, Any]:
        """The fault as JSON-ready data."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class PluginRecord:
    """What is known about one plugin.

    Attributes:
        name: The entry-point name (or the builtin plugin's name).
        distribution: The distribution that declares it.
        version: That distribution's version.
        status: ``"loaded"``, ``"blocked"``, ``"failed"``, ``"builtin"``, or ``"faulted"`` (loaded, but something
            it provides raised while serving a call).
        error: Why it failed or is blocked, and the fix (``"failed to import (...): ImportError: ...; fix or
            uninstall it, or set JT_DISABLE_PLUGINS=name"``), or ``None``. The plugin's name, distribution and
            version are not repeated in it: messages about the plugin say them first.
        platforms: Platforms it registered backends for.
        dialects: Dialects it registered.
        launchers: ``platform:name`` of the launchers it registered.
        launcher_details: For each of those, its ``priority`` and ``falls_back_for``: what makes a call go to the
            platform's next launcher (empty for launchers that take every call).
        faults: What it raised while serving calls, oldest first.
        deprecations: The names of earlier jt contracts its components use, each with its replacement and the
            jt-core version that refuses it (they keep working until then).
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
    faults: list[PluginFault] = dataclasses.field(default_factory=list)
    deprecations: list[str] = dataclasses.field(default_factory=list)

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
            "faults": [fault.as_dict() for fault in self.faults],
            "deprecations": list(self.deprecations),
        }
