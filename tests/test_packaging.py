"""What the distributions claim is what CI tests: one version for all four, the Python CI runs on as the oldest
supported one, the pinned version set as the oldest jax/jaxlib/triton, and documents that say the same."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import jt_core

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("jt_core", "jt_cuda", "jt_rocm", "jt_gluon")
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
    for folder in ("jt_cuda", "jt_rocm", "jt_gluon"):
        assert PROJECTS[folder]["dependencies"] == [f"jt-core=={VERSION}"]
    extras = PROJECTS["jt_core"]["optional-dependencies"]
    for extra in ("cuda", "rocm", "gluon"):
        assert extras[extra] == [f"jt-{extra}=={VERSION}"]
    assert [Requirement(r).name for r in extras["testing"]] == ["pytest"]


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
