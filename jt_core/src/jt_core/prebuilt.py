"""Prebuilt libraries: a platform wheel carries each native library compiled against the XLA FFI headers of the
oldest jaxlib jt supports, with a build record beside it (`write_prebuilt_record`); one is used only where it
is the file the wheel was built with, built from the installed sources, and built for an XLA FFI API version the
installed jaxlib takes (`check_prebuilt`). ``JT_PREBUILT_NATIVE=0`` (`PREBUILT_VARIABLE`) ignores
them."""

from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from jt_core import _compat
from jt_core.compiler import jax_version

__all__ = [
    "PREBUILT_VARIABLE",
    "PrebuiltLibrary",
    "built_for",
    "check_prebuilt",
    "record_path",
    "write_prebuilt_record",
    "xla_ffi_api_problem",
]

#: The switch that, set to ``0``, ignores prebuilt libraries: every library is built on this machine.
PREBUILT_VARIABLE = "JT_PREBUILT_NATIVE"


@dataclasses.dataclass(frozen=True, eq=False)
class PrebuiltLibrary:
    """A library as the installed platform wheel carries it, checked for use in this process.

    Attributes:
        path: The prebuilt file when it can be used here, else ``None``.
        problem: Why it cannot be used here (it is damaged, built from other sources, or built for an XLA FFI API
            the installed jaxlib does not take); ``None`` when it can, and when there is none (an install from an
            sdist, a platform without prebuilt libraries, or ``JT_PREBUILT_NATIVE=0``).
        xla_ffi_api: The XLA FFI API version it was built for, as the library reports it.
        library: The loaded library, when it can be used.
    """

    path: Path | None
    problem: str | None = None
    xla_ffi_api: tuple[int, int] | None = None
    library: ctypes.CDLL | None = None


def record_path(path: Path) -> Path:
    """Where a prebuilt library's build record lies: beside it, ``lib<name>.so.json``."""
    return path.with_name(path.name + ".json")


def built_for(library: ctypes.CDLL) -> tuple[int, int]:
    """The XLA FFI API version a library jt built reports (``(-1, -1)``: built without the XLA FFI headers)."""
    major, minor = ctypes.c_int32(), ctypes.c_int32()
    library.jt_native_xla_ffi_api_version(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def xla_ffi_api_problem(built_for: tuple[int, int], installed: tuple[int, int] | None) -> str | None:
    """Why a library built for XLA FFI API ``built_for`` cannot be loaded into the installed jaxlib, whose headers
    declare ``installed``; ``None`` when it can. XLA's rule: the same major version, and a minor version not newer
    than its own (a newer jaxlib takes a library built for an older one). A library built without the XLA FFI
    headers (``(-1, -1)``) uses no XLA API and fits any jaxlib."""
    if built_for == (-1, -1):
        return None
    shown = ".".join(map(str, built_for))
    if installed is None:
        return f"it was built for XLA FFI API {shown}, and the installed jaxlib's headers declare no version"
    if built_for[0] != installed[0] or built_for[1] > installed[1]:
        found = ".".join(map(str, installed))
        return f"it was built for XLA FFI API {shown}, which the installed jaxlib (XLA FFI API {found}) does not take"
    return None


def check_prebuilt(path: Path, source_digest: Callable[[], str]) -> PrebuiltLibrary:
    """The library at ``path`` checked, and loaded, for use in this process: its build record must give its size and
    SHA-256 and ``source_digest()`` (the digest of the installed sources), and the XLA FFI API version it reports
    must be one the installed jaxlib takes. Where there is neither a file nor a record, there is no prebuilt
    library."""
    record_file = record_path(path)
    if not (path.exists() or record_file.exists()):
        return PrebuiltLibrary(None)
    try:
        record = json.loads(record_file.read_text(encoding="utf-8"))
        data = path.read_bytes()
        sources = source_digest()
    except (OSError, ValueError) as exc:
        return PrebuiltLibrary(None, f"it, its build record or its sources cannot be read ({exc})")
    if not isinstance(record, dict) or record.get("size") != len(data):
        return PrebuiltLibrary(None, "it is not the file the wheel was built with (its size differs)")
    if record.get("sha256") != hashlib.sha256(data).hexdigest():
        return PrebuiltLibrary(None, "it is not the file the wheel was built with (its SHA-256 differs)")
    if record.get("sources") != sources:
        return PrebuiltLibrary(None, "it was built from other sources than the installed ones")
    try:
        library = ctypes.CDLL(str(path))
        version = built_for(library)
    except (OSError, AttributeError) as exc:
        return PrebuiltLibrary(None, f"it cannot be loaded here ({exc})")
    problem = xla_ffi_api_problem(version, _compat.xla_ffi_api_version())
    if problem is not None:
        return PrebuiltLibrary(None, problem, version)
    return PrebuiltLibrary(path, None, version, library)


def write_prebuilt_record(target: Path, name: str, sources: str, compiler: str) -> None:
    """Writes the build record of the library just compiled at ``target``: its size and SHA-256, the digest of the
    sources it was built from, the XLA FFI API version it reports (it is loaded here to ask), and, for people, the
    jax version and the compiler."""
    data = target.read_bytes()
    record = {
        "name": name,
        "sources": sources,
        "xla_ffi_api": list(built_for(ctypes.CDLL(str(target)))),
        "jax": jax_version(),
        "compiler": compiler,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    record_path(target).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
