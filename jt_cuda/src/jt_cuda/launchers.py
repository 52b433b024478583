"""The CUDA launchers: jt's own XLA FFI handler (``"jt"``) and jaxlib's Triton kernel-call handler (``"jaxlib"``).

Both emit one ``stablehlo.custom_call`` per ``triton_call``; they differ in what runs it:

* ``"jt"`` (priority 20): :mod:`jt_cuda.handler`, a typed-FFI handler registered as command-buffer compatible, so
  XLA captures chains of launches into CUDA graphs. It takes the cubin, the launch shape and an index-based
  parameter layout as attributes, zeroes ``zeroed_outputs`` on the stream, gets global scratch from XLA as an extra
  output, launches clusters with ``cuLaunchKernelEx``, encodes the TMA descriptors of host-side tensor descriptors
  at launch (:mod:`jt_cuda.tensormaps`) and autotunes on the real buffers in its initialize stage.
* ``"jaxlib"`` (priority 10): the handler that ships with jaxlib's CUDA plugin (where the installed jaxlib has
  it). It takes PTX, assembles it itself, and autotunes with aliased inputs restored. It cannot pass host-side
  tensor descriptors, so calls with one are refused with a pointer to ``"jt"``.

Selection follows the plugin contract: ``launcher=`` on the call, else ``JT_LAUNCHER_CUDA``, else priority.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from jt_core import launch_attributes
from jt_core.backend import CompiledKernel, Launcher
from jt_core.binding import INPUT, OUTPUT, SCALAR, KernelCall, ParamSlot
from jt_core.errors import KernelCallValueError
from jt_cuda import _compat, _jaxlib_proto

PARAM_OPERAND = launch_attributes.PARAM_OPERAND
PARAM_RESULT = launch_attributes.PARAM_RESULT
PARAM_SCALAR = launch_attributes.PARAM_SCALAR


def scalar_bytes(type_str: str, value: Any) -> bytes:
    """The bytes a kernel receives for a by-value parameter of Triton type ``type_str``."""
    return launch_attributes.scalar_bytes(type_str, value, "cuda")


def _row_major(aval: Any) -> list[int]:
    return list(range(len(aval.shape) - 1, -1, -1))


@functools.cache
def _cuda_devices_present() -> bool:
    import jax

    try:
        return bool(jax.devices("cuda"))
    except RuntimeError:
        return False


def _nbytes(aval: Any) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


def _ir_str(value: str | bytes) -> Any:
    from jax._src.lib.mlir import ir

    return ir.StringAttr.get(value)


_refuse_profile_scratch = launch_attributes.refuse_profile_scratch


class JtFfiLauncher(Launcher):
    """Launches through jt's own XLA FFI handler (a command-buffer compatible custom call)."""

    platform = "cuda"
    name = "jt"
    priority = 20
    supports_tensor_descriptors = True

    def unavailable_reason(self) -> str | None:
        if not _cuda_devices_present():
            return None  # lowering only (export, cross-lowering): the handler is needed where the module runs
        try:
            from jt_cuda import handler

            handler.register()
        except Exception as exc:
            return f"jt's CUDA FFI handler could not be built or registered: {type(exc).__name__}: {exc}"
        return None

    def lower(
        self, ctx: Any, call: KernelCall, kernels: Sequence[CompiledKernel], operands: Sequence[Any]
    ) -> Sequence[Any]:

        from jt_cuda import handler

        _refuse_profile_scratch(call, kernels, self.name)
        if _cuda_devices_present():
            handler.register()
        return launch_attributes.emit_launch_call(ctx, call, kernels, operands, handler.HANDLER, ffi_attributes)


def tuning_file(call: KernelCall, device: Any | None) -> str:
    """Where the handler remembers the winner of an autotuned call on this device kind ("" when not autotuned,
    when the device is unknown -- lowering without one -- or when the cache is disabled)."""
    return launch_attributes.tuning_file(call, device, "cuda")


def ffi_attributes(
    call: KernelCall, kernels: Sequence[CompiledKernel], device: Any | None = None
) -> tuple[dict[str, Any], int]:
    """The custom call's attributes for jt's handler, and the size of the global scratch output (0: none).

    The schema is shared with jt-rocm (:func:`jt_core.launch_attributes.ffi_attributes`).
    """
    from jt_cuda.tensormaps import descriptor_params

    return launch_attributes.ffi_attributes(call, kernels, device, "cuda", descriptor_params)


# -- jaxlib's handler ----------------------------------------------------------------------------------------


def _jaxlib_scalar(slot: ParamSlot) -> _jaxlib_proto.ScalarParameter:
    """A by-value parameter in one of the kinds jaxlib's handler knows.

    Narrower types travel in a 32-bit slot: the driver copies only the kernel parameter's own width, and the
    low-order bytes of a little-endian 32-bit value are the narrow value (integers) or its bit pattern (fp16/bf16).
    """
    type_str = slot.type_str
    value = slot.value.item() if isinstance(slot.value, np.generic) else slot.value
    if type_str == "i1":
        return _jaxlib_proto.ScalarParameter("bool", bool(value))
    if type_str in ("i8", "i16", "i32"):
        return _jaxlib_proto.ScalarParameter("i32", int(value))
    if type_str in ("u1", "u8", "u16", "u32"):
        return _jaxlib_proto.ScalarParameter("u32", int(value))
    if type_str == "i64":
        return _jaxlib_proto.ScalarParameter("i64", int(value))
    if type_str == "u64":
        return _jaxlib_proto.ScalarParameter("u64", int(value))
    if type_str == "fp32":
        return _jaxlib_proto.ScalarParameter("f32", float(value))
    if type_str == "fp64":
        return _jaxlib_proto.ScalarParameter("f64", float(value))
    if type_str in ("fp16", "bf16"):
        bits = int.from_bytes(scalar_bytes(type_str, value), "little")
        return _jaxlib_proto.ScalarParameter("u32", bits)
    raise KernelCallValueError(f"scalar argument {slot.name!r} of type {type_str} cannot be passed by jaxlib's handler")


class JaxlibLauncher(Launcher):
    """Launches through the Triton kernel-call handler of jaxlib's CUDA plugin."""

    platform = "cuda"
    name = "jaxlib"
    priority = 10

    def unavailable_reason(self) -> str | None:
        if _compat.jaxlib_triton_module() is None:
            return (
                "the installed jaxlib has no CUDA Triton kernel-call handler (jax._src.lib.gpu_triton lacks "
                "TritonKernelCall: a CPU-only jaxlib); install jax[cuda12] or jax[cuda13], or use launcher='jt'"
            )
        return None

    def lower(
        self, ctx: Any, call: KernelCall, kernels: Sequence[CompiledKernel], operands: Sequence[Any]
    ) -> Sequence[Any]:
        from jax._src.interpreters import mlir

        _refuse_profile_scratch(call, kernels, self.name)
        for config, kernel in zip(call.configs, kernels):
            problems = []
            if kernel.global_scratch_size:
                problems.append(f"{kernel.global_scratch_size} bytes of global scratch memory per program")
            if kernel.metadata.get("launch_cooperative_grid") or kernel.metadata.get("launch_pdl"):
                problems.append("a cooperative or programmatic-dependent launch")
            if problems:
                raise KernelCallValueError(
                    f"triton_call {call.name!r} config [{config.label}] needs {' and '.join(problems)}, which "
                    "jaxlib's Triton handler cannot provide; use launcher='jt' (or JT_LAUNCHER_CUDA=jt)"
                )
        plan = _BufferPlan.make(call)
        call_operands = [
            operands[source] if kind == "operand" else mlir.full_like_aval(ctx, 0, call.out_avals[source])
            for kind, source in plan.operand_sources
        ]
        operand_avals = [
            call.operand_avals[source] if kind == "operand" else call.out_avals[source]
            for kind, source in plan.operand_sources
        ]
        specs = []
        for config, kernel in zip(call.configs, kernels):
            specs.append(self._kernel_call(call, config.zeroed_outputs, config.grid, kernel, plan))
        proto_call: _jaxlib_proto.KernelCallSpec | _jaxlib_proto.AutotunedCallSpec
        if len(specs) == 1:
            proto_call = specs[0]
        else:
            num_operands = len(call_operands)
            restore = tuple(
                (operand, num_operands + result, _nbytes(call.out_avals[plan.result_order[result]]))
                for operand, result in sorted(plan.aliases.items())
            )
            proto_call = _jaxlib_proto.AutotunedCallSpec(
                name=call.name,
                configs=tuple((spec, config.label) for spec, config in zip(specs, call.configs)),
                input_output_aliases=restore,
            )
        opaque = zlib.compress(_jaxlib_proto.any_kernel_call(proto_call, call.name, call.serialized_metadata))
        out_avals = [call.out_avals[i] for i in plan.result_order]
        result_types = [mlir.aval_to_ir_type(ctx.module_context, aval) for aval in out_avals]
        common: dict[str, Any] = {
            "result_types": result_types,
            "operands": call_operands,
            "has_side_effect": call.has_side_effect,
            "operand_output_aliases": dict(plan.aliases),
            "operand_layouts": [_row_major(aval) for aval in operand_avals],
            "result_layouts": [_row_major(aval) for aval in out_avals],
        }
        if _compat.jaxlib_has_ffi_triton_handler() or _compat.jaxlib_triton_module() is None:
            op = mlir.custom_call(
                "triton_kernel_call_ffi", backend_config={"opaque": _ir_str(opaque)}, api_version=4, **common
            )
        else:
            op = mlir.custom_call("triton_kernel_call", backend_config=opaque, api_version=2, **common)
        results = list(op.results)
        ordered: list[Any] = [None] * len(results)
        for position, out_index in enumerate(plan.result_order):
            ordered[out_index] = results[position]
        return ordered

    @staticmethod
    def _kernel_call(
        call: KernelCall,
        zeroed: Sequence[int],
        grid: tuple[int, int, int],
        kernel: CompiledKernel,
        plan: _BufferPlan,
    ) -> _jaxlib_proto.KernelCallSpec:
        parameters: list[_jaxlib_proto.Parameter] = []
        pointer = 0
        for slot in call.slots:
            if slot.type_str == "constexpr":
                continue
            if slot.kind == SCALAR:
                parameters.append(_jaxlib_scalar(slot))
                continue
            out = plan.param_outputs[pointer]
            pointer += 1
            to_zero = _nbytes(call.out_avals[out]) if out is not None and out in zeroed else 0
            parameters.append(_jaxlib_proto.ArrayParameter(bytes_to_zero=to_zero, ptr_divisibility=16))
        spec = _jaxlib_proto.KernelSpec(
            name=kernel.name,
            num_warps=kernel.num_warps,
            num_ctas=kernel.cluster_dims[0],
            shared_mem_bytes=kernel.shared_mem,
            ptx=str(kernel.asm["ptx"]),
            compute_capability=int(kernel.target.arch),
        )
        return _jaxlib_proto.KernelCallSpec(kernel=spec, grid=grid, parameters=tuple(parameters))


class _BufferPlan:
    """How a call's buffers are ordered for jaxlib's handler, which hands the i-th buffer to the i-th pointer.

    XLA passes a custom call's buffers as its operands followed by its results, so the kernel's pointer parameters
    must name operands first, then results, in that order. When the kernel's signature has an output pointer
    before an input pointer, every pointer parameter becomes an operand in signature order instead: an output's
    parameter gets a zero-filled operand (or the aliased input) aliased to the output's result.

    Attributes:
        operand_sources: Per custom-call operand: ``("operand", operand index)`` or ``("output", output index)``.
        result_order: Output indices in custom-call result order.
        aliases: Custom-call operand position -> custom-call result position.
        param_outputs: Per pointer parameter (signature order): the output whose buffer it writes, or ``None``.
    """

    def __init__(
        self,
        operand_sources: list[tuple[str, int]],
        result_order: list[int],
        aliases: dict[int, int],
        param_outputs: list[int | None],
    ) -> None:
        self.operand_sources = operand_sources
        self.result_order = result_order
        self.aliases = aliases
        self.param_outputs = param_outputs

    @classmethod
    def make(cls, call: KernelCall) -> _BufferPlan:
        pointer_slots = [s for s in call.slots if s.kind in (INPUT, OUTPUT)]
        operand_to_out = dict(call.aliases)
        out_to_operand = {out: operand for operand, out in call.aliases}
        first_output = next((i for i, s in enumerate(pointer_slots) if s.kind == OUTPUT), len(pointer_slots))
        operand_sources: list[tuple[str, int]] = []
        aliases: dict[int, int] = {}
        param_outputs: list[int | None] = []
        if all(s.kind == OUTPUT for s in pointer_slots[first_output:]):
            result_order = [s.index for s in pointer_slots if s.kind == OUTPUT]
            seen = set(result_order)
            result_order += [o for o in range(len(call.out_avals)) if o not in seen]
            result_position = {out: position for position, out in enumerate(result_order)}
            for slot in pointer_slots:
                if slot.kind == INPUT:
                    out = operand_to_out.get(slot.index)
                    if out is not None:
                        aliases[len(operand_sources)] = result_position[out]
                    operand_sources.append(("operand", slot.index))
                    param_outputs.append(out)
                else:
                    param_outputs.append(slot.index)
            return cls(operand_sources, result_order, aliases, param_outputs)
        result_order = list(range(len(call.out_avals)))
        outputs_with_param = {s.index for s in pointer_slots if s.kind == OUTPUT}
        for slot in pointer_slots:
            position = len(operand_sources)
            if slot.kind == INPUT:
                operand_sources.append(("operand", slot.index))
                out = operand_to_out.get(slot.index)
                if out is not None and out not in outputs_with_param:
                    aliases[position] = out
                    param_outputs.append(out)
                else:
                    param_outputs.append(None)
            else:
                source = out_to_operand.get(slot.index)
                operand_sources.append(("operand", source) if source is not None else ("output", slot.index))
                aliases[position] = slot.index
                param_outputs.append(slot.index)
        return cls(operand_sources, result_order, aliases, param_outputs)
