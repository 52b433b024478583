"""``JAX_TRITON_DUMP_DIR``: writes every compiled kernel's IRs, binary and compile info to a directory."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jt_core.backend import CompiledKernel, CompileRequest

#: The environment variable naming the dump directory (the name jax-triton uses).
DUMP_DIR_ENV = "JAX_TRITON_DUMP_DIR"


def dump_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The dump directory, or ``None`` when dumping is off."""
    value = (environ if environ is not None else os.environ).get(DUMP_DIR_ENV, "").strip()
    return Path(value) if value else None


def _write_atomic(path: Path, data: bytes) -> None:
    # Write then rename: a reader never sees half a file and a second dump of the same kernel just replaces it.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def dump_kernel(request: CompileRequest, kernel: CompiledKernel, binary_ext: str, root: Path) -> Path:
    """Writes one compiled configuration under ``root`` and returns its folder.

    The folder is ``<call name>-<hash>`` where the hash covers the binary and the configuration, so the same
    kernel dumped twice lands in the same folder (its files are replaced) and different configurations never
    collide. It holds one file per IR stage (``<kernel>.ttir``, ``.ttgir``, ``.llir``, ``.amdgcn`` ...), the binary
    (``<kernel>.<binary_ext>``) and ``<kernel>.compile_info.json``.
    """
    digest = hashlib.sha256()
    digest.update(kernel.binary)
    digest.update(request.config.label.encode())
    digest.update(repr(request.target).encode())
    folder = root / f"{_safe(request.call.name)}-{digest.hexdigest()[:16]}"
    folder.mkdir(parents=True, exist_ok=True)
    stem = _safe(kernel.name)
    for stage, text in kernel.asm.items():
        if isinstance(text, str):
            _write_atomic(folder / f"{stem}.{stage}", text.encode())
    _write_atomic(folder / f"{stem}.{binary_ext}", kernel.binary)
    info = {
        "call": request.call.name,
        "kernel": kernel.name,
        "signature": request.call.signature_text(),
        "config": request.config.label,
        "target": {
            "platform": request.target.platform,
            "arch": request.target.arch,
            "warp_size": request.target.warp_size,
        },
        "options": _plain(request.options.as_dict()),
        "num_warps": kernel.num_warps,
        "shared_mem_bytes": kernel.shared_mem,
        "global_scratch_size": kernel.global_scratch_size,
        "metadata": _plain(kernel.metadata),
    }
    _write_atomic(folder / f"{stem}.compile_info.json", json.dumps(info, indent=2, sort_keys=True).encode())
    return folder


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name) or "kernel"
