"""The markers of jt's pytest plugin: ``cuda``, ``rocm``, ``gpu`` and ``tpu``, which skip a test where JAX sees no
such device (failures instead under ``--jt-require-gpu``), and ``requires_plugin(name, ...)``, which skips a test
unless the jt plugins it names are installed."""

from __future__ import annotations

import functools

import jax
import pytest

from jt_core.plugin.loader import discover_entry_points

__all__ = [
    "HARDWARE_MARKERS",
    "PLUGIN_MARKER",
    "declare_markers",
    "has_platform",
    "installed_plugins",
    "pytest_addoption",
    "pytest_runtest_setup",
]

#: The markers that skip a test where JAX sees no device of their platform.
HARDWARE_MARKERS = ("cuda", "rocm", "gpu", "tpu")
#: The marker that names the jt plugins a test needs besides the one it tests.
PLUGIN_MARKER = "requires_plugin"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jt")
    group.addoption(
        "--jt-require-gpu",
        action="store_true",
        default=False,
        help="fail, instead of skip, tests marked cuda/rocm/gpu/tpu when the hardware is absent",
    )


def installed_plugins() -> set[str]:
    """The names of the jt plugins installed here: the entry points of group ``jt`` (none is imported)."""
    return {entry_point.name for entry_point in discover_entry_points()}


def declare_markers(config: pytest.Config) -> None:
    """Declares the markers (the plugin's ``pytest_configure`` calls it)."""
    for name in HARDWARE_MARKERS:
        config.addinivalue_line(
            "markers", f"{name}: needs a {name} device (skipped without one unless --jt-require-gpu)"
        )
    config.addinivalue_line(
        "markers", f"{PLUGIN_MARKER}(name, ...): needs the jt plugins named (skipped where one is not installed)"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    wanted = [name for marker in item.iter_markers(PLUGIN_MARKER) for name in marker.args]
    if wanted:
        missing = sorted(set(wanted) - installed_plugins())
        if missing:
            pytest.skip(
                f"needs the jt plugins {missing}, which no installed distribution provides (entry-point group 'jt')"
            )
    for name in HARDWARE_MARKERS:
        if item.get_closest_marker(name) is None:
            continue
        if has_platform(name):
            continue
        message = f"needs a {name} device, and JAX sees none"
        if item.config.getoption("--jt-require-gpu"):
            pytest.fail(f"{message} (--jt-require-gpu is set)", pytrace=False)
        pytest.skip(message)


@functools.cache
def has_platform(platform: str) -> bool:
    """Whether JAX sees a device of ``platform`` (``"cpu"``, ``"cuda"``, ``"rocm"``, ``"gpu"`` or ``"tpu"``)."""
    try:
        return bool(jax.devices(platform))
    except RuntimeError:
        return False
