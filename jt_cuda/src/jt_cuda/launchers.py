"""The CUDA launchers: jt's own launch handler (``"jt"``) and jaxlib's Triton kernel-call handler (``"jaxlib"``).

Both emit one ``stablehlo.custom_call`` per ``triton_call``; they differ in what runs it:

* ``"jt"`` (priority 20): jt's launch handler on the CUDA driver (``csrc/jt_cuda_launch.cc`` over jt-core's shared
  handler), a typed-FFI handler registered as command-buffer compatible, so XLA captures chains of launches into
  CUDA graphs (each call as one kernel node that XLA adds through the handler's record stage, where XLA's FFI has
  one; ``JT_CUDA_RECORD=0`` falls back to XLA capturing the call). It takes the cubin, the launch shape and an
  index-based parameter layout as attributes, zeroes ``zeroed_outputs`` on the stream, gets global scratch from
  XLA as an extra output, launches clusters and programmatic dependents (sm90+ kernels, compiled to wait for their
  prerequisite grids at entry: `jt_cuda.dependent_launch`) with ``cuLaunchKernelEx``, encodes the TMA
  descriptors of host-side tensor descriptors at launch (`jt_cuda.tensormaps`) and autotunes on the real
  buffers in its initialize stage.
* ``"jaxlib"`` (priority 10): the handler that ships with jaxlib's CUDA plugin (where the installed jaxlib has
  it). It takes PTX, assembles it itself, and autotunes with aliased inputs restored. It cannot pass host-side
  tensor descriptors, so calls with one are refused with a pointer to ``"jt"``.
* ``"xla"``: XLA's own Triton custom call, given the kernel's Triton IR (`jt_core.gpu.xla`); XLA compiles it
  with the Triton it bundles and runs it as one of its own kernels. What it cannot express goes to ``"jt"``.

Selection follows the plugin contract: ``launcher=`` on the call, else ``JT_LAUNCHER_CUDA``, else priority.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from jt_core.gpu import (
    DescriptorParams,
    HandlerLauncher,
    JaxlibLauncher,
    LaunchHandlerLibrary,
    XlaTritonLauncher,
    jaxlib_call,
    scalar_bytes,
)
from jt_core.plugin import CompiledKernel, KernelCall, LaunchConfig, ParamSlot
from jt_cuda import _compat
from jt_cuda.tensormaps import descriptor_params

__all__ = ["HANDLER", "CudaJaxlibLauncher", "CudaJtLauncher", "CudaXlaLauncher", "register_handlers"]

#: jt's launch handler on the CUDA driver (symbols ``jt_cuda_launch_*``), and its XLA targets
#: (``triton_kernel_call_jt_cuda``, ``triton_kernel_call_jt_cuda_preloaded``, and with a record stage
#: ``triton_kernel_call_jt_cuda_record``, ``triton_kernel_call_jt_cuda_record_preloaded``).
HANDLER = LaunchHandlerLibrary(
    prefix="jt_cuda_launch",
    source=Path(__file__).parent / "csrc" / "jt_cuda_launch.cc",
    platform="CUDA",
    preload_variable="JT_CUDA_PRELOAD",
    record_variable="JT_CUDA_RECORD",
    target_name="triton_kernel_call_jt_cuda",
)


def register_handlers() -> None:
    """Builds (first time on a machine) and registers jt's CUDA launch handler with XLA.

    Raises:
        jt_core.native.NativeBuildError: When no C++ compiler is available or the build fails.
    """
    HANDLER.register()


class CudaJtLauncher(HandlerLauncher):
    """Launches through jt's own XLA FFI handler on the CUDA driver."""

    platform = "cuda"
    handler = HANDLER

    def descriptor_params(self) -> DescriptorParams:
        return descriptor_params


class CudaJaxlibLauncher(JaxlibLauncher):
    """Launches through the Triton kernel-call handler of jaxlib's CUDA plugin."""

    platform = "cuda"

    def unavailable_reason(self) -> str | None:
        if _compat.jaxlib_triton_module() is None:
            return (
                "the installed jaxlib has no CUDA Triton kernel-call handler (jax._src.lib.gpu_triton lacks "
                "TritonKernelCall: a CPU-only jaxlib); install jax[cuda12] or jax[cuda13], or use launcher='jt'"
            )
        return None

    def custom_call_target(self) -> tuple[str, int]:
        if _compat.jaxlib_has_ffi_triton_handler() or _compat.jaxlib_triton_module() is None:
            return "triton_kernel_call_ffi", 4
        return "triton_kernel_call", 2

    def kernel_spec(self, call: KernelCall, config: LaunchConfig, kernel: CompiledKernel) -> jaxlib_call.KernelSpec:
        return jaxlib_call.KernelSpec(
            name=kernel.name,
            num_warps=kernel.num_warps,
            shared_mem_bytes=kernel.shared_mem,
            module=str(kernel.asm["ptx"]),
            num_ctas=kernel.cluster_dims[0],
            compute_capability=int(kernel.target.arch),
        )

    def scalar(self, call: KernelCall, slot: ParamSlot) -> jaxlib_call.ScalarParameter:
        """Narrower types than the handler knows travel in a 32-bit slot: the driver copies only the parameter's
        own width, and the low-order bytes of a little-endian 32-bit value are the narrow value (integers) or its
        bit pattern (fp16/bf16)."""
        value = slot.value.item() if isinstance(slot.value, np.generic) else slot.value
        if slot.type_str in ("i8", "i16"):
            return jaxlib_call.ScalarParameter("i32", int(value))
        if slot.type_str in ("u1", "u8", "u16"):
            return jaxlib_call.ScalarParameter("u32", int(value))
        if slot.type_str in ("fp16", "bf16"):
            bits = int.from_bytes(scalar_bytes(slot.type_str, value), "little")
            return jaxlib_call.ScalarParameter("u32", bits)
        return super().scalar(call, slot)


class CudaXlaLauncher(XlaTritonLauncher):
    """Hands the kernel's Triton IR to XLA's own Triton custom call on CUDA."""

    platform = "cuda"
