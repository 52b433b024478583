"""The faults of plugins kept on this machine, so that ``python -m jt_core plugins`` shows them from any process:
the last `KEPT_FAULTS` of each plugin, as a record with its integrity check in the cache root's ``plugins``
folder."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jt_core import files, integrity
from jt_core.plugin.records import FAULTED, LOADED, PluginFault, PluginRecord

__all__ = [
    "FAULTS_FOLDER",
    "KEPT_FAULTS",
    "faults_file",
    "forget_faults",
    "recorded_faults",
    "remember_fault",
    "with_recorded_faults",
]

log = logging.getLogger("jt_core.plugins")

#: The cache folder keeping the faults of the last processes, and how many each plugin keeps.
FAULTS_FOLDER = "plugins"
KEPT_FAULTS = 5

_FAULT_TEXT_FIELDS = ("plugin", "distribution", "version", "where", "error", "traceback", "consequence")


def faults_file(plugin: str) -> Path:
    """Where the faults of ``plugin`` are kept on this machine (``<plugin>.jt-faults.json`` in the cache root's
    ``plugins`` folder).

    Raises:
        OSError: When the cache has no usable folder.
    """
    return files.cache_folder(FAULTS_FOLDER) / f"{files.safe_name(plugin)}.jt-faults.json"


def _read_faults(path: Path) -> list[PluginFault]:
    """The faults kept in ``path``; a missing, unreadable or damaged file (one that fails its integrity check is
    deleted, with a warning) holds none, and entries that are not faults are skipped."""
    data = integrity.read_record(path)
    found = []
    for entry in data.get("faults", ()) if data is not None else ():
        if not isinstance(entry, dict):
            continue
        texts: dict[str, Any] = {name: entry.get(name) for name in _FAULT_TEXT_FIELDS}
        pid, when = entry.get("pid"), entry.get("time")
        if all(isinstance(t, str) for t in texts.values()) and isinstance(pid, int) and isinstance(when, (int, float)):
            found.append(PluginFault(**texts, pid=pid, time=float(when)))
    return found


def remember_fault(fault: PluginFault) -> None:
    """Keeps ``fault`` in jt's cache folder (the last `KEPT_FAULTS` of its plugin, as a record with its
    integrity check), for ``python -m jt_core plugins`` in any process. A folder that cannot be written only loses
    the record (reported once, as every cache folder that takes no file)."""
    try:
        path = faults_file(fault.plugin)
    except OSError as exc:
        log.debug("the fault of plugin %r was not kept: %s", fault.plugin, exc)
        return
    kept = [*_read_faults(path)[-(KEPT_FAULTS - 1) :], fault]
    integrity.write_record(path, {"faults": [f.as_dict() for f in kept]})


def recorded_faults(record: PluginRecord) -> list[PluginFault]:
    """The faults kept on this machine for ``record``'s plugin at its installed distribution and version, oldest
    first (those of an older or newer version are left out: they may be fixed)."""
    try:
        path = faults_file(record.name)
    except OSError:
        return []
    return [f for f in _read_faults(path) if (f.distribution, f.version) == (record.distribution, record.version)]


def with_recorded_faults(records: Iterable[PluginRecord]) -> list[PluginRecord]:
    """``records``, each loaded plugin's with the faults kept on this machine added (by time) and its status
    ``"faulted"`` when it has any. The records themselves are left as they are."""
    merged = []
    for record in records:
        if record.status not in (LOADED, FAULTED):
            merged.append(record)
            continue
        known = {(f.pid, f.time, f.where) for f in record.faults}
        extra = [f for f in recorded_faults(record) if (f.pid, f.time, f.where) not in known]
        if not extra:
            merged.append(record)
            continue
        faults = sorted([*record.faults, *extra], key=lambda f: f.time)
        merged.append(dataclasses.replace(record, status=FAULTED, faults=faults))
    return merged


def forget_faults() -> int:
    """Deletes every fault kept on this machine; returns how many plugins had some."""
    try:
        paths = files.kept_files(FAULTS_FOLDER, files.cache_folder(FAULTS_FOLDER))
    except OSError:
        return 0
    forgotten = 0
    for path in paths:
        try:
            path.unlink()
            forgotten += 1
        except OSError:
            continue
    return forgotten
