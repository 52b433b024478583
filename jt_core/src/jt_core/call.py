"""The bound-call model: what one ``triton_call`` becomes, and what plugins read from it.

`CallOptions` is what the caller asked for (``triton_call``'s keyword arguments, checked once).
`KernelCall` is the result of binding them to a kernel: the hashable, static description the primitive
carries. It holds four things:

* the kernel: the object the caller passed, its function, the dialect that claimed it, its parameters;
* the binding: for every leaf of every non-constexpr parameter, where its value comes from (an input operand, an
  output buffer or a scalar) as a `ParamSlot`, the operands' and outputs' avals and the aliases;
* the configurations: one `LaunchConfig` per autotuning candidate, with its constexpr values, grid, the
  `CompileOptions` every backend takes and the zeroed outputs;
* the launch: `LaunchOptions`, how the call becomes an operation whatever the platform.

Nothing in it belongs to one backend: what a call gives the backend that compiles it (``backend_options=``,
``compute_capability=``, the CPU checks in force) travels unopened in `KernelCall.backend_arguments`, and
each backend reads what it owns there (`jt_core.plugin.Backend.target`,
`jt_core.plugin.Backend.parse_options`). `KernelCall.specialization` gives the
`Specialization` a backend compiles.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from jax import tree_util

from jt_core.checks import CpuChecks
from jt_core.errors import KernelCallTypeError, KernelCallValueError, short_repr
from jt_core.options import (
    OPTION_NAMES,
    CompileOptions,
    ExactEquality,
    LaunchOptions,
    TritonOptions,
    flag_value,
    static_key,
)
from jt_core.tensordesc import TensorDescriptorSpec

__all__ = [
    "CLASSIC",
    "CURRENT",
    "CPU_CHECKS",
    "INPUT",
    "OUTPUT",
    "SCALAR",
    "VMAP_STRATEGIES",
    "BatchInfo",
    "CallOptions",
    "CompileOptions",
    "ExactEquality",
    "KernelCall",
    "KernelDialect",
    "KernelParam",
    "LaunchConfig",
    "LaunchOptions",
    "ParamSlot",
    "Specialization",
    "TritonOptions",
    "kernel_name",
    "kernel_params",
    "kernel_signature_text",
    "static_key",
]

#: `ParamSlot.kind` of an array operand (or the base of a tensor descriptor).
INPUT = "input"
#: `ParamSlot.kind` of an output buffer.
OUTPUT = "output"
#: `ParamSlot.kind` of a by-value scalar.
SCALAR = "scalar"

#: `KernelCall.convention`: every output has a pointer parameter, appended after the inputs.
CLASSIC = "classic"
#: `KernelCall.convention`: only outputs not aliased to an input have a pointer parameter.
CURRENT = "current"

#: Values of ``triton_call(vmap=...)``.
VMAP_STRATEGIES = ("auto", "grid", "sequential")

#: The key of `KernelCall.backend_arguments` under which a call carries the CPU checks in force when it was
#: made (`jt_core.cpu_checks`); the CPU backend reads it.
CPU_CHECKS = "cpu_checks"


@dataclasses.dataclass(frozen=True)
class Specialization:
    """How one configuration's parameters are specialised, keyed by full parameter path.

    Attributes:
        signature: Parameter name to Triton type string (``"*fp32"``, ``"i32"``, ``"constexpr"``); tuple
            parameters map to a tuple of such strings.
        constexprs: Parameter path (``(index,)`` or ``(index, leaf, ...)``) to the constant value.
        attrs: Parameter path to a list of ``[attribute, value]`` pairs (e.g. ``["tt.divisibility", 16]``).
    """

    signature: Mapping[str, Any]
    constexprs: Mapping[tuple[int, ...], Any]
    attrs: Mapping[tuple[int, ...], Sequence[Sequence[Any]]]

    def key(self) -> tuple[Any, ...]:
        """A hashable identity of the specialisation (for caches). Constant values count by `static_key`:
        ``2``, ``2.0`` and ``True``, or ``-0.0`` and ``0.0``, are equal in Python but compile to different kernels."""
        return (
            tuple(self.signature.items()),
            tuple(sorted(((path, static_key(value)) for path, value in self.constexprs.items()), key=lambda kv: kv[0])),
            tuple(sorted((k, tuple(tuple(a) for a in v)) for k, v in self.attrs.items())),
        )


@dataclasses.dataclass(frozen=True)
class CallOptions:
    """The options of one ``triton_call``: everything it takes besides the kernel, operands and metaparameters.

    Built once by `jt_core.triton_call`; binding and partitioning read it. The fields are the arguments of
    the same names (see ``triton_call``), with ``out_shape=``/``out_type=`` as `out_spec` and the explicit
    compiler options gathered in `compile_options`.

    Raises:
        KernelCallTypeError, KernelCallValueError: For an option of the wrong type or value, naming it.
    """

    out_spec: Any
    grid: Any
    input_output_aliases: Mapping[int, int] | None = None
    zeroed_outputs: Sequence[int] | Callable[[dict[str, Any]], Sequence[int]] = ()
    compile_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    backend_options: Mapping[str, Any] | None = None
    name: str | None = None
    compute_capability: Any = None
    serialized_metadata: bytes = b""
    cost_estimate: Mapping[str, Any] | None = None
    has_side_effect: bool = False
    launcher: str | None = None
    vmap: str = "auto"
    checks: CpuChecks = dataclasses.field(default_factory=CpuChecks)

    def __post_init__(self) -> None:
        if self.backend_options is not None and not isinstance(self.backend_options, Mapping):
            raise KernelCallTypeError(
                f"backend_options must be a mapping of option names, got {self.backend_options!r}"
            )
        if self.input_output_aliases is not None and not isinstance(self.input_output_aliases, Mapping):
            raise KernelCallTypeError(
                "input_output_aliases must be a dict {operand index: output index}, got "
                f"{self.input_output_aliases!r}"
            )
        unknown = sorted(set(self.compile_options) - set(OPTION_NAMES))
        if unknown:
            raise KernelCallTypeError(f"compile_options names {unknown}; known: {list(OPTION_NAMES)}")
        if self.vmap not in VMAP_STRATEGIES:
            raise KernelCallValueError(f"vmap= must be one of {list(VMAP_STRATEGIES)}, got {self.vmap!r}")
        object.__setattr__(self, "has_side_effect", flag_value("has_side_effect", self.has_side_effect))
        if self.name is not None and not isinstance(self.name, str):
            raise KernelCallTypeError(f"name must be a str (or None for the kernel's), got {short_repr(self.name)}")
        if not isinstance(self.serialized_metadata, (bytes, bytearray, memoryview)):
            raise KernelCallTypeError(
                f"serialized_metadata must be bytes, got {short_repr(self.serialized_metadata)} "
                f"({type(self.serialized_metadata).__name__}); encode text first (e.g. text.encode())"
            )
        cost = self.cost_estimate
        if cost is not None and not (
            isinstance(cost, Mapping)
            and all(isinstance(k, str) and isinstance(v, (int, float, np.number)) for k, v in cost.items())
        ):
            raise KernelCallTypeError(
                "cost_estimate must be a dict of numbers by name ({'flops': ..., 'bytes_accessed': ...}), got "
                f"{short_repr(cost)}"
            )

    def launch_options(self) -> LaunchOptions:
        """How the call becomes an operation, as the bound call carries it."""
        cost = tuple(sorted(self.cost_estimate.items())) if self.cost_estimate else None
        return LaunchOptions(
            launcher=self.launcher,
            has_side_effect=bool(self.has_side_effect),
            serialized_metadata=bytes(self.serialized_metadata),
            cost_estimate=cost,
            vmap=self.vmap,
        )

    def backend_arguments(self) -> tuple[tuple[str, Any], ...]:
        """What the call gives the backend that compiles it, by argument name, for
        `KernelCall.backend_arguments`: ``backend_options`` (as sorted pairs) and ``compute_capability``
        when given, and the CPU checks in force (`CPU_CHECKS`) when they are not the defaults."""
        arguments: dict[str, Any] = {}
        if self.backend_options:
            arguments["backend_options"] = tuple(sorted(self.backend_options.items()))
        if self.compute_capability is not None:
            arguments["compute_capability"] = self.compute_capability
        if self.checks != CpuChecks():
            arguments[CPU_CHECKS] = self.checks
        return tuple(sorted(arguments.items()))


@dataclasses.dataclass(frozen=True)
class KernelParam:
    """One parameter of the kernel function.

    Attributes:
        index: Its position in the signature.
        name: Its name.
        is_constexpr: Whether it is annotated ``tl.constexpr``.
        has_default: Whether the signature declares a default.
        default: That default.
        do_not_specialize: Whether Triton's value specialisation is off for it.
    """

    index: int
    name: str
    is_constexpr: bool
    has_default: bool
    default: Any
    do_not_specialize: bool


@dataclasses.dataclass(frozen=True, eq=False)
class ParamSlot(ExactEquality):
    """One leaf of a non-constexpr parameter and where its runtime value comes from.

    Attributes:
        path: The full parameter path: ``(param_index,)`` or ``(param_index, i, ...)`` inside tuple parameters.
        name: A readable name (``x_ptr`` or ``pair[1]``).
        kind: `INPUT` (an array operand, or the base of a tensor descriptor), `OUTPUT` (an output
            buffer) or `SCALAR`.
        index: The operand index (inputs) or output index (outputs); -1 for scalars.
        value: The scalar value (scalars only).
        type_str: The Triton type (``"*fp32"``, ``"i32"``, ``"tensordesc<fp16[64, 64]>"``, ``"constexpr"`` for
            scalars specialised to a value).
        divisible_by_16: Whether Triton may assume divisibility by 16 (pointers, integers that are).
        descriptor: For a host-side tensor descriptor (an input whose operand is the descriptor's base), its
            shape, strides, block shape, padding and layout; ``None`` otherwise.
    """

    path: tuple[int, ...]
    name: str
    kind: str
    index: int
    value: Any
    type_str: str
    divisible_by_16: bool
    descriptor: TensorDescriptorSpec | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class LaunchConfig(ExactEquality):
    """One configuration (autotuning candidate) of a call.

    Attributes:
        constexprs: Every constexpr parameter's value, as ``(name, value)`` pairs in signature order.
        grid: The grid, always three axes.
        options: Compiler options.
        zeroed_outputs: Output indices zeroed before the launch.
        label: A readable description, used in errors.
        descriptor_blocks: ``(slot name, block shape)`` of the tensor descriptor arguments whose block shape this
            configuration sets (its hooks did: `jt_core.pruning`); the others keep their own.
            `KernelCall.slots_for` gives the slots with them applied.
    """

    constexprs: tuple[tuple[str, Any], ...]
    grid: tuple[int, int, int]
    options: CompileOptions
    zeroed_outputs: tuple[int, ...]
    label: str
    descriptor_blocks: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def constexpr_dict(self) -> dict[str, Any]:
        """The constexpr values as a dict."""
        return dict(self.constexprs)


class KernelDialect(Protocol):
    """What a bound call needs of the dialect that claimed its kernel: a `jt_core.plugin.Dialect`, named here
    by what the call model reads of it, so that the model does not import the roles, which are built on it."""

    @property
    def name(self) -> str:
        """The dialect's name (``"triton"``, ``"gluon"``)."""

    def claims(self, kernel: Any) -> bool:
        """Whether ``kernel`` is written in this dialect."""

    def make_source(self, kernel: Any, specialization: Specialization, target: Any) -> Any:
        """The source object ``triton.compile`` accepts."""

    def requires_descriptor_layout(self, kernel: Any) -> bool:
        """Whether host-side tensor descriptors passed to ``kernel`` carry the block's layout."""


@dataclasses.dataclass(frozen=True, eq=False)
class KernelCall(ExactEquality):
    """Everything static about one ``triton_call``: the primitive's only parameter.

    Attributes:
        kernel: The object the user passed (a ``JITFunction``, ``Heuristics`` or ``Autotuner``).
        fn: The underlying kernel function object (wrappers removed).
        dialect: The dialect that claimed ``fn``, resolved once per call.
        name: The call's name (``name=`` or the kernel's).
        params: The kernel's parameters.
        slots: The non-constexpr parameter leaves in signature order.
        param_trees: For each non-constexpr parameter, the pytree structure of its leaves (tuples).
        operand_avals: The avals of the array operands, in slot order.
        out_avals: The avals of the outputs (user outputs, then the hidden ones backing Refs).
        num_user_outputs: How many of ``out_avals`` the user asked for.
        aliases: ``(operand index, output index)`` pairs of buffers shared by an input and an output.
        convention: `CLASSIC` or `CURRENT`.
        configs: The configurations; more than one only for autotuned kernels.
        autotune_keys: The autotuner's ``key`` names (empty if not autotuned).
        launch: How the call becomes an operation (`LaunchOptions`).
        backend_arguments: What the call gives the backend that compiles it, as sorted ``(argument, value)``
            pairs, carried unopened (see `CallOptions.backend_arguments`); `arguments_for_backend` gives
            them as a backend is offered them.
        batch: For a call produced by the grid batching strategy, how it relates to the unbatched call
            (`BatchInfo`); ``None`` otherwise.
    """

    kernel: Any
    fn: Any
    dialect: KernelDialect
    name: str
    params: tuple[KernelParam, ...]
    slots: tuple[ParamSlot, ...]
    param_trees: tuple[tuple[int, Any], ...]
    operand_avals: tuple[Any, ...]
    out_avals: tuple[Any, ...]
    num_user_outputs: int
    aliases: tuple[tuple[int, int], ...]
    convention: str
    configs: tuple[LaunchConfig, ...]
    autotune_keys: tuple[str, ...]
    launch: LaunchOptions = dataclasses.field(default_factory=LaunchOptions)
    backend_arguments: tuple[tuple[str, Any], ...] = ()
    batch: BatchInfo | None = None

    def arguments_for_backend(self) -> dict[str, Any]:
        """`backend_arguments` as a backend is offered them (``backend_arguments=``): a dict, with
        ``backend_options`` as a dict."""
        return {key: dict(value) if key == "backend_options" else value for key, value in self.backend_arguments}

    def binding_text(self) -> str:
        """What each runtime parameter was given, for messages: ``x_ptr: operand 0 (*fp32), n: 100 (i32), out_ptr:
        output 0 (*fp32)``."""

        def given(slot: ParamSlot) -> str:
            if slot.kind == INPUT:
                return f"operand {slot.index} ({slot.type_str})"
            if slot.kind == OUTPUT:
                return f"output {slot.index} ({slot.type_str})"
            return f"{short_repr(slot.value)} ({slot.type_str})"

        return ", ".join(f"{slot.name}: {given(slot)}" for slot in self.slots)

    def signature_text(self) -> str:
        """The kernel's signature, for error messages."""
        return kernel_signature_text(self.params, kernel_name(self.fn))

    def slots_for(self, config: LaunchConfig) -> tuple[ParamSlot, ...]:
        """`slots` as one configuration passes them: a tensor descriptor whose block shape the configuration sets
        (`LaunchConfig.descriptor_blocks`) carries that block shape (and the type it gives the parameter)."""
        if not config.descriptor_blocks:
            return self.slots
        blocks = dict(config.descriptor_blocks)
        slots = []
        for slot in self.slots:
            block = blocks.get(slot.name)
            if block is not None and slot.descriptor is not None:
                spec = slot.descriptor.with_block_shape(block, slot.name)
                slot = dataclasses.replace(slot, descriptor=spec, type_str=spec.type_str)
            slots.append(slot)
        return tuple(slots)

    def specialization(self, config: LaunchConfig) -> Specialization:
        """The Triton specialisation of one configuration, keyed by full parameter path."""
        signature: dict[str, Any] = {}
        constexprs: dict[tuple[int, ...], Any] = {}
        attrs: dict[tuple[int, ...], list[list[Any]]] = {}
        values = config.constexpr_dict
        slots_by_param: dict[int, list[ParamSlot]] = {}
        for slot in self.slots_for(config):
            slots_by_param.setdefault(slot.path[0], []).append(slot)
        trees = dict(self.param_trees)
        for param in self.params:
            if param.is_constexpr:
                signature[param.name] = "constexpr"
                constexprs[(param.index,)] = values[param.name]
                continue
            leaves = slots_by_param[param.index]
            for slot in leaves:
                if slot.type_str == "constexpr":
                    constexprs[slot.path] = slot.value
                elif slot.divisible_by_16:
                    attrs[slot.path] = [["tt.divisibility", 16]]
            types = [slot.type_str for slot in leaves]
            tree = trees[param.index]
            signature[param.name] = types[0] if tree is None else tree_util.tree_unflatten(tree, types)
        return Specialization(signature=signature, constexprs=constexprs, attrs=attrs)


@dataclasses.dataclass(frozen=True, eq=False)
class BatchInfo(ExactEquality):
    """How a grid-batched call relates to the unbatched call it was made from.

    Under ``jax.vmap``, where the batch can become a grid axis, jt binds a new `KernelCall` instead of
    looping, and launchers are given that call: its ``fn`` is a generated ``@triton.jit`` wrapper kernel that reads
    the batch index from grid axis `axis`, offsets every batched pointer by the index times the batch stride
    and calls the user's kernel (``base.fn``) unchanged; its ``params`` are the user's kernel's followed by the
    wrapper's constexpr batch sizes and strides (named ``_JT_...``); its ``operand_avals`` and ``out_avals`` have
    the batch dimensions in front, and each configuration's grid carries the flattened batch on `axis`. The
    platform's backend compiles the wrapper like any kernel.

    Attributes:
        base: The unbatched call (the user's kernel and parameters).
        batch_shape: The batch dimensions, outermost first (one per ``vmap`` level).
        operand_dims: For each operand, one flag per batch dimension: whether the operand has that dimension
            (an operand without it is shared by the whole dimension, stride 0).
        axis: The grid axis carrying the flattened batch index.
    """

    base: KernelCall
    batch_shape: tuple[int, ...]
    operand_dims: tuple[tuple[bool, ...], ...]
    axis: int

    def __repr__(self) -> str:
        return (
            f"BatchInfo(kernel={self.base.name!r}, batch_shape={self.batch_shape}, "
            f"operand_dims={self.operand_dims}, axis={self.axis})"
        )


def kernel_name(fn: Any) -> str:
    """The Python name of a kernel function object (``JITFunction`` or a dialect's equivalent)."""
    return str(getattr(getattr(fn, "fn", fn), "__name__", "kernel"))


def kernel_signature_text(params: Sequence[KernelParam], name: str) -> str:
    """``name(x_ptr, n, BLOCK: tl.constexpr = 128)``."""
    parts = []
    for p in params:
        text = p.name + (": tl.constexpr" if p.is_constexpr else "")
        if p.has_default:
            text += f" = {p.default!r}"
        parts.append(text)
    return f"{name}({', '.join(parts)})"


def kernel_params(fn: Any) -> tuple[KernelParam, ...]:
    """The parameters of a kernel function object (``JITFunction`` or a dialect's equivalent)."""
    py_fn = getattr(fn, "fn", fn)
    sig = inspect.signature(py_fn)
    triton_params = {p.name: p for p in getattr(fn, "params", ())}
    params = []
    for index, (name, p) in enumerate(sig.parameters.items()):
        tp = triton_params.get(name)
        if tp is not None:
            is_constexpr = bool(tp.is_constexpr)
            do_not_specialize = bool(getattr(tp, "do_not_specialize", False))
        else:
            annotation = p.annotation
            text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
            is_constexpr = "constexpr" in str(text)
            do_not_specialize = False
        params.append(
            KernelParam(
                index=index,
                name=name,
                is_constexpr=is_constexpr,
                has_default=p.default is not inspect.Parameter.empty,
                default=None if p.default is inspect.Parameter.empty else p.default,
                do_not_specialize=do_not_specialize,
            )
        )
    return tuple(params)
