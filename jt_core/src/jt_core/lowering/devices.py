"""The devices a lowering runs on, as JAX passes them to lowering rules."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["computation_devices", "lowering_device"]


def _runs_on(device: Any, platform: str) -> bool:
    """Whether ``device`` is one of the lowering platform's (JAX's CUDA and ROCm devices say ``"gpu"``)."""
    kind = getattr(device, "platform", None)
    return kind == platform or (kind == "gpu" and platform in ("cuda", "rocm"))


def computation_devices(ctx: Any) -> tuple[Any, ...] | None:
    """The devices of the computation being lowered, when JAX passes them and they are the lowering platform's
    (``None`` for export and cross-platform lowering). In a multi-process job they include devices of other
    processes."""
    module_context = ctx.module_context
    if len(module_context.platforms) != 1:
        return None
    axis_context = module_context.axis_context
    devices = getattr(axis_context, "device_assignment", None)
    if not devices:
        try:
            devices = tuple(axis_context.mesh.devices.flat)  # a concrete mesh (shard_map, partition rules)
        except Exception:
            return None
    devices = tuple(devices)
    if not devices or not all(_runs_on(device, module_context.platforms[0]) for device in devices):
        return None
    return devices


def lowering_device(ctx: Any, devices: Sequence[Any] | None = None) -> Any | None:
    """The device a lowering runs on, when known (``None`` for export and cross-platform lowering): the first device
    of the computation that this process drives (in a multi-process job the first one may belong to another)."""
    module_context = ctx.module_context
    if devices is None:
        devices = computation_devices(ctx)
    if devices:
        import jax

        here = jax.process_index()
        return next((d for d in devices if getattr(d, "process_index", here) == here), devices[0])
    try:
        backend = module_context.get_backend() if hasattr(module_context, "get_backend") else module_context.backend
    except Exception:
        return None
    try:
        local = backend.local_devices() if backend is not None else []
    except Exception:
        return None
    platform = module_context.platforms[0] if module_context.platforms else None
    if local and platform and _runs_on(local[0], platform):
        return local[0]
    return None
