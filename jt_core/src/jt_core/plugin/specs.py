"""Hook specifications of the ``jt`` pluggy project.

A jt plugin is a module (or object) exposed through the ``jt`` entry-point group whose functions are decorated with
`jt_core.hookimpl`. Three families exist:

* **backend** -- `jt_register_backends`: compile kernels for a JAX lowering platform;
* **dialect** -- `jt_register_dialects`: recognise a kernel object and build its Triton AST source;
* **launcher** -- `jt_register_launchers`: turn compiled kernels into XLA operations on a platform;

plus the wrapper hook `jt_compile_kernel` for observers (timing, IR dumps, caches).

jt never calls ``pm.hook.*`` outside `jt_core.plugin.facade`, the typed facade over these specs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pluggy

from jt_core._version import __version__

if TYPE_CHECKING:
    from jt_core.plugin.roles import Backend, CompileRequest, Dialect, Launcher
    from jt_core.plugin.values import CompiledKernel

PROJECT_NAME = "jt"

#: The version of the plugin API (`jt_core.plugin`) this jt-core speaks. A plugin module declares the version
#: it is written for as ``JT_PLUGIN_API``; the loader refuses one that declares none or another. Within a version,
#: jt-core only adds: hooks, optional methods with a default, and arguments (jt passes a hook or a contract method
#: only the arguments its signature names, so an implementation that does not name a new one is unaffected); a name
#: it retires keeps working, with a warning, for one minor version (``jt_core.plugin.retired.Retired``).
PLUGIN_API_VERSION = 1

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

__all__ = [
    "PLUGIN_API_VERSION",
    "PROJECT_NAME",
    "api_version_problem",
    "hookimpl",
    "hookspec",
    "jt_compile_kernel",
    "jt_register_backends",
    "jt_register_dialects",
    "jt_register_launchers",
]

# -------------------------------------------------------------------------------------------------------------
# Backend hooks
# -------------------------------------------------------------------------------------------------------------


@hookspec
def jt_register_backends(platform: str | None) -> Sequence[Backend]:
    """Called when jt first needs a platform's backend (the first call lowered for it), and once with ``None`` when
    every registration is wanted (``python -m jt_core plugins``), to collect the backends each plugin provides.

    A backend compiles kernels for one JAX lowering platform (``"cpu"``, ``"cuda"``, ``"rocm"`` or a third-party
    platform name). Backends form a registry: two plugins returning a backend for the same platform is an error
    (`jt_core.errors.DuplicateBackendError`) raised when that platform is used, naming both plugins; block
    one with ``JT_DISABLE_PLUGINS``.

    Args:
        platform: The platform jt looks up, or ``None`` for every platform. A plugin returns ``[]`` for a platform
            it does not serve, so that calls on other platforms never import its backend; an implementation that
            leaves ``platform`` out of its signature is called once and returns all its backends.

    Returns:
        A sequence of `jt_core.plugin.Backend` instances (empty when the plugin provides none).

    Implemented by: jt-core's builtin ``cpu`` plugin (the Triton interpreter), ``jt-cuda``, ``jt-rocm`` and
    third-party backends.
    """
    raise NotImplementedError


# -------------------------------------------------------------------------------------------------------------
# Dialect hooks
# -------------------------------------------------------------------------------------------------------------


@hookspec
def jt_register_dialects() -> Sequence[Dialect]:
    """Called once per process, at the first call, to collect the kernel dialects each plugin provides.

    A dialect answers "is this kernel object mine?" (`jt_core.plugin.Dialect.claims`) and builds the
    Triton AST source a backend compiles. It is asked about every kernel, so it answers without importing its
    language: no kernel of the language exists before the user has imported it (look in ``sys.modules`` first).
    Kernel selection asks the plugins' dialects first and the builtin plain Triton dialect last, so the first
    dialect that claims a kernel wins.

    Returns:
        A sequence of `jt_core.plugin.Dialect` instances.

    Implemented by: jt-core's builtin ``triton`` dialect (runs last) and ``jt-gluon``.
    """
    raise NotImplementedError


# -------------------------------------------------------------------------------------------------------------
# Launcher hooks
# -------------------------------------------------------------------------------------------------------------


@hookspec
def jt_register_launchers(platform: str | None) -> Sequence[Launcher]:
    """Called when jt first needs a platform's launchers (the first call lowered for it), and once with ``None``
    when every registration is wanted, to collect the launchers each plugin provides.

    A launcher turns compiled kernels into an XLA operation for one platform. Several may exist for a platform;
    the one used is chosen deterministically: the ``launcher=`` argument of ``triton_call``, else the environment
    variable ``JT_LAUNCHER_<PLATFORM>`` (e.g. ``JT_LAUNCHER_CUDA=jaxlib``), else the available launcher with the
    highest `priority` (ties broken by name).

    Args:
        platform: The platform jt looks up, or ``None`` for every platform (as for `jt_register_backends`).

    Returns:
        A sequence of `jt_core.plugin.Launcher` instances.

    Implemented by: jt-core's builtin ``cpu`` plugin, ``jt-cuda`` (its own FFI handler and jaxlib's handler) and
    ``jt-rocm``.
    """
    raise NotImplementedError


# -------------------------------------------------------------------------------------------------------------
# Compile hooks
# -------------------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def jt_compile_kernel(request: CompileRequest) -> CompiledKernel | None:
    """Called during lowering for every kernel configuration that has to be compiled.

    Stops at the first non-None result. jt-core's builtin implementation runs last and calls
    ``request.backend.compile(request)`` through its caches (once per process per variant, once per machine for
    backends that let the disk cache keep their kernels); a plugin returns a
    `CompiledKernel` to replace the compile (a cache of its own), or ``None`` to let the
    others decide. Observers implement it as a wrapper
    (``@hookimpl(wrapper=True)``) to time the compile or to look at its result; jt-core's own wrapper writes the
    ``JAX_TRITON_DUMP_DIR`` dumps and prints the IRs of ``debug=True`` calls, for every backend.

    Args:
        request: What to compile: the kernel, its dialect, specialisation, target and options.

    Returns:
        The compiled kernel, or ``None`` to defer to the next implementation.

    Implemented by: jt-core's builtin ``core`` plugin (the compile through the caches, and the wrapper writing
    ``JAX_TRITON_DUMP_DIR`` dumps); observers.
    """


def api_version_problem(plugin: object) -> str | None:
    """What is wrong with the plugin API version a plugin module (or object) declares, or ``None`` when it declares
    `PLUGIN_API_VERSION`."""
    declared = getattr(plugin, "JT_PLUGIN_API", None)
    where = getattr(plugin, "__name__", type(plugin).__name__)
    if declared is None:
        return (
            f"declares no plugin API version; jt-core {__version__} speaks version {PLUGIN_API_VERSION}: set "
            f"JT_PLUGIN_API = {PLUGIN_API_VERSION} in {where} once it is written for it (see jt_core.plugin)"
        )
    if isinstance(declared, bool) or not isinstance(declared, int):
        return f"declares JT_PLUGIN_API = {declared!r} in {where}; it must be an int ({PLUGIN_API_VERSION} here)"
    if declared > PLUGIN_API_VERSION:
        return (
            f"is written for plugin API version {declared}, newer than the {PLUGIN_API_VERSION} jt-core "
            f"{__version__} speaks; upgrade jt-core"
        )
    if declared < PLUGIN_API_VERSION:
        return (
            f"is written for plugin API version {declared}, which jt-core {__version__} no longer speaks (it speaks "
            f"{PLUGIN_API_VERSION}); upgrade the plugin"
        )
    return None
