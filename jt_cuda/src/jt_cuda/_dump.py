"""Writing a compiled kernel's IRs and compile info to ``JAX_TRITON_DUMP_DIR``."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DUMP_DIR_VARIABLE = "JAX_TRITON_DUMP_DIR"

#: IR stage name -> file suffix.
STAGE_FILES = {"ttir": "ttir", "ttgir": "ttgir", "llir": "llir", "ptx": "ptx", "cubin": "cubin"}


def dump_dir() -> Path | None:
    """The dump folder named by ``JAX_TRITON_DUMP_DIR``, or ``None`` when unset or empty."""
    value = os.environ.get(DUMP_DIR_VARIABLE, "").strip()
    return Path(value) if value else None


def _write(path: Path, data: bytes) -> None:
    """Writes atomically (temporary file + rename): a second write of the same kernel replaces the first."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:80] or "kernel"


def write_dump(root: Path, name: str, key: str, asm: Mapping[str, Any], info: Mapping[str, Any]) -> Path:
    """Writes ``<root>/<name>-<key>/<name>.<stage>`` for every IR and ``compile_info.json``.

    Returns:
        The kernel's dump folder.
    """
    folder = root / f"{_safe(name)}-{key[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    for stage, suffix in STAGE_FILES.items():
        if stage not in asm:
            continue
        value = asm[stage]
        data = value if isinstance(value, bytes) else str(value).encode()
        _write(folder / f"{_safe(name)}.{suffix}", data)
    _write(folder / "compile_info.json", json.dumps(info, indent=2, sort_keys=True, default=str).encode())
    return folder
