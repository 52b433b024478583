"""The ``compiled`` CPU launcher: a call's kernel translated from its TTIR into JAX operations
(`jt_core.translation`) that XLA compiles with the rest of the computation.

The kernel runs at the speed of compiled code, with no host callback, so it works wherever XLA runs the
computation: inside ``custom_partitioning`` bodies and in every process of a ``jax.distributed`` job. What it cannot
express (its plan refuses it, `jt_core.translation.plan`) it says in one line, and the call runs in the interpreter
(the platform's next launcher): a kernel is never refused only
because it cannot be compiled. The race check and the unwritten-output check run in the interpreter too: a call
made with one of them on goes there. An autotuned call runs its first configuration, or with ``JT_CPU_AUTOTUNE=1``
the fastest, timed compiled when the call is lowered.

A call whose every access was proven inside its buffer when the kernel was traced lowers to XLA operations alone;
otherwise a check after the kernel raises a stray access's error, or says that a program waited in a loop that could
never end (`jt_core.cpu.compiled.checking`). Lowered for ``jax.export``, a call lowers to plain StableHLO whatever it
accesses: an artifact can carry none of jt's custom calls, so the check becomes a select that poisons every output
where an access strayed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jt_core import _compat, distributed, settings
from jt_core.call import KernelCall
from jt_core.cpu import ffi_launcher
from jt_core.cpu.compiled import checking, differential, handed_over
from jt_core.cpu.ffi_launcher import CpuFfiLauncher
from jt_core.cpu.lowered import cpu_autotune_enabled
from jt_core.errors import CpuFallbackWarning, UnsupportedKernelError, warn_in_user_code
from jt_core.plugin.values import CompiledKernel
from jt_core.translation.launcher import TranslatingLauncher, kernel_function
from jt_core.translation.strategy import CPU_STRATEGY, Strategy
from jt_core.translation.values import Unsupported

__all__ = ["COMPILED_DEVICE_NAME", "CpuCompiledLauncher", "kernel_function"]

#: The device name the compiled path's autotuning winners are remembered under.
COMPILED_DEVICE_NAME = "cpu-xla"

#: The CPU's strategy with every grid's programs run in order.
_IN_ORDER = dataclasses.replace(CPU_STRATEGY, side_by_side=False)


def _one_device(ctx: Any) -> bool:
    """Whether the computation being lowered runs on one device of this process (where a host callback may run)."""
    if jax.process_count() > 1:
        return False
    context = ctx.module_context.axis_context
    mesh = getattr(context, "mesh", None)
    if mesh is not None:
        return int(getattr(mesh, "size", 1)) <= 1
    return int(getattr(context, "num_devices", 1)) <= 1


class CpuCompiledLauncher(TranslatingLauncher):
    """Lowers a call to XLA operations translated from its kernel's TTIR; hands to the interpreter what it cannot
    express, and checks the kernel's accesses after it ran."""

    platform = "cpu"
    name = "compiled"
    fallback_rules = (
        "a kernel using what the compiled path cannot express (inline asm, device printing or assertions, "
        "breakpoint(), pointers made from integers, libdevice's Bessel functions) runs in the interpreter "
        "(JT_CPU_FALLBACK=warn warns, =error refuses)",
        "a call made with the race check on (JT_CPU_RACE_CHECK=1, jt.cpu_checks(races=True)) runs in the "
        "interpreter, which keeps it",
        "debug=True runs in the interpreter (overflow checks, device assertions)",
    )

    def strategy(self) -> Strategy:
        # JT_CPU_SIDE_BY_SIDE=0 runs every grid's programs in order (the CPU's own switch: the TPU's is its own).
        if settings.flag("JT_CPU_SIDE_BY_SIDE", default=True):
            return CPU_STRATEGY
        return _IN_ORDER

    def tunes(self) -> bool:
        return cpu_autotune_enabled()

    def device_name(self) -> str:
        return COMPILED_DEVICE_NAME

    def native_library(self) -> Any:
        # The check that raises a kernel's out-of-bounds error after it ran is a handler of this library.
        return ffi_launcher.library_spec()

    def unavailable_reason(self) -> str | None:
        try:
            checking.handler_ready()
        except RuntimeError as exc:
            return (
                f"jt's CPU handler library, which raises the compiled kernels' errors, could not be built or loaded "
                f"({exc}); it is built with the machine's C++ compiler at first use, or ahead of time by "
                "`python -m jt_core build-native`"
            )
        return None

    def fallback_reason(self, call: KernelCall, kernels: Sequence[CompiledKernel], device: Any | None) -> str | None:
        checks = getattr(kernels[0].payload, "checks", None)
        if checks is not None and checks.races and not differential.enabled():
            return "the race check runs in the interpreter"
        if any(config.options.debug for config in call.configs):
            return "debug=True runs in the interpreter"
        return super().fallback_reason(call, kernels, device)

    def untranslatable(
        self, call: KernelCall, kernels: Sequence[CompiledKernel], error: UnsupportedKernelError
    ) -> str | None:
        traced = error
        kernel = getattr(kernels[0].payload, "fn", None)
        if isinstance(traced, Unsupported):
            reason = f"the compiled path cannot express {traced.what}{handed_over.located(traced.line, kernel)}"
        else:
            reason = f"the compiled path cannot express it: {traced}{handed_over.located(None, kernel)}"
        handed_over.remember(call.signature_text(), reason)
        policy = handed_over.policy()
        if policy == "error":
            raise UnsupportedKernelError(
                f"triton_call {call.name!r}: {reason}, and JT_CPU_FALLBACK=error refuses to run it in Triton's "
                "interpreter instead (JT_CPU_FALLBACK=info or warn lets it run there)"
            )
        if policy == "warn":
            warn_in_user_code(
                f"triton_call {call.name!r}: {reason}; it runs in Triton's interpreter", CpuFallbackWarning
            )
        return reason

    def after_kernel(
        self, call: KernelCall, kernel: CompiledKernel, index: int, count: int, exporting: bool
    ) -> Callable[..., list[jax.Array]]:
        call_id = checking.register(call, kernel, index)

        def check(*arrays: jax.Array) -> list[jax.Array]:
            outputs, faults, operands = arrays[:count], arrays[count], arrays[count + 1 :]
            return checking.checked(outputs, faults, operands, call_id, call.name, call.launch.has_side_effect)

        return check

    def lower(
        self,
        ctx: Any,
        call: KernelCall,
        kernels: Sequence[CompiledKernel],
        operands: Sequence[Any],
        device: Any | None,
    ) -> Sequence[Any]:

        results = super().lower(ctx, call, kernels, operands, device)
        if _compat.lowering_for_export(ctx) or not differential.enabled() or not _one_device(ctx):
            return results
        index = self.chosen(call, kernels)
        return self._compared(ctx, call, kernels[index], index, operands, results, device)

    @staticmethod
    def _compared(
        ctx: Any,
        call: KernelCall,
        kernel: CompiledKernel,
        index: int,
        operands: Sequence[Any],
        results: Sequence[Any],
        device: Any | None,
    ) -> Sequence[Any]:
        """The compiled ``results``, after a custom call of jt's CPU handler that compares them with the
        interpreter's (its error reaches the caller as a kernel's, `jt_core.errors.DifferentialMismatchError`)."""
        one = dataclasses.replace(call, configs=(call.configs[index],))
        launcher = CpuFfiLauncher()
        # The interpreter runs with subnormal floats flushed, as the compiled path runs on XLA's threads: the two
        # differ there by design (docs/pages/cpu.md), which is not what the comparison looks for.
        ffi_launcher.ensure_registered()
        reference_id = ffi_launcher.registry().register(one, [kernel], keep_subnormals=False)
        reference = launcher.emit(
            ctx,
            reference_id,
            call.name,
            operands,
            call.operand_avals,
            call.out_avals,
            dict(call.aliases),
            call.launch.has_side_effect,
        )
        allowed = differential.tolerance(kernel.payload.program)
        count = len(call.out_avals)

        def compare(arrays: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
            differential.compare(call.name, allowed, arrays[:count], arrays[count:])
            for out, compiled in zip(outputs, arrays[:count], strict=True):
                if out.ctypes.data != compiled.ctypes.data:
                    np.copyto(out, compiled)

        avals = tuple(call.out_avals)
        key = f"compare/{distributed.call_digest(one)}/{allowed}"
        call_id = ffi_launcher.registry().register_function(
            key, ffi_launcher.HostFunction(call.name, avals + avals, avals, compare)
        )
        aliases = {i: i for i in range(count)}
        return launcher.emit(ctx, call_id, call.name, [*results, *reference], avals + avals, avals, aliases, False)
