"""Every difference between supported JAX, Triton and Python versions, named once."""

from __future__ import annotations

import ast
import contextlib
import functools
import re
import threading
import weakref
from collections.abc import Iterable, Iterator
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

#: Held by every parse of Python source into an AST that jt makes or has Triton make (`parse_python`,
#: `serialize_kernel_parsing`).
_AST_LOCK = threading.Lock()


def parse_python(source: str) -> ast.Module:
    """``ast.parse(source)``, one parse in the process at a time: CPython 3.11 keeps the recursion depth of its AST
    constructor per interpreter rather than per parse, so two threads parsing at once can fail with ``SystemError:
    AST constructor recursion depth mismatch`` (CPython gh-106905; seen with 3.11.7). A parse takes milliseconds."""
    with _AST_LOCK:
        return ast.parse(source)


def serialize_kernel_parsing() -> None:
    """Has Triton parse a kernel's source (``JITFunction.parse``, which every compile's front end calls, in Triton
    3.6 to 3.9) one parse at a time, as `parse_python` does, from now on in this process: the configurations of an
    autotuned kernel compiled side by side in threads failed on Python 3.11.7 with the ``SystemError`` above. The
    rest of each compile still runs side by side."""
    from triton.runtime import jit

    parse = jit.JITFunction.parse
    if getattr(parse, "_jt_one_at_a_time", False):
        return

    @functools.wraps(parse)
    def one_at_a_time(self: Any) -> Any:
        with _AST_LOCK:
            return parse(self)

    one_at_a_time._jt_one_at_a_time = True  # type: ignore[attr-defined]
    jit.JITFunction.parse = one_at_a_time


def entry_points_for_group(group: str) -> Iterable[Any]:
    """The installed entry points of ``group``."""
    return entry_points(group=group)


def emit_python_callback(ctx: Any, callback: Any, operands: Any, has_side_effect: bool) -> Any:
    """Emits a host callback in a lowering rule; returns the result values."""
    from jax._src import callback as jax_callback

    results, _, _ = jax_callback.emit_python_callback(
        ctx,
        callback,
        None,
        list(operands),
        ctx.avals_in,
        ctx.avals_out,
        has_side_effect=has_side_effect,
        returns_token=False,
    )
    return results


def is_ref(value: Any) -> bool:
    """Whether ``value`` is a mutable JAX array reference (``jax.new_ref``), concrete or traced."""
    from jax._src import state

    try:
        import jax

        aval = jax.typeof(value)
    except Exception:
        return False
    return isinstance(aval, state.AbstractRef)


def is_transformed_ref(value: Any) -> bool:
    """Whether ``value`` is a sliced or otherwise transformed reference (not supported as an operand)."""
    from jax._src import state

    return isinstance(value, state.TransformedRef)


def register_host_ffi_target(name: str, handler: Any) -> None:
    """Registers a typed XLA FFI handler (a C function pointer) for the CPU ("Host") platform.

    ``jax.ffi.register_ffi_target``, ``jax.ffi.pycapsule``, ``jax.ffi.include_dir`` and the parts of the XLA FFI
    C++ API jt's CPU handler uses (``AnyBuffer``, ``RemainingArgs``/``RemainingRets``, integer and string
    attributes, ``ffi::Error``) are the same in jax 0.10 to 0.12; only the FFI C API's minor version differs
    (3 in jaxlib 0.10.2, 4 in 0.11.2, 5 in 0.12: per-call custom options, unused here; the record extension, which
    jt's GPU handlers use where it is, came with 0.11).
    """
    import jax

    jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(handler), platform="cpu", api_version=1)


def ffi_include_dir() -> str:
    """The folder holding the XLA FFI headers of the installed jaxlib."""
    import jax

    return str(jax.ffi.include_dir())


def xla_ffi_api_version() -> tuple[int, int] | None:
    """The XLA FFI C API version of the installed jaxlib, ``(major, minor)``: ``XLA_FFI_API_MAJOR`` and
    ``XLA_FFI_API_MINOR`` in its ``xla/ffi/api/c_api.h`` (0.3 in jaxlib 0.10.2, 0.4 in 0.11.2, 0.5 in 0.12), the
    headers jaxlib ships for the handlers loaded into it. ``None`` when they are missing or declare no version."""
    try:
        text = (Path(ffi_include_dir()) / "xla" / "ffi" / "api" / "c_api.h").read_text(errors="replace")
    except OSError:
        return None
    found = dict(re.findall(r"^\s*#\s*define\s+XLA_FFI_API_(MAJOR|MINOR)\s+(\d+)\b", text, re.MULTILINE))
    if set(found) != {"MAJOR", "MINOR"}:
        return None
    return int(found["MAJOR"]), int(found["MINOR"])


def distributed_state() -> tuple[int, int, Any]:
    """This process's index, the number of processes and the distributed runtime client (``None`` unless
    ``jax.distributed.initialize`` ran). JAX keeps them in ``jax._src.distributed.global_state`` (the same in jax 0.10
    to 0.12); the client's key-value methods (``key_value_set``, ``blocking_key_value_get``, ``key_value_try_get``)
    are the ones JAX itself uses to share compiled programs between processes."""
    from jax._src import distributed

    state = distributed.global_state
    return int(state.process_id), int(state.num_processes), state.client


@functools.cache
def _boolean_operand_check() -> Any:
    from triton.compiler import code_generator

    return getattr(code_generator, "_is_dynamic_boolean_operand", None) or code_generator._is_triton_tensor


def lowered_boolean_operand(value: Any) -> bool:
    """Whether Triton's code generator gives ``and``, ``or`` and ``not`` on ``value`` a run-time meaning
    (``logical_and``, ``logical_or``, the logical not) rather than Python's truth value: in Triton 3.9 any Triton
    value but a constexpr or a tuple (``_is_dynamic_boolean_operand``), in Triton 3.6 a tensor."""
    return bool(_boolean_operand_check()(value))


def on_clear_caches(store: Any, name: str) -> None:
    """Has ``jax.clear_caches()`` (and ``jax.clear_backends()``) call ``store.cache_clear()``, as it does for JAX's
    own caches.

    JAX keeps its caches in ``jax._src.util._caches`` (a ``WeakKeyDictionary``, so ``store`` must be kept alive by
    its owner) and registers each with ``jax._src.util.register_cache(cache, name)``; ``jax.clear_caches()`` calls
    ``util.clear_all_caches()``, which calls ``cache_clear()`` on every one. The same in jax 0.10 to 0.12.
    """
    from jax._src import util

    util.register_cache(store, name)


def wait_for_running_computations(platform: str) -> None:
    """Waits until every computation that produces a live array of ``platform`` has finished (errors are the
    arrays' readers' to see). Nothing is started: without an initialised backend (``jax.clear_backends()`` has
    just dropped them) there is nothing to wait for. ``jax._src.xla_bridge.backends_are_initialized`` and
    ``jax.live_arrays`` are the same in jax 0.10 to 0.12."""
    import jax
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized():
        return
    try:
        arrays = jax.live_arrays(platform)
    except RuntimeError:
        return  # no such platform here
    for array in arrays:
        try:
            array.block_until_ready()
        except Exception:
            continue


def hold_jit_functions_weakly() -> None:
    """Makes Triton's process-wide registry of ``JITFunction`` objects hold them weakly, so that a kernel a program
    made at run time and dropped is freed. Triton 3.9 enters every ``JITFunction`` under ``<module>:<name>``
    (``triton.runtime.jit._triton_jit_function_registry``, a dict read only to resolve a ``JITFunction`` constant
    of preloaded specialization data) and keeps it for the life of the process: the newest kernel of each module
    and name, whatever else let go of it. Held weakly, it resolves the same for every kernel still alive. Triton
    3.6 has no such registry."""
    from triton.runtime import jit

    registry = getattr(jit, "_triton_jit_function_registry", None)
    if registry is None or isinstance(registry, weakref.WeakValueDictionary):
        return
    held: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary(registry)
    jit._triton_jit_function_registry = held
    # A JITFunction made by another thread meanwhile entered itself into the dict replaced.
    for key, function in list(registry.items()):
        held.setdefault(key, function)


def forget_jit_functions(module_name: str) -> None:
    """Takes the ``JITFunction`` objects of a module jt generated out of Triton's process-wide registry, where they
    would stay for the life of the process (with everything they hold). Triton 3.9 enters every ``JITFunction``
    made there under ``<module>:<name>`` (``triton.runtime.jit._triton_jit_function_registry``, read only to
    preload kernels serialized with a ``JITFunction`` constant); Triton 3.6 has no such registry."""
    from triton.runtime import jit

    registry = getattr(jit, "_triton_jit_function_registry", None)
    if registry is None:
        return
    for key in [key for key in list(registry) if key.startswith(module_name + ":")]:
        registry.pop(key, None)


@contextlib.contextmanager
def jit_registry_kept(fn: Any) -> Iterator[None]:
    """Keeps the entry of ``fn``'s module and name in Triton's registry of ``JITFunction`` objects
    (``triton.runtime.jit._triton_jit_function_registry``, Triton 3.9) as it was: Triton's interpreter makes a
    ``JITFunction`` of the kernel's function just to read its file and line, which entered itself in place of the
    user's kernel (and, held weakly, was then freed: the user's kernel no longer resolved)."""
    from triton.runtime import jit

    registry = getattr(jit, "_triton_jit_function_registry", None)
    key = f"{getattr(fn, '__module__', None)}:{getattr(fn, '__qualname__', None)}"
    before = registry.get(key) if registry is not None else None
    try:
        yield
    finally:
        if registry is not None:
            if before is None:
                registry.pop(key, None)
            else:
                registry[key] = before


@functools.cache
def jaxlib_version() -> tuple[int, ...]:
    """The installed jaxlib's version, e.g. ``(0, 10, 2)`` (its release numbers; a suffix such as ``.dev`` is left
    out)."""
    import jaxlib

    return tuple(int(part) for part in re.findall(r"\d+", str(jaxlib.__version__).split("+")[0])[:3])


def barriers_outlast_fusion() -> bool:
    """Whether the installed jaxlib's XLA keeps a ``lax.optimization_barrier`` until its fusion passes have run, as
    jaxlib 0.11.2 and later do: the CPU's compiled path relies on it to keep a float product apart from the sum that
    reads it (two roundings, as Triton computes a product it does not fuse and ``enable_fp_fusion=False``) and to
    compile each stage of a chain of helper calls once. jaxlib 0.10 removes barriers before fusion: XLA's CPU code
    then contracts such a product and sum into one multiply-add, and a long chain of helpers compiles slowly (a
    512-element bitonic argsort: 100 s against 12 s)."""
    return jaxlib_version() >= (0, 11)


def lowering_for_export(ctx: Any) -> bool:
    """Whether a lowering rule runs for ``jax.export`` (``jax.export.export`` lowers with
    ``LoweringParameters(for_export=True)``, kept in the rule context's module context; the same in jax 0.10 to
    0.12)."""
    parameters = getattr(ctx.module_context, "lowering_parameters", None)
    return bool(getattr(parameters, "for_export", False))


def low_level_jaxpr(closed: Any) -> Any:
    """``closed`` with its high-level equations (JAX's "hijax" primitives, which ``custom_jvp`` functions such as
    ``jax.nn.softplus`` trace to in newer JAX) lowered to the primitives they stand for, as ``jax.jit`` does before
    it lowers a jaxpr: `lower_closed_jaxpr` has no rule for them. A jaxpr without such equations is returned as is.
    """
    if not getattr(closed, "is_high", False):
        return closed
    from jax._src.interpreters import partial_eval

    return partial_eval.lower_jaxpr2(closed)


def lower_closed_jaxpr(ctx: Any, closed: Any, operands: Any) -> Any:
    """Lowers a closed jaxpr inline, in a lowering rule, on ``operands`` (MLIR values); returns the result values.

    ``mlir.lower_fun(core.jaxpr_as_fun(closed))`` does the same after tracing the jaxpr's every equation again into
    a new jaxpr; this lowers the one given. The steps are ``lower_fun``'s own, in jax 0.10 to 0.12 alike: the
    rule context's platforms, its name stack, tokens, dimension variables and constants.
    """
    from jax._src.interpreters import mlir
    from jax._src.lib import xla_client

    module = ctx.module_context if ctx.platforms is None else ctx.module_context.replace(platforms=ctx.platforms)
    out, tokens = mlir.jaxpr_subcomp(
        module,
        closed.jaxpr,
        ctx.name_stack,
        ctx.tokens_in,
        mlir.ir_consts(closed.consts, [v.aval for v in closed.jaxpr.constvars]),
        *operands,
        dim_var_values=ctx.dim_var_values,
        const_lowering=ctx.const_lowering,
        outer_traceback=xla_client.Traceback(),
    )
    ctx.set_tokens_out(tokens)
    return out


# -- explicit sharding (jax.set_mesh with explicit axes, shardings in the types) ---------------------------------------


def concrete_mesh() -> Any | None:
    """The mesh of the context (``jax.set_mesh``) with its devices, also while tracing under ``jax.jit`` (where
    ``jax.sharding.get_mesh`` refuses); ``None`` where none is set or this jax cannot say."""
    try:
        from jax._src.mesh import get_concrete_mesh

        mesh = get_concrete_mesh()
    except Exception:  # a jax without it
        return None
    return None if mesh is None or getattr(mesh, "empty", True) else mesh


def is_explicit_axis(axis_type: Any) -> bool:
    """Whether a mesh axis's type is explicit (the arrays' types carry their shardings along it)."""
    import jax

    explicit = getattr(getattr(jax.sharding, "AxisType", None), "Explicit", None)
    return explicit is not None and axis_type == explicit


def typeof(array: Any) -> Any:
    """The abstract value of ``array``, with its sharding where JAX keeps one in types."""
    import jax

    getter = getattr(jax, "typeof", None)
    return getter(array) if getter is not None else getattr(array, "aval", None)


def reshard(array: Any, sharding: Any) -> Any:
    """``array`` resharded to ``sharding`` (a ``NamedSharding``), where its type's sharding differs."""
    import jax

    current = getattr(getattr(typeof(array), "sharding", None), "spec", None)
    if current is not None and tuple(current) == tuple(sharding.spec):
        return array
    return jax.sharding.reshard(array, sharding)
