"""Content-addressed HSACO files for launchers that load a module from a path (jaxlib's ROCm handler).

jaxlib's ROCm Triton handler reads the HSACO from the file named in the kernel call (and recent jaxlibs delete that
file after loading it). A file named by the SHA-256 of its bytes, in a per-user cache directory, keeps the lowered
call deterministic and is rewritten whenever a lowering finds it missing.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

#: Overrides the directory the HSACO files are written to.
HSACO_DIR_ENV = "JT_ROCM_HSACO_DIR"


def hsaco_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$JT_ROCM_HSACO_DIR``, else ``$XDG_CACHE_HOME/jt/rocm-hsaco``, else ``~/.cache/jt/rocm-hsaco``."""
    env = environ if environ is not None else os.environ
    explicit = env.get(HSACO_DIR_ENV, "").strip()
    if explicit:
        return Path(explicit)
    cache = env.get("XDG_CACHE_HOME", "").strip()
    base = Path(cache) if cache else Path.home() / ".cache"
    return base / "jt" / "rocm-hsaco"


def store_hsaco(kernel_name: str, hsaco: bytes, environ: Mapping[str, str] | None = None) -> Path:
    """Writes ``hsaco`` (unless an identical file is there) and returns its path.

    The name is ``<kernel>-<sha256>.hsaco``: the same bytes always map to the same path.
    """
    if not hsaco:
        raise ValueError(f"kernel {kernel_name!r} has an empty HSACO")
    folder = hsaco_dir(environ)
    folder.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in kernel_name)[:80] or "kernel"
    path = folder / f"{safe}-{hashlib.sha256(hsaco).hexdigest()}.hsaco"
    try:
        if path.stat().st_size == len(hsaco):
            return path
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{safe}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(hsaco)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
