"""Meta tests: hook specs documented, versions in lockstep, the CLI, the conformance suites on builtins/fakes."""

from __future__ import annotations

import inspect
import json
import pathlib
import subprocess
import sys
import tomllib
from typing import Any

import pytest

import jt_core
from jt_core.cpu.backend import CpuBackend
from jt_core.cpu.compiled.launcher import CpuCompiledLauncher
from jt_core.cpu.interpreter_launcher import CpuLauncher
from jt_core.plugin import specs
from jt_core.plugin.roles import Backend, CompileRequest
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.testing import BackendConformance, DialectConformance, LauncherConformance, fake_entry_point
from jt_core.triton_dialect import TritonDialect

ROOT = pathlib.Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ["jt_core", "jt_cuda", "jt_rocm", "jt_gluon"]


def _specs() -> list[Any]:
    return [getattr(specs, name) for name in dir(specs) if name.startswith("jt_")]


def test_there_are_backend_dialect_launcher_and_observer_hooks() -> None:
    names = {spec.__name__ for spec in _specs()}
    assert {"jt_register_backends", "jt_register_dialects", "jt_register_launchers", "jt_compile_kernel"} <= names


@pytest.mark.parametrize("spec", _specs(), ids=lambda s: s.__name__)
def test_every_hook_spec_is_documented(spec: Any) -> None:
    doc = inspect.getdoc(spec) or ""
    assert doc.splitlines()[0].startswith("Called "), "first line says when the hook is called"
    assert "Returns:" in doc
    assert "Implemented by:" in doc
    if getattr(spec, "jt_spec", {}).get("firstresult"):
        assert "Stops at the first non-None result" in doc


def test_the_four_versions_agree() -> None:
    versions = {}
    for dist in DISTRIBUTIONS:
        data = tomllib.loads((ROOT / dist / "pyproject.toml").read_text())
        versions[dist] = data["project"]["version"]
        if dist != "jt_core":
            assert f"jt-core=={jt_core.__version__}" in data["project"]["dependencies"]
            assert data["project"]["entry-points"]["jt"] == {dist.split("_")[1]: f"{dist}.plugin"}
        version_file = "_version.py" if dist == "jt_core" else "__init__.py"
        init = (ROOT / dist / "src" / dist / version_file).read_text()
        assert f'__version__ = "{versions[dist]}"' in init
        assert (ROOT / dist / "src" / dist / "py.typed").exists()
    assert set(versions.values()) == {jt_core.__version__}, versions


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    full_env = {**os.environ, **(env or {})}
    full_env.pop("JT_STRICT_PLUGINS", None)
    return subprocess.run(
        [sys.executable, "-m", "jt_core", *args], capture_output=True, text=True, env=full_env, check=True
    )


def _with_working_plugin(folder: pathlib.Path) -> dict[str, str]:
    """Installs the distribution ``jt-listed-example`` 0.3 in ``folder`` (its plugin ``listed`` loads and provides
    nothing); returns the environment that puts it on the path."""
    (folder / "jt_listed_example.py").write_text(
        "from jt_core.plugin import API_VERSION as JT_PLUGIN_API, hookimpl\n\n"
        "@hookimpl\ndef jt_register_backends(platform):\n    return []\n"
    )
    dist = folder / "jt_listed_example-0.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jt-listed-example\nVersion: 0.3\n")
    (dist / "entry_points.txt").write_text("[jt]\nlisted = jt_listed_example\n")
    return {"PYTHONPATH": str(folder)}


def test_cli_json_lists_every_plugin(tmp_path: pathlib.Path) -> None:
    import importlib.metadata

    data = json.loads(_cli("plugins", "--json", env=_with_working_plugin(tmp_path)).stdout)
    by_name = {entry["name"]: entry for entry in data}
    assert by_name["cpu"]["status"] == "builtin"
    assert by_name["cpu"]["provides"]["platforms"] == ["cpu"]
    assert by_name["triton"]["provides"]["dialects"] == ["triton"]
    installed = {
        (ep.name, ep.dist.metadata["Name"], ep.dist.version) for ep in importlib.metadata.entry_points(group="jt")
    }
    for name, distribution, version in installed | {("listed", "jt-listed-example", "0.3")}:
        assert (by_name[name]["distribution"], by_name[name]["version"]) == (distribution, version)
        assert by_name[name]["status"] == "loaded" and by_name[name]["error"] is None, by_name[name]
    assert set(by_name["cpu"]) == {
        "name",
        "distribution",
        "version",
        "status",
        "provides",
        "error",
        "faults",
        "deprecations",
    }


def test_cli_text_shows_a_table_and_errors(tmp_path: pathlib.Path) -> None:
    out = _cli("plugins", env={**_with_working_plugin(tmp_path), "JT_DISABLE_PLUGINS": "listed"}).stdout
    header, *rows = out.splitlines()
    assert header.split() == ["NAME", "DISTRIBUTION", "VERSION", "STATUS", "PROVIDES"]
    cpu = next(row for row in rows if row.startswith("cpu "))
    assert "builtin" in cpu and "backends: cpu" in cpu and "launchers: cpu:compiled,cpu:interpreter" in cpu
    listed = next(row for row in rows if row.startswith("listed "))
    assert "blocked" in listed and listed.endswith("nothing: listed in JT_DISABLE_PLUGINS")


def test_installed_broken_distribution_is_listed_and_cpu_still_works(tmp_path: pathlib.Path) -> None:
    dist = tmp_path / "jt_broken_example-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: jt-broken-example\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[jt]\nbroken = jt_broken_example_missing_module.plugin\n")
    script = (
        "import jax, jax.numpy as jnp, numpy as np, jt_core as jt, warnings\n"
        "from jt_core.testing import sample_add_kernel\n"
        "warnings.simplefilter('ignore')\n"
        "x = jnp.arange(64, dtype=jnp.float32)\n"
        "out = jax.jit(lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64,"
        " BLOCK=32))(x)\n"
        "assert np.array_equal(np.asarray(out), 2 * np.arange(64, dtype=np.float32))\n"
        "print({r.name: (r.status, r.error) for r in jt.list_plugins()}['broken'])\n"
    )
    import os

    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("JT_STRICT_PLUGINS", None)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert "'failed'" in result.stdout
    assert "jt_broken_example_missing_module" in result.stdout
    listing = json.loads(
        subprocess.run(
            [sys.executable, "-m", "jt_core", "plugins", "--json"], capture_output=True, text=True, env=env, check=True
        ).stdout
    )
    broken = next(entry for entry in listing if entry["name"] == "broken")
    assert broken["distribution"] == "jt-broken-example"
    assert broken["status"] == "failed" and "No module named" in broken["error"]


# -- conformance suites on the builtins and on a fake backend ------------------------------------------------


class MinimalBackend(Backend):
    platform = "minimal"

    def target(self) -> Target:
        return Target("minimal", "m0", 8)

    def compile(self, request: CompileRequest) -> CompiledKernel:
        return CompiledKernel(name=request.call.name, target=request.target)


class MinimalPlugin:
    @jt_core.hookimpl
    def jt_register_backends(self) -> list[Backend]:
        return [MinimalBackend()]


class TestCpuBackendConformance(BackendConformance):
    @pytest.fixture
    def backend(self) -> Backend:
        return CpuBackend()


class TestFakeBackendConformance(BackendConformance):
    @pytest.fixture
    def backend(self, jt_fake_entry_points: Any) -> Backend:
        jt_fake_entry_points([fake_entry_point("minimal", MinimalPlugin())])
        return MinimalBackend()


class TestCpuLauncherConformance(LauncherConformance):
    expected_in_lowering = "callback"

    @pytest.fixture
    def launcher(self) -> CpuLauncher:
        return CpuLauncher()


class TestCpuCompiledLauncherConformance(LauncherConformance):
    @pytest.fixture
    def launcher(self) -> CpuCompiledLauncher:
        return CpuCompiledLauncher()


class TestTritonDialectConformance(DialectConformance):
    @pytest.fixture
    def dialect(self) -> TritonDialect:
        return TritonDialect()

    @pytest.fixture
    def sample_kernel(self) -> Any:
        from jt_core.testing import sample_add_kernel

        return sample_add_kernel

    @pytest.fixture
    def foreign_kernel(self) -> Any:
        def plain_python(x: Any) -> Any:
            return x

        return plain_python


def test_abc_refuses_a_backend_missing_a_method() -> None:
    class Incomplete(Backend):
        platform = "incomplete"

        def target(self) -> Target:
            return Target("incomplete", 0, 1)

    with pytest.raises(TypeError, match="compile"):
        Incomplete()  # type: ignore[abstract]
