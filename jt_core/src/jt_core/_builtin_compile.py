"""Builtin plugin ``core``: the default ``jt_compile_kernel`` implementation."""

from __future__ import annotations

from jt_core import cache
from jt_core.backend import CompiledKernel, CompileRequest
from jt_core.hookspecs import hookimpl


@hookimpl(trylast=True)
def jt_compile_kernel(request: CompileRequest) -> CompiledKernel:
    """Compiles with the request's backend, once per process for each distinct kernel variant, and once per
    machine for backends whose kernels go to the disk cache (:mod:`jt_core.cache`).

    Runs after every plugin's implementation. The variant is identified by the kernel, its dialect, the
    specialisation, the target, the options and the backend's class.
    """
    key = (
        request.dialect.name,
        request.specialization.key(),
        request.target,
        request.options,
        type(request.backend).__qualname__,
        request.call.name,
    )
    return cache.memoized(request.kernel, key, lambda: cache.compile_cached(request))
