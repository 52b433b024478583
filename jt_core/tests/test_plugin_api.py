"""The plugin API: one surface (jt_core.plugin, with jt_core.gpu for GPU runtimes), a declared version the loader
checks, and the shipped plugins held to that surface."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jt_core import plugin
from jt_core._version import __version__
from jt_core.plugin.records import FAILED, LOADED
from jt_core.testing import fake_entry_point
from jt_core.testing.fixtures import make_registry

#: The modules a plugin may import from jt-core, and the distributions shipped with it.
SURFACE = ("jt_core.plugin", "jt_core.gpu")
SHIPPED = ("jt_cuda", "jt_rocm", "jt_gluon", "jt_example_backend", "jt_example_launcher")


@pytest.mark.parametrize(
    ("declared", "says"),
    [
        (None, r"declares no plugin API version; jt-core \S+ speaks version 1: set JT_PLUGIN_API = 1 in"),
        (2, r"is written for plugin API version 2, newer than the 1 jt-core \S+ speaks; upgrade jt-core"),
        (0, r"is written for plugin API version 0, which jt-core \S+ no longer speaks \(it speaks 1\); upgrade the"),
        ("1", r"declares JT_PLUGIN_API = '1' in .*; it must be an int"),
    ],
)
def test_the_loader_refuses_a_plugin_without_the_api_version_it_speaks(declared: Any, says: str) -> None:
    target = SimpleNamespace(__name__="their_plugin")
    if declared is not None:
        target.JT_PLUGIN_API = declared
    registry = make_registry([fake_entry_point("versioned", target, api_version=None)], {})
    with pytest.warns(RuntimeWarning, match=says):
        record = {r.name: r for r in registry.list_plugins()}["versioned"]
    assert record.status == FAILED
    assert record.error is not None and "versioned" in record.error and "JT_DISABLE_PLUGINS=versioned" in record.error


def test_the_api_version_message_names_the_plugin_once() -> None:
    target = SimpleNamespace(__name__="their_plugin", JT_PLUGIN_API=0)
    registry = make_registry(
        [fake_entry_point("versioned", target, distribution="d", version="0.1", api_version=None)], {}
    )
    with pytest.warns(RuntimeWarning) as caught:
        record = {r.name: r for r in registry.list_plugins()}["versioned"]
    assert [str(w.message) for w in caught] == [
        f"jt plugin 'versioned' from d 0.1 is written for plugin API version 0, which jt-core {__version__} no "
        "longer speaks (it speaks 1); upgrade the plugin; until then set JT_DISABLE_PLUGINS=versioned to silence this."
    ]
    assert record.error == str(caught[0].message).removeprefix("jt plugin 'versioned' from d 0.1 ")


def test_a_plugin_declaring_the_current_version_loads() -> None:
    target = SimpleNamespace(__name__="their_plugin", JT_PLUGIN_API=plugin.API_VERSION)
    registry = make_registry([fake_entry_point("versioned", target, api_version=None)], {})
    assert {r.name: r for r in registry.list_plugins()}["versioned"].status == LOADED


def _source_files(package: str) -> list[Path]:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        pytest.skip(f"{package} is not installed")
    return sorted(Path(spec.origin).parent.rglob("*.py"))


def _jt_core_imports(path: Path) -> list[tuple[str, list[str], int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "jt_core":
            found.append((node.module, [alias.name for alias in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names if alias.name.split(".")[0] == "jt_core"]
    return found


@pytest.mark.parametrize("package", SHIPPED)
def test_shipped_plugins_import_only_the_plugin_surface(package: str) -> None:
    problems = []
    for path in _source_files(package):
        for module, names, line in _jt_core_imports(path):
            if module not in SURFACE:
                problems.append(f"{path.name}:{line} imports {module}")
                continue
            published = set(importlib.import_module(module).__all__)
            problems += [f"{path.name}:{line} imports {module}.{name}" for name in names if name not in published]
    assert problems == [], "imports outside jt_core.plugin / jt_core.gpu's __all__:\n" + "\n".join(problems)


@pytest.mark.parametrize("package", SHIPPED)
def test_shipped_plugins_declare_the_api_version(package: str) -> None:
    from importlib.metadata import entry_points

    declared = [ep for ep in entry_points(group="jt") if ep.value.split(".")[0] == package]
    if not declared:
        pytest.skip(f"{package} is not installed")
    for ep in declared:
        assert getattr(ep.load(), "JT_PLUGIN_API", None) == plugin.API_VERSION, ep.value


def test_the_surface_names_resolve_and_the_gpu_part_loads_on_first_use() -> None:
    for module in SURFACE:
        loaded = importlib.import_module(module)
        assert all(hasattr(loaded, name) for name in loaded.__all__), module
    code = (
        "import sys, jt_core.gpu as gpu; before = 'jt_core.gpu.launchers' in sys.modules; "
        "gpu.HandlerLauncher; print(before, 'jt_core.gpu.launchers' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "True"]


def test_the_writing_a_backend_page_lists_the_surface() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "pages" / "writing-a-backend.md"
    if not page.is_file():
        pytest.skip("the docs are not in this checkout")
    text = page.read_text()
    assert [module for module in SURFACE if f"`{module}`" not in text] == []


def test_contract_methods_get_the_arguments_they_name() -> None:
    from jt_core.plugin.roles import invoke

    class Narrow:
        def target(self, device: Any) -> tuple[str, Any]:
            return ("narrow", device)

    class Wide:
        def target(self, **offered: Any) -> dict[str, Any]:
            return offered

    assert invoke(Narrow(), "target", call="the call", device="gpu0") == ("narrow", "gpu0")
    assert invoke(Wide(), "target", call="the call", device="gpu0") == {"call": "the call", "device": "gpu0"}
    narrow = Narrow()
    narrow.target = lambda call: ("patched", call)  # type: ignore[method-assign]
    assert invoke(narrow, "target", call="the call", device="gpu0") == ("patched", "the call")


def test_a_launcher_that_names_fewer_arguments_still_lowers(jt_register_plugin: Any) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jt_core as jt
    from jt_core.cpu.interpreter_launcher import CpuLauncher
    from jt_core.testing import sample_add_kernel

    seen: list[str] = []

    class Narrow(CpuLauncher):
        name = "narrow"
        priority = 100

        def fallback_reason(self, call: Any) -> None:  # type: ignore[override]  # names the call only
            seen.append("fallback_reason")

        def lower(self, ctx: Any, call: Any, kernels: Any, operands: Any) -> Any:  # type: ignore[override]
            seen.append("lower")
            return super().lower(ctx, call, kernels, operands, None)

    class NarrowPlugin:
        @plugin.hookimpl
        def jt_register_launchers(self, platform: str | None) -> list[Any]:
            return [Narrow()] if platform in (None, "cpu") else []

    jt_register_plugin(NarrowPlugin())
    x = jnp.asarray(np.random.default_rng().standard_normal(64), jnp.float32)
    out = jax.jit(lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32))(x)
    np.testing.assert_allclose(np.asarray(out), 2 * np.asarray(x), rtol=1e-6)
    assert seen == ["fallback_reason", "lower"]
