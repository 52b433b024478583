"""The plugin touches nothing private: it imports jt-core only through its public plugin surface (its tests also
through jt_core and jt_core.testing), each name from the module's __all__, and no module or name of any package
that starts with an underscore (Triton's interpreter internals, jax._src, jt's own modules)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SOURCES = sorted((HERE.parent / "src").rglob("*.py"))
TESTS = sorted(HERE.glob("*.py"))
#: The jt-core modules the plugin's code may import, and those its tests may import besides.
PLUGIN_SURFACE = {"jt_core.plugin"}
TEST_SURFACE = {"jt_core", "jt_core.testing"}


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def problems_in(path: Path, allowed: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            imported = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            imported = [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Attribute) and private(node.attr):
            found.append(f"{where} reads the private attribute .{node.attr}")
            continue
        else:
            continue
        for module, name in imported:
            if any(private(part) for part in module.split(".")) or (name is not None and private(name)):
                found.append(f"{where} imports {module}{'.' + name if name else ''}, which is private")
            elif module.split(".")[0] == "jt_core":
                if module not in allowed:
                    found.append(f"{where} imports {module}, which is not one of {sorted(allowed)}")
                elif name is not None and name not in importlib.import_module(module).__all__:
                    found.append(f"{where} imports {module}.{name}, which {module}.__all__ does not list")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_the_plugin_imports_only_jt_core_plugin_and_nothing_private(path: Path) -> None:
    assert problems_in(path, PLUGIN_SURFACE) == []


@pytest.mark.parametrize("path", TESTS, ids=[p.name for p in TESTS])
def test_its_tests_import_only_the_public_surface(path: Path) -> None:
    assert problems_in(path, PLUGIN_SURFACE | TEST_SURFACE) == []


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from triton.runtime import interpreter\n"
        "from jax._src import callback\n"
        "from jt_core.interpreter.execute import execute\n"
        "from jt_core.plugin import run_on_host, _private\n"
        "interpreter._patch_lang(None)\n",
        encoding="utf-8",
    )
    assert problems_in(bad, PLUGIN_SURFACE) == [
        "bad.py:2 imports jax._src.callback, which is private",
        "bad.py:3 imports jt_core.interpreter.execute, which is not one of ['jt_core.plugin']",
        "bad.py:4 imports jt_core.plugin._private, which is private",
        "bad.py:5 reads the private attribute ._patch_lang",
    ]
