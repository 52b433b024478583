"""What the distributions claim is what CI tests: one version for all of them, the oldest Python CI runs on as the
oldest supported one, the oldest jax/jaxlib and triton CI's version sets install as the floors, and documents that say
the same."""

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


def ci_python(variable: str = "JT_OLDEST_PYTHON_VERSION") -> str:
    """A Python version .ci/env.sh builds virtualenvs with: by default the oldest (the py311 set's)."""
    match = re.search(rf"^{variable}=(3\.\d+)$", ENV_SH, re.MULTILINE)
    assert match, f"{variable} is not set in .ci/env.sh"
    return match[1]


def ci_pythons() -> list[str]:
    """Every Python version CI runs on, oldest first."""
    return sorted({ci_python(), ci_python("JT_PYTHON_VERSION")}, key=lambda v: tuple(map(int, v.split("."))))


def ci_sets() -> dict[str, dict[str, str]]:
    """CI's version sets with pinned versions (.ci/env.sh's make_venv): each set's name and what it pins."""
    body = ENV_SH.split("make_venv() {", 1)[1].split("\n}\n", 1)[0]
    sets = {}
    for name, case in re.findall(r"^ {8}(\w+)\)\n(.*?)^ {12};;", body, re.MULTILINE | re.DOTALL):
        pins = dict(re.findall(r"\b(jaxlib|triton)==([\d.]+)", case))
        if pins:
            assert re.search(rf'"jax\$extra=={re.escape(pins["jaxlib"])}"', case), case
            sets[name] = {**pins, "jax": pins["jaxlib"]}
    return sets


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
def test_the_oldest_python_claimed_is_the_oldest_ci_runs_on(folder: str) -> None:
    python = ci_python()
    project = pyproject(ROOT / folder / "pyproject.toml")["project"]
    assert project["requires-python"] == f">={python}"
    if folder in FOLDERS:
        versions = [c.rsplit(" :: ", 1)[1] for c in project["classifiers"] if re.fullmatch(r".* :: 3\.\d+", c)]
        assert versions == ci_pythons(), f"{folder} lists Python versions {versions}; CI tests {ci_pythons()}"


def test_tools_check_the_code_for_the_claimed_python() -> None:
    tools = pyproject(ROOT / "pyproject.toml")["tool"]
    python = ci_python()
    assert tools["ruff"]["target-version"] == "py" + python.replace(".", "")
    assert tools["mypy"]["python_version"] == python


def floors() -> dict[str, Version]:
    """jt-core's ``>=`` floors, by requirement name."""
    found = {}
    for line in PROJECTS["jt_core"]["dependencies"]:
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                found[requirement.name] = Version(spec.version)
    return found


def test_the_oldest_jax_and_triton_claimed_are_the_oldest_ci_installs() -> None:
    sets = ci_sets()
    assert {"pinned", "py311"} <= set(sets), sets
    assert sets["py311"]["jax"] == "0.10.2", "the py311 set is a TPU VM's stack"
    for name in ("jax", "jaxlib", "triton"):
        oldest = min(Version(pins[name]) for pins in sets.values())
        assert floors()[name] == oldest, f"{name}: claimed >= {floors()[name]}, CI's oldest is {oldest}"


def test_documents_state_the_pythons_ci_runs_on() -> None:
    wrong = []
    for doc in DOCUMENTS:
        for match in re.finditer(r"Python (3\.\d+)", doc.read_text(encoding="utf-8")):
            if match[1] not in ci_pythons():
                wrong.append(f"{doc.relative_to(ROOT)}: {match[0]!r}")
    assert not wrong, f"documents name another Python than {ci_pythons()}: {wrong}"
    for doc in (
        ROOT / "docs" / "pages" / "getting-started.md",
        ROOT / "README.md",
        *(ROOT / f / "README.md" for f in FOLDERS),
    ):
        text = doc.read_text(encoding="utf-8")
        assert f"Python {ci_python()} or newer" in text, doc
        assert not re.search(rf"Python (?!{re.escape(ci_python())})3\.\d+ or newer", text), doc


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


@pytest.mark.parametrize(
    "folder", [f for f in FOLDERS if pyproject(ROOT / f / "pyproject.toml").get("tool", {}).get("jt")]
)
def test_platform_wheels_are_built_against_a_jaxlib_a_ci_set_runs(folder: str) -> None:
    """jt-core's libraries against the oldest jaxlib claimed, which takes them all; a plugin's against that one or the
    later one its pyproject.toml names (jt-cuda's record stage needs jaxlib 0.11.2's headers), which a CI set runs,
    so that its prebuilt library is loaded and tested there."""
    native_setup = runpy.run_path(str(ROOT / "jt_core" / "src" / "jt_core" / "native_setup.py"))
    requirements = native_setup["build_requirements"](ROOT / folder)
    version = native_setup["build_jaxlib"](ROOT / folder)
    assert f"jax=={version}" in requirements and f"jaxlib=={version}" in requirements, requirements
    assert not [r for r in requirements if Requirement(r).name == "triton"], requirements
    assert version in {pins["jaxlib"] for pins in ci_sets().values()}, version
    if folder == "jt_core":
        assert Version(version) == floors()["jaxlib"]


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
    assert len(lines) == 1 + len(ci_sets()) + 1, lines
    for line in lines:
        words = {word.strip('"').split("=")[0].split("$")[0] for word in line.split()}
        wanted = set(names) - {"jaxlib"} - words  # jax brings the jaxlib it needs
        assert not wanted, f"{sorted(wanted)} missing from: {line.strip()}"


VERSION_TABLE = re.compile(
    r"^\| version set \| Python \| jax, jaxlib \| Triton \| what CI runs on it \|\n\|[-|]+\|\n((?:\|.*\|\n)+)", re.M
)


def version_table(path: Path) -> list[list[str]]:
    """The rows of the version table of a document: set, Python, jax and jaxlib, Triton, what CI runs."""
    found = VERSION_TABLE.findall(path.read_text(encoding="utf-8"))
    assert len(found) == 1, f"{path.relative_to(ROOT)} has {len(found)} version tables"
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in found[0].splitlines()]


def set_python(name: str) -> str:
    """The Python version a set runs on, as .ci/env.sh's set_python says."""
    body = ENV_SH.split("set_python() {", 1)[1].split("\n}\n", 1)[0]
    special = re.search(r'if \[ "\$1" = (\w+) \]; then echo "\$(\w+)"; else echo "\$(\w+)"; fi', body)
    assert special, body
    return ci_python(special[2] if name == special[1] else special[3])


@pytest.mark.parametrize("document", ["README.md", "docs/pages/getting-started.md"])
def test_the_version_tables_give_each_sets_versions_as_ci_installs_them(document: str) -> None:
    rows = version_table(ROOT / document)
    sets = ci_sets()
    named = [row[0].split()[0] for row in rows]
    assert named == ["latest", *sets], f"{document} lists the sets {named}; .ci/env.sh has latest and {list(sets)}"
    assert "latest)" in ENV_SH and '-U "jax$extra" triton' in ENV_SH, "the latest set installs the newest releases"
    for row in rows:
        name, python, jax, triton = row[0].split()[0], row[1], row[2], row[3]
        assert python == set_python(name), f"{document}, {name}: Python {python}; .ci/env.sh: {set_python(name)}"
        if name == "latest":
            assert (jax, triton) == ("the newest", "the newest"), row
        else:
            assert (jax, triton) == (sets[name]["jax"], sets[name]["triton"]), f"{document}, {name}: {row}"
    # The two tables say the same (the README's links lead into docs/pages/).
    same = [[cell.replace("docs/pages/", "") for cell in row] for row in version_table(ROOT / "README.md")]
    assert rows == same or document == "README.md", f"{document}'s version table differs from the README's"


def test_ci_runs_a_suite_on_each_set_the_tables_name() -> None:
    """Each pinned set's virtualenv is made by .ci/test.sh and its separated suites run there."""
    test_sh = (ROOT / ".ci" / "test.sh").read_text(encoding="utf-8")
    for name in ci_sets():
        assert re.search(rf"^ *make_venv {name} {name}\b", test_sh, re.M), name
        assert re.search(rf'prepare_separated "\$JT_CI_HOME/venv-{name}/bin/python" (venv-separate\S*)', test_sh), name
    separated = re.findall(r'prepare_separated "\$JT_CI_HOME/venv-\w+/bin/python" (venv-separate\S*)', test_sh)
    assert sorted(separated) == sorted(re.findall(r"^run_separated (\S+)(?: .*)?$", test_sh, re.M)), separated
