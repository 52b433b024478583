"""The jt hooks of the example plugin. Only ``@hookimpl`` functions here: heavy imports happen inside them."""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.plugin import Backend, Launcher, hookimpl

#: The plugin API version this plugin is written for (jt_core.plugin.API_VERSION).
JT_PLUGIN_API = 1


@hookimpl
def jt_register_backends(platform: str | None) -> Sequence[Backend]:
    """Registers the ``toy`` backend."""
    if platform not in (None, "toy"):
        return []  # another platform's call: nothing to import
    from jt_example_backend.backend import ToyBackend

    return [ToyBackend()]


@hookimpl
def jt_register_launchers(platform: str | None) -> Sequence[Launcher]:
    """Registers the ``toy`` launcher."""
    if platform not in (None, "toy"):
        return []  # another platform's call: nothing to import
    from jt_example_backend.backend import ToyLauncher

    return [ToyLauncher()]
