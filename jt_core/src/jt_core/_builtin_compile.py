"""Builtin plugin ``core``: the default ``jt_compile_kernel`` implementation."""

from __future__ import annotations

from jt_core.backend import CompiledKernel, CompileRequest
from jt_core.hookspecs import hookimpl


@hookimpl(trylast=True)
def jt_compile_kernel(request: CompileRequest) -> CompiledKernel:
    """Compiles with the request's backend (runs after every plugin's implementation)."""
    return request.backend.compile(request)
