"""The ``triton_kernel_call`` primitive: abstract evaluation, effects, lowering dispatch, JVP.

Lowering for platform P asks the registries for P's backend and launcher, compiles every configuration (with the
dialect the call resolved when it was made) through :func:`jt_core.hooks.compile_kernel` and lets the launcher emit
the op; the device lowered for is found once and passed to both. A launcher that lowers one configuration only gets
an autotuned call tuned first; a launcher that cannot express a call hands it to the platform's next launcher, with
the reason reported. So does a plugin's launcher that raises, unless the call names it: it is set aside, and what
it emitted before raising is removed. The batching rule lives in :mod:`jt_core.batching`, which registers it.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax._src import dispatch
from jax._src import effects as effects_lib
from jax._src.core import Primitive  # jax.extend.core's, whose package imports Pallas (about 17 ms)
from jax._src.interpreters import mlir
from jax.interpreters import ad

from jt_core import compiling, distributed, hooks, settings, tuning
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


def lower_for_platform(ctx: Any, *operands: Any, call: KernelCall, platform: str) -> Sequence[Any]:
    """Lowers a call for one platform through its backend and launcher.

    In a ``jax.distributed`` job, a call of a computation spanning several processes runs the configuration the
    first of them chose (:func:`tune_ahead`), and the processes compare how they lower it
    (:func:`agree_on_lowering`).
    """
    devices = computation_devices(ctx)
    job = distributed.job_of(devices)
    if job is None:
        return _lower(ctx, operands, call, platform, devices, None)
    exchange = distributed.Exchange(job, distributed.call_digest(call), f"triton_call {call.name!r}")
    with exchange.reporting():
        return _lower(ctx, operands, call, platform, devices, exchange)


def _lower(
    ctx: Any,
    operands: Sequence[Any],
    call: KernelCall,
    platform: str,
    devices: Sequence[Any] | None,
    exchange: distributed.Exchange | None,
) -> Sequence[Any]:
    backend = hooks.backend_for(platform)
    needed = f"lowering triton_call {call.name!r} for platform {platform!r} needs"
    dialect = call.dialect
    if backend.interprets and not dialect.interpretable:
        raise UnsupportedKernelError(
            f"triton_call {call.name!r}: {dialect.name} kernels cannot run on the {platform!r} backend (Triton's "
            "interpreter cannot execute them); run it on a GPU platform such as 'cuda' (jt-cuda) or 'rocm' (jt-rocm)"
        )
    device = lowering_device(ctx, devices) if len(ctx.module_context.platforms) == 1 else None
    target = hooks.serve(backend, "target", call, device, needed=needed)

    def requests(call: KernelCall) -> list[CompileRequest]:
        for config in call.configs:
            hooks.serve(backend, "validate_options", config.options, call, target, needed=needed)
        return [CompileRequest.for_config(call, config, target, backend) for config in call.configs]

    with compiling.ahead_of_native_builds(platform, device, lambda: requests(call)):
        launcher = hooks.launcher_for(platform, call.launcher)
    if len(call.configs) > 1 and (launcher.single_config or exchange is not None):
        call = tune_ahead(call, platform, device, launcher, exchange)
    kernels = compiling.compile_all(requests(call))
    return lower_with(ctx, call, kernels, operands, device, platform, launcher, exchange)


def lower_with(
    ctx: Any,
    call: KernelCall,
    kernels: Sequence[CompiledKernel],
    operands: Sequence[Any],
    device: Any | None,
    platform: str,
    launcher: Launcher,
    exchange: distributed.Exchange | None = None,
) -> Sequence[Any]:
    """Emits the call with ``launcher``, or with the platform's next launchers, in priority order, while one cannot
    express it (``fallback_reason``) or raises (a plugin's launcher that the call does not name: it is set aside,
    and the operations it emitted before raising are removed).

    In a ``jax.distributed`` job the processes agree on the launcher before it emits the call (``exchange``); a
    launcher that then raises fails the call instead of handing it on, which would make this process differ.

    Raises:
        UnsupportedKernelError: When no launcher of the platform can express the call.
        PluginFaultError: When the launcher the call names raises.
    """
    refused: dict[str, str] = {}
    while True:
        needed = hooks.requested(platform, launcher, call.launcher)
        reason = hooks.serve(launcher, "fallback_reason", call, kernels, device, needed=needed)
        if reason is None:
            if exchange is not None:
                agree_on_lowering(exchange, call, platform, launcher, refused)
                needed = needed or "the agreement between the processes of this jax.distributed job names"
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


def tune_ahead(
    call: KernelCall,
    platform: str,
    device: Any | None,
    launcher: Launcher,
    exchange: distributed.Exchange | None = None,
) -> KernelCall:
    """The call with its one configuration, chosen before lowering, for a launcher that lowers one or for a call of
    a computation that several processes share (``exchange``).

    The choice is the remembered winner for this device kind, else the winner of trials run now on scratch buffers
    through the launcher (or, for one that lowers a single configuration, the platform's next launcher). In a job,
    the first process sharing the computation chooses and every process runs its choice
    (:func:`jt_core.tuning.agreed_config`). Returns ``call``
    unchanged when no winner can be had outside a job (no device, tuning records disabled): the launcher then says
    why it cannot express the call.
    """
    if exchange is not None:
        index: int | None = tuning.agreed_config(
            exchange, call, lambda: _local_winner(call, platform, device, launcher)
        )
    else:
        index = _local_winner(call, platform, device, launcher)
    if index is None:
        return call
    return dataclasses.replace(call, configs=(call.configs[index],))


def _local_winner(call: KernelCall, platform: str, device: Any | None, launcher: Launcher) -> int | None:
    kind = str(getattr(device, "device_kind", "") or "") if device is not None else ""
    if not kind:
        return None
    key = tuning.tuning_key(call, f"{platform}:{kind}")
    index = tuning.load_choice(key, len(call.configs))
    if index is None:
        tuner = hooks.next_launcher(platform, launcher) if launcher.single_config else launcher
        report(call, f"tuning {len(call.configs)} configurations with launcher {tuner.name!r} before lowering")
        tuning.take_recent_choice(call)  # an earlier choice, on another device say, is not this run's
        _run_on_scratch(dataclasses.replace(call, launcher=tuner.name), device)
        index = tuning.take_recent_choice(call)
        if index is None:
            index = tuning.load_choice(key, len(call.configs))
    return index


def agree_on_lowering(
    exchange: distributed.Exchange,
    call: KernelCall,
    platform: str,
    launcher: Launcher,
    refused: dict[str, str] | None = None,
) -> None:
    """Compares how the processes of a job lower a call: the launcher and the configurations.

    The record says, too, why this process passed over the launchers ahead of its own (unavailable here, such as
    one whose native library cannot be built without a C++ compiler, or unable to express the call), so that a
    difference names its cause.

    Raises:
        ProcessAgreementError: When another process lowers it with another launcher or configuration.
    """
    passed_over: dict[str, str] = {}
    if call.launcher is None and platform not in settings.launcher_overrides():  # chosen by priority
        for other in hooks.launchers_for(platform):
            if other is launcher or other.name in (refused or {}):
                break
            reason = hooks.unavailable_reason(other)  # a plugin's that raises is set aside, as in selection
            if reason is not None:
                passed_over[other.name] = f"unavailable here: {reason}"
    passed_over.update({name: f"cannot express the call: {why}" for name, why in (refused or {}).items()})
    record = {
        "launcher": launcher.name,
        "configs": [config.label for config in call.configs],
        "passed_over": passed_over,
    }

    def describe(theirs: Any) -> str:
        text = f"launcher {theirs.get('launcher')!r}"
        for name, why in dict(theirs.get("passed_over") or {}).items():
            text += f" (not {name!r}: {why})"
        return text + f", configs {theirs.get('configs')}"

    exchange.compare(
        "lowering",
        record,
        ("launcher", "configs"),
        describe,
        hint=(
            "A launcher that builds a native library needs it on every host: run `python -m jt_core build-native` "
            "on each host before the job starts (with JT_CACHE_DIR on a shared disk, once), with a C++ compiler "
            f"there; or name one launcher for every process (launcher= or JT_LAUNCHER_{platform.upper()}=...)"
        ),
    )


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
# Lowering needs the computation's devices: the compile target and the tuning records depend on the device kind,
# and in a multi-process job they tell which calls the processes share.
dispatch.prim_requires_devices_during_lowering.add(triton_kernel_call_p)


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
