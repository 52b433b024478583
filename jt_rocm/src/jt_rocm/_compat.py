"""Every difference between supported JAX/jaxlib and Triton versions that jt-rocm depends on, named once."""

from __future__ import annotations

from typing import Any


def jaxlib_rocm_triton() -> Any | None:
    """jaxlib's ROCm Triton module (``jax._src.lib.gpu_triton`` backed by the ROCm plugin), or ``None``.

    ``gpu_triton`` imports on every jaxlib, but only a jaxlib with a GPU plugin gives it a kernel-call API; which
    plugin backs it is not recorded, so the caller pairs this with a ROCm device.
    """
    try:
        from jax._src.lib import gpu_triton
    except ImportError:
        return None
    return gpu_triton if hasattr(gpu_triton, "get_arch_details") else None


def device_arch(device: Any) -> str | None:
    """The ``gfx`` architecture name of a JAX ROCm device, when the installed jaxlib tells it.

    PJRT's ROCm devices report the architecture as ``compute_capability`` (``"gfx942"``, possibly with target
    features); older plugins do not, and jaxlib's Triton module answers ``get_arch_details`` instead.
    """
    value = getattr(device, "compute_capability", None)
    if isinstance(value, str) and value.lower().startswith("gfx"):
        return value
    lib = jaxlib_rocm_triton()
    if lib is not None:
        index = getattr(device, "local_hardware_id", None)
        try:
            details = lib.get_arch_details(int(index) if index is not None else 0)
        except Exception:
            return None
        if isinstance(details, bytes):
            details = details.decode()
        if isinstance(details, str) and details.lower().startswith("gfx"):
            return details
    return None


def metadata_dict(metadata: Any) -> dict[str, Any]:
    """Triton's compiled-kernel metadata (a named tuple in 3.6 and 3.9) as a plain dict."""
    if hasattr(metadata, "_asdict"):
        return dict(metadata._asdict())
    return dict(vars(metadata))


#: The intermediate representations Triton keeps in ``CompiledKernel.asm``, by stage, for either language. Triton
#: 3.9 also keeps the kernel's ``source`` and, for Gluon, a ``glir`` stage; 3.6 starts Gluon at ``ttgir``.
IR_STAGES = ("ttir", "glir", "ttgir", "llir", "amdgcn")
