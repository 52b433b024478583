"""The typed facade over the hook specs: the only place jt's call path calls plugin hooks or reads the registries.

What a plugin raises on the way is its fault, not the call's (`jt_core.plugin.registry`): the calls that can go on
without it do.
"""

from __future__ import annotations

from typing import Any

from jt_core import frontend
from jt_core.compile_errors import compile_error_message
from jt_core.errors import JtError, KernelCompileError
from jt_core.plugin.records import BROKEN
from jt_core.plugin.registry import SET_ASIDE, get_registry
from jt_core.plugin.roles import Backend, CompileRequest, Dialect, Launcher, invoke
from jt_core.plugin.values import CompiledKernel

__all__ = [
    "SET_ASIDE",
    "aside_reason",
    "ask",
    "backend_for",
    "compile_kernel",
    "dialect_for",
    "launcher_for",
    "launcher_override",
    "launchers_for",
    "next_launcher",
    "requested",
    "serve",
    "unavailable_reason",
]


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


def unavailable_reason(launcher: Launcher) -> str | None:
    """Why ``launcher`` cannot be used in this process (its own reason, or that it raised and is set aside)."""
    return get_registry().unavailable_reason(launcher)


def launcher_override(platform: str) -> str | None:
    """The launcher ``JT_LAUNCHER_<PLATFORM>`` names, as the registry reads it when it chooses one; ``None`` when
    unset."""
    return get_registry().launcher_overrides.get(platform)


def requested(platform: str, launcher: Launcher, name: str | None) -> str | None:
    """What names ``launcher`` for a call (``launcher=`` is ``name``, or ``JT_LAUNCHER_<PLATFORM>``), or ``None``."""
    return get_registry().requested(platform, launcher, name)


def serve(component: Any, method: str, *, needed: str | None = None, **arguments: Any) -> Any:
    """``component.method(...)`` with the ``arguments`` it names, or `SET_ASIDE` when the plugin's component
    raised and the call does not need it (see `jt_core.plugin.registry.Registry.serve`)."""
    return get_registry().serve(component, method, needed=needed, **arguments)


def ask(component: Any, question: str, *, otherwise: Any, needed: str | None = None, **arguments: Any) -> Any:
    """A component's answer to one of the contract's questions (``component.question(...)`` with the ``arguments``
    it names), or ``otherwise`` when the plugin's component raised and is set aside (`serve`)."""
    answer = serve(component, question, needed=needed, **arguments)
    return otherwise if answer is SET_ASIDE else answer


def aside_reason(component: Any) -> str:
    """Why a component is set aside."""
    return get_registry().aside_reason(component)


def dialect_for(kernel: Any) -> Dialect:
    """The dialect of an (unwrapped) kernel function object."""
    return get_registry().dialect_for(kernel)


def _target_text(request: CompileRequest) -> str:
    """The platform and the backend's label of the target (``"cuda sm90"``, ``"rocm gfx942"``, ``"cpu"``)."""
    platform = request.target.platform
    try:
        label = str(invoke(request.backend, "target_label", target=request.target))
    except Exception:  # a message is being made for another error: the target's fields do
        label = str(request.target.arch)
    return label if label == platform or label.startswith(f"{platform} ") else f"{platform} {label}"


def compile_kernel(request: CompileRequest) -> CompiledKernel:
    """Compiles one configuration through the ``jt_compile_kernel`` hook (caches and observers included).

    A plugin's implementation that raises is set aside and the compile runs again without it.

    Raises:
        KernelCompileError: With the compiler's message, the call's name, the kernel and the configuration.
    """
    registry = get_registry()
    while True:
        try:
            # Never beside an interpreter run, which patches triton.language; Triton's front end in linear time.
            with frontend.compiling(), frontend.linear_front_end(request.kernel):
                result = registry.compile_hook()(request=request)
            break
        except JtError as exc:
            frontend.release_frames(exc)
            raise
        except BROKEN as exc:
            frontend.release_frames(exc)
            if registry.compile_fault(exc):
                continue
            if not isinstance(exc, Exception):
                raise
            message = compile_error_message(request.call, request.config, _target_text(request), exc)
            raise KernelCompileError(message) from exc
    if result is None:
        raise KernelCompileError(f"no plugin compiled {request.call.name!r} for {request.target.platform}")
    return result
