"""The typed facade over the hook specs: the only place jt's call path calls plugin hooks or reads the registries."""

from __future__ import annotations

from typing import Any

from jt_core import frontend
from jt_core.contracts import Backend, CompiledKernel, CompileRequest, Dialect, Launcher
from jt_core.errors import JtError, KernelCompileError
from jt_core.registry import get_registry

__all__ = ["backend_for", "compile_kernel", "dialect_for", "launcher_for", "launchers_for", "next_launcher"]


def backend_for(platform: str) -> Backend:
    """The backend registered for ``platform`` (raises ``NoBackendError`` / ``DuplicateBackendError``)."""
    return get_registry().backend(platform)


def launcher_for(platform: str, name: str | None = None) -> Launcher:
    """The launcher for ``platform``: ``name``, else ``JT_LAUNCHER_<PLATFORM>``, else the highest priority."""
    return get_registry().launcher(platform, name)


def launchers_for(platform: str) -> list[Launcher]:
    """Every launcher registered for ``platform``, highest priority first."""
    return get_registry().launchers_for(platform)


def next_launcher(platform: str, launcher: Launcher) -> Launcher:
    """The available launcher after ``launcher`` for ``platform``, by priority (raises ``NoBackendError``)."""
    return get_registry().next_launcher(platform, launcher)


def dialect_for(kernel: Any) -> Dialect:
    """The dialect of an (unwrapped) kernel function object."""
    return get_registry().dialect_for(kernel)


def compile_kernel(request: CompileRequest) -> CompiledKernel:
    """Compiles one configuration through the ``jt_compile_kernel`` hook (caches and observers included).

    Raises:
        KernelCompileError: With the compiler's message, the call's name, the kernel and the configuration.
    """
    hook = get_registry().ensure_loaded().loader.pm.hook
    try:
        with frontend.compiling():  # never beside an interpreter run, which patches triton.language
            result = hook.jt_compile_kernel(request=request)
    except JtError:
        raise
    except Exception as exc:
        raise KernelCompileError(
            f"compiling triton_call {request.call.name!r} (kernel {request.call.signature_text()}) for "
            f"{request.target.platform} {request.target.arch} with config [{request.config.label}] failed:\n"
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if result is None:
        raise KernelCompileError(f"no plugin compiled {request.call.name!r} for {request.target.platform}")
    return result
