"""``python -m jt_core plugins`` on plugins installed for real (fake distributions on ``PYTHONPATH``): what the table
says about launchers that only lower here, and about plugins that failed."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

from jt_core.testing.markers import has_platform

PLUGIN = """
import jt_core as jt
from jt_core.plugin.roles import Launcher
from jt_core.cpu.interpreter_launcher import CpuLauncher
from jt_core.native import LibrarySpec

JT_PLUGIN_API = 1

class NoDeviceLauncher(Launcher):
    platform = "nodevice"
    name = "nd"
    fallback_rules = ("calls the nodevice runtime refuses",)

    def native_library(self):
        return LibrarySpec("jt_nodevice_launch", (), without_it="nothing runs")

    def lower(self, ctx, call, kernels, operands, device):
        raise AssertionError("not lowered here")


class PickyLauncher(CpuLauncher):
    name = "picky"
    priority = -1
    fallback_rules = ("calls the picky launcher refuses",)


@jt.hookimpl
def jt_register_launchers():
    return [NoDeviceLauncher(), PickyLauncher()]
"""


def _install(site: pathlib.Path, distribution: str, entry_point: str, modules: dict[str, str]) -> None:
    """A distribution ``distribution`` 1.0 in ``site``, with one ``jt`` entry point and the given modules."""
    info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[jt]\n{entry_point}\n")
    for name, source in modules.items():
        (site / f"{name}.py").write_text(textwrap.dedent(source))


def _plugins(site: pathlib.Path, *flags: str, **environ: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(site), "JT_CACHE_DIR": str(site / "cache"), **environ}
    env.pop("JT_STRICT_PLUGINS", None)
    listed = subprocess.run(
        [sys.executable, "-m", "jt_core", "plugins", *flags], capture_output=True, text=True, env=env, check=True
    )
    assert "jt plugin " not in listed.stderr, "the table says why a plugin failed; a warning need not say it again"
    return listed.stdout


def _launchers(listing: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {label: d for entry in listing for label, d in entry["provides"]["launcher_details"].items()}


def test_a_launcher_whose_platform_has_no_device_here_gets_one_line(tmp_path: pathlib.Path) -> None:
    """Where JAX sees no device of a platform, its launchers only lower: the table gives each one line saying so,
    without what matters when running (rules for handing calls on, the native library); ``--json`` keeps it all."""
    _install(tmp_path, "jt-nodevice", "nodevice = jt_nodevice_plugin", {"jt_nodevice_plugin": PLUGIN})
    text = _plugins(tmp_path)
    listing = _launchers(json.loads(_plugins(tmp_path, "--json")))
    below_table = text.partition("\n\n")[2]
    assert not has_platform("nodevice")
    nodevice = listing["nodevice:nd"]
    assert nodevice["lowers_only"] is True and nodevice["falls_back_for"] == ["calls the nodevice runtime refuses"]
    assert nodevice["native"]["library"] == "jt_nodevice_launch" and not nodevice["native"]["built"]
    assert listing["cpu:picky"]["lowers_only"] is False
    for label, details in listing.items():  # the installed GPU plugins' launchers too, on a machine without GPUs
        platform = label.split(":", 1)[0]
        assert details["lowers_only"] is not has_platform(platform), label
        if details["lowers_only"]:
            mentions = [line for line in below_table.splitlines() if label in line]
            assert mentions == [
                f"{label:20} lowers only: JAX sees no {platform} device here (jax.export, cross-platform lowering)"
            ], text
    assert "nodevice runtime refuses" not in text and "jt_nodevice_launch" not in text
    assert "\ncpu:picky hands a call to the platform's next launcher for: calls the picky launcher refuses\n" in text
    assert "jt_cpu_interpreter_call" in text  # the native library of a launcher that runs here


def test_the_table_says_why_a_plugin_failed_or_is_blocked(tmp_path: pathlib.Path) -> None:
    _install(tmp_path, "jt-broken-import", "broken = jt_missing_module_of_broken", {})
    _install(
        tmp_path, "jt-typo", "typo = jt_typo_plugin", {"jt_typo_plugin": PLUGIN.replace("launchers():", "launcher():")}
    )
    _install(tmp_path, "jt-bare", "bare = jt_bare_plugin", {"jt_bare_plugin": PLUGIN.replace("@jt.hookimpl\n", "")})
    _install(tmp_path, "jt-nodevice", "nodevice = jt_nodevice_plugin", {"jt_nodevice_plugin": PLUGIN})
    rows = {row.split()[0]: row for row in _plugins(tmp_path, JT_DISABLE_PLUGINS="nodevice").splitlines() if row}
    assert rows["broken"].split()[1:4] == ["jt-broken-import", "1.0", "failed"]
    assert rows["broken"].endswith(
        "  nothing: failed to import (jt_missing_module_of_broken): ModuleNotFoundError: No module named "
        "'jt_missing_module_of_broken'. Fix or uninstall it, or set JT_DISABLE_PLUGINS=broken."
    ), rows["broken"]
    assert rows["typo"].split()[3] == "failed"
    assert rows["typo"].endswith(
        "  nothing: implements hooks that have no spec: jt_register_launcher (did you mean jt_register_launchers?). "
        "Correct the name in the plugin; set JT_DISABLE_PLUGINS=typo to skip it."
    ), rows["typo"]
    assert rows["bare"].split()[3] == "failed"
    assert rows["bare"].endswith(
        "  nothing: defines the hook function jt_bare_plugin.jt_register_launchers without the @hookimpl decorator, "
        "so jt would never call it. Decorate it with jt_core.plugin.hookimpl (`from jt_core.plugin import "
        "hookimpl`, then `@hookimpl` above the def); set JT_DISABLE_PLUGINS=bare to skip the plugin."
    ), rows["bare"]
    assert rows["nodevice"].split()[3] == "blocked"
    assert rows["nodevice"].endswith("  nothing: listed in JT_DISABLE_PLUGINS"), rows["nodevice"]


OLD_STYLE = """
import jt_core as jt
from jt_core.cpu.interpreter_launcher import CpuLauncher

JT_PLUGIN_API = 1

class OneConfigLauncher(CpuLauncher):
    name = "oneconfig"
    priority = -1
    single_config = True

@jt.hookimpl
def jt_register_launchers():
    return [OneConfigLauncher()]
"""


def test_the_table_lists_what_a_plugin_still_uses_of_an_earlier_contract(tmp_path: pathlib.Path) -> None:
    from jt_core._version import __version__

    _install(tmp_path, "jt-oldstyle", "oldstyle = jt_oldstyle_plugin", {"jt_oldstyle_plugin": OLD_STYLE})
    listed = _plugins(tmp_path)
    rows = {row.split()[0]: row for row in listed.split("\n\n", 1)[0].splitlines()}
    assert rows["oldstyle"].split()[1:4] == ["jt-oldstyle", "1.0", "loaded"]
    assert rows["oldstyle"].endswith("  launchers: cpu:oneconfig; uses names of an earlier jt contract (below)")
    note = (
        "registered the Launcher jt_oldstyle_plugin.OneConfigLauncher, which uses a name of an earlier jt contract: "
        f"single_config, replaced by Launcher.needs_tuning_ahead(call) (jt-core {__version__} still honours it; 0.2.0 "
        f"refuses it). Move to the replacement while jt-core {__version__} still takes it."
    )
    assert f"\n\noldstyle (jt-oldstyle 1.0) {note}\n" in listed
    oldstyle = next(entry for entry in json.loads(_plugins(tmp_path, "--json")) if entry["name"] == "oldstyle")
    assert oldstyle["deprecations"] == [note]
