"""The jt hooks of the example launcher plugin. Only ``@hookimpl`` functions here: heavy imports happen inside them."""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.plugin import Launcher, hookimpl

#: The plugin API version this plugin is written for (jt_core.plugin.API_VERSION).
JT_PLUGIN_API = 1


@hookimpl
def jt_register_launchers(platform: str | None) -> Sequence[Launcher]:
    """Registers the ``logged`` launcher of the ``cpu`` platform."""
    if platform not in (None, "cpu"):
        return []  # another platform's call: nothing to import
    from jt_example_launcher.launcher import LoggedLauncher

    return [LoggedLauncher()]
