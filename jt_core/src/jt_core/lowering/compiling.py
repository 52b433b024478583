"""Compiling a call's configurations: in parallel threads, and ahead of a native build that would hold them up.

Triton's compiler spends its time in native code that releases the GIL, so threads overlap the configurations of
an autotuned kernel. The first call on a machine also builds a launcher's native library (seconds of C++), which
the launcher's selection waits for; `ahead_of_native_builds` starts the configurations' compiles first, so
that the two overlap instead of adding up.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
from collections.abc import Callable, Iterator, Sequence

from jt_core import native, settings
from jt_core.plugin import facade
from jt_core.plugin.roles import CompileRequest
from jt_core.plugin.values import CompiledKernel

__all__ = ["ahead_of_native_builds", "compile_all", "compile_workers"]


def compile_workers(count: int) -> int:
    """How many threads compile the configurations of one call (``JT_COMPILE_WORKERS``, default: one per core)."""
    workers = settings.integer("JT_COMPILE_WORKERS", os.cpu_count() or 1)
    return max(1, min(workers, count))


def compile_all(requests: Sequence[CompileRequest]) -> list[CompiledKernel]:
    """Compiles every configuration of a call, in parallel threads when there are several; results keep the
    configurations' order. Each compile is kept in memory (`jt_core.plugin.facade.compile_kernel`), so compiling a
    request again returns at once."""
    workers = compile_workers(len(requests))
    if workers == 1:
        return [facade.compile_kernel(request) for request in requests]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jt-compile") as pool:
        return list(pool.map(facade.compile_kernel, requests))


#: The platforms whose launchers' libraries `native_build_due` has asked about (the answer is then known).
_asked: set[str] = set()


def native_build_due(platform: str) -> bool:
    """Whether a launcher of ``platform`` would build its native library on first use (it is not built on this
    machine, and a compiler is there to build it); asked once per platform and process, so later lowerings make
    no library specs."""
    if platform in _asked:
        return False
    _asked.add(platform)
    for launcher in facade.launchers_for(platform):
        spec = facade.serve(launcher, "native_library")
        if isinstance(spec, native.LibrarySpec) and native.build_due(spec):
            return True
    return False


@contextlib.contextmanager
def ahead_of_native_builds(
    platform: str, device: object | None, requests: Callable[[], Sequence[CompileRequest]]
) -> Iterator[None]:
    """Compiles ``requests()`` in the background while the body runs, when the call runs on a ``device`` of
    ``platform`` whose launchers are due to build a native library (the first call on a machine: the body selects
    the launcher, which waits for the build); otherwise does nothing. Leaves when both are done.

    The compiles are kept in memory, so compiling the same requests after the body returns their results. One
    that fails here fails again there, where its error reaches the caller.
    """
    if device is None or not native_build_due(platform):
        yield
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="jt-compile-ahead") as pool:
        ahead = pool.submit(compile_all, requests())
        try:
            yield
        finally:
            concurrent.futures.wait([ahead])
