"""The jt plugin module of jt-gluon: only ``@hookimpl`` functions; heavy imports happen inside them."""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.plugin import Dialect, hookimpl

#: The plugin API version this plugin is written for (jt_core.plugin.API_VERSION).
JT_PLUGIN_API = 1


@hookimpl
def jt_register_dialects() -> Sequence[Dialect]:
    """Registers the Gluon dialect (``@gluon.jit`` kernels)."""
    from jt_gluon.dialect import GluonDialect

    return [GluonDialect()]
