"""Every difference between supported Triton, JAX and jaxlib versions that jt-cuda depends on, named once."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any


def gpu_target(arch: int) -> Any:
    """Triton's ``GPUTarget`` for a CUDA compute capability (e.g. ``90``)."""
    from triton.backends.compiler import GPUTarget

    return GPUTarget("cuda", arch, 32)


@functools.cache
def cuda_option_names() -> frozenset[str]:
    """The option names Triton's CUDA backend accepts (fields of ``CUDAOptions``; they differ by release)."""
    from triton.backends.nvidia.compiler import CUDAOptions

    return frozenset(CUDAOptions.__dataclass_fields__)


def metadata_dict(metadata: Any) -> dict[str, Any]:
    """Triton's compiled-kernel metadata (a namedtuple in 3.6-3.9, or a mapping) as a plain dict."""
    if isinstance(metadata, Mapping):
        return dict(metadata)
    if hasattr(metadata, "_asdict"):
        return dict(metadata._asdict())
    return dict(vars(metadata))


def cluster_dims(metadata: dict[str, Any]) -> tuple[int, int, int]:
    """The cluster shape: older Triton records ``cluster_dims``; 3.6+ only ``num_ctas`` (a 1-D cluster)."""
    dims = metadata.get("cluster_dims")
    if dims:
        x, y, z = (int(d) for d in dims)
        return (x, y, z)
    return (int(metadata.get("num_ctas", 1) or 1), 1, 1)


def jaxlib_triton_module() -> Any | None:
    """jaxlib's CUDA Triton kernel-call module, or ``None`` when this jaxlib has none (CPU-only jaxlib).

    ``jax._src.lib.gpu_triton`` imports on every jaxlib; only a CUDA plugin gives it the kernel-call API.
    """
    try:
        from jax._src.lib import gpu_triton
    except Exception:
        return None
    if not hasattr(gpu_triton, "TritonKernelCall"):
        return None
    return gpu_triton


def jaxlib_has_ffi_triton_handler() -> bool:
    """Whether jaxlib registers the typed-FFI ``triton_kernel_call_ffi`` target, besides the legacy one."""
    module = jaxlib_triton_module()
    if module is None:
        return False
    plugin = getattr(module, "_cuda_triton", None)
    registrations = getattr(plugin, "registrations", None)
    if registrations is None:
        return False
    try:
        return "triton_kernel_call_ffi" in registrations()
    except Exception:
        return False


def device_compute_capability(device: Any) -> str | None:
    """A JAX device's compute capability string (``"9.0"``), or ``None`` if it has none (not a CUDA device)."""
    value = getattr(device, "compute_capability", None)
    return str(value) if value else None


@functools.cache
def decomposed_descriptor_flags() -> int:
    """How many ``i1`` flags follow a host descriptor's shape and strides when it is passed decomposed (no TMA).

    Triton 3.6 passes the padding flag; 3.9 adds ``round_f32_to_tf32`` (a field of its host ``TensorDescriptor``).
    """
    from triton.tools.tensor_descriptor import TensorDescriptor

    return 2 if "round_f32_to_tf32" in TensorDescriptor.__dataclass_fields__ else 1


def triton_version() -> str:
    """The installed Triton's version string."""
    import triton

    return str(triton.__version__)
