"""Builtin plugin ``core``: compiling through jt's caches, and the wrapper that writes dumps and prints IRs."""

from __future__ import annotations

import sys
from collections.abc import Generator

from jt_core import cache, dumps, triton_cache
from jt_core.call import static_key
from jt_core.plugin.roles import CompileRequest, invoke
from jt_core.plugin.specs import PLUGIN_API_VERSION, hookimpl
from jt_core.plugin.values import CompiledKernel

JT_PLUGIN_API = PLUGIN_API_VERSION

#: The IR stages ``debug=True`` prints, in compile order (those the backend kept).
PRINTED_STAGES = ("ttir", "glir", "ttgir", "llir", "ptx", "amdgcn")


@hookimpl(trylast=True)
def jt_compile_kernel(request: CompileRequest) -> CompiledKernel:
    """Compiles with the request's backend, once per process for each distinct kernel variant, and once per
    machine for backends whose kernels go to the disk cache (`jt_core.cache`).

    Runs after every plugin's implementation. The variant is identified by the kernel, its dialect, the
    specialisation, the target, the options, the backend's class and its cache tag (as on disk: a backend switch
    read at compile time changes the binary), each value by its `static_key`.
    """
    key = static_key(
        (
            request.dialect.name,
            request.specialization.key(),
            request.target,
            request.options,
            type(request.backend).__qualname__,
            invoke(request.backend, "cache_tag"),
            request.call.name,
        )
    )
    return cache.memoized(request.kernel, key, lambda: _compile(request))


def _compile(request: CompileRequest) -> CompiledKernel:
    with triton_cache.triton_cache_folder():  # Triton's cache needs a folder even where the environment empties it
        return cache.compile_cached(request)


@hookimpl(wrapper=True, specname="jt_compile_kernel")
def observe_compile(request: CompileRequest) -> Generator[None, CompiledKernel, CompiledKernel]:
    """Writes the ``JAX_TRITON_DUMP_DIR`` dump of every kernel that comes back (compiled or cached, any backend)
    and prints the IRs of ``debug=True`` calls."""
    kernel = yield
    root = dumps.dump_dir()
    if root is not None and kernel is not None:
        dumps.write_dump(root, cache.compile_key(request), request, kernel)
    if request.config.options.debug and kernel is not None:
        _print_irs(request, kernel)
    return kernel


def _print_irs(request: CompileRequest, kernel: CompiledKernel) -> None:
    out = sys.stdout
    for stage in PRINTED_STAGES:
        if stage in kernel.asm:
            out.write(
                f"// ---- triton_call {request.call.name!r} config [{request.config.label}] {stage} "
                f"({invoke(request.backend, 'target_label', target=request.target)}) ----\n"
            )
            out.write(str(kernel.asm[stage]))
            out.write("\n")
    out.flush()
