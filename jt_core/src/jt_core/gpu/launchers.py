"""The launcher bases GPU plugins share: jt's own handler (``"jt"``) and jaxlib's Triton handler (``"jaxlib"``).

A GPU plugin's launchers are small subclasses of these two: `HandlerLauncher` lowers a call to jt's launch
handler (`jt_core.gpu.handler`, attributes from `jt_core.gpu.attributes`), `JaxlibLauncher` to
the Triton handler of the installed jaxlib (the message of `jt_core.gpu.jaxlib_call`). A subclass says which
handler library or which code object it uses, and adds the checks of its runtime; the lowering itself, the order of
the buffers and the refusals shared by every runtime live here.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from jt_core import coverage, settings
from jt_core.call import INPUT, OUTPUT, SCALAR, KernelCall, LaunchConfig, ParamSlot
from jt_core.errors import KernelCallTypeError, KernelCallValueError
from jt_core.gpu import jaxlib_call
from jt_core.gpu.attributes import RUNTIME_NAMES, DescriptorParams, ffi_attributes, refuse_profile_scratch
from jt_core.gpu.handler import LaunchHandlerLibrary
from jt_core.native import LibrarySpec
from jt_core.plugin.roles import Launcher
from jt_core.plugin.values import CompiledKernel

__all__ = [
    "TUNE_AHEAD",
    "BufferPlan",
    "HandlerLauncher",
    "JaxlibLauncher",
    "OperandSource",
    "devices_present",
    "nbytes",
    "source_avals",
    "source_values",
]


#: The switch that keeps an autotuned call's every configuration in its lowering, for the handler to choose among
#: when the call runs (``JT_TUNE_AHEAD=0``), instead of tuning it before lowering.
TUNE_AHEAD = "JT_TUNE_AHEAD"


@functools.cache
def devices_present(platform: str) -> bool:
    """Whether JAX sees a device of ``platform`` in this process (lowering needs none; running does)."""
    import jax

    try:
        return bool(jax.devices(platform))
    except RuntimeError:
        return False


def nbytes(aval: Any) -> int:
    """The size in bytes of an array value."""
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


#: Where a custom call's operand comes from: ``("operand", operand index)`` (one of the call's array operands) or
#: ``("output", output index)`` (a zero-filled buffer of that output's shape, made for the call).
OperandSource = tuple[str, int]


def source_avals(call: KernelCall, sources: Sequence[OperandSource]) -> list[Any]:
    """The avals of custom-call operands described by ``sources``."""
    return [call.operand_avals[index] if kind == "operand" else call.out_avals[index] for kind, index in sources]


def source_values(ctx: Any, call: KernelCall, sources: Sequence[OperandSource], operands: Sequence[Any]) -> list[Any]:
    """The MLIR values of custom-call operands described by ``sources`` (zero-filled buffers made in ``ctx``)."""
    from jax._src.interpreters import mlir

    return [
        operands[index] if kind == "operand" else mlir.full_like_aval(ctx, 0, call.out_avals[index])
        for kind, index in sources
    ]


class HandlerLauncher(Launcher):
    """Base of the ``"jt"`` launchers: jt's own XLA FFI launch handler (command-buffer compatible).

    Subclasses set `platform` and `handler`, and may override `descriptor_params` (how the
    runtime passes host-side tensor descriptors) and `check` (what the runtime cannot launch).
    """

    name = "jt"
    priority = 20
    #: The runtime's handler library.
    handler: ClassVar[LaunchHandlerLibrary]

    def native_library(self) -> LibrarySpec:
        return self.handler.spec()

    def passes_tensor_descriptors(self, call: KernelCall, parameters: Sequence[str]) -> bool:
        """Whether the runtime passes host-side tensor descriptors: when `descriptor_params` says how."""
        return self.descriptor_params() is not None

    def unavailable_reason(self) -> str | None:
        if not devices_present(self.platform):
            return None  # lowering only (export, cross-lowering): the handler is needed where the module runs
        try:
            self.handler.register()
        except Exception as exc:
            runtime = RUNTIME_NAMES.get(self.platform, self.platform)
            return f"jt's {runtime} launch handler could not be built or registered: {type(exc).__name__}: {exc}"
        return None

    def descriptor_params(self) -> DescriptorParams | None:
        """How host-side tensor descriptors become kernel parameters; ``None``: the runtime cannot pass them."""
        return None

    def tunes_ahead(self, call: KernelCall) -> bool:
        """Yes, where the lowering has a device (``JT_TUNE_AHEAD=0`` says no): the handler times the candidates on
        scratch buffers before lowering, and the call lowered holds the winner alone, with no initialize stage and
        no choice left for run time, as that configuration called fixed."""
        return settings.flag(TUNE_AHEAD, default=True) and devices_present(self.platform)

    def check(self, call: KernelCall, kernels: Sequence[CompiledKernel]) -> None:
        """Refuses what the runtime cannot launch (raises ``KernelCallValueError``); the default accepts all."""

    def attributes(
        self, call: KernelCall, kernels: Sequence[CompiledKernel], device: Any | None
    ) -> tuple[dict[str, Any], int]:
        """The custom call's attributes and the size of its global scratch output (see
        `jt_core.gpu.attributes.ffi_attributes`)."""
        return ffi_attributes(call, kernels, device, self.platform, self.descriptor_params())

    def lower(
        self,
        ctx: Any,
        call: KernelCall,
        kernels: Sequence[CompiledKernel],
        operands: Sequence[Any],
        device: Any | None,
    ) -> Sequence[Any]:
        from jax import core
        from jax._src.interpreters import mlir

        refuse_profile_scratch(call, kernels, self.name)
        self.check(call, kernels)
        if devices_present(self.platform):
            self.handler.register()
        backend_config, scratch_bytes = self.attributes(call, kernels, device)
        out_avals = list(call.out_avals)
        result_types = [mlir.aval_to_ir_type(ctx.module_context, aval) for aval in out_avals]
        result_layouts = [self.row_major(aval) for aval in out_avals]
        if scratch_bytes:
            scratch = core.ShapedArray((scratch_bytes,), np.dtype(np.uint8))
            result_types.append(mlir.aval_to_ir_type(ctx.module_context, scratch))
            result_layouts.append([0])
        parameters = getattr(ctx.module_context, "lowering_parameters", None)
        op = mlir.custom_call(
            self.handler.custom_call_target(
                len(kernels) == 1, for_export=bool(getattr(parameters, "for_export", False))
            ),
            result_types=result_types,
            operands=list(operands),
            backend_config=backend_config,
            has_side_effect=call.launch.has_side_effect,
            api_version=4,
            operand_output_aliases=dict(call.aliases),
            operand_layouts=[self.row_major(aval) for aval in call.operand_avals],
            result_layouts=result_layouts,
        )
        return list(op.results)[: len(out_avals)]


@dataclasses.dataclass(frozen=True)
class BufferPlan:
    """How a call's buffers line up with a handler that hands the i-th buffer to the i-th pointer parameter.

    XLA passes a custom call's buffers as its operands followed by its results, so the kernel's pointer parameters
    must name operands first, then results, in that order. When the kernel's signature has an output pointer
    before an input pointer, every pointer parameter becomes an operand in signature order instead: an output's
    parameter gets a zero-filled operand (or the input it aliases) aliased to the output's result.

    Attributes:
        operand_sources: Per custom-call operand: ``("operand", operand index)`` or ``("output", output index)``
            (a zero-filled buffer of that output's shape).
        result_order: Output indices in custom-call result order.
        aliases: Custom-call operand position -> custom-call result position.
        param_outputs: Per pointer parameter (signature order): the output whose buffer it writes, or ``None``.
    """

    operand_sources: tuple[tuple[str, int], ...]
    result_order: tuple[int, ...]
    aliases: tuple[tuple[int, int], ...]
    param_outputs: tuple[int | None, ...]

    @property
    def natural(self) -> bool:
        """Whether the call's own operands and results already line up (no operand added or reordered)."""
        return all(kind == "operand" for kind, _ in self.operand_sources) and self.result_order == tuple(
            sorted(self.result_order)
        )

    @classmethod
    def make(cls, call: KernelCall) -> BufferPlan:
        """The plan for ``call``'s pointer parameters (array inputs and outputs, in signature order)."""
        pointer_slots = [s for s in call.slots if s.kind in (INPUT, OUTPUT)]
        operand_to_out = dict(call.aliases)
        out_to_operand = {out: operand for operand, out in call.aliases}
        first_output = next((i for i, s in enumerate(pointer_slots) if s.kind == OUTPUT), len(pointer_slots))
        sources: list[tuple[str, int]] = []
        aliases: dict[int, int] = {}
        param_outputs: list[int | None] = []
        if all(s.kind == OUTPUT for s in pointer_slots[first_output:]):
            result_order = [s.index for s in pointer_slots if s.kind == OUTPUT]
            result_order += [o for o in range(len(call.out_avals)) if o not in set(result_order)]
            position = {out: p for p, out in enumerate(result_order)}
            for slot in pointer_slots:
                if slot.kind == INPUT:
                    out = operand_to_out.get(slot.index)
                    if out is not None:
                        aliases[len(sources)] = position[out]
                    sources.append(("operand", slot.index))
                    param_outputs.append(out)
                else:
                    param_outputs.append(slot.index)
            return cls(tuple(sources), tuple(result_order), tuple(sorted(aliases.items())), tuple(param_outputs))
        outputs_with_param = {s.index for s in pointer_slots if s.kind == OUTPUT}
        for slot in pointer_slots:
            position_ = len(sources)
            if slot.kind == INPUT:
                sources.append(("operand", slot.index))
                out = operand_to_out.get(slot.index)
                if out is not None and out not in outputs_with_param:
                    aliases[position_] = out
                    param_outputs.append(out)
                else:
                    param_outputs.append(None)
            else:
                source = out_to_operand.get(slot.index)
                sources.append(("operand", source) if source is not None else ("output", slot.index))
                aliases[position_] = slot.index
                param_outputs.append(slot.index)
        order = tuple(range(len(call.out_avals)))
        return cls(tuple(sources), order, tuple(sorted(aliases.items())), tuple(param_outputs))

    def operands(self, ctx: Any, call: KernelCall, operands: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """The custom call's operand values (zero-filled buffers made for outputs) and their avals."""
        return source_values(ctx, call, self.operand_sources, operands), source_avals(call, self.operand_sources)

    def results(self, results: Sequence[Any]) -> list[Any]:
        """The custom call's results put back in the call's output order."""
        ordered: list[Any] = [None] * len(results)
        for position, out_index in enumerate(self.result_order):
            ordered[out_index] = results[position]
        return ordered


class JaxlibLauncher(Launcher):
    """Base of the ``"jaxlib"`` launchers: the Triton kernel-call handler of the installed jaxlib.

    Subclasses set `platform` and implement `kernel_spec` (the code object the handler loads); they
    may override `scalar` (the by-value types they can pass) and `custom_call_target` (the custom
    call's target).
    """

    name = "jaxlib"
    priority = 10

    def custom_call_target(self) -> tuple[str, int]:
        """The custom-call target and its API version (4: typed FFI with a dictionary backend config)."""
        return "triton_kernel_call_ffi", 4

    def needs_tuning_ahead(self, call: KernelCall) -> bool:
        """For configurations that launch the same grid into outputs that start as garbage: jaxlib's handler would
        time them without checking that each writes every element of those outputs (`jt_core.coverage`), so jt's
        handler tunes them first."""
        return bool(coverage.checked_outputs(call))

    def kernel_spec(self, call: KernelCall, config: LaunchConfig, kernel: CompiledKernel) -> jaxlib_call.KernelSpec:
        """The ``TritonKernel`` message of one compiled configuration (raises ``KernelCallValueError`` for one
        the handler cannot launch)."""
        raise NotImplementedError

    def scalar(self, call: KernelCall, slot: ParamSlot) -> jaxlib_call.ScalarParameter:
        """A by-value parameter; the default passes the types the handler knows and refuses the others."""
        if slot.type_str not in jaxlib_call.SCALAR_TYPES:
            raise KernelCallTypeError(
                f"triton_call {call.name!r}: scalar argument {slot.name!r} has Triton type {slot.type_str}, which "
                f"jaxlib's handler cannot pass; pass one of {jaxlib_call.SCALAR_TYPES} (a Python bool/int/float, "
                "or np.int32/np.int64/np.uint32/np.uint64/np.float32/np.float64)"
            )
        value = slot.value.item() if isinstance(slot.value, np.generic) else slot.value
        return jaxlib_call.ScalarParameter(slot.type_str, value)

    def _launch(
        self, call: KernelCall, config: LaunchConfig, kernel: CompiledKernel, plan: BufferPlan
    ) -> jaxlib_call.KernelLaunch:
        problems = []
        if kernel.global_scratch_size:
            problems.append(f"{kernel.global_scratch_size} bytes of global scratch memory per program")
        if kernel.metadata.get("launch_cooperative_grid") or kernel.metadata.get("launch_pdl"):
            problems.append("a cooperative or programmatic-dependent launch")
        if problems:
            raise KernelCallValueError(
                f"triton_call {call.name!r} config [{config.label}] needs {' and '.join(problems)}, which jaxlib's "
                f"Triton handler cannot provide; use launcher='jt' (or JT_LAUNCHER_{self.platform.upper()}=jt)"
            )
        zeroed = set(config.zeroed_outputs)
        parameters: list[jaxlib_call.Parameter] = []
        pointer = 0
        for slot in call.slots:
            if slot.type_str == "constexpr":
                continue  # specialised into the kernel
            if slot.kind == SCALAR:
                parameters.append(self.scalar(call, slot))
                continue
            out = plan.param_outputs[pointer]
            pointer += 1
            to_zero = nbytes(call.out_avals[out]) if out is not None and out in zeroed else 0
            parameters.append(jaxlib_call.ArrayParameter(to_zero, 16 if slot.divisible_by_16 else 0))
        return jaxlib_call.KernelLaunch(self.kernel_spec(call, config, kernel), config.grid, tuple(parameters))

    def lower(
        self,
        ctx: Any,
        call: KernelCall,
        kernels: Sequence[CompiledKernel],
        operands: Sequence[Any],
        device: Any | None,
    ) -> Sequence[Any]:
        from jax._src.interpreters import mlir
        from jax._src.lib.mlir import ir

        refuse_profile_scratch(call, kernels, self.name)
        plan = BufferPlan.make(call)
        launches = [self._launch(call, config, kernel, plan) for config, kernel in zip(call.configs, kernels)]
        call_operands, operand_avals = plan.operands(ctx, call, operands)
        restore = []
        if len(launches) > 1:
            restore = [
                jaxlib_call.BufferAlias(operand, len(call_operands) + result, nbytes(operand_avals[operand]))
                for operand, result in plan.aliases
            ]
        opaque = jaxlib_call.encode_call(
            call.name, launches, [config.label for config in call.configs], restore, call.launch.serialized_metadata
        )
        out_avals = [call.out_avals[i] for i in plan.result_order]
        target, api_version = self.custom_call_target()
        op = mlir.custom_call(
            target,
            result_types=[mlir.aval_to_ir_type(ctx.module_context, aval) for aval in out_avals],
            operands=call_operands,
            backend_config={"opaque": ir.StringAttr.get(opaque)} if api_version == 4 else opaque,
            has_side_effect=call.launch.has_side_effect,
            api_version=api_version,
            operand_output_aliases=dict(plan.aliases),
            operand_layouts=[self.row_major(aval) for aval in operand_avals],
            result_layouts=[self.row_major(aval) for aval in out_avals],
        )
        return plan.results(list(op.results))
