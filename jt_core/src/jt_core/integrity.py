"""Integrity records: every file jt reads back carries the size and SHA-256 it was written with, inside it (a JSON
record, `write_record`) or beside it (a file another program wrote, `record_integrity`), and is checked
against them before each use (`read_record`, `integrity_problem`). A file that fails is deleted with a
warning (`jt_core.files.unusable`) and made again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from jt_core.files import read_file, unusable, write_file

__all__ = ["integrity_path", "integrity_problem", "read_record", "record_integrity", "write_record"]

_INTEGRITY = "integrity"


def _integrity(payload: bytes) -> dict[str, Any]:
    return {"size": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}


def write_record(path: Path, record: dict[str, Any]) -> bool:
    """Writes a JSON record with its integrity record (the size and SHA-256 of the record's canonical JSON) inside.

    Returns:
        As `write_file`.
    """
    body = json.dumps(record, sort_keys=True)
    sealed = {**record, _INTEGRITY: _integrity(body.encode())}
    return write_file(path, json.dumps(sealed, sort_keys=True).encode())


def read_record(path: Path, data: bytes | None = None) -> dict[str, Any] | None:
    """The JSON record at ``path`` when it passes its integrity check; ``None`` when it is missing or unreadable,
    and when it fails the check (then it is deleted with a warning, see `unusable`). ``data``: the file's
    contents when the caller has read them already."""
    if data is None:
        data = read_file(path)
    if data is None:
        return None
    try:
        record = json.loads(data.decode())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        recorded = record.pop(_INTEGRITY, None)
        if recorded is None:
            raise ValueError("it has no integrity record")
        if recorded != _integrity(json.dumps(record, sort_keys=True).encode()):
            raise ValueError("its size or SHA-256 differs from its integrity record")
    except (ValueError, UnicodeDecodeError) as exc:
        unusable(path, str(exc))
        return None
    return record


def integrity_path(path: Path) -> Path:
    """Where the integrity record of a file written by another program (a compiler) is kept: beside it."""
    return path.with_name(path.name + ".integrity.json")


def record_integrity(path: Path) -> bool:
    """Records the size and SHA-256 of the file at ``path`` beside it (`integrity_path`).

    Raises:
        OSError: When ``path`` cannot be read.
    """
    return write_record(integrity_path(path), _integrity(path.read_bytes()))


def integrity_problem(path: Path) -> str | None:
    """Why the file at ``path`` does not match the integrity record beside it (missing, other size, other SHA-256,
    no record), or ``None`` when it does. The size is compared first, so a truncated file is never read whole."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            return "it is not a file"
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    recorded = read_record(integrity_path(path))
    if recorded is None:
        return "it has no valid integrity record"
    if recorded.get("size") != size:
        return f"it has {size} bytes, {recorded.get('size')} were written"
    data = read_file(path)
    if data is None or recorded != _integrity(data):
        return "its SHA-256 differs from the one recorded when it was written"
    return None
