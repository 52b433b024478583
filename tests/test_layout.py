"""The layout of jt's source holds: no import circle in any package, imports made only for type annotations
included, and no module so long that its role cannot be told at a glance."""

from __future__ import annotations

import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: jt's import packages, each a distribution's ``src/<package>``.
PACKAGES = ("jt_core", "jt_cuda", "jt_rocm", "jt_gluon", "jt_tpu")
#: The most lines a source module may have.
MODULE_LINES = 600


def import_circles(*packages: str) -> list[str]:
    """The import circles in ``packages`` and every package inside them, type-only imports (``if TYPE_CHECKING:``)
    included: for each package with a circle among its children, the imports whose removal would break it, as
    ``package: importer -> imported`` lines."""
    grimp = pytest.importorskip("grimp")
    graph = grimp.build_graph(*packages, exclude_type_checking_imports=False, cache_dir=None)
    found = []
    for package in sorted(graph.modules):
        if not graph.find_children(package):
            continue
        for importer, imported in sorted(graph.nominate_cycle_breakers(package)):
            found.append(f"{package}: {importer} -> {imported}")
    return found


def test_the_import_contracts_count_type_only_imports() -> None:
    """``lint-imports`` checks the layers and the circles with the imports made for type annotations."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    assert config.get("exclude_type_checking_imports", False) is False


def test_no_package_has_an_import_circle() -> None:
    circles = import_circles(*PACKAGES)
    assert not circles, "import circles (each line an import whose removal breaks one):\n" + "\n".join(circles)


def test_a_circle_of_type_only_imports_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "circled"
    (package / "inner").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "inner" / "__init__.py").write_text("")
    (package / "inner" / "model.py").write_text(
        textwrap.dedent(
            """
            from typing import TYPE_CHECKING

            if TYPE_CHECKING:
                from circled.inner.roles import Role
            """
        )
    )
    (package / "inner" / "roles.py").write_text("from circled.inner import model\n")
    (package / "flat.py").write_text("from circled.inner import roles\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        circles = import_circles("circled")
    finally:
        sys.modules.pop("circled", None)
    assert len(circles) == 1, circles
    package_name, edge = circles[0].split(": ")
    assert package_name == "circled.inner"
    assert set(edge.split(" -> ")) == {"circled.inner.model", "circled.inner.roles"}


def test_no_source_module_is_over_the_line_limit() -> None:
    modules = [path for package in PACKAGES for path in (ROOT / package / "src" / package).rglob("*.py")]
    assert len(modules) > 50, modules  # the packages are where this looks
    lengths = {
        path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines()) for path in modules
    }
    over = {name: lines for name, lines in lengths.items() if lines > MODULE_LINES}
    assert not over, f"modules over {MODULE_LINES} lines (split each by role): {over}"
