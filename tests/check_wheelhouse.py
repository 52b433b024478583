"""jt's wheelhouse (``dist/``, built by ``.ci/wheels.sh``) is complete, and jt installs from it by name.

Not part of the default test run (the name does not match ``test_*.py``): ``.ci/test.sh`` builds the wheelhouse and
then runs ``python -m pytest tests/check_wheelhouse.py``.

The wheelhouse holds an sdist and a pure wheel of each distribution, and a platform wheel of each distribution with
native libraries, which carries them prebuilt. The install checks run the commands of the getting-started page, each
in a fresh virtualenv with the pip that comes with Python, from the repository root (where ``dist`` is), on a
machine without a compiler: no C or C++ compiler on ``PATH``, ``CXX`` and ``CC`` unset. jax and triton come from the
package index; pip takes the platform wheels. They then list the plugins and run a kernel on the CPU backend outside
the repository, with the prebuilt handler: nothing is built. The ``[cuda]`` install also runs a 2-process job in
which one process is told its compiler is missing.
"""

from __future__ import annotations

import email.parser
import hashlib
import importlib
import json
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from jt_core.native import LibrarySpec

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = ROOT / "dist"
GETTING_STARTED = ROOT / "docs" / "pages" / "getting-started.md"
DISTRIBUTIONS = ("jt_core", "jt_cuda", "jt_rocm", "jt_gluon", "jt_tpu")
PLUGINS = {"jt_cuda": "cuda", "jt_rocm": "rocm", "jt_gluon": "gluon", "jt_tpu": "tpu"}


def project(folder: str) -> dict:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]


VERSION = project("jt_core")["version"]
#: The distributions whose platform wheels carry native libraries, with the spec of each library.
NATIVE = {
    folder: tomllib.loads((ROOT / folder / "pyproject.toml").read_text(encoding="utf-8"))
    .get("tool", {})
    .get("jt", {})
    .get("native-libraries", [])
    for folder in DISTRIBUTIONS
}
NATIVE = {folder: references for folder, references in NATIVE.items() if references}
#: jt-core's native_setup.py, which says which jaxlib each distribution's libraries are compiled against.
NATIVE_SETUP = runpy.run_path(str(ROOT / "jt_core" / "src" / "jt_core" / "native_setup.py"))
#: The most a wheel may weigh.
MAX_WHEEL_BYTES = 5 * 1024 * 1024


def tracked_files(folder: str) -> list[str]:
    """The files git tracks under ``folder`` (relative to it)."""
    out = subprocess.run(["git", "ls-files", "-z", folder], cwd=ROOT, capture_output=True, check=True).stdout
    return [name[len(folder) + 1 :] for name in out.decode().split("\0") if name]


def platform_wheel_path(folder: str) -> Path:
    """The one platform wheel of ``folder`` (``py3-none-manylinux_*``)."""
    (path,) = WHEELHOUSE.glob(f"{folder}-{VERSION}-py3-none-manylinux_*.whl")
    return path


def wheel(folder: str, platform: bool = False) -> zipfile.ZipFile:
    if platform:
        return zipfile.ZipFile(platform_wheel_path(folder))
    return zipfile.ZipFile(WHEELHOUSE / f"{folder}-{VERSION}-py3-none-any.whl")


#: Every wheel: (distribution folder, whether it is the platform wheel).
WHEELS = [(folder, False) for folder in DISTRIBUTIONS] + [(folder, True) for folder in NATIVE]
WHEEL_IDS = [f"{folder}-{'platform' if platform else 'pure'}" for folder, platform in WHEELS]


def wheel_metadata(folder: str, platform: bool = False) -> email.message.Message:
    with wheel(folder, platform) as archive:
        return email.parser.Parser().parsestr(archive.read(f"{folder}-{VERSION}.dist-info/METADATA").decode())


def library_specs(folder: str) -> list[LibrarySpec]:
    """The specs of the libraries ``folder``'s platform wheel carries, as the installed (checkout's) jt makes them."""
    specs = []
    for reference in NATIVE[folder]:
        module, _, attributes = reference.partition(":")
        found = importlib.import_module(module)
        for name in attributes.split("."):
            found = getattr(found, name)
        specs.append(found())
    return specs


@pytest.fixture
def say(capfd: pytest.CaptureFixture[str]):
    """Reports a measured figure: appended to the file JT_WHEELHOUSE_FIGURES names (pytest-xdist's workers cannot
    print), else printed past pytest's output capture."""

    def report(line: str) -> None:
        if os.environ.get("JT_WHEELHOUSE_FIGURES"):
            with open(os.environ["JT_WHEELHOUSE_FIGURES"], "a", encoding="utf-8") as out:
                out.write(line + "\n")
        else:
            with capfd.disabled():
                print(f"\n    {line}", end="", flush=True)

    return report


def test_an_sdist_and_a_pure_wheel_per_distribution_and_a_platform_wheel_per_native_one(say) -> None:
    expected = {f"{f}-{VERSION}-py3-none-any.whl" for f in DISTRIBUTIONS} | {
        f"{f}-{VERSION}.tar.gz" for f in DISTRIBUTIONS
    }
    platform = {p.name for p in WHEELHOUSE.glob("*-py3-none-manylinux_*_x86_64.whl")}
    assert {p.name.split("-")[0] for p in WHEELHOUSE.glob("*-py3-none-manylinux_*_x86_64.whl")} == set(NATIVE)
    assert {p.name for p in WHEELHOUSE.iterdir()} == expected | platform
    assert len(platform) == len(NATIVE), platform
    for path in sorted(WHEELHOUSE.iterdir()):
        say(f"{path.name:50} {path.stat().st_size / 1024:7.1f} KiB")
        assert path.stat().st_size < MAX_WHEEL_BYTES, f"{path.name} weighs more than {MAX_WHEEL_BYTES} bytes"


#: How far a size the getting-started page quotes may be from the wheel's: a tenth (a wheel grows with each module).
SIZE_SLACK = 0.1


def quoted_sizes() -> dict[str, dict[str, int]]:
    """The wheels' sizes the getting-started page quotes, in KiB: ``{"platform": {"jt-core": 517, ...}, "pure":
    {...}}``."""
    text = " ".join(GETTING_STARTED.read_text(encoding="utf-8").split())
    found = re.search(
        r"built by `bash \.ci/wheels\.sh`, weigh (.*?); the pure wheels \(`python -m build`\) (.*?)\.", text
    )
    assert found, "getting-started.md no longer says what the wheels weigh"
    return {
        kind: {name: int(size) for size, name in re.findall(r"(\d+) KiB \((jt-\w+)\)", part)}
        for kind, part in (("platform", found[1]), ("pure", found[2]))
    }


def test_the_getting_started_page_gives_each_wheels_size() -> None:
    quoted = quoted_sizes()
    wrong = []
    for folder, platform in WHEELS:
        path = platform_wheel_path(folder) if platform else WHEELHOUSE / f"{folder}-{VERSION}-py3-none-any.whl"
        size = path.stat().st_size / 1024
        kind, name = ("platform" if platform else "pure"), folder.replace("_", "-")
        said = quoted[kind].get(name)
        if said is None or abs(said - size) > max(1.0, SIZE_SLACK * size):
            wrong.append(f"{kind} wheel of {name}: {said} KiB quoted, {size:.0f} KiB built")
    assert not wrong, "getting-started.md, 'What the wheels carry': " + "; ".join(wrong)
    assert sum(map(len, quoted.values())) == len(WHEELS), quoted


@pytest.mark.parametrize(("folder", "platform"), WHEELS, ids=WHEEL_IDS)
def test_wheel_metadata_is_complete(folder: str, platform: bool) -> None:
    meta = wheel_metadata(folder, platform)
    declared = project(folder)
    assert meta["Name"] == declared["name"] and meta["Version"] == VERSION
    assert meta["Requires-Python"] == declared["requires-python"] == ">=3.11"
    assert meta["License-Expression"] == "Apache-2.0" and meta["License-File"] == "LICENSE"
    classifiers = meta.get_all("Classifier")
    assert {"Programming Language :: Python :: 3.11", "Programming Language :: Python :: 3.12"} <= set(classifiers)
    assert "Typing :: Typed" in classifiers
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().strip() == (ROOT / folder / "README.md").read_text(encoding="utf-8").strip()
    requires = meta.get_all("Requires-Dist")
    if folder == "jt_core":
        for extra, plugin in (("cuda", "jt-cuda"), ("rocm", "jt-rocm"), ("gluon", "jt-gluon")):
            assert f'{plugin}=={VERSION}; extra == "{extra}"' in requires
        assert any(r.startswith("pytest") and r.endswith('extra == "testing"') for r in requires)
    else:
        assert [r for r in requires if "; extra ==" not in r] == [f"jt-core=={VERSION}"]
    # The test extra: what the distribution's test suite needs.
    tested = [r.split(";")[0].replace(" ", "") for r in requires if r.endswith('extra == "test"')]
    assert tested == [r.replace(" ", "") for r in declared["optional-dependencies"]["test"]]


@pytest.mark.parametrize(("folder", "platform"), WHEELS, ids=WHEEL_IDS)
def test_wheel_holds_every_package_file_the_license_and_the_entry_point(folder: str, platform: bool) -> None:
    with wheel(folder, platform) as archive:
        names = set(archive.namelist())
        info = f"{folder}-{VERSION}.dist-info"
        assert f"{info}/licenses/LICENSE" in names
        if folder in PLUGINS:
            entry_points = archive.read(f"{info}/entry_points.txt").decode()
            assert f"[jt]\n{PLUGINS[folder]} = {folder}.plugin" in entry_points
        tags = email.parser.Parser().parsestr(archive.read(f"{info}/WHEEL").decode())
    sources = {name.removeprefix("src/") for name in tracked_files(folder) if name.startswith("src/")}
    missing = sorted(sources - names)
    assert not missing, f"tracked package files missing from the {folder} wheel: {missing}"
    assert f"{folder}/py.typed" in names
    libraries = sorted(name for name in names if re.search(r"\.so(\.json)?$", name))
    if platform:
        assert tags["Root-Is-Purelib"] == "false" and tags.get_all("Tag") == [
            platform_wheel_path(folder).stem.split("-", 2)[2]
        ]
        assert len(libraries) == 2 * len(NATIVE[folder]), libraries
    else:
        assert tags["Root-Is-Purelib"] == "true" and tags.get_all("Tag") == ["py3-none-any"]
        assert not libraries, f"the pure wheel of {folder} carries {libraries}"


@pytest.mark.parametrize("folder", sorted(NATIVE))
def test_the_platform_wheel_carries_each_library_built_from_the_checkouts_sources(folder: str, say) -> None:
    """Each library the distribution's specs name is in its platform wheel where the spec looks for it, built from
    what the spec lists now (a source added to a spec is compiled in), against the headers of the jaxlib its
    distribution names (the oldest jt supports, or jt-cuda's ``native-jaxlib``)."""
    floor = NATIVE_SETUP["build_jaxlib"](ROOT / folder)
    with wheel(folder, platform=True) as archive:
        for spec in library_specs(folder):
            # Where the installed package is: the checkout's src/ (an editable install) or site-packages.
            relative = spec.prebuilt_path.relative_to(Path(importlib.import_module(folder).__file__).parents[1])
            relative = relative.as_posix()
            data = archive.read(relative)
            record = json.loads(archive.read(relative + ".json"))
            assert data[:4] == b"\x7fELF" and record["name"] == spec.name
            assert record["size"] == len(data) and record["sha256"] == hashlib.sha256(data).hexdigest()
            assert record["sources"] == spec.source_digest(), f"{relative} was built from other sources"
            assert record["jax"] == f"jax {floor} jaxlib {floor}", record
            say(f"{relative}: {len(data) / 1024:.1f} KiB, XLA FFI API {record['xla_ffi_api']}, {record['compiler']}")


@pytest.mark.parametrize("folder", DISTRIBUTIONS)
def test_sdist_holds_every_tracked_file(folder: str) -> None:
    with tarfile.open(WHEELHOUSE / f"{folder}-{VERSION}.tar.gz") as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    missing = sorted(set(tracked_files(folder)) - names)
    assert not missing, f"tracked files missing from the {folder} sdist: {missing}"
    assert "PKG-INFO" in names


KERNEL = """
import time

import jax
import numpy as np
import triton
import triton.language as tl

import jt_core as jt
from jt_core.plugin.registry import get_registry


@triton.jit
def affine_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 3.0 * tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)


def affine(x):
    return jt.triton_call(x, x.size, kernel=affine_kernel, out_shape=x, grid=jt.cdiv(x.size, 64), BLOCK=64)


x = np.random.default_rng(0).standard_normal(200).astype(np.float32)
start = time.perf_counter()
np.testing.assert_allclose(np.asarray(jax.jit(affine)(x)), 3.0 * x + 1.0, rtol=1e-6)
first_call = time.perf_counter() - start
# The interpreter's FFI handler, prebuilt too, runs the kernel as well.
by_ffi = jax.jit(lambda v: jt.triton_call(v, v.size, kernel=affine_kernel, out_shape=v, grid=jt.cdiv(v.size, 64),
                                          BLOCK=64, launcher="ffi"))
np.testing.assert_allclose(np.asarray(by_ffi(x)), 3.0 * x + 1.0, rtol=1e-6)
# The CUDA launcher 'jt' lowers here (no GPU needed), and its prebuilt handler loads.
lowered = jax.jit(lambda v: jt.triton_call(v, v.size, kernel=affine_kernel, out_shape=v, grid=4, BLOCK=64,
                                           compute_capability=90, launcher="jt"))
text = lowered.trace(x).lower(lowering_platforms=("cuda",)).as_text()
assert "triton_kernel_call_jt_cuda" in text, text[-2000:]
from jt_cuda.launchers import HANDLER

assert HANDLER.library()._name == str(HANDLER.spec().prebuilt_path)
# jax.export serialises with flatbuffers, which jt-core requires: an artifact for the CPU and CUDA serialises and
# runs here after `pip install jt-core`, nothing else installed.
everywhere = lambda v: jt.triton_call(v, v.size, kernel=affine_kernel, out_shape=v, grid=4, BLOCK=64,
                                     compute_capability=90)
exported = jt.export(everywhere, platforms=["cpu", "cuda"])(jax.ShapeDtypeStruct(x.shape, x.dtype))
restored = jax.export.deserialize(exported.serialize())
np.testing.assert_allclose(np.asarray(restored.call(x)), 3.0 * x + 1.0, rtol=1e-6)
print(jax.default_backend(), jax.__version__, triton.__version__, get_registry().launcher("cpu").name, first_call)
"""
#: The part of `KERNEL` that runs on the CPU alone (the launcher 'jt' of CUDA and its handler left out).
CPU_KERNEL = KERNEL.split("# The CUDA launcher 'jt' lowers here", 1)[0] + (
    "exported = jt.export(affine, platforms=['cpu'])(jax.ShapeDtypeStruct(x.shape, x.dtype))\n"
    "restored = jax.export.deserialize(exported.serialize())\n"
    "np.testing.assert_allclose(np.asarray(restored.call(x)), 3.0 * x + 1.0, rtol=1e-6)\n"
    "print(jax.default_backend(), jax.__version__, triton.__version__, get_registry().launcher('cpu').name,"
    " first_call)\n"
)

# The by-name installs of the getting-started page that these checks run, as written there.
BY_NAME = ("pip install --find-links dist jt-core jt-cuda", 'pip install --find-links dist "jt-core[cuda]"')
TPU_BY_NAME = "pip install --find-links dist jt-core jt-tpu"

#: Run after the TPU install: a kernel lowered for a TPU on this host, with jt-tpu found by its entry point.
TPU_KERNEL = """
import jax, numpy as np, triton, triton.language as tl
import jt_core as jt


@triton.jit
def affine_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 3.0 * tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)


def affine(x):
    return jt.triton_call(x, x.size, kernel=affine_kernel, out_shape=x, grid=jt.cdiv(x.size, 64), BLOCK=64)


spec = jax.ShapeDtypeStruct((1024,), np.float32)
text = jax.export.export(jax.jit(affine), platforms=("tpu",))(spec).mlir_module()
assert "custom_call" not in text and "gather" not in text, text[-2000:]
print([p.name for p in jt.list_plugins() if p.status == "loaded"])
"""


#: The by-name installs the py311 version set checks, one after the other, on a TPU VM's stack, as written on the page.
TPU_VM_BY_NAME = (TPU_BY_NAME, BY_NAME[0])


def tpu_vm_stack() -> list[str]:
    """The py311 version set's pins (.ci/env.sh): a TPU VM's jax, jaxlib and Triton, as pip requirements."""
    env_sh = (ROOT / ".ci" / "env.sh").read_text(encoding="utf-8")
    case = re.search(r"^ {8}py311\)\n(.*?)^ {12};;", env_sh, re.MULTILINE | re.DOTALL)
    assert case is not None, "no py311 set in .ci/env.sh's make_venv"
    pins = re.findall(r"\b(jax|jaxlib|triton)(?:\$extra)?==([\d.]+)", case[1])
    assert {name for name, _ in pins} == {"jax", "jaxlib", "triton"}, pins
    return [f"{name}=={version}" for name, version in pins]


def test_the_getting_started_page_shows_the_checked_commands() -> None:
    text = GETTING_STARTED.read_text(encoding="utf-8")
    for command in (*BY_NAME, TPU_BY_NAME):
        assert re.search(rf"^{re.escape(command)}(\s|$)", text, re.MULTILINE), f"{command!r} is not on the page"


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=900, **kwargs)
    assert result.returncode == 0, f"{shlex.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture
def fresh_venv(tmp_path: Path) -> Iterator[Path]:
    """A new virtualenv (about 1.5 GB once jax and triton are in), removed after the test."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


def without_a_compiler(venv: Path, folder: Path) -> dict[str, str]:
    """This process's environment less its compilers: no C or C++ compiler on ``PATH``, ``CXX`` and ``CC`` unset."""
    from jt_core.testing import no_compiler_path

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_FIND_LINKS", "JT_LOAD_PLUGINS")}
    env = {k: v for k, v in env.items() if k not in ("CXX", "CC", "JT_PREBUILT_NATIVE", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{no_compiler_path(folder)}"
    for compiler in ("c++", "g++", "clang++", "cc", "gcc"):
        assert shutil.which(compiler, path=env["PATH"]) is None, compiler
    return env


@pytest.mark.parametrize("command", BY_NAME)
def test_install_by_name_without_a_compiler_lists_the_plugin_and_runs_a_kernel_building_nothing(
    command: str, fresh_venv: Path, tmp_path: Path, say
) -> None:
    python = str(fresh_venv / "bin" / "python")
    args = shlex.split(command)
    assert args[:2] == ["pip", "install"]
    env = without_a_compiler(fresh_venv, tmp_path / "bin")
    cache = tmp_path / "jt-cache"
    env["JT_CACHE_DIR"] = str(cache)  # a machine jt has not run on yet
    start = time.perf_counter()
    _run([python, "-m", "pip", *args[1:], "--disable-pip-version-check", "-q"], cwd=ROOT, env=env)
    seconds = time.perf_counter() - start

    installed = json.loads(_run([python, "-m", "pip", "list", "--format", "json"], env=env).stdout)
    versions = {row["name"].lower(): row["version"] for row in installed}
    assert versions["jt-core"] == versions["jt-cuda"] == VERSION
    assert "jt-rocm" not in versions and "jt-gluon" not in versions

    work = tmp_path / "work"  # outside the repository, whose jt_* folders must not be importable
    work.mkdir()
    records = json.loads(_run([python, "-m", "jt_core", "plugins", "--json"], cwd=work, env=env).stdout)
    status = {r["name"]: (r["distribution"], r["status"]) for r in records}
    assert status["cuda"] == ("jt-cuda", "loaded") and status["cpu"] == ("jt-core", "builtin")
    assert all(r["error"] is None for r in records), records
    native = {
        label: details["native"]
        for record in records
        for label, details in record["provides"]["launcher_details"].items()
        if "native" in details
    }
    assert {"cpu:ffi", "cuda:jt"} <= set(native), native
    assert all(library["prebuilt"] and library["compiler"] is None for library in native.values()), native
    listed = _run([python, "-m", "jt_core", "build-native"], cwd=work, env=env).stdout
    assert listed.count("prebuilt, nothing to build") == len(native), listed

    (work / "kernel.py").write_text(KERNEL, encoding="utf-8")
    run = _run([python, "kernel.py"], cwd=work, env=env)
    backend, *_, launcher, first_call = run.stdout.split()
    assert (backend, launcher) == ("cpu", "compiled"), run.stdout
    # Nothing is built, so nothing is said: no line, no warning, reaches stderr, and no library is in the cache.
    assert run.stderr == "", f"the kernel's run printed to stderr:\n{run.stderr}"
    assert not list(cache.rglob("*.so")), sorted(cache.rglob("*"))
    say(f"first call with the prebuilt CPU handler, in a fresh process: {float(first_call):.2f} s")
    say(f"{command}: {seconds:.1f} s in a fresh virtualenv; jax {versions['jax']}, triton {versions['triton']}")

    if "[cuda]" in command:
        # jt_core.testing needs pytest, which the testing extra adds.
        _run([python, "-m", "pip", "install", "--find-links", "dist", "-q", "jt-core[testing]"], cwd=ROOT, env=env)
        _run([python, "-c", "from jt_core.testing import fake_entry_point, BackendConformance"], cwd=work, env=env)
        # A 2-process job, one process told its compiler is missing: both run the call with the prebuilt handler.
        test = "test_a_process_without_a_compiler_uses_the_prebuilt_handler_like_the_others"
        test = f"jt_core/tests/test_multiprocess.py::{test}"
        job = _run([python, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", test], cwd=ROOT, env=env)
        assert re.search(r"^1 passed", job.stdout.strip().splitlines()[-1]), job.stdout


def test_install_jt_tpu_by_name_lowers_a_kernel_for_a_tpu(fresh_venv: Path, tmp_path: Path, say) -> None:
    """``pip install jt-core jt-tpu`` (jt-tpu's pure wheel builds nothing), then a kernel lowered for a TPU on this
    host, to plain StableHLO, with jt-tpu's plugin loaded by its entry point."""
    python = str(fresh_venv / "bin" / "python")
    env = without_a_compiler(fresh_venv, tmp_path / "bin")
    env["JT_CACHE_DIR"] = str(tmp_path / "jt-cache")
    start = time.perf_counter()
    _run([python, "-m", "pip", *shlex.split(TPU_BY_NAME)[1:], "--disable-pip-version-check", "-q"], cwd=ROOT, env=env)
    seconds = time.perf_counter() - start
    work = tmp_path / "work"
    work.mkdir()
    (work / "kernel.py").write_text(TPU_KERNEL, encoding="utf-8")
    run = _run([python, "kernel.py"], cwd=work, env=env)
    assert "'tpu'" in run.stdout, run.stdout
    say(f"{TPU_BY_NAME}: {seconds:.1f} s in a fresh virtualenv; a kernel lowered for a TPU, no custom call")


def python_3_11() -> str:
    """The Python 3.11 to make the py311 set's virtualenv with: ``JT_WHEELHOUSE_PYTHON311`` (CI sets it), else
    ``python3.11`` on ``PATH``; the test skips where there is neither."""
    found = os.environ.get("JT_WHEELHOUSE_PYTHON311") or shutil.which("python3.11")
    if not found:
        pytest.skip("no Python 3.11 here (JT_WHEELHOUSE_PYTHON311 unset, no python3.11 on PATH)")
    version = _run([found, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).stdout.strip()
    assert version == "3.11", f"{found} is Python {version}, not 3.11"
    return found


def test_install_by_name_on_a_tpu_vms_stack_keeps_it_and_runs_kernels(tmp_path: Path, say) -> None:
    """On Python 3.11 with jax/jaxlib 0.10.2 and Triton 3.8.0 installed first (a TPU VM's stack), ``pip install
    jt-core jt-tpu`` and ``pip install jt-core jt-cuda`` by name, without flags and without a compiler, keep that
    stack; a kernel then runs on the CPU with jt-core's prebuilt handler (compiled against jaxlib 0.10.2's headers,
    the oldest jt supports) and lowers for a TPU. jt-cuda's prebuilt handler is compiled against jaxlib 0.11.2's
    (its record stage), which jaxlib 0.10.2 does not take: ``python -m jt_core plugins`` says so."""
    venv = tmp_path / "venv"
    _run([python_3_11(), "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    env = without_a_compiler(venv, tmp_path / "bin")
    env["JT_CACHE_DIR"] = str(tmp_path / "jt-cache")
    stack = tpu_vm_stack()
    _run([python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *stack], env=env)
    start = time.perf_counter()
    for command in TPU_VM_BY_NAME:
        _run([python, "-m", "pip", *shlex.split(command)[1:], "--disable-pip-version-check", "-q"], cwd=ROOT, env=env)
    seconds = time.perf_counter() - start
    installed = json.loads(_run([python, "-m", "pip", "list", "--format", "json"], env=env).stdout)
    versions = {row["name"].lower(): row["version"] for row in installed}
    assert [f"{name}=={versions[name]}" for name in ("jax", "jaxlib", "triton")] == stack, versions
    assert versions["jt-core"] == versions["jt-tpu"] == versions["jt-cuda"] == VERSION

    work = tmp_path / "work"
    work.mkdir()
    records = json.loads(_run([python, "-m", "jt_core", "plugins", "--json"], cwd=work, env=env).stdout)
    status = {r["name"]: (r["distribution"], r["status"]) for r in records}
    assert status["tpu"] == ("jt-tpu", "loaded") and status["cuda"] == ("jt-cuda", "loaded"), status
    native = {
        label: details["native"]
        for record in records
        for label, details in record["provides"]["launcher_details"].items()
        if "native" in details
    }
    assert native["cpu:ffi"]["prebuilt"], native["cpu:ffi"]
    assert not native["cuda:jt"]["prebuilt"] and "XLA FFI API 0.4" in native["cuda:jt"]["prebuilt_problem"], native

    (work / "kernel.py").write_text(CPU_KERNEL, encoding="utf-8")
    run = _run([python, "kernel.py"], cwd=work, env=env)
    backend, jax_version, triton_version, launcher, first_call = run.stdout.split()
    assert (backend, launcher) == ("cpu", "compiled"), run.stdout
    assert {f"jax=={jax_version}", f"triton=={triton_version}"} <= set(stack), run.stdout
    assert run.stderr == "", f"the kernel's run printed to stderr:\n{run.stderr}"
    assert not list((tmp_path / "jt-cache").rglob("*.so")), sorted((tmp_path / "jt-cache").rglob("*"))
    (work / "tpu_kernel.py").write_text(TPU_KERNEL, encoding="utf-8")
    assert "'tpu'" in _run([python, "tpu_kernel.py"], cwd=work, env=env).stdout
    say(
        f"{' then '.join(TPU_VM_BY_NAME)}: {seconds:.1f} s on Python 3.11 with {' '.join(stack)}, kept; a kernel on "
        f"the CPU with the prebuilt handler (first call {float(first_call):.2f} s), one lowered for a TPU"
    )
