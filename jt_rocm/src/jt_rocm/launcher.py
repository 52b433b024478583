"""Launching on ROCm through jaxlib's Triton handler (``triton_kernel_call_ffi``).

jaxlib's ROCm plugin registers the handler; it reads a ``TritonAnyKernelCall`` description from the ``opaque``
attribute, loads the HSACO named there, and launches with ``num_warps * 64`` threads per program, taking one XLA
buffer (operands, then results) for each array parameter, in parameter order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jt_core.backend import CompiledKernel, Launcher
from jt_core.binding import INPUT, OUTPUT, SCALAR, KernelCall, LaunchConfig
from jt_core.errors import KernelCallTypeError, KernelCallValueError
from jt_rocm import hsaco_store
from jt_rocm import kernel_call_proto as proto

#: The custom-call target jaxlib registers for ROCm.
CUSTOM_CALL_TARGET = "triton_kernel_call_ffi"
#: Threads per warp jaxlib's ROCm handler assumes when it turns ``num_warps`` into a block size.
JAXLIB_THREADS_PER_WARP = 64


def _nbytes(aval: Any) -> int:
    return int(np.prod(aval.shape, dtype=np.int64)) * np.dtype(aval.dtype).itemsize


def _buffer_plan(call: KernelCall) -> tuple[bool, list[int]]:
    """Whether operands-then-results already line up with the array parameters, and the slots' buffer indices."""
    n_ops = len(call.operand_avals)
    wanted = []
    for slot in call.slots:
        if slot.kind == INPUT:
            wanted.append(slot.index)
        elif slot.kind == OUTPUT:
            wanted.append(n_ops + slot.index)
    return wanted == list(range(len(wanted))), wanted


class JaxlibRocmLauncher(Launcher):
    """Lowers a call to jaxlib's ``triton_kernel_call_ffi`` custom call on ROCm.

    The HSACO travels as a path: jaxlib's ROCm handler only loads modules from files. The file is content
    addressed (see :mod:`jt_rocm.hsaco_store`), so the lowering is deterministic, and it is written on the machine
    that lowers: an executable exported elsewhere needs the same file there.
    """

    platform = "rocm"
    name = "jaxlib"
    priority = 10

    def lower(
        self, ctx: Any, call: KernelCall, kernels: Sequence[CompiledKernel], operands: Sequence[Any]
    ) -> Sequence[Any]:
        from jax._src.interpreters import mlir

        natural, _ = _buffer_plan(call)
        aliased = dict(call.aliases)  # operand -> output
        out_alias_src = {out: op for op, out in call.aliases}
        if natural:
            call_operands = list(operands)
            operand_output_aliases = dict(aliased)
            restore = [
                proto.BufferAlias(op, len(operands) + out, _nbytes(call.operand_avals[op])) for op, out in call.aliases
            ]
        else:
            call_operands, operand_output_aliases, restore = self._reordered(ctx, call, operands, out_alias_src)

        launches = [self._launch(call, config, kernel, out_alias_src) for config, kernel in zip(call.configs, kernels)]
        opaque = proto.encode_call(
            name=call.name,
            launches=launches,
            descriptions=[config.label for config in call.configs],
            aliases=restore,
            metadata=call.serialized_metadata,
            autotune_name=f"{call.name} ({kernels[0].name})",
        )
        result_types = [mlir.aval_to_ir_type(ctx.module_context, aval) for aval in call.out_avals]
        op = mlir.custom_call(
            CUSTOM_CALL_TARGET,
            result_types=result_types,
            operands=call_operands,
            backend_config={"opaque": mlir.ir.StringAttr.get(opaque)},
            has_side_effect=call.has_side_effect,
            api_version=4,
            operand_output_aliases=operand_output_aliases or None,
        )
        return list(op.results)

    def _reordered(
        self, ctx: Any, call: KernelCall, operands: Sequence[Any], out_alias_src: dict[int, int]
    ) -> tuple[list[Any], dict[int, int], list[proto.BufferAlias]]:
        """Operands in parameter order, each output written through an operand it aliases.

        Used when an output parameter comes before an input one (or an aliased output without a parameter sits
        between two that have one): jaxlib hands out buffers strictly in order, operands first.
        """
        from jax._src.interpreters import mlir

        call_operands: list[Any] = []
        position_of_operand: dict[int, int] = {}
        position_of_output: dict[int, int] = {}
        for slot in call.slots:
            if slot.kind == INPUT:
                position_of_operand[slot.index] = len(call_operands)
                call_operands.append(operands[slot.index])
            elif slot.kind == OUTPUT:
                if slot.index in out_alias_src:
                    raise KernelCallValueError(
                        f"triton_call {call.name!r}: output {slot.index} is aliased to an input and has its own "
                        f"pointer parameter {slot.name!r} placed before an input parameter; jaxlib's ROCm handler "
                        "passes buffers strictly in parameter order, so declare the kernel's input parameters "
                        "before its output parameters"
                    )
                position_of_output[slot.index] = len(call_operands)
                call_operands.append(mlir.full_like_aval(ctx, 0, call.out_avals[slot.index]))
        aliases: dict[int, int] = {}
        restore = []
        n_call_operands = len(call_operands)
        for out in range(len(call.out_avals)):
            if out in out_alias_src:
                position = position_of_operand[out_alias_src[out]]
                restore.append(proto.BufferAlias(position, n_call_operands + out, _nbytes(call.out_avals[out])))
            else:
                position = position_of_output[out]
            aliases[position] = out
        return call_operands, aliases, restore

    def _launch(
        self, call: KernelCall, config: LaunchConfig, kernel: CompiledKernel, out_alias_src: dict[int, int]
    ) -> proto.KernelLaunch:
        threads = kernel.num_warps * kernel.target.warp_size
        if threads % JAXLIB_THREADS_PER_WARP:
            raise KernelCallValueError(
                f"triton_call {call.name!r}: compiled for {kernel.target.arch} with {kernel.num_warps} warps of "
                f"{kernel.target.warp_size} threads ({threads} threads), but jaxlib's ROCm handler launches "
                f"multiples of {JAXLIB_THREADS_PER_WARP} threads; use an even num_warps"
            )
        if kernel.global_scratch_size:
            raise KernelCallValueError(
                f"triton_call {call.name!r}: kernel {kernel.name!r} needs {kernel.global_scratch_size} bytes of "
                "global scratch memory per program (device-side tensor descriptors), which jaxlib's ROCm handler "
                "does not allocate"
            )
        zeroed = set(config.zeroed_outputs)
        zeroed_operands = {out_alias_src[o] for o in zeroed if o in out_alias_src}
        parameters: list[proto.Parameter] = []
        for slot in call.slots:
            if slot.kind == SCALAR:
                if slot.type_str == "constexpr":
                    continue  # specialised away: not a kernel argument
                if slot.type_str not in proto.SUPPORTED_SCALAR_TYPES:
                    raise KernelCallTypeError(
                        f"triton_call {call.name!r}: scalar argument {slot.name!r} has Triton type {slot.type_str}, "
                        f"which jaxlib's handler cannot pass; pass one of {proto.SUPPORTED_SCALAR_TYPES} (a Python "
                        "bool/int/float, or np.int32/np.int64/np.uint32/np.uint64/np.float32/np.float64)"
                    )
                value = slot.value.item() if isinstance(slot.value, np.generic) else slot.value
                parameters.append(proto.ScalarParameter(slot.type_str, value))
                continue
            if slot.kind == OUTPUT:
                size = _nbytes(call.out_avals[slot.index]) if slot.index in zeroed else 0
            else:
                size = _nbytes(call.operand_avals[slot.index]) if slot.index in zeroed_operands else 0
            parameters.append(proto.ArrayParameter(size, 16 if slot.divisible_by_16 else 0))
        path = hsaco_store.store_hsaco(kernel.name, kernel.binary)
        spec = proto.KernelSpec(
            name=kernel.name,
            num_warps=threads // JAXLIB_THREADS_PER_WARP,
            shared_mem_bytes=kernel.shared_mem,
            module=str(path),
        )
        return proto.KernelLaunch(spec, config.grid, tuple(parameters))
