"""The jt hooks of the example plugin. Only ``@hookimpl`` functions here: heavy imports happen inside them."""

from __future__ import annotations

from collections.abc import Sequence

from jt_core import Backend, Launcher, hookimpl


@hookimpl
def jt_register_backends() -> Sequence[Backend]:
    """Registers the ``toy`` backend."""
    from jt_example_backend.backend import ToyBackend

    return [ToyBackend()]


@hookimpl
def jt_register_launchers() -> Sequence[Launcher]:
    """Registers the ``toy`` launcher."""
    from jt_example_backend.backend import ToyLauncher

    return [ToyLauncher()]
