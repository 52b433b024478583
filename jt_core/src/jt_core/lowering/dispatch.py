"""The lowering rule of ``triton_kernel_call``: for each platform, the backend's target, the launcher, the compiles
of the configurations, then the launcher's emission (`jt_core.lowering.fallback`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jax._src import dispatch
from jax._src.interpreters import mlir

from jt_core import _compat, distributed, tuning
from jt_core.call import KernelCall
from jt_core.errors import KernelCallTypeError, KernelCallValueError, KernelCompileError, UnsupportedKernelError
from jt_core.lowering import compiling
from jt_core.lowering.devices import computation_devices, lowering_device
from jt_core.lowering.fallback import lower_with
from jt_core.lowering.tune_ahead import in_scratch_run, tune_ahead
from jt_core.plugin import facade
from jt_core.plugin.roles import CompileRequest
from jt_core.primitive import kernel_side_effect, triton_kernel_call_p

__all__ = ["EXPORT_HINT", "lower_for_platform"]

#: What an export for a GPU platform needs besides the target: said where the export fails first.
EXPORT_HINT = (
    "Exported, the computation then holds the custom calls of jt's launchers, which jax.export refuses unless "
    "disabled_checks names them (jax.export.DisabledSafetyCheck.custom_call(target)): "
    "jt.export(f, platforms=[...])(*args) exports with them named"
)


def lower_for_platform(ctx: Any, *operands: Any, call: KernelCall, platform: str) -> Sequence[Any]:
    """Lowers a call for one platform through its backend and launcher.

    In a ``jax.distributed`` job, a call of a computation spanning several processes runs the configuration the
    first of them chose (`tune_ahead`), and the processes compare how they lower it
    (`agree_on_lowering`).
    """
    devices = computation_devices(ctx)
    job = distributed.job_of(devices)
    try:
        if job is None:
            return _lower(ctx, operands, call, platform, devices, None)
        exchange = distributed.Exchange(job, distributed.call_digest(call), f"triton_call {call.name!r}")
        with exchange.reporting():
            return _lower(ctx, operands, call, platform, devices, exchange)
    except KernelCompileError as exc:
        # The error says where in the kernel, which call and the fix; jt's frames from here down to the compile
        # would only print before it. Triton's error stays its cause.
        raise exc.with_traceback(None) from exc.__cause__


def _lower(
    ctx: Any,
    operands: Sequence[Any],
    call: KernelCall,
    platform: str,
    devices: Sequence[Any] | None,
    exchange: distributed.Exchange | None,
) -> Sequence[Any]:
    backend = facade.backend_for(platform)
    needed = f"lowering triton_call {call.name!r} for platform {platform!r} needs"
    dialect = call.dialect
    refusal = facade.serve(backend, "unsupported_dialect_reason", dialect=dialect, needed=needed)
    if refusal is not None:
        raise UnsupportedKernelError(
            f"triton_call {call.name!r}: {dialect.name} kernels cannot run on the {platform!r} backend: {refusal}"
        )
    device = lowering_device(ctx, devices) if len(ctx.module_context.platforms) == 1 else None
    try:
        target = facade.serve(
            backend,
            "target",
            backend_arguments=call.arguments_for_backend(),
            device=device,
            name=call.name,
            call=call,  # for a backend whose target still takes the call (RETIRED_PARAMETERS)
            needed=needed,
        )
    except (KernelCallTypeError, KernelCallValueError) as exc:
        if not _compat.lowering_for_export(ctx):
            raise
        # The second refusal an export without a device meets is JAX's, of jt's custom calls: say it now.
        raise type(exc)(f"{exc}. {EXPORT_HINT}") from None

    def requests(call: KernelCall) -> list[CompileRequest]:
        return [
            CompileRequest.for_config(
                call,
                config,
                target,
                backend,
                facade.serve(
                    backend,
                    "parse_options",
                    **CompileRequest.option_arguments(call, config, target),
                    call=call,  # for a backend still written with validate_options (RETIRED_ATTRIBUTES)
                    needed=needed,
                ),
            )
            for config in call.configs
        ]

    with compiling.ahead_of_native_builds(platform, device, lambda: requests(call)):
        launcher = facade.launcher_for(platform, call.launch.launcher)
    call, kernels = compiling.compile_usable(call, requests)
    if len(call.configs) > 1 and not in_scratch_run(call):
        named = facade.requested(platform, launcher, call.launch.launcher)
        ahead = facade.ask(launcher, "needs_tuning_ahead", otherwise=False, needed=named, call=call)
        itself = not ahead and facade.ask(launcher, "tunes_ahead", otherwise=False, needed=named, call=call)
        if ahead or itself or exchange is not None:
            tuned = tune_ahead(call, platform, device, launcher, exchange, through_next_launcher=ahead)
            if tuned is not call:
                call = tuned
                kernels = compiling.compile_all(requests(call))  # kept in memory: the chosen one's at once
    if len(call.configs) == 1:
        tuning.note_best_config(call, 0)  # a launcher given more chooses among them: it says which it runs
    return lower_with(ctx, call, kernels, operands, device, platform, launcher, exchange)


def _lowering(ctx: Any, *operands: Any, call: KernelCall) -> Sequence[Any]:
    platforms = list(ctx.module_context.platforms)
    if len(platforms) == 1:
        return lower_for_platform(ctx, *operands, call=call, platform=platforms[0])
    rules = {
        p: (lambda ctx_, *ops, call, _p=p: lower_for_platform(ctx_, *ops, call=call, platform=_p)) for p in platforms
    }
    effects = {kernel_side_effect} if call.launch.has_side_effect else set()
    return mlir.lower_per_platform(ctx, "triton_kernel_call", rules, None, effects, *operands, call=call)


mlir.register_lowering(triton_kernel_call_p, _lowering)
# Lowering needs the computation's devices: the compile target and the tuning records depend on the device kind,
# and in a multi-process job they tell which calls the processes share.
dispatch.prim_requires_devices_during_lowering.add(triton_kernel_call_p)
