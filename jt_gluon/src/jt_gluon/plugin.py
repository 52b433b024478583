"""The jt plugin module of jt-gluon: only ``@hookimpl`` functions; heavy imports happen inside them."""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.contracts import Dialect
from jt_core.hookspecs import hookimpl


@hookimpl
def jt_register_dialects() -> Sequence[Dialect]:
    """Registers the Gluon dialect (``@gluon.jit`` kernels)."""
    from jt_gluon.dialect import GluonDialect

    return [GluonDialect()]
