"""What the distributions claim is what CI tests: one version for all four, the Python CI runs on as the oldest
supported one, the pinned version set as the oldest jax/jaxlib/triton, and documents that say the same."""

from __future__ import annotations

import ast
import importlib
import re
import runpy
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import jt_core

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("jt_core", "jt_cuda", "jt_rocm", "jt_gluon", "jt_tpu")
ENV_SH = (ROOT / ".ci" / "env.sh").read_text(encoding="utf-8")
DOCUMENTS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs" / "pages").glob("*.md")),
    *(ROOT / f / "README.md" for f in FOLDERS),
]


def pyproject(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


PROJECTS = {folder: pyproject(ROOT / folder / "pyproject.toml")["project"] for folder in FOLDERS}
VERSION = PROJECTS["jt_core"]["version"]


def ci_python() -> str:
    """The Python version .ci/env.sh builds every virtualenv with."""
    match = re.search(r"^JT_PYTHON_VERSION=(3\.\d+)$", ENV_SH, re.MULTILINE)
    assert match, "JT_PYTHON_VERSION is not set in .ci/env.sh"
    return match[1]


def test_versions_move_in_lockstep() -> None:
    assert {p["version"] for p in PROJECTS.values()} == {VERSION} == {jt_core.__version__}
    for folder in ("jt_cuda", "jt_rocm", "jt_gluon", "jt_tpu"):
        assert PROJECTS[folder]["dependencies"] == [f"jt-core=={VERSION}"]
    extras = PROJECTS["jt_core"]["optional-dependencies"]
    for extra in ("cuda", "rocm", "gluon"):
        assert extras[extra] == [f"jt-{extra}=={VERSION}"]
    assert [Requirement(r).name for r in extras["testing"]] == ["pytest"]
    for folder in ("jt_cuda", "jt_rocm", "jt_gluon", "jt_tpu"):
        assert f"jt-core[testing]=={VERSION}" in PROJECTS[folder]["optional-dependencies"]["test"]


@pytest.mark.parametrize("folder", [*FOLDERS, "docs/examples/jt_example_backend", "docs/examples/jt_example_launcher"])
def test_the_oldest_python_claimed_is_the_one_ci_runs_on(folder: str) -> None:
    python = ci_python()
    project = pyproject(ROOT / folder / "pyproject.toml")["project"]
    assert project["requires-python"] == f">={python}"
    if folder in FOLDERS:
        versions = [c.rsplit(" :: ", 1)[1] for c in project["classifiers"] if re.fullmatch(r".* :: 3\.\d+", c)]
        assert versions == [python], f"{folder} lists Python versions {versions}; CI tests {python}"


def test_tools_check_the_code_for_the_claimed_python() -> None:
    tools = pyproject(ROOT / "pyproject.toml")["tool"]
    python = ci_python()
    assert tools["ruff"]["target-version"] == "py" + python.replace(".", "")
    assert tools["mypy"]["python_version"] == python


def test_the_oldest_jax_and_triton_claimed_are_the_pinned_set_ci_runs() -> None:
    pinned = dict(re.findall(r"\b(jaxlib|triton)==([\d.]+)", ENV_SH))
    assert set(pinned) == {"jaxlib", "triton"}, pinned
    pinned["jax"] = pinned["jaxlib"]
    assert re.search(rf'"jax\$extra=={re.escape(pinned["jax"])}"', ENV_SH)
    floors = {}
    for line in PROJECTS["jt_core"]["dependencies"]:
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                floors[requirement.name] = Version(spec.version)
    for name in ("jax", "jaxlib", "triton"):
        assert floors[name] == Version(pinned[name]), (
            f"{name}: claimed >= {floors[name]}, CI's oldest is {pinned[name]}"
        )


def test_documents_state_the_python_ci_runs_on() -> None:
    python = ci_python()
    wrong = []
    for doc in DOCUMENTS:
        for match in re.finditer(r"Python (3\.\d+)", doc.read_text(encoding="utf-8")):
            if match[1] != python:
                wrong.append(f"{doc.relative_to(ROOT)}: {match[0]!r}")
    assert not wrong, f"documents name another Python than {python}: {wrong}"
    assert f"Python {python} or newer" in (ROOT / "docs" / "pages" / "getting-started.md").read_text(encoding="utf-8")
    assert f"Python {python} or newer" in (ROOT / "README.md").read_text(encoding="utf-8")


def _resolve(reference: str):
    module, _, attributes = reference.partition(":")
    found = importlib.import_module(module)
    for name in attributes.split("."):
        found = getattr(found, name)
    return found


def test_every_launchers_native_library_is_prebuilt_in_its_distributions_platform_wheel() -> None:
    from jt_core.__main__ import _native_launchers

    prebuilt = {}
    for folder in FOLDERS:
        tool = pyproject(ROOT / folder / "pyproject.toml").get("tool", {}).get("jt", {})
        for reference in tool.get("native-libraries", []):
            spec = _resolve(reference)()
            prebuilt[spec.name] = spec
            # The wheel carries it beside its first source, so that source is in the distribution's own package.
            package = Path(importlib.import_module(folder).__file__ or "").parent
            assert spec.prebuilt_path.is_relative_to(package), (reference, spec.prebuilt_path)
    launchers = {label: spec for label, spec in _native_launchers()}
    assert {"cpu:ffi", "cuda:jt", "rocm:jt"} <= set(launchers)
    for label, spec in launchers.items():
        assert prebuilt.get(spec.name) == spec, f"{label}'s library {spec.name} is in no platform wheel"


def test_platform_wheels_are_built_against_the_oldest_jax_claimed() -> None:
    native_setup = runpy.run_path(str(ROOT / "jt_core" / "src" / "jt_core" / "native_setup.py"))
    requirements = native_setup["build_requirements"]()
    pinned = dict(re.findall(r"\b(jaxlib)==([\d.]+)", ENV_SH))["jaxlib"]
    assert f"jax=={pinned}" in requirements and f"jaxlib=={pinned}" in requirements, requirements
    assert not [r for r in requirements if Requirement(r).name == "triton"], requirements


def _test_extra(folder: str) -> set[str]:
    """The distributions a suite's ``test`` extra names, with what jt-core's ``testing`` extra brings."""
    names = set()
    for line in PROJECTS[folder].get("optional-dependencies", {}).get("test", []):
        requirement = Requirement(line)
        names.add(requirement.name)
        if requirement.name == "jt-core" and "testing" in requirement.extras:
            names.update(Requirement(r).name for r in PROJECTS["jt_core"]["optional-dependencies"]["testing"])
    return names


@pytest.mark.parametrize("folder", FOLDERS)
def test_each_suite_declares_what_it_needs_in_its_test_extra(folder: str) -> None:
    tests = sorted((ROOT / folder / "tests").glob("*.py"))
    runtime = {Requirement(r).name.replace("-", "_") for r in PROJECTS["jt_core"]["dependencies"]}
    ours = {*FOLDERS, *(path.stem for path in tests)}
    imported = set()
    for path in tests:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update(alias.name.partition(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.partition(".")[0])
    needed = imported - set(sys.stdlib_module_names) - runtime - ours
    if any(".serialize()" in path.read_text(encoding="utf-8") for path in tests) and "flatbuffers" not in runtime:
        needed.add("flatbuffers")  # jax.export serialises with it, and does not require it
    missing = needed - _test_extra(folder)
    assert not missing, f"{folder}/tests need {sorted(missing)}: name them in the test extra of {folder}/pyproject.toml"


def test_ci_installs_what_the_test_extras_name() -> None:
    listed = subprocess.run(
        ["bash", "-c", f'source "{ROOT}/.ci/env.sh" && test_requirements "{sys.executable}"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    declared = [
        line
        for folder in FOLDERS
        for line in PROJECTS[folder].get("optional-dependencies", {}).get("test", [])
        if not line.startswith("jt-")
    ]
    assert listed == declared
    for script in (".ci/env.sh", ".ci/test.sh"):
        assert 'test_requirements "$' in (ROOT / script).read_text(encoding="utf-8"), script


def test_ci_installs_jt_cores_requirements_where_it_installs_jt_without_them() -> None:
    """CI installs jt with ``--no-deps``, so each of jt-core's requirements is named where it installs jax."""
    names = [Requirement(line).name for line in PROJECTS["jt_core"]["dependencies"]]
    assert "flatbuffers" in names  # Exported.serialize needs it after `pip install jt-core`
    test_sh = (ROOT / ".ci" / "test.sh").read_text(encoding="utf-8")
    lines = [
        *(line for line in ENV_SH.splitlines() if '"${pip[@]}"' in line and "triton" in line),
        *(line for line in test_sh.splitlines() if "pytest-xdist $(test_requirements" in line),
    ]
    assert len(lines) == 3, lines
    for line in lines:
        words = {word.strip('"').split("=")[0].split("$")[0] for word in line.split()}
        wanted = set(names) - {"jaxlib"} - words  # jax brings the jaxlib it needs
        assert not wanted, f"{sorted(wanted)} missing from: {line.strip()}"
