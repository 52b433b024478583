"""Compiling a call's configurations: in parallel threads, and ahead of a native build that would hold them up;
setting aside those the target cannot run (`compile_usable`).

Triton's compiler spends its time in native code that releases the GIL, so threads overlap the configurations of
an autotuned kernel. The first call on a machine also builds a launcher's native library (seconds of C++), which
the launcher's selection waits for; `ahead_of_native_builds` starts the configurations' compiles first, so
that the two overlap instead of adding up.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence

from jt_core import coverage, native, settings
from jt_core.call import KernelCall
from jt_core.errors import KernelCompileError, OutOfResourcesError
from jt_core.plugin import facade
from jt_core.plugin.roles import CompileRequest
from jt_core.plugin.values import CompiledKernel

__all__ = ["ahead_of_native_builds", "compile_all", "compile_usable", "compile_workers"]


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


def _compile_each(requests: Sequence[CompileRequest]) -> list[CompiledKernel | Exception]:
    """`compile_all`, with each request's exception in its place instead of raised."""

    def one(request: CompileRequest) -> CompiledKernel | Exception:
        try:
            return facade.compile_kernel(request)
        except Exception as exc:
            return exc

    workers = compile_workers(len(requests))
    if workers == 1:
        return [one(request) for request in requests]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jt-compile") as pool:
        return list(pool.map(one, requests))


def skipped_because(error: Exception) -> str | None:
    """Why a configuration that failed to compile with ``error`` is skipped, as Triton's autotuner skips it; ``None``
    for an error that fails the call: it needs more of a resource than the target has (jt's `OutOfResourcesError`,
    Triton's ``OutOfResources``), ``ptxas`` refused it, or a ``tl.static_assert`` failed for its values."""
    if isinstance(error, OutOfResourcesError):
        return str(error)
    cause = error.__cause__ if isinstance(error, KernelCompileError) else None
    if cause is None:
        return None
    from triton.compiler.errors import CompileTimeAssertionFailure
    from triton.runtime.errors import OutOfResources, PTXASError

    if isinstance(cause, (OutOfResources, PTXASError, CompileTimeAssertionFailure)):
        text = str(cause).strip().splitlines()
        return f"{type(cause).__name__}: {text[-1] if text else ''}"
    return None


def compile_usable(
    call: KernelCall, requests: Callable[[KernelCall], Sequence[CompileRequest]]
) -> tuple[KernelCall, list[CompiledKernel]]:
    """Compiles every configuration of a call, and sets aside those that cannot run on the target (`skipped_because`)
    with one warning each; the call returned holds the others.

    Raises:
        NoUsableConfigError: When every configuration is set aside, listing each and why.
        Exception: A configuration's compile error of any other kind (or the only configuration's).
    """
    if len(call.configs) == 1:
        return call, compile_all(requests(call))
    results = _compile_each(requests(call))
    kept: list[int] = []
    reasons: list[tuple[str, str]] = []
    for index, (config, result) in enumerate(zip(call.configs, results, strict=True)):
        if not isinstance(result, Exception):
            kept.append(index)
            continue
        why = skipped_because(result)
        if why is None:
            raise result
        reasons.append((config.label, why))
    if not kept:
        raise coverage.no_usable_config(call, reasons, unwritten_only=False)
    for label, why in reasons:
        config = next(c for c in call.configs if c.label == label)
        coverage.config_skipped(call, config, f"it cannot run on the target: {why}")
    kernels = [results[index] for index in kept]
    if len(kept) < len(call.configs):
        call = dataclasses.replace(call, configs=tuple(call.configs[index] for index in kept))
    return call, [kernel for kernel in kernels if not isinstance(kernel, Exception)]


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
