"""Handing a call to the platform's next launcher while one cannot express it, or raises."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

from jax._src.interpreters import mlir

from jt_core import _compat, distributed
from jt_core.call import KernelCall
from jt_core.errors import KernelCallValueError, UnsupportedKernelError
from jt_core.lowering.agreement import agree_on_lowering
from jt_core.lowering.reporting import report
from jt_core.plugin import facade
from jt_core.plugin.roles import Launcher
from jt_core.plugin.values import CompiledKernel

__all__ = ["lower_with", "recording_custom_calls"]

#: The custom-call targets jt's launchers emitted while `recording_custom_calls` runs, or ``None`` outside it.
_recorded: contextvars.ContextVar[set[str] | None] = contextvars.ContextVar("jt_custom_call_targets", default=None)


@contextlib.contextmanager
def recording_custom_calls() -> Iterator[set[str]]:
    """Collects, in the set it yields, the targets of the custom calls jt's launchers emit for the calls lowered
    in this thread while the block runs (what ``jax.export`` must be told it may carry)."""
    targets: set[str] = set()
    token = _recorded.set(targets)
    try:
        yield targets
    finally:
        _recorded.reset(token)


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

    Lowered for ``jax.export``, a launcher whose operation cannot go into the artifact (``unexportable_reason``)
    fails the export, with why the launchers before it could not express the call.

    Raises:
        UnsupportedKernelError: When no launcher of the platform can express the call, or the one that can cannot
            be exported.
        PluginFaultError: When the launcher the call names raises.
    """
    refused: dict[str, str] = {}
    exporting = _compat.lowering_for_export(ctx)
    while True:
        needed = facade.requested(platform, launcher, call.launch.launcher)
        reason = facade.serve(launcher, "fallback_reason", call=call, kernels=kernels, device=device, needed=needed)
        if reason is None and exporting:
            _refuse_export(call, platform, launcher, refused, needed)
        if reason is None:
            if exchange is not None:
                agree_on_lowering(exchange, call, platform, launcher, refused)
                needed = needed or "the agreement between the processes of this jax.distributed job names"
            _check_tensor_descriptors(call, platform, launcher, needed)
            emitted = _EmittedOperations()
            lowered = facade.serve(
                launcher, "lower", ctx=ctx, call=call, kernels=kernels, operands=operands, device=device, needed=needed
            )
            if lowered is not facade.SET_ASIDE:
                recorded = _recorded.get()
                if recorded is not None:
                    recorded.update(emitted.custom_call_targets())
                return lowered
            emitted.remove()
        if reason is None or reason is facade.SET_ASIDE:
            reason = facade.aside_reason(launcher)
        refused[launcher.name] = reason
        fallback = facade.next_launcher(platform, launcher)
        if fallback.name in refused:
            reasons = "; ".join(f"{name!r}: {why}" for name, why in refused.items())
            raise UnsupportedKernelError(
                f"triton_call {call.name!r}: no launcher for platform {platform!r} can express it ({reasons})"
            )
        report(call, f"launcher {launcher.name!r} on {platform} cannot express it ({reason}); using {fallback.name!r}")
        launcher = fallback


def _refuse_export(
    call: KernelCall, platform: str, launcher: Launcher, refused: dict[str, str], needed: str | None
) -> None:
    """Fails an export whose call ``launcher`` would lower to what an artifact cannot carry (its
    ``unexportable_reason``, or a host callback), saying why and why the launchers before it (``refused``) could not
    express the call: where the kernel's source line is known, their reason names it."""
    why = facade.ask(launcher, "unexportable_reason", otherwise=None, needed=needed, call=call)
    if why is None and facade.ask(launcher, "runs_through_host_callback", otherwise=False, needed=needed, call=call):
        why = "runs it through a JAX host callback, which lives only in the process that lowered it"
    if why is None:
        return
    before = "".join(f"launcher {name!r} cannot express it ({reason}), and " for name, reason in refused.items())
    if refused:
        fix = "change what the first launcher cannot express, or lower the computation in the process that runs it"
    else:
        fix = f"export it without naming launcher {launcher.name!r} (launcher= or JT_LAUNCHER_{platform.upper()})"
    raise UnsupportedKernelError(
        f"triton_call {call.name!r} (kernel {call.signature_text()}) cannot be exported for platform {platform!r}: "
        f"{before}launcher {launcher.name!r} {why}. An artifact of jax.export holds only operations that run "
        f"wherever it is loaded; {fix}"
    )


class _EmittedOperations:
    """The operations emitted at the current insertion point from now on, so that a launcher that raised halfway
    leaves nothing behind (an op with side effects would run, or fail XLA's compile)."""

    def __init__(self) -> None:
        self.point = mlir.ir.InsertionPoint.current
        self.count = len(self.point.block.operations)

    def _added(self) -> list[Any]:
        operations = [op.operation for op in self.point.block.operations]
        added = len(operations) - self.count
        end = len(operations)
        reference = self.point.ref_operation
        if reference is not None:
            end = next(i for i, op in enumerate(operations) if op == reference.operation)
        return operations[end - added : end]

    def custom_call_targets(self) -> set[str]:
        """The targets of the custom calls among the operations emitted since this object was made (and in their
        regions)."""
        targets: set[str] = set()
        pending = self._added()
        while pending:
            operation = pending.pop()
            if operation.name == "stablehlo.custom_call":
                targets.add(mlir.ir.StringAttr(operation.attributes["call_target_name"]).value)
            pending += [op.operation for region in operation.regions for block in region for op in block]
        return targets

    def remove(self) -> None:
        """Erases the operations emitted since this object was made, last first."""
        for operation in reversed(self._added()):
            operation.erase()


def _check_tensor_descriptors(call: KernelCall, platform: str, launcher: Launcher, needed: str | None) -> None:
    """Refuses host-side tensor descriptors on a launcher that cannot pass them, naming those that can (a launcher
    set aside for raising while asked is left to its ``lower``, which hands the call on)."""
    described = [slot.name for slot in call.slots if slot.descriptor is not None]
    if not described:
        return
    question = "passes_tensor_descriptors"
    if facade.ask(launcher, question, otherwise=True, needed=needed, call=call, parameters=described):
        return
    able = [
        other.name
        for other in facade.launchers_for(platform)
        if other is not launcher
        and facade.ask(other, question, otherwise=False, call=call, parameters=described)
        and facade.unavailable_reason(other) is None
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
