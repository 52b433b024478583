"""``triton_call``: the user-facing entry point."""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jax import tree_util

import jt_core.batching  # noqa: F401  (registers the primitive's vmap rule)
from jt_core import checks
from jt_core.binding import bind_call
from jt_core.call import CallOptions, kernel_name, kernel_params, kernel_signature_text
from jt_core.configs import KernelWrappers, unwrap_kernel
from jt_core.conventions import suggest
from jt_core.errors import KernelCallTypeError, KernelCallValueError, short_repr
from jt_core.lowering import dispatch as _dispatch  # noqa: F401  (registers the lowering rule)
from jt_core.options import OPTION_NAMES
from jt_core.partitioning import partitioned_triton_call
from jt_core.plugin import facade
from jt_core.primitive import triton_kernel_call_p

__all__ = ["triton_call"]


class _Unset:
    """The default of a keyword of `triton_call` that has no value to default to; it reads as its name in the
    signature (``help(jt.triton_call)``, the reference)."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


#: ``kernel=`` and ``grid=``: a call without one is refused, naming it.
REQUIRED: Any = _Unset("REQUIRED")
#: ``out_shape=`` and ``out_type=``, two names of one argument: a call gives exactly one.
NOT_GIVEN: Any = _Unset("NOT_GIVEN")

#: What the required keywords hold, for the error when one is missing.
_REQUIRED = {
    "kernel": "the @triton.jit (or @gluon.jit) kernel to call",
    "grid": "the number of programs (an int, a tuple of up to 3 ints, or a callable of the metaparameters)",
}
#: jax-triton 0.3's keyword that jt does not take, with its default (which asks for nothing jt does not do).
_CUSTOM_TARGET = ("custom_call_target_name", "triton_kernel_call")
#: ``triton_call``'s keywords that make up the call itself, never a kernel argument whatever the kernel's parameters
#: are named (Triton's launcher keeps ``grid`` apart too).
_CALL_KEYWORDS = frozenset({"kernel", "grid", "out_shape", "out_type"})
#: Keywords of Pallas's ``pallas_call`` that people bring, with what ``triton_call`` takes instead.
_PALLAS_HABITS = {
    "interpret": (
        "interpret= is Pallas's: a call runs on the CPU when JAX places it there, compiled, with no flag; "
        'launcher="interpreter" runs it in Triton\'s interpreter instead'
    ),
    "compiler_params": (
        "compiler_params= is Pallas's: pass the compile options as triton_call's own keywords (num_warps=, "
        "num_stages=, num_ctas=, enable_fp_fusion=, debug=) and the backend's other options in backend_options={...}"
    ),
}


def triton_call(
    *args: Any,
    kernel: Any = REQUIRED,
    out_shape: Any = NOT_GIVEN,
    out_type: Any = NOT_GIVEN,
    grid: int | tuple[int, ...] | Callable[[dict[str, Any]], Any] = REQUIRED,
    input_output_aliases: Mapping[int, int] | None = None,
    zeroed_outputs: Sequence[int] | Callable[[dict[str, Any]], Sequence[int]] = (),
    num_warps: int | None = None,
    num_stages: int | None = None,
    num_ctas: int | None = None,
    compute_capability: int | None = None,
    enable_fp_fusion: bool | None = None,
    backend_options: Mapping[str, Any] | None = None,
    debug: bool | None = None,
    name: str | None = None,
    serialized_metadata: bytes = b"",
    cost_estimate: Mapping[str, Any] | None = None,
    has_side_effect: bool = False,
    launcher: str | None = None,
    vmap: str = "auto",
    partition: Any = None,
    **metaparams: Any,
) -> Any:
    """Calls a Triton (or Gluon) kernel on JAX arrays, inside or outside ``jax.jit``.

    Two calling conventions are accepted and told apart by counting the kernel's non-constexpr parameters
    that the arguments leave unfilled (see `jt_core.conventions`):

    * *classic*: the operands fill the kernel's non-constexpr parameters in order and one pointer per output is
      appended after them; an output aliased with ``input_output_aliases`` keeps its own pointer parameter.
    * *current*: as classic, but an aliased output has no parameter of its own (the kernel writes through the
      input's pointer). Operands may also be given by keyword (``x_ptr=x``) and as tuples for tuple parameters.

    Constexpr parameters are given by keyword (``BLOCK=128``), take their declared defaults, or, as in
    jax-triton 0.4, are reached by positional values counted in declaration order (constexprs included) when only
    that reading fits the call.

    A keyword that names a kernel parameter fills it, as Triton's launcher binds it, even where it is also one of
    the arguments below: a compile option (``num_warps=``, ``num_stages=``, ``num_ctas=``, ``enable_fp_fusion=``,
    ``debug=``) then sets both the parameter and the option, any other argument (``name=``, ``launcher=`` ...) the
    parameter alone. ``kernel``, ``grid``, ``out_shape`` and ``out_type`` always keep their meaning.

    Args:
        *args: Operands: JAX arrays, ``jax.new_ref`` references (updated in place), bool/int/float/NumPy
            scalars (passed by value, specialised like Triton does: ``1`` becomes a constant, multiples of 16 get
            a divisibility hint), and ``None`` (a constant the kernel and its heuristics test with ``is None``;
            refused, naming the parameter, where the kernel uses it unconditionally).
        kernel: Required. A ``@triton.jit`` kernel, possibly wrapped in ``@triton.heuristics`` /
            ``@triton.autotune``, or a ``@gluon.jit`` kernel (with jt-gluon).
        out_shape: The outputs: an object with ``shape`` and ``dtype`` (``jax.ShapeDtypeStruct``, an array) or a
            pytree of them. The result has the same structure. Required unless ``out_type`` is given.
        out_type: Same as ``out_shape`` (the newer name); give exactly one of the two.
        grid: Required. Number of programs: an int, a tuple of up to three ints, or a callable receiving the
            metaparameters (and named operands' shapes) and returning one of those.
        input_output_aliases: ``{operand index: output index}``: the output reuses the operand's buffer (with
            ``jax.jit(..., donate_argnums=...)`` no copy is made). Operand indices count the flattened
            non-constexpr operands (arrays and scalars) in parameter order; in the classic convention they count
            the array operands only (jax-triton 0.3's indices).
        zeroed_outputs: Output indices (or a callable of the metaparameters returning them) zeroed before the
            launch.
        num_warps: Warps per program (power of two; default 4 or the autotune config's).
        num_stages: Pipelining stages (default 3 or the config's).
        num_ctas: Programs per cluster, 1 to 8 (above 1 needs sm90+).
        compute_capability: CUDA target override (e.g. ``90``); also used when lowering without a GPU.
        enable_fp_fusion: Allow fused multiply-adds (default True).
        backend_options: Further backend compiler options; the explicit options above may not be repeated here.
        debug: Compile with Triton's debug checks and print the IRs; on the CPU also checks integer overflow.
        name: A name for the call (errors, profiles, IR dumps); defaults to the kernel's.
        serialized_metadata: Opaque bytes carried into the lowered call.
        cost_estimate: ``{"flops": ..., "bytes_accessed": ...}``: accepted and kept with the call (``jax.vmap``
            scales it by the batch), but no launcher hands it to XLA, whose custom calls have no place for it; Pallas's
            Triton lowering drops it too.
        has_side_effect: Keep the call even when its outputs are unused.
        launcher: Name of the launcher to use on the platform (see ``python -m jt_core plugins``).
        vmap: How ``jax.vmap`` batches the call: ``"grid"`` (one launch, the batch on a free grid axis),
            ``"sequential"`` (one launch per batch element) or ``"auto"`` (grid where the kernel allows it).
            See `jt_core.batching`.
        partition: How the call partitions when its operands are sharded under ``jax.jit``
            (`jt_core.Elementwise`, `jt_core.BatchDims`); each shard then runs the call on its
            local operands with no gather. The grid must then be a callable (it is re-evaluated with the
            per-shard shapes); scalars reach every shard unchanged, and one that is a global size the shards do
            not have (``n=x.size``) is refused: make such calls inside ``@jt.partitioned(...)``. ``None``: XLA
            gathers the operands. See `jt_core.partitioning`.
        **metaparams: Constexpr values and keyword operands (``None`` included).

    Returns:
        The outputs, in the structure of ``out_shape``/``out_type``.

    Raises:
        KernelCallTypeError: Arguments that do not fit the kernel (the message shows its signature).
        KernelCallValueError: Unusable values (grid, aliases, options).
        NoBackendError: When lowering for a platform no installed plugin serves.
    """
    if kernel is REQUIRED or grid is REQUIRED:
        _refuse_missing(kernel, grid, metaparams, args)
    wrappers = unwrap_kernel(kernel)
    _refuse_misspelled_options(wrappers.fn, metaparams)
    own = {
        "input_output_aliases": input_output_aliases,
        "zeroed_outputs": zeroed_outputs,
        "num_warps": num_warps,
        "num_stages": num_stages,
        "num_ctas": num_ctas,
        "compute_capability": compute_capability,
        "enable_fp_fusion": enable_fp_fusion,
        "backend_options": backend_options,
        "debug": debug,
        "name": name,
        "serialized_metadata": serialized_metadata,
        "cost_estimate": cost_estimate,
        "has_side_effect": has_side_effect,
        "launcher": launcher,
        "vmap": vmap,
        "partition": partition,
    }
    _bind_shared_keywords(wrappers, len(args), own, metaparams)
    if out_shape is not NOT_GIVEN and out_type is not NOT_GIVEN:
        raise KernelCallTypeError("triton_call got both out_shape= and out_type=; give one (they mean the same)")
    if out_shape is NOT_GIVEN and out_type is NOT_GIVEN:
        raise KernelCallTypeError(
            "triton_call needs out_shape= (or out_type=): the shape and dtype of each output, e.g. "
            "out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype)"
        )
    options = CallOptions(
        out_spec=out_shape if out_shape is not NOT_GIVEN else out_type,
        grid=grid,
        input_output_aliases=own["input_output_aliases"],
        zeroed_outputs=own["zeroed_outputs"],
        compile_options={key: own[key] for key in OPTION_NAMES if own[key] is not None},
        backend_options=own["backend_options"],
        name=own["name"],
        compute_capability=own["compute_capability"],
        serialized_metadata=own["serialized_metadata"],
        cost_estimate=own["cost_estimate"],
        has_side_effect=own["has_side_effect"],
        launcher=own["launcher"],
        vmap=own["vmap"],
        checks=checks.current(),
    )
    dialect = facade.dialect_for(wrappers.fn)

    def run(args: Sequence[Any], metaparams: Mapping[str, Any], options: CallOptions) -> Any:
        bound = bind_call(kernel, wrappers, dialect, args, metaparams, options)
        results = triton_kernel_call_p.bind(*bound.operands, call=bound.call)
        aliases = dict(bound.call.aliases)
        for operand_index, ref in bound.refs:
            ref[...] = results[aliases[operand_index]]
        return tree_util.tree_unflatten(bound.out_tree, results[: bound.call.num_user_outputs])

    if own["partition"] is not None:
        return partitioned_triton_call(own["partition"], run, args, metaparams, options)
    return run(args, metaparams, options)


@functools.cache
def _own_keywords() -> list[str]:
    return [p.name for p in inspect.signature(triton_call).parameters.values() if p.kind is p.KEYWORD_ONLY]


@functools.cache
def _own_defaults() -> dict[str, Any]:
    return {p.name: p.default for p in inspect.signature(triton_call).parameters.values() if p.kind is p.KEYWORD_ONLY}


def _is_default(value: Any, default: Any) -> bool:
    """Whether a keyword holds ``triton_call``'s default, so was not given (``None``, or a value of the default's
    type equal to it)."""
    if default is None:
        return value is None
    return value is default or (type(value) is type(default) and value == default)


def _bind_shared_keywords(
    wrappers: KernelWrappers, num_positional: int, own: dict[str, Any], metaparams: dict[str, Any]
) -> None:
    """Gives a keyword of ``triton_call``'s own to the kernel parameter of the same name, as Triton's launcher does.

    Triton binds a launch's keywords to the kernel's parameters and reads its compile options from all of them:
    ``num_stages=2`` for a kernel with a ``num_stages: tl.constexpr`` parameter sets that parameter and is the
    compile option too (Triton 3.6 to 3.9 alike). So a keyword given here that names a parameter fills it (it moves
    into ``metaparams``); a compile option (`OPTION_NAMES`) stays the option as well, and any other keyword
    (``name=``, ``launcher=`` ...) becomes the parameter's alone, its own meaning back at its default. A keyword
    counts as given when it differs from ``triton_call``'s default (``None`` for most).

    Triton's launcher always passes the debug option by keyword, so a ``debug: tl.constexpr`` parameter that the call
    gives no value receives it (False) over its declared default, unless a positional value, a heuristic or an
    autotuning config may give it one.
    """
    params = {p.name: p for p in kernel_params(wrappers.fn)}
    defaults = _own_defaults()
    for name in [name for name in own if name in params and name not in _CALL_KEYWORDS]:
        if _is_default(own[name], defaults[name]):
            continue
        metaparams[name] = own[name]
        if name not in OPTION_NAMES:
            own[name] = defaults[name]
    debug = params.get("debug")
    if (
        debug is not None
        and debug.is_constexpr
        and "debug" not in metaparams
        and debug.index >= num_positional
        and all(heuristic != "debug" for heuristic, _ in wrappers.heuristics)
        and all("debug" not in dict(config.kwargs) for config in wrappers.configs)
    ):
        metaparams["debug"] = False


def _refuse_missing(kernel: Any, grid: Any, metaparams: dict[str, Any], args: tuple[Any, ...]) -> None:
    """Names a required keyword that is missing, and the misspelling, or the kernel given positionally, that
    probably stands for it."""
    for name, value in (("kernel", kernel), ("grid", grid)):
        if value is not REQUIRED:
            continue
        if name == "kernel":
            positional = [i for i, arg in enumerate(args) if _looks_like_a_kernel(arg)]
            if positional:
                raise KernelCallTypeError(
                    f"triton_call got a Triton kernel as positional argument {positional[0]}; positional arguments "
                    "are the kernel's operands: pass the kernel as kernel=..."
                )
        close = [key for key in metaparams if suggest(key, [name])]
        if close:
            raise KernelCallTypeError(
                f"triton_call got keyword {close[0]!r}, which is not one of its arguments: did you mean {name}=? "
                f"({name}= is required: {_REQUIRED[name]})"
            )
        raise KernelCallTypeError(f"triton_call needs {name}=: {_REQUIRED[name]}")


def _looks_like_a_kernel(value: Any) -> bool:
    """Whether ``value`` is a Triton kernel (``@triton.jit``, or its autotune/heuristics wrappers), without
    importing Triton."""
    return type(value).__module__.startswith("triton.") and hasattr(value, "run")


def _refuse_misspelled_options(fn: Any, metaparams: dict[str, Any]) -> None:
    """Refuses keywords that are no kernel parameter but look like one of ``triton_call``'s own arguments."""
    params = kernel_params(fn)
    names = {p.name for p in params}
    name, default = _CUSTOM_TARGET
    if name in metaparams and name not in names:
        if metaparams[name] != default:
            raise KernelCallValueError(
                f"triton_call {name}={metaparams[name]!r} (a jax-triton 0.3 argument) is not supported: jt's "
                "launchers choose the custom call they emit; pick one with launcher= (launcher='jaxlib' emits "
                "jaxlib's 'triton_kernel_call_ffi')"
            )
        del metaparams[name]
    own = _own_keywords()
    for key in metaparams:
        if key in names:
            continue
        habit = _PALLAS_HABITS.get(key) or _backend_option_hint(key, metaparams[key])
        if habit:
            raise KernelCallTypeError(
                f"triton_call got keyword {key!r}, which is neither one of its arguments nor a parameter of kernel "
                f"{kernel_signature_text(params, kernel_name(fn))}. {habit}"
            )
        near_option = difflib.get_close_matches(key, own, n=1, cutoff=0.75)
        near_param = difflib.get_close_matches(key, list(names), n=1)
        if near_option and (not near_param or _likeness(key, near_option[0]) > _likeness(key, near_param[0])):
            raise KernelCallTypeError(
                f"triton_call got keyword {key!r}, which is neither one of its arguments nor a parameter of kernel "
                f"{kernel_signature_text(params, kernel_name(fn))}. Did you mean {near_option[0]}=?"
            )


def _backend_option_hint(key: str, value: Any) -> str:
    """For a keyword that is one of the options of Triton's CUDA or ROCm backend (``maxnreg=``, ``waves_per_eu=``),
    which Triton's launcher takes as keywords, how ``triton_call`` takes it; else ``""``."""
    fields: set[str] = set()
    for module, options in (
        ("triton.backends.nvidia.compiler", "CUDAOptions"),
        ("triton.backends.amd.compiler", "HIPOptions"),
    ):
        try:
            fields |= set(getattr(importlib.import_module(module), options).__dataclass_fields__)
        except (ImportError, AttributeError):
            continue
    if key not in fields:
        return ""
    return (
        f"{key}= is an option of Triton's backend, which triton_call takes in backend_options: "
        f"backend_options={{{key!r}: {short_repr(value)}}}"
    )


def _likeness(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()
