"""Launching on ROCm through jt's own XLA FFI handler (``"jt"``, preferred over jaxlib's handler).

The custom call carries everything the handler needs as attributes, the HSACO code object included as **bytes**
(never a path to a file), so a lowered or exported module is self-contained and deterministic. The handler
(:mod:`jt_rocm.handler`) is the launch handler jt-cuda runs too, on a HIP driver: typed FFI, registered as
command-buffer compatible, with global scratch from an extra XLA output, ``zeroed_outputs`` cleared on the stream,
and autotuning on the real buffers (aliased buffers restored) in its initialize stage. Programs are launched with
``num_warps * warp_size`` threads, the warp size being the one the kernel was compiled for (64 on CDNA, 32 on RDNA).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from jt_core import launch_attributes
from jt_core.backend import CompiledKernel, Launcher
from jt_core.binding import KernelCall
from jt_core.errors import KernelCallValueError


@functools.cache
def _rocm_devices_present() -> bool:
    import jax

    try:
        return bool(jax.devices("rocm"))
    except RuntimeError:
        return False


def _row_major(aval: Any) -> list[int]:
    return list(range(len(aval.shape) - 1, -1, -1))


class RocmFfiLauncher(Launcher):
    """Launches through jt's own XLA FFI handler for ROCm (a command-buffer compatible custom call)."""

    platform = "rocm"
    name = "jt"
    priority = 20

    def unavailable_reason(self) -> str | None:
        if not _rocm_devices_present():
            return None  # lowering only (export, cross-lowering): the handler is needed where the module runs
        try:
            from jt_rocm import handler

            handler.register()
        except Exception as exc:
            return f"jt's ROCm FFI handler could not be built or registered: {type(exc).__name__}: {exc}"
        return None

    def lower(
        self, ctx: Any, call: KernelCall, kernels: Sequence[CompiledKernel], operands: Sequence[Any]
    ) -> Sequence[Any]:
        from jax._src.interpreters import mlir

        from jt_core.primitive import lowering_device
        from jt_rocm import handler

        launch_attributes.refuse_profile_scratch(call, kernels, self.name)
        for config, kernel in zip(call.configs, kernels):
            if kernel.cluster_dims[0] != 1 or kernel.metadata.get("launch_pdl"):
                raise KernelCallValueError(
                    f"triton_call {call.name!r} config [{config.label}] asks for thread-block clusters or a "
                    "programmatic dependent launch, which the ROCm handler does not perform; use num_ctas=1"
                )
        if _rocm_devices_present():
            handler.register()
        attributes, scratch_bytes = launch_attributes.ffi_attributes(call, kernels, lowering_device(ctx), "rocm")
        out_avals = list(call.out_avals)
        result_types = [mlir.aval_to_ir_type(ctx.module_context, aval) for aval in out_avals]
        result_layouts = [_row_major(aval) for aval in out_avals]
        if scratch_bytes:
            import jax.numpy as jnp
            from jax import core

            scratch_aval = core.ShapedArray((scratch_bytes,), jnp.uint8)
            result_types.append(mlir.aval_to_ir_type(ctx.module_context, scratch_aval))
            result_layouts.append([0])
        single = len(kernels) == 1 and handler.preload_enabled()
        op = mlir.custom_call(
            handler.PRELOADED_TARGET_NAME if single else handler.TARGET_NAME,
            result_types=result_types,
            operands=list(operands),
            backend_config=attributes,
            has_side_effect=call.has_side_effect,
            api_version=4,
            operand_output_aliases=dict(call.aliases),
            operand_layouts=[_row_major(aval) for aval in call.operand_avals],
            result_layouts=result_layouts,
        )
        return list(op.results)[: len(out_avals)]
