"""Builtin plugin ``triton``: the plain Triton dialect (``@triton.jit`` kernels). Runs after plugin dialects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jt_core.call import Specialization
from jt_core.plugin.roles import Dialect
from jt_core.plugin.specs import PLUGIN_API_VERSION, hookimpl
from jt_core.plugin.values import Target

JT_PLUGIN_API = PLUGIN_API_VERSION


class TritonDialect(Dialect):
    """Kernels written with ``@triton.jit``."""

    name = "triton"

    def claims(self, kernel: Any) -> bool:
        from triton.runtime.jit import JITFunction

        return isinstance(kernel, JITFunction)

    def make_source(self, kernel: Any, specialization: Specialization, target: Target) -> Any:
        from triton.compiler import ASTSource

        return ASTSource(
            fn=kernel,
            signature=dict(specialization.signature),
            constexprs=dict(specialization.constexprs),
            attrs={k: [list(a) for a in v] for k, v in specialization.attrs.items()},
        )


@hookimpl
def jt_register_dialects() -> Sequence[Dialect]:
    """Registers the plain Triton dialect."""
    return [TritonDialect()]
