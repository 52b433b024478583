"""The ``triton_kernel_call`` primitive: abstract evaluation, effects, lowering dispatch, JVP.

Lowering for platform P asks the registries for P's backend and launcher, compiles every configuration (with the
dialect the call resolved when it was made) through :func:`jt_core.hooks.compile_kernel` and lets the launcher emit
the op; the device lowered for is found once and passed to both. A launcher that lowers one configuration only gets
an autotuned call tuned first; a launcher that cannot express a call hands it to the platform's next launcher, with
the reason reported. So does a plugin's launcher that raises, unless the call names it: it is set aside, and what
it emitted before raising is removed. The batching rule lives in :mod:`jt_core.batching`, which registers it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax._src import dispatch
from jax._src import effects as effects_lib
from jax._src.core import Primitive  # jax.extend.core's, whose package imports Pallas (about 17 ms)
from jax._src.interpreters import mlir
from jax.interpreters import ad

from jt_core import hooks, settings, tuning
from jt_core.call import KernelCall
from jt_core.contracts import CompiledKernel, CompileRequest, Launcher
from jt_core.errors import KernelCallValueError, UnsupportedKernelError

log = logging.getLogger("jt_core.primitive")

triton_kernel_call_p = Primitive("triton_kernel_call")
triton_kernel_call_p.multiple_results = True


class KernelSideEffect(effects_lib.Effect):
    """The effect of a call made with ``has_side_effect=True``: it is never removed as dead code."""

    def __repr__(self) -> str:
        return "TritonKernelSideEffect"


kernel_side_effect = KernelSideEffect()
for _allowed in (
    effects_lib.lowerable_effects,
    effects_lib.control_flow_allowed_effects,
    effects_lib.custom_derivatives_allowed_effects,
    effects_lib.remat_allowed_effects,
):
    _allowed.add_type(KernelSideEffect)


def _abstract_eval(*avals: Any, call: KernelCall) -> tuple[list[Any], set[Any]]:
    for i, (aval, expected) in enumerate(zip(avals, call.operand_avals)):
        if tuple(aval.shape) != tuple(expected.shape) or aval.dtype != expected.dtype:
            raise TypeError(f"triton_kernel_call operand {i} is {aval.str_short()}, expected {expected.str_short()}")
    effects = {kernel_side_effect} if call.has_side_effect else set()
    return list(call.out_avals), effects


triton_kernel_call_p.def_effectful_abstract_eval(_abstract_eval)


def _impl(*args: Any, call: KernelCall) -> Any:
    return dispatch.apply_primitive(triton_kernel_call_p, *args, call=call)


triton_kernel_call_p.def_impl(_impl)


def lowering_device(ctx: Any) -> Any | None:
    """The device a lowering runs on, when known (``None`` for export and cross-platform lowering)."""
    module_context = ctx.module_context
    axis_context = getattr(module_context, "axis_context", None)
    for holder in (axis_context, getattr(axis_context, "mesh", None)):
        devices = getattr(holder, "device_assignment", None)
        if devices:
            return devices[0]
    try:
        backend = module_context.get_backend() if hasattr(module_context, "get_backend") else module_context.backend
    except Exception:
        return None
    try:
        devices = backend.local_devices() if backend is not None else []
    except Exception:
        return None
    platform = module_context.platforms[0] if module_context.platforms else None
    if devices and platform and getattr(devices[0], "platform", None) in (platform, "gpu"):
        return devices[0]
    return None


def lower_for_platform(ctx: Any, *operands: Any, call: KernelCall, platform: str) -> Sequence[Any]:
    """Lowers a call for one platform through its backend and launcher."""
    backend = hooks.backend_for(platform)
    launcher = hooks.launcher_for(platform, call.launcher)
    needed = f"lowering triton_call {call.name!r} for platform {platform!r} needs"
    dialect = call.dialect
    if backend.interprets and not dialect.interpretable:
        raise UnsupportedKernelError(
            f"triton_call {call.name!r}: {dialect.name} kernels cannot run on the {platform!r} backend (Triton's "
            "interpreter cannot execute them); run it on a GPU platform such as 'cuda' (jt-cuda) or 'rocm' (jt-rocm)"
        )
    device = lowering_device(ctx) if len(ctx.module_context.platforms) == 1 else None
    target = hooks.serve(backend, "target", call, device, needed=needed)
    if launcher.single_config and len(call.configs) > 1:
        call = tune_ahead(call, platform, device, launcher)
    requests = []
    for config in call.configs:
        hooks.serve(backend, "validate_options", config.options, call, target, needed=needed)
        requests.append(CompileRequest.for_config(call, config, target, backend))
    kernels = compile_all(requests)
    return lower_with(ctx, call, kernels, operands, device, platform, launcher)


def lower_with(
    ctx: Any,
    call: KernelCall,
    kernels: Sequence[CompiledKernel],
    operands: Sequence[Any],
    device: Any | None,
    platform: str,
    launcher: Launcher,
) -> Sequence[Any]:
    """Emits the call with ``launcher``, or with the platform's next launchers, in priority order, while one cannot
    express it (``fallback_reason``) or raises (a plugin's launcher that the call does not name: it is set aside,
    and the operations it emitted before raising are removed).

    Raises:
        UnsupportedKernelError: When no launcher of the platform can express the call.
        PluginFaultError: When the launcher the call names raises.
    """
    refused: dict[str, str] = {}
    while True:
        needed = hooks.requested(platform, launcher, call.launcher)
        reason = hooks.serve(launcher, "fallback_reason", call, kernels, device, needed=needed)
        if reason is None:
            _check_tensor_descriptors(call, platform, launcher)
            emitted = _EmittedOperations()
            lowered = hooks.serve(launcher, "lower", ctx, call, kernels, operands, device, needed=needed)
            if lowered is not hooks.SET_ASIDE:
                return lowered
            emitted.remove()
        if reason is None or reason is hooks.SET_ASIDE:
            reason = hooks.aside_reason(launcher)
        refused[launcher.name] = reason
        fallback = hooks.next_launcher(platform, launcher)
        if fallback.name in refused:
            reasons = "; ".join(f"{name!r}: {why}" for name, why in refused.items())
            raise UnsupportedKernelError(
                f"triton_call {call.name!r}: no launcher for platform {platform!r} can express it ({reasons})"
            )
        report(call, f"launcher {launcher.name!r} on {platform} cannot express it ({reason}); using {fallback.name!r}")
        launcher = fallback


class _EmittedOperations:
    """The operations emitted at the current insertion point from now on, so that a launcher that raised halfway
    leaves nothing behind (an op with side effects would run, or fail XLA's compile)."""

    def __init__(self) -> None:
        self.point = mlir.ir.InsertionPoint.current
        self.count = len(self.point.block.operations)

    def remove(self) -> None:
        """Erases the operations emitted since this object was made, last first."""
        operations = [op.operation for op in self.point.block.operations]
        added = len(operations) - self.count
        end = len(operations)
        reference = self.point.ref_operation
        if reference is not None:
            end = next(i for i, op in enumerate(operations) if op == reference.operation)
        for operation in reversed(operations[end - added : end]):
            operation.erase()


def report(call: KernelCall, message: str) -> None:
    """Says something about a call's lowering: on stderr under ``JT_TRACE_PLUGINS`` or for a ``debug=True`` call,
    and to the ``jt_core.primitive`` logger."""
    text = f"jt: triton_call {call.name!r}: {message}"
    log.info(text)
    if settings.flag("JT_TRACE_PLUGINS") or any(config.options.debug for config in call.configs):
        sys.stderr.write(text + "\n")


def tune_ahead(call: KernelCall, platform: str, device: Any | None, launcher: Launcher) -> KernelCall:
    """The call with its one configuration for a launcher that lowers one: the remembered winner for this device
    kind, else the winner of trials run now through the platform's next launcher on scratch buffers (which
    remembers it). Returns ``call`` unchanged when no winner can be had (no device, tuning records disabled): the
    launcher then says why it cannot express the call."""
    kind = str(getattr(device, "device_kind", "") or "") if device is not None else ""
    if not kind:
        return call
    key = tuning.tuning_key(call, f"{platform}:{kind}")
    index = tuning.load_choice(key, len(call.configs))
    if index is None:
        tuner = hooks.next_launcher(platform, launcher)
        report(call, f"tuning {len(call.configs)} configurations with launcher {tuner.name!r} before lowering")
        _run_on_scratch(dataclasses.replace(call, launcher=tuner.name), device)
        index = tuning.load_choice(key, len(call.configs))
        if index is None:
            return call
    return dataclasses.replace(call, configs=(call.configs[index],))


def _run_on_scratch(call: KernelCall, device: Any) -> None:
    import jax

    rng = np.random.default_rng(0)
    operands = []
    for aval in call.operand_avals:
        dtype = np.dtype(aval.dtype)
        if dtype.kind == "f" or "float" in dtype.name:
            values = rng.standard_normal(aval.shape).astype(dtype)
        elif dtype.kind == "b":
            values = rng.integers(0, 2, aval.shape).astype(dtype)
        else:
            values = rng.integers(0, 8, aval.shape).astype(dtype)
        operands.append(jax.device_put(values, device))
    results = jax.jit(lambda *ops: triton_kernel_call_p.bind(*ops, call=call))(*operands)
    jax.block_until_ready(results)


def _check_tensor_descriptors(call: KernelCall, platform: str, launcher: Launcher) -> None:
    """Refuses host-side tensor descriptors on a launcher that cannot pass them, naming those that can."""
    described = [slot.name for slot in call.slots if slot.descriptor is not None]
    if not described or launcher.supports_tensor_descriptors:
        return
    able = [
        other.name
        for other in hooks.launchers_for(platform)
        if other.supports_tensor_descriptors and hooks.unavailable_reason(other) is None
    ]
    hint = (
        f"use launcher={able[0]!r} (or JT_LAUNCHER_{platform.upper()}={able[0]})"
        if able
        else f"no launcher for {platform!r} does; pass the array and build the descriptor in the kernel "
        "(tl.make_tensor_descriptor)"
    )
    raise KernelCallValueError(
        f"triton_call {call.name!r}: argument(s) {described} are host-side tensor descriptors (jt.TensorDescriptor), "
        f"which launcher {launcher.name!r} on platform {platform!r} cannot pass; {hint}"
    )


def compile_workers(count: int) -> int:
    """How many threads compile the configurations of one call (``JT_COMPILE_WORKERS``, default: one per core)."""
    workers = settings.integer("JT_COMPILE_WORKERS", os.cpu_count() or 1)
    return max(1, min(workers, count))


def compile_all(requests: Sequence[CompileRequest]) -> list[CompiledKernel]:
    """Compiles every configuration of a call, in parallel threads when there are several.

    Triton's compiler spends its time in native code that releases the GIL, so threads overlap the
    configurations of an autotuned kernel; results keep the configurations' order.
    """
    workers = compile_workers(len(requests))
    if workers == 1:
        return [hooks.compile_kernel(request) for request in requests]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jt-compile") as pool:
        return list(pool.map(hooks.compile_kernel, requests))


def _lowering(ctx: Any, *operands: Any, call: KernelCall) -> Sequence[Any]:
    platforms = list(ctx.module_context.platforms)
    if len(platforms) == 1:
        return lower_for_platform(ctx, *operands, call=call, platform=platforms[0])
    rules = {
        p: (lambda ctx_, *ops, call, _p=p: lower_for_platform(ctx_, *ops, call=call, platform=_p)) for p in platforms
    }
    effects = {kernel_side_effect} if call.has_side_effect else set()
    return mlir.lower_per_platform(ctx, "triton_kernel_call", rules, None, effects, *operands, call=call)


mlir.register_lowering(triton_kernel_call_p, _lowering)


def _jvp(primals: Any, tangents: Any, *, call: KernelCall) -> Any:
    del primals, tangents
    raise NotImplementedError(
        f"triton_call {call.name!r} cannot be differentiated automatically: JAX cannot see inside a Triton "
        "kernel. Write the backward pass as a second kernel and pair the two with jax.custom_vjp; "
        "jt_core.kernel_vjp(forward, backward) does the pairing (residuals, static arguments, zero cotangents). "
        "See the 'Gradients' page of the documentation (docs/pages/gradients.md). jax.grad and jax.vjp then work "
        "through the pair; forward mode (jax.jvp, jax.jacfwd) needs jax.custom_jvp instead."
    )


ad.primitive_jvps[triton_kernel_call_p] = _jvp
