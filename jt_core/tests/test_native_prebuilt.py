"""Prebuilt native libraries (what a platform wheel carries): loaded without a compiler when they fit the installed
jaxlib and sources; otherwise one line says why and the library is built on the machine, as from an sdist."""

from __future__ import annotations

import ctypes
import shutil
import uuid
from pathlib import Path

import pytest

from jt_core import _compat
from jt_core.native import (
    LibrarySpec,
    NativeBuildError,
    build_due,
    build_prebuilt,
    xla_ffi_api_problem,
)

needs_compiler = pytest.mark.skipif(shutil.which("c++") is None, reason="builds the prebuilt library with c++")

SOURCE = 'extern "C" int jt_prebuilt_probe(int x) {{ return x * {factor} + 5; }}\n'


@pytest.fixture
def machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A machine jt has not run on: an empty cache folder, prebuilt libraries allowed."""
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("JT_PREBUILT_NATIVE", raising=False)
    return tmp_path / "cache"


def probe(tmp_path: Path, factor: int = 3, include: Path | None = None) -> LibrarySpec:
    """A library in a package folder of its own, compiled against the installed jaxlib's XLA FFI headers unless
    ``include`` names others (a unique name each time, so each test sees its own stderr lines)."""
    package = tmp_path / "package" / "csrc"
    package.mkdir(parents=True, exist_ok=True)
    source = package / "probe.cc"
    source.write_text(SOURCE.format(factor=factor))
    folder = str(include) if include is not None else _compat.ffi_include_dir()
    return LibrarySpec(f"jt_probe_{uuid.uuid4().hex[:8]}", (source,), include_dirs=(folder,))


def ffi_headers(tmp_path: Path, version: tuple[int, int]) -> Path:
    """A folder of XLA FFI headers that declare ``version``."""
    folder = tmp_path / "include"
    (folder / "xla" / "ffi" / "api").mkdir(parents=True)
    (folder / "xla" / "ffi" / "api" / "c_api.h").write_text(
        f"#define XLA_FFI_API_MAJOR {version[0]}\n#define XLA_FFI_API_MINOR {version[1]}\n"
    )
    return folder


def native_files(cache: Path) -> list[str]:
    return sorted(p.name for p in (cache / "native").glob("*")) if (cache / "native").is_dir() else []


@needs_compiler
def test_a_fitting_prebuilt_library_loads_with_no_compiler_and_nothing_is_built(
    tmp_path: Path, machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = probe(tmp_path, factor=7)
    path = build_prebuilt(spec, spec.sources[0].parent)
    assert path == spec.prebuilt_path
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    library = spec.load()
    assert library.jt_prebuilt_probe(6) == 47
    assert Path(library._name) == spec.prebuilt_path
    # It was built for the installed jaxlib's XLA FFI API, as the compiler saw the headers.
    assert spec.prebuilt().xla_ffi_api == _compat.xla_ffi_api_version()
    status = spec.status()
    assert status.prebuilt and status.path == spec.prebuilt_path and status.compiler is None
    assert not build_due(spec)
    assert native_files(machine) == [] and capsys.readouterr().err == ""


@needs_compiler
def test_a_prebuilt_library_for_a_newer_xla_ffi_api_is_built_here_and_one_line_says_why(
    tmp_path: Path, machine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    installed = _compat.xla_ffi_api_version()
    assert installed is not None
    newer = (installed[0], installed[1] + 1)
    spec = probe(tmp_path, include=ffi_headers(tmp_path, newer))
    build_prebuilt(spec, spec.sources[0].parent)
    assert spec.prebuilt().xla_ffi_api == newer
    library = spec.load()
    assert library.jt_prebuilt_probe(2) == 11
    assert Path(library._name).parent == machine / "native"
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("jt: ")]
    shown = ".".join(map(str, newer)), ".".join(map(str, installed))
    assert lines[0] == (
        f"jt: not using the prebuilt {spec.name}: it was built for XLA FFI API {shown[0]}, which the installed "
        f"jaxlib (XLA FFI API {shown[1]}) does not take; building it for this machine instead"
    )
    assert lines[1].startswith(f"jt: building {spec.name} for this machine") and len(lines) == 2
    status = spec.status()
    assert not status.prebuilt and status.path == Path(library._name) and "XLA FFI API" in status.prebuilt_problem


@needs_compiler
def test_without_a_compiler_either_the_error_names_both_missing_pieces(
    tmp_path: Path, machine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = probe(tmp_path, include=ffi_headers(tmp_path, (99, 0)))
    build_prebuilt(spec, spec.sources[0].parent)
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(NativeBuildError) as raised:
        spec.load()
    message = str(raised.value)
    assert "CXX='/nonexistent/c++' does not name an executable compiler" in message
    assert "the prebuilt library is not used: it was built for XLA FFI API 99.0" in message
    status = spec.status()
    assert status.path is None and "CXX=" in status.error and "99.0" in status.prebuilt_problem


@needs_compiler
@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("edit the source", "it was built from other sources than the installed ones"),
        ("truncate the library", "its size differs"),
        ("overwrite the library", "its SHA-256 differs"),
        ("remove the build record", "cannot be read"),
    ],
)
def test_a_prebuilt_library_that_does_not_match_its_record_is_built_here(
    tmp_path: Path, machine: Path, capsys: pytest.CaptureFixture[str], change: str, why: str
) -> None:
    spec = probe(tmp_path, factor=4)
    path = build_prebuilt(spec, spec.sources[0].parent)
    if change == "edit the source":
        spec.sources[0].write_text(SOURCE.format(factor=9))
    elif change == "truncate the library":
        path.write_bytes(path.read_bytes()[:1000])
    elif change == "overwrite the library":
        data = bytearray(path.read_bytes())
        data[-8:] = b"garbage!"
        path.write_bytes(bytes(data))
    else:
        path.with_name(path.name + ".json").unlink()
    library = spec.load()
    assert library.jt_prebuilt_probe(1) == (14 if change == "edit the source" else 9)
    assert Path(library._name).parent == machine / "native"
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"jt: not using the prebuilt {spec.name}: ") and why in first, first


@needs_compiler
def test_jt_prebuilt_native_0_builds_every_library_here(
    tmp_path: Path, machine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = probe(tmp_path)
    build_prebuilt(spec, spec.sources[0].parent)
    monkeypatch.setenv("JT_PREBUILT_NATIVE", "0")
    assert spec.prebuilt().path is None and spec.prebuilt().problem is None
    library = spec.load()
    assert Path(library._name).parent == machine / "native"
    assert "not using the prebuilt" not in capsys.readouterr().err


@needs_compiler
def test_every_library_reports_the_xla_ffi_api_it_was_compiled_against(tmp_path: Path, machine: Path) -> None:
    for version in ((0, 4), (0, 5), (1, 2)):
        spec = probe(tmp_path / f"v{version}", include=ffi_headers(tmp_path / f"v{version}", version))
        reported = ctypes.c_int32(), ctypes.c_int32()
        spec.load().jt_native_xla_ffi_api_version(ctypes.byref(reported[0]), ctypes.byref(reported[1]))
        assert (reported[0].value, reported[1].value) == version


@pytest.mark.parametrize(
    ("built_for", "installed", "fits"),
    [
        ((0, 4), (0, 4), True),
        ((0, 4), (0, 5), True),  # a newer jaxlib takes a library built for an older one
        ((0, 5), (0, 4), False),
        ((0, 4), (1, 0), False),  # another major version: another ABI
        ((1, 0), (0, 9), False),
        ((-1, -1), (0, 4), True),  # built without the XLA FFI headers: no XLA API used
        ((0, 4), None, False),
    ],
)
def test_xla_ffi_api_rule(built_for: tuple[int, int], installed: tuple[int, int] | None, fits: bool) -> None:
    assert (xla_ffi_api_problem(built_for, installed) is None) == fits


def test_the_installed_jaxlibs_xla_ffi_api_version_is_read_from_its_headers() -> None:
    header = (Path(_compat.ffi_include_dir()) / "xla" / "ffi" / "api" / "c_api.h").read_text()
    version = _compat.xla_ffi_api_version()
    assert version is not None
    assert f"#define XLA_FFI_API_MAJOR {version[0]}\n" in header
    assert f"#define XLA_FFI_API_MINOR {version[1]}\n" in header


def test_a_spec_without_sources_has_no_prebuilt_library(machine: Path) -> None:
    spec = LibrarySpec("jt_probe_nothing", ())
    assert spec.prebuilt().path is None and spec.prebuilt().problem is None
    with pytest.raises(ValueError, match="lists no sources"):
        _ = spec.prebuilt_path
