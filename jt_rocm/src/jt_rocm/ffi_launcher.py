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
        return launch_attributes.emit_launch_call(
            ctx,
            call,
            kernels,
            operands,
            handler.HANDLER,
            lambda c, k, device: launch_attributes.ffi_attributes(c, k, device, "rocm"),
        )
