"""The attributes of jt's GPU launch handler: what the CUDA and ROCm ``jt`` launchers write into their custom call.

jt-cuda and jt-rocm run the same handler (``csrc/jt_launch_common.h``, built by `jt_core.native` on top of
each runtime's driver), so they describe a call the same way: the code objects, the launch shape of every
configuration, and an index-based parameter layout, so that the order of the kernel's parameters never matters.
The schema is documented at the top of ``csrc/jt_launch_state.h``.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from jt_core import cache, coverage, tuning
from jt_core.call import INPUT, OUTPUT, KernelCall, ParamSlot
from jt_core.errors import KernelCallValueError
from jt_core.plugin.values import CompiledKernel

__all__ = [
    "PARAM_OPERAND",
    "PARAM_RESULT",
    "PARAM_SCALAR",
    "PARAM_TENSOR_MAP",
    "RUNTIME_NAMES",
    "ENTRY_WAIT",
    "DescriptorParam",
    "DescriptorParams",
    "TENSOR_MAP_RECORD_SIZE",
    "ffi_attributes",
    "programmatic_launch",
    "refuse_profile_scratch",
    "scalar_bytes",
    "threads_per_program",
    "tuning_file",
]

#: ``param_kinds`` value of a parameter that takes an operand's buffer.
PARAM_OPERAND = 0
#: ``param_kinds`` value of a parameter that takes a result's buffer (outputs, and inputs aliased to one).
PARAM_RESULT = 1
#: ``param_kinds`` value of a by-value parameter, read from the packed ``scalars``.
PARAM_SCALAR = 2
#: ``param_kinds`` value of a tensor map the handler encodes at launch (a host-side tensor descriptor); its index
#: is a record of the configuration's ``tensormaps_<c>``.
PARAM_TENSOR_MAP = 3


@dataclasses.dataclass(frozen=True)
class DescriptorParam:
    """One kernel parameter that a host-side tensor descriptor argument becomes.

    Attributes:
        kind: ``"buffer"`` (the descriptor's base address), ``"scalar"`` (a by-value ``type_str`` holding
            ``value``) or ``"tensor_map"`` (a map the handler encodes at launch from the base address).
        type_str: The scalar's Triton type.
        value: The scalar's value.
        records: For a tensor map, one encoding record per configuration; the handler reads it after the
            buffer's kind and index, which are prepended here.
    """

    kind: str
    type_str: str = ""
    value: int = 0
    records: tuple[tuple[int, ...], ...] = ()


class DescriptorParams(Protocol):
    """How a platform passes a host-side tensor descriptor: the kernel parameters it becomes, per slot."""

    def __call__(
        self, slot: ParamSlot, ordinal: int, kernels: Sequence[CompiledKernel]
    ) -> Sequence[DescriptorParam]: ...


# Triton type -> struct format of its by-value kernel parameter (floats are passed in their own width).
_SCALAR_FORMATS = {
    "i1": "<b",
    "i8": "<b",
    "i16": "<h",
    "i32": "<i",
    "i64": "<q",
    "u1": "<B",
    "u8": "<B",
    "u16": "<H",
    "u32": "<I",
    "u64": "<Q",
    "fp32": "<f",
    "fp64": "<d",
}

#: Runtime names for messages, by platform.
RUNTIME_NAMES = {"cuda": "CUDA", "rocm": "ROCm"}

#: Metadata key of a compiled kernel that waits for its prerequisite grids before any memory access (a GPU
#: plugin's compile step puts ``griddepcontrol.wait`` at its entry), so that it may start before they finish.
ENTRY_WAIT = "entry_gdc_wait"

#: int64 fields per tensor map record: buffer kind and index, data type, rank, swizzle, OOB fill, dims[5],
#: byte strides[4], box[5] (innermost dimension first).
TENSOR_MAP_RECORD_SIZE = 20


def scalar_bytes(type_str: str, value: Any, platform: str = "cuda") -> bytes:
    """The bytes a kernel receives for a by-value parameter of Triton type ``type_str``.

    Raises:
        KernelCallValueError: For a type no GPU kernel takes by value.
    """
    plain = value.item() if isinstance(value, np.generic) else value
    if type_str == "fp16":
        return np.asarray(plain, dtype=np.float16).tobytes()
    if type_str == "bf16":
        import ml_dtypes

        return np.asarray(plain, dtype=ml_dtypes.bfloat16).tobytes()
    fmt = _SCALAR_FORMATS.get(type_str)
    if fmt is None:
        runtime = RUNTIME_NAMES.get(platform, platform)
        raise KernelCallValueError(
            f"scalar parameter of Triton type {type_str!r} cannot be passed to a {runtime} kernel"
        )
    return struct.pack(fmt, int(plain) if fmt[-1] not in "fd" else float(plain))


def refuse_profile_scratch(call: KernelCall, kernels: Sequence[CompiledKernel], launcher: str) -> None:
    """Refuses kernels compiled with Triton's instrumentation, whose profile scratch no launcher provides.

    Raises:
        KernelCallValueError: Naming the configuration.
    """
    for config, kernel in zip(call.configs, kernels):
        if int(kernel.metadata.get("profile_scratch_size", 0) or 0) > 0:
            raise KernelCallValueError(
                f"triton_call {call.name!r} config [{config.label}] was compiled with Triton instrumentation "
                f"(profile scratch memory), which launcher {launcher!r} does not provide; compile without "
                "instrumentation_mode"
            )


def programmatic_launch(kernel: CompiledKernel) -> bool:
    """Whether the handler launches ``kernel`` as a programmatic dependent of the previous kernel on the stream:
    when it asks for it (Triton's ``launch_pdl``, with its own ``gdc_wait``) or waits at entry (`ENTRY_WAIT`)."""
    return bool(kernel.metadata.get("launch_pdl") or kernel.metadata.get(ENTRY_WAIT))


def threads_per_program(kernel: CompiledKernel) -> int:
    """Threads per program: the compiled warp count times the warp size the kernel was compiled for.

    The warp size is Triton's (``metadata["warp_size"]``: 64 on CDNA, 32 on RDNA and NVIDIA), else the target's.
    """
    warp_size = int(kernel.metadata.get("warp_size") or kernel.target.warp_size)
    return kernel.num_warps * warp_size


def tuning_file(call: KernelCall, device: Any | None, platform: str = "cuda") -> str:
    """Where the handler remembers the winner of an autotuned call on this device kind ("" when not autotuned,
    when the device is unknown -- lowering without one -- or when the cache is disabled or has no usable folder)."""
    if len(call.configs) < 2 or device is None or not cache.enabled():
        return ""
    kind = str(getattr(device, "device_kind", "") or "")
    if not kind:
        return ""
    path = tuning.record_path(tuning.tuning_key(call, f"{platform}:{kind}"))
    return "" if path is None else str(path)


def _ir_int(value: int) -> Any:
    from jax._src.lib.mlir import ir

    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(value))


def _ir_ints(values: Sequence[int]) -> Any:
    from jax._src.lib.mlir import ir

    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


def _ir_str(value: str | bytes) -> Any:
    from jax._src.lib.mlir import ir

    return ir.StringAttr.get(value)


def ffi_attributes(
    call: KernelCall,
    kernels: Sequence[CompiledKernel],
    device: Any | None = None,
    platform: str = "cuda",
    descriptor_params: DescriptorParams | None = None,
) -> tuple[dict[str, Any], int]:
    """The custom call's attributes for jt's handler, and the size of the global scratch output (0: none).

    Parameters are described by index, so their order in the kernel's signature never matters: each is an
    operand, a result (outputs, and inputs that share an output's buffer) or a packed scalar. The attributes are
    a pure function of the call and its compiled kernels, so lowering is deterministic.

    Args:
        call: The bound call.
        kernels: One compiled kernel per configuration of ``call``.
        device: The device lowered for (names the tuning record), or ``None``.
        platform: ``"cuda"`` or ``"rocm"``: names the runtime in messages and the tuning record.
        descriptor_params: How the platform passes host-side tensor descriptors; ``None``: it does not.

    Raises:
        KernelCallValueError: For a tensor descriptor argument without ``descriptor_params``.
    """
    aliased_operand_to_out = dict(call.aliases)
    kinds: list[int] = []
    indices: list[int] = []
    scalars = bytearray()
    tensor_maps: list[list[int]] = [[] for _ in kernels]
    descriptors = 0

    def add_scalar(type_str: str, value: Any) -> None:
        kinds.append(PARAM_SCALAR)
        indices.append(len(scalars))
        data = scalar_bytes(type_str, value, platform)
        scalars.extend(data + b"\0" * (8 - len(data)))

    for slot in call.slots:
        if slot.type_str == "constexpr":
            continue  # specialised into the kernel
        if slot.kind == INPUT:
            buffer = (
                (PARAM_RESULT, aliased_operand_to_out[slot.index])
                if slot.index in aliased_operand_to_out
                else (PARAM_OPERAND, slot.index)
            )
            if slot.descriptor is None:
                kinds.append(buffer[0])
                indices.append(buffer[1])
                continue
            if descriptor_params is None:
                raise KernelCallValueError(
                    f"triton_call {call.name!r}: tensor descriptor argument {slot.name!r} cannot be passed to a "
                    f"{RUNTIME_NAMES.get(platform, platform)} kernel by jt's handler"
                )
            for param in descriptor_params(slot, descriptors, kernels):
                if param.kind == "buffer":
                    kinds.append(buffer[0])
                    indices.append(buffer[1])
                elif param.kind == "scalar":
                    add_scalar(param.type_str, param.value)
                else:
                    kinds.append(PARAM_TENSOR_MAP)
                    indices.append(len(tensor_maps[0]) // TENSOR_MAP_RECORD_SIZE)
                    if len(param.records) != len(kernels) or any(
                        len(record) != TENSOR_MAP_RECORD_SIZE - 2 for record in param.records
                    ):
                        raise KernelCallValueError(
                            f"tensor descriptor argument {slot.name!r}: expected one tensor map record of "
                            f"{TENSOR_MAP_RECORD_SIZE - 2} fields per configuration"
                        )
                    for c, record in enumerate(param.records):
                        tensor_maps[c] += [*buffer, *record]
            descriptors += 1
        elif slot.kind == OUTPUT:
            kinds.append(PARAM_RESULT)
            indices.append(slot.index)
        else:
            add_scalar(slot.type_str, slot.value)
    scratch_bytes = 0
    for config, kernel in zip(call.configs, kernels):
        if kernel.global_scratch_size:
            programs = config.grid[0] * config.grid[1] * config.grid[2] * kernel.cluster_dims[0]
            needed = programs * kernel.global_scratch_size + kernel.global_scratch_align
            scratch_bytes = max(scratch_bytes, needed)
    attributes: dict[str, Any] = {
        "name": _ir_str(call.name),
        "param_kinds": _ir_ints(kinds),
        "param_indices": _ir_ints(indices),
        "scalars": _ir_str(bytes(scalars)),
        "num_configs": _ir_int(len(kernels)),
        "restore": _ir_ints(sorted({out for _, out in call.aliases}) if len(kernels) > 1 else []),
        "scratch_result": _ir_int(len(call.out_avals) if scratch_bytes else -1),
    }
    for c, (config, kernel) in enumerate(zip(call.configs, kernels)):
        launch = [
            *config.grid,
            threads_per_program(kernel),
            kernel.shared_mem,
            kernel.cluster_dims[0],
            kernel.global_scratch_size,
            kernel.global_scratch_align,
            int(bool(kernel.metadata.get("launch_cooperative_grid", False))),
            int(programmatic_launch(kernel)),
            int(kernel.metadata.get("profile_scratch_size", 0) or 0),
        ]
        attributes[f"symbol_{c}"] = _ir_str(kernel.name)
        attributes[f"binary_{c}"] = _ir_str(kernel.binary)
        attributes[f"label_{c}"] = _ir_str(config.label)
        attributes[f"launch_{c}"] = _ir_ints(launch)
        attributes[f"zeroed_{c}"] = _ir_ints(config.zeroed_outputs)
        if tensor_maps[c]:
            attributes[f"tensormaps_{c}"] = _ir_ints(tensor_maps[c])
    checked = coverage.checked_outputs(call)
    if checked:
        attributes["coverage"] = _ir_ints(checked)
    if len(kernels) > 1 and tuning.caller_reports_skips():
        attributes["report_skipped"] = _ir_int(0)
    remembered = tuning_file(call, device, platform)
    if remembered:
        attributes["tuning_file"] = _ir_str(remembered)
    if call.launch.serialized_metadata:
        attributes["metadata"] = _ir_str(call.launch.serialized_metadata)
    return attributes, scratch_bytes
