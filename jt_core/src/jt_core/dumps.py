"""``JAX_TRITON_DUMP_DIR``: every compiled kernel's IRs, binary and compile info, written to a folder.

jt-core writes the dumps for every backend (from `CompiledKernel`), from the builtin
``jt_compile_kernel`` wrapper, each time a kernel comes back from compilation or from a cache. One folder per
kernel variant, ``<call name>-<key>``, holds ``<kernel>.<stage>`` for each IR the backend kept (``ttir``, ``ttgir``,
``llir``, ``ptx`` or ``amdgcn`` ...), the binary as ``<kernel>.<suffix>`` (the backend's answer to
`binary_file_suffix`: ``cubin``, ``hsaco``) and ``compile_info.json``. Files are
replaced atomically, so dumping the same kernel twice, or from two processes, is safe; a folder that cannot take a
dump is reported once and fails no call.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from jt_core import files, settings
from jt_core.plugin.roles import CompileRequest, invoke
from jt_core.plugin.values import CompiledKernel, plain_metadata

__all__ = ["dump_dir", "write_dump"]


def dump_dir() -> Path | None:
    """The dump folder named by ``JAX_TRITON_DUMP_DIR``, or ``None`` when dumping is off."""
    value = settings.text(settings.DUMP_DIR)
    return Path(value) if value else None


def _options_record(options: Any) -> dict[str, Any]:
    """A backend's parsed options (a frozen dataclass, as `Backend.parse_options` asks) as JSON data."""
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        return plain_metadata(dataclasses.asdict(options))
    return {"value": repr(options)}


def compile_info(request: CompileRequest, kernel: CompiledKernel) -> dict[str, Any]:
    """What ``compile_info.json`` holds: the call, configuration, target, options and compiled launch shape."""
    return {
        "call": request.call.name,
        "kernel": kernel.name,
        "signature": request.call.signature_text(),
        "config": request.config.label,
        "grid": list(request.config.grid),
        "target": {
            "platform": request.target.platform,
            "arch": request.target.arch,
            "warp_size": request.target.warp_size,
        },
        "options": _options_record(request.options),
        "num_warps": kernel.num_warps,
        "shared_mem": kernel.shared_mem,
        "cluster_dims": list(kernel.cluster_dims),
        "global_scratch_size": kernel.global_scratch_size,
        "global_scratch_align": kernel.global_scratch_align,
        "binary_bytes": len(kernel.binary),
        "metadata": plain_metadata(kernel.metadata),
    }


def write_dump(root: Path, key: str, request: CompileRequest, kernel: CompiledKernel) -> Path | None:
    """Writes one kernel variant under ``root`` and returns its folder.

    A dump is for reading, so a folder that cannot take it (a full disk, a read-only folder) fails no call: it is
    reported once and the call goes on, and ``None`` is returned.

    Args:
        root: The dump folder.
        key: Identifies the variant (the disk-cache key); its first 16 characters name the folder.
        request: What was compiled.
        kernel: The compiled kernel.
    """
    try:
        return _write(root, key, request, kernel)
    except OSError as exc:
        consequence = f"Kernels are not dumped there; calls go on. Point {settings.DUMP_DIR} at a writable folder."
        files.report_fault(root, exc, consequence=consequence)
        return None


def _write(root: Path, key: str, request: CompileRequest, kernel: CompiledKernel) -> Path:
    # Every part of a path comes from a name (the call's, the kernel's, a backend's stage and suffix): each is made
    # fit for a file name, so none leads out of the dump folder.
    folder = root / f"{files.safe_name(request.call.name)}-{files.safe_name(key[:16])}"
    files.make_folders(folder)
    stem = files.safe_name(kernel.name)
    suffix = invoke(request.backend, "binary_file_suffix", kernel=kernel)
    for stage, value in kernel.asm.items():
        if stage == "source":
            continue
        data = value if isinstance(value, bytes) else str(value).encode()
        files.atomic_write(folder / f"{stem}.{files.safe_name(str(stage))}", data)
    if kernel.binary and suffix not in kernel.asm:
        files.atomic_write(folder / f"{stem}.{files.safe_name(str(suffix))}", kernel.binary)
    info = json.dumps(compile_info(request, kernel), indent=2, sort_keys=True, default=str).encode()
    files.atomic_write(folder / "compile_info.json", info)
    return folder
