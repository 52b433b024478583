"""jt's wheelhouse (``dist/``, built by ``.ci/wheels.sh``) is complete, and jt installs from it by name.

Not part of the default test run (the name does not match ``test_*.py``): ``.ci/test.sh`` builds the wheelhouse and
then runs ``python -m pytest tests/check_wheelhouse.py``.

The install checks run the commands of the getting-started page, each in a fresh virtualenv with the pip that comes
with Python, from the repository root (where ``dist`` is); jax and triton come from the package index. They then
list the plugins and run a kernel on the CPU backend outside the repository.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
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

import pytest

ROOT = Path(__file__).resolve().parents[1]
WHEELHOUSE = ROOT / "dist"
GETTING_STARTED = ROOT / "docs" / "pages" / "getting-started.md"
DISTRIBUTIONS = ("jt_core", "jt_cuda", "jt_rocm", "jt_gluon")
PLUGINS = {"jt_cuda": "cuda", "jt_rocm": "rocm", "jt_gluon": "gluon"}


def project(folder: str) -> dict:
    return tomllib.loads((ROOT / folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]


VERSION = project("jt_core")["version"]


def tracked_files(folder: str) -> list[str]:
    """The files git tracks under ``folder`` (relative to it)."""
    out = subprocess.run(["git", "ls-files", "-z", folder], cwd=ROOT, capture_output=True, check=True).stdout
    return [name[len(folder) + 1 :] for name in out.decode().split("\0") if name]


def wheel(folder: str) -> zipfile.ZipFile:
    return zipfile.ZipFile(WHEELHOUSE / f"{folder}-{VERSION}-py3-none-any.whl")


def wheel_metadata(folder: str) -> email.message.Message:
    with wheel(folder) as archive:
        return email.parser.Parser().parsestr(archive.read(f"{folder}-{VERSION}.dist-info/METADATA").decode())


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


def test_one_wheel_and_one_sdist_per_distribution(say) -> None:
    expected = {f"{f}-{VERSION}-py3-none-any.whl" for f in DISTRIBUTIONS} | {
        f"{f}-{VERSION}.tar.gz" for f in DISTRIBUTIONS
    }
    assert {p.name for p in WHEELHOUSE.iterdir()} == expected
    for path in sorted(WHEELHOUSE.iterdir()):
        say(f"{path.name:32} {path.stat().st_size / 1024:7.1f} KiB")


@pytest.mark.parametrize("folder", DISTRIBUTIONS)
def test_wheel_metadata_is_complete(folder: str) -> None:
    meta = wheel_metadata(folder)
    declared = project(folder)
    assert meta["Name"] == declared["name"] and meta["Version"] == VERSION
    assert meta["Requires-Python"] == declared["requires-python"] == ">=3.12"
    assert meta["License-Expression"] == "Apache-2.0" and meta["License-File"] == "LICENSE"
    classifiers = meta.get_all("Classifier")
    assert "Programming Language :: Python :: 3.12" in classifiers and "Typing :: Typed" in classifiers
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


@pytest.mark.parametrize("folder", DISTRIBUTIONS)
def test_wheel_holds_every_package_file_the_license_and_the_entry_point(folder: str) -> None:
    with wheel(folder) as archive:
        names = set(archive.namelist())
        info = f"{folder}-{VERSION}.dist-info"
        assert f"{info}/licenses/LICENSE" in names
        if folder in PLUGINS:
            entry_points = archive.read(f"{info}/entry_points.txt").decode()
            assert f"[jt]\n{PLUGINS[folder]} = {folder}.plugin" in entry_points
    sources = {name.removeprefix("src/") for name in tracked_files(folder) if name.startswith("src/")}
    missing = sorted(sources - names)
    assert not missing, f"tracked package files missing from the {folder} wheel: {missing}"
    assert f"{folder}/py.typed" in names


@pytest.mark.parametrize("folder", DISTRIBUTIONS)
def test_sdist_holds_every_tracked_file(folder: str) -> None:
    with tarfile.open(WHEELHOUSE / f"{folder}-{VERSION}.tar.gz") as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    missing = sorted(set(tracked_files(folder)) - names)
    assert not missing, f"tracked files missing from the {folder} sdist: {missing}"
    assert "PKG-INFO" in names


KERNEL = """
import jax
import numpy as np
import triton
import triton.language as tl

import jt_core as jt


@triton.jit
def affine_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, 3.0 * tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)


def affine(x):
    return jt.triton_call(x, x.size, kernel=affine_kernel, out_shape=x, grid=jt.cdiv(x.size, 64), BLOCK=64)


x = np.random.default_rng(0).standard_normal(200).astype(np.float32)
np.testing.assert_allclose(np.asarray(jax.jit(affine)(x)), 3.0 * x + 1.0, rtol=1e-6)
print(jax.default_backend(), jax.__version__, triton.__version__)
"""

# The by-name installs of the getting-started page that these checks run, as written there.
BY_NAME = ("pip install --find-links dist jt-core jt-cuda", 'pip install --find-links dist "jt-core[cuda]"')


def test_the_getting_started_page_shows_the_checked_commands() -> None:
    text = GETTING_STARTED.read_text(encoding="utf-8")
    for command in BY_NAME:
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


@pytest.mark.parametrize("command", BY_NAME)
def test_install_by_name_in_a_fresh_virtualenv_lists_the_plugin_and_runs_a_kernel(
    command: str, fresh_venv: Path, tmp_path: Path, say
) -> None:
    python = str(fresh_venv / "bin" / "python")
    args = shlex.split(command)
    assert args[:2] == ["pip", "install"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_FIND_LINKS", "JT_LOAD_PLUGINS")}
    env["JT_CACHE_DIR"] = str(tmp_path / "jt-cache")  # a machine jt has not run on yet
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

    (work / "kernel.py").write_text(KERNEL, encoding="utf-8")
    run = _run([python, "kernel.py"], cwd=work, env=env)
    assert run.stdout.split()[0] == "cpu"
    # jt may say what it builds on first use ("jt: ..."); nothing else, and no warning, reaches stderr.
    notes = run.stderr.splitlines()
    assert all(line.startswith("jt: ") for line in notes), f"the kernel's run printed to stderr:\n{run.stderr}"
    assert "warning" not in run.stderr.lower(), run.stderr
    for line in notes:
        if " built " in line:
            say(f"first call: {line.removeprefix('jt: ')}")
    say(f"{command}: {seconds:.1f} s in a fresh virtualenv; jax {versions['jax']}, triton {versions['triton']}")

    if "[cuda]" in command:
        # jt_core.testing needs pytest, which the testing extra adds.
        _run([python, "-m", "pip", "install", "--find-links", "dist", "-q", "jt-core[testing]"], cwd=ROOT, env=env)
        _run([python, "-c", "from jt_core.testing import fake_entry_point, BackendConformance"], cwd=work, env=env)
