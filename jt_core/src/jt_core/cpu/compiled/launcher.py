"""The ``compiled`` CPU launcher: a call's kernel, traced from its TTIR into JAX operations that XLA compiles with the
rest of the computation.

The kernel runs at the speed of compiled code, with no host callback, so it works wherever XLA runs the
computation: inside ``custom_partitioning`` bodies and in every process of a ``jax.distributed`` job. What it cannot
express (`unsupported_operation`, or a construct found while tracing) it says in
one line, and the call runs in the interpreter (the platform's next launcher): a kernel is never refused only
because it cannot be compiled. The race check and the unwritten-output check run in the interpreter too: a call
made with one of them on goes there. An autotuned call runs its first configuration, or with ``JT_CPU_AUTOTUNE=1``
the fastest, timed compiled when the call is lowered.

A call whose every access was proven inside its buffer when the kernel was traced lowers to XLA operations alone.
Lowered for ``jax.export``, a call lowers to plain StableHLO whatever it accesses: an artifact can carry none of
jt's custom calls, so the check after the kernel becomes a select that poisons every output where an access
strayed (`_poisoned_where_faulty`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core import _compat, coverage, distributed, tuning
from jt_core.call import INPUT, OUTPUT, KernelCall
from jt_core.cpu import ffi_launcher
from jt_core.cpu.compiled import checking, differential, handed_over
from jt_core.cpu.ffi_launcher import CpuFfiLauncher
from jt_core.cpu.lowered import cpu_autotune_enabled
from jt_core.errors import CpuFallbackWarning, NoUsableConfigError, UnsupportedKernelError
from jt_core.plugin.roles import Launcher
from jt_core.plugin.values import CompiledKernel
from jt_core.translation import floats
from jt_core.translation.accesses import pointer_argument
from jt_core.translation.descriptors import Descriptor, block_of
from jt_core.translation.grid import run_grid
from jt_core.translation.kernel import unsupported_operation
from jt_core.translation.memory import BufferSpec, Memory, State, no_error
from jt_core.translation.program import Program
from jt_core.translation.values import Unsupported

__all__ = ["CpuCompiledLauncher", "kernel_function"]


def _poison(aval: Any) -> jax.Array:
    """A fresh output's contents before the kernel runs: NaN for floats, 0xA5 bytes otherwise (as the
    interpreter fills them)."""
    dtype = np.dtype(aval.dtype)
    if np.issubdtype(dtype, np.floating) or "float" in dtype.name:
        fill = np.asarray(np.nan, dtype)
    elif dtype == np.bool_:
        fill = np.asarray(True)
    else:
        fill = np.frombuffer(b"\xa5" * dtype.itemsize, dtype)[0]
    return lax.broadcast_in_dim(fill, tuple(aval.shape), ())


def _sentinel(aval: Any, run: int) -> jax.Array:
    """A fresh output filled with the coverage check's sentinel of run ``run`` (`jt_core.coverage`)."""
    dtype = np.dtype(aval.dtype)
    if dtype == np.bool_:  # a stored bool is 0 or 1: the two runs' fills differ from what either stores last
        return jnp.full(aval.shape, run == 0, bool)
    element = np.frombuffer(bytes([coverage.SENTINELS[run]]) * dtype.itemsize, dtype)[0]
    return jnp.full(aval.shape, element, dtype)


def _scalar(value: Any) -> Any:
    return value.item() if isinstance(value, np.generic) else value


def kernel_function(
    call: KernelCall,
    kernel: CompiledKernel,
    config_index: int,
    fuse: bool = True,
    sentinel_run: int | None = None,
    checked: bool = True,
    opaque_zeros: bool = True,
) -> Callable[..., list[jax.Array]]:
    """The function of the call's operands that runs one configuration of it and returns its outputs.

    Args:
        call: The call.
        kernel: The configuration's compiled kernel.
        config_index: Which configuration.
        fuse: Whether products and sums may be fused into multiply-adds where the configuration's
            ``enable_fp_fusion`` allows it (as GPUs fuse them); ``False`` rounds each as the interpreter does.
        sentinel_run: For the coverage check, which sentinel fills the outputs that are neither aliased nor zeroed
            (`jt_core.coverage`); ``None``: they are poisoned as usual.
        checked: Whether the outputs pass the check that raises an access's out-of-bounds error
            (`jt_core.cpu.compiled.checking`); ``False`` returns the outputs unchecked, followed by the faults
            (`jt_core.translation.memory.State`), for the caller to act on.
        opaque_zeros: Whether the kernel's ``+0.0`` constants are hidden from XLA's simplifier
            (`jt_core.translation.floats.opaque_constants`, through a custom call of jt's CPU handler library);
            ``False`` for an exported artifact, which may hold no custom call: there XLA folds ``x + 0.0`` into ``x``.

    Raises:
        UnsupportedKernelError: When the kernel has no TTIR, or uses what the compiled path cannot express (before
            tracing; more is found when the function is traced).
    """
    payload = kernel.payload
    program: Program | None = getattr(payload, "program", None)
    if program is None:
        raise Unsupported(
            getattr(payload, "why_not", None) or "its Triton IR is not available", getattr(payload, "why_not_at", None)
        )
    refused = unsupported_operation(program)
    if refused is not None:
        raise refused
    config = call.configs[config_index]
    checks = payload.checks
    aliased = dict(call.aliases)
    zeroed = set(config.zeroed_outputs)
    entry = program.functions[program.entry]
    parameters = entry.body[0].arguments

    keys: dict[tuple[str, int], int] = {}
    specs: list[BufferSpec] = []
    arguments_plan: list[tuple[str, Any]] = []
    for slot in call.slots:
        if slot.kind in (INPUT, OUTPUT):
            output = slot.index if slot.kind == OUTPUT else aliased.get(slot.index)
            key = ("out", output) if output is not None else ("in", slot.index)
            if key not in keys:
                aval = call.out_avals[output] if output is not None else call.operand_avals[slot.index]
                keys[key] = len(specs)
                specs.append(BufferSpec(slot.name, np.dtype(aval.dtype), tuple(aval.shape), output is not None, output))
            if slot.descriptor is None:
                arguments_plan.append(("pointer", keys[key]))
                continue
            # A host-side descriptor is the descriptor, then its shape and strides, as Triton passes it.
            desc = slot.descriptor
            arguments_plan.append(("descriptor", (keys[key], desc)))
            arguments_plan += [("scalar", int(v)) for v in (*desc.shape, *desc.strides)]
        elif slot.type_str != "constexpr":
            arguments_plan.append(("scalar", _scalar(slot.value)))
    if len(arguments_plan) != len(parameters):
        raise Unsupported(
            f"the kernel's TTIR takes {len(parameters)} arguments where the call passes {len(arguments_plan)}"
        )
    arguments: list[Any] = []
    for (kind, value), parameter in zip(arguments_plan, parameters, strict=True):
        ty = program.type_of(parameter)
        if kind == "pointer":
            if not ty.is_pointer or ty.pointee is None:
                raise Unsupported(f"a pointer passed where the kernel's TTIR takes {ty.text}")
            arguments.append(pointer_argument(value, ty.pointee))
        elif kind == "descriptor":
            buffer, desc = value
            block, element = block_of(ty.text)
            arguments.append(
                Descriptor(
                    buffer,
                    0,
                    tuple(desc.shape),
                    tuple(desc.strides),
                    block,
                    element,
                    nan_padding=desc.padding == "nan",
                    round_to_tf32=desc.round_f32_to_tf32,
                )
            )
        else:
            arguments.append(value)
    for output in range(len(call.out_avals)):
        if ("out", output) not in keys:  # an output the kernel has no pointer to: returned as initialised
            keys[("out", output)] = len(specs)
            aval = call.out_avals[output]
            specs.append(BufferSpec(f"output {output}", np.dtype(aval.dtype), tuple(aval.shape), True, output))

    call_id = checking.register(call, kernel, config_index) if checked else 0

    def run(*operands: jax.Array) -> list[jax.Array]:
        initial: dict[int, jax.Array] = {}
        poisoned: dict[tuple[tuple[int, ...], np.dtype], jax.Array] = {}  # one array for outputs of one type
        for (where, index), buffer in keys.items():
            if where != "out":
                continue
            aval = call.out_avals[index]
            source = next((op for op, dst in call.aliases if dst == index), None)
            if source is not None:
                value = jnp.reshape(operands[source], aval.shape).astype(aval.dtype)
                initial[buffer] = jnp.zeros(aval.shape, aval.dtype) if index in zeroed else value
            elif index in zeroed:
                initial[buffer] = jnp.zeros(aval.shape, aval.dtype)
            else:
                if sentinel_run is not None:
                    initial[buffer] = _sentinel(aval, sentinel_run)
                else:
                    kind = (tuple(aval.shape), np.dtype(aval.dtype))
                    initial[buffer] = poisoned[kind] if kind in poisoned else poisoned.setdefault(kind, _poison(aval))
        constants = [
            None
            if spec.writable
            else jnp.ravel(operands[next(i for (w, i), b in keys.items() if b == n and w == "in")])
            for n, spec in enumerate(specs)
        ]
        memory = Memory(specs, constants, checks.bounds)
        state = State(memory.initial([initial[i] for i in memory.writable]), no_error())
        with floats.opaque_constants(checking.opaque_zero()) if opaque_zeros else contextlib.nullcontext():
            state = run_grid(program, memory, config.grid, arguments, state, config.options.enable_fp_fusion and fuse)
        finals = dict(zip(memory.writable, memory.final(state), strict=True))
        outputs = [finals[keys[("out", index)]] for index in range(len(call.out_avals))]
        if not checked:
            return [*outputs, state.faults]
        return checking.checked(outputs, state.faults, operands, call_id, call.name, call.launch.has_side_effect)

    return run


class _Traced:
    """A call's kernel traced for its operands, kept between the launcher's question and its lowering: the last
    few, emptied by ``jax.clear_caches()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[Any, Any] = collections.OrderedDict()

    def get(self, call: KernelCall, kernels: Sequence[CompiledKernel], exporting: bool = False) -> Any:
        """``(configuration index, closed jaxpr)`` of the call, or an `UnsupportedKernelError` for a kernel
        the compiled path cannot express. The jaxpr returns the outputs unchecked, then the faults (an access
        strayed, a program spun: `kernel_function` with ``checked=False``): the lowering adds the check, or, in an
        exported artifact, what stands for it (``exporting``: no custom call at all)."""
        fuse = not differential.enabled()
        key = (call, tuple(id(k) for k in kernels), fuse, exporting)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key]
        try:
            index = _chosen_config(call, kernels)
            with jax.enable_x64(True):
                run = kernel_function(call, kernels[index], index, fuse, checked=False, opaque_zeros=not exporting)
                jaxpr = _compat.low_level_jaxpr(jax.make_jaxpr(run)(*call.operand_avals))
            traced: Any = (index, _without_dead_code(jaxpr))
        except NoUsableConfigError:
            raise  # no configuration writes the outputs: the interpreter would find the same
        except UnsupportedKernelError as exc:
            traced = exc
        except Exception as exc:  # a kernel this jt cannot trace runs in the interpreter: never refused for it
            traced = Unsupported(f"what it failed to trace ({type(exc).__name__}: {exc})")
        with self._lock:
            self._entries[key] = traced
            while len(self._entries) > 32:  # asked right before its lowering: a few suffice
                self._entries.popitem(last=False)
        return traced

    def cache_clear(self) -> None:
        """Forgets every traced call (``jax.clear_caches()`` calls it)."""
        with self._lock:
            self._entries.clear()


def _without_dead_code(closed: Any) -> Any:
    """``closed`` less the equations nothing uses (a grid first traced side by side, then in order, leaves the first
    trace behind), so that XLA does not compile them."""
    from jax._src.interpreters import partial_eval as pe

    jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars), instantiate=True)
    return closed.replace(jaxpr=jaxpr)


_traced = _Traced()
_compat.on_clear_caches(_traced, "jt_core compiled CPU traces")

#: The device name the compiled path's autotuning winners are remembered under.
COMPILED_DEVICE_NAME = "cpu-xla"


def _chosen_config(call: KernelCall, kernels: Sequence[CompiledKernel]) -> int:
    """The configuration an autotuned call runs: the first, or with ``JT_CPU_AUTOTUNE=1`` the fastest compiled
    (remembered per machine like every autotuning winner); for configurations that launch the same grid, only those
    that write every element of the outputs, checked on scratch operands (`jt_core.coverage`, whose rule says what
    an element that no configuration writes means).

    Raises:
        NoUsableConfigError: When no configuration is usable (`jt_core.coverage.CoverageCheck`).
    """
    if len(call.configs) == 1:
        return 0
    checked = coverage.applies(call)
    tuned = cpu_autotune_enabled()
    if not (checked or tuned):
        return 0
    rng = np.random.default_rng(0)
    scratch = []
    for aval in call.operand_avals:
        dtype = np.dtype(aval.dtype)
        if jnp.issubdtype(dtype, jnp.floating):
            scratch.append(jnp.asarray(rng.standard_normal(aval.shape).astype(dtype)))
        else:
            scratch.append(jnp.asarray(rng.integers(0, 2 if dtype == np.bool_ else 8, aval.shape).astype(dtype)))

    def measure(index: int) -> dict[int, np.ndarray]:
        """Runs configuration ``index`` into both sentinels: what it left unwritten. Unchecked: scratch integers
        may send an access astray, which is dropped and says nothing about coverage."""
        runs = []
        for run in (0, 1):
            with jax.enable_x64(True):
                fn = jax.jit(kernel_function(call, kernels[index], index, sentinel_run=run, checked=False))
                runs.append([np.asarray(out) for out in jax.block_until_ready(fn(*scratch))[:-1]])
        return {
            out: coverage.unwritten_elements(runs[0][out], runs[1][out])
            for out in coverage.checked_outputs(call, call.configs[index])
        }

    check = coverage.CoverageCheck(call, measure)
    if not tuned:
        return check.first_usable()  # an UnsupportedKernelError hands the call to the interpreter, which chooses

    unsupported: list[UnsupportedKernelError] = []

    def none_usable() -> Exception:
        if unsupported:  # the call runs in the interpreter, which chooses again
            return unsupported[0]
        return check.error()

    def trial(index: int) -> float:
        try:
            if checked and not check.usable(index):
                return float("inf")
            with jax.enable_x64(True):
                fn = jax.jit(kernel_function(call, kernels[index], index))
                jax.block_until_ready(fn(*scratch))
                start = time.perf_counter()
                jax.block_until_ready(fn(*scratch))
        except UnsupportedKernelError as exc:
            unsupported.append(exc)
            return float("inf")
        return time.perf_counter() - start

    index = tuning.choose_config(call, COMPILED_DEVICE_NAME, trial, none_usable)
    return check.chosen(index) if checked else index


def _one_device(ctx: Any) -> bool:
    """Whether the computation being lowered runs on one device of this process (where a host callback may run)."""
    if jax.process_count() > 1:
        return False
    context = ctx.module_context.axis_context
    mesh = getattr(context, "mesh", None)
    if mesh is not None:
        return int(getattr(mesh, "size", 1)) <= 1
    return int(getattr(context, "num_devices", 1)) <= 1


def _never_strays(closed: Any) -> bool:
    """Whether the traced kernel's faults (its last result) are the constant zero."""
    from jax._src import core

    flag = closed.jaxpr.outvars[-1]
    return isinstance(flag, core.Literal) and not np.asarray(flag.val).any()


def _checking(call: KernelCall, call_id: int, count: int) -> Callable[..., list[jax.Array]]:
    """The check after the kernel (`jt_core.cpu.compiled.checking`), as a function of its ``count`` outputs, the
    faults and the call's operands."""

    def check(*arrays: jax.Array) -> list[jax.Array]:
        outputs, faults, operands = arrays[:count], arrays[count], arrays[count + 1 :]
        return checking.checked(outputs, faults, operands, call_id, call.name, call.launch.has_side_effect)

    return check


def _poisoned_where_faulty(count: int) -> Callable[..., list[jax.Array]]:
    """What stands for the check in an exported artifact, as a function of the ``count`` outputs, the faults and the
    operands (unused). An artifact can carry no custom call of jt's (JAX's export admits only those of its own list),
    so nothing in it can raise: when an access strayed (or a program left a loop that could never end), every
    output comes back poisoned as an unwritten one is (NaN, bytes 0xA5, ``True``), rather than with values that
    look right."""

    def poisoned(*arrays: jax.Array) -> list[jax.Array]:
        outputs, faults = arrays[:count], arrays[count]
        return [lax.select(jnp.broadcast_to(faults != 0, o.shape), _poison(o.aval), o) for o in outputs]

    return poisoned


class CpuCompiledLauncher(Launcher):
    """Lowers a call to XLA operations traced from its kernel's TTIR."""

    platform = "cpu"
    name = "compiled"
    priority = 20
    fallback_rules = (
        "a kernel using what the compiled path cannot express (inline asm, device printing or assertions, "
        "breakpoint(), pointers made from integers, libdevice's Bessel functions) runs in the interpreter "
        "(JT_CPU_FALLBACK=warn warns, =error refuses)",
        "a call made with the race check on (JT_CPU_RACE_CHECK=1, jt.cpu_checks(races=True)) runs in the "
        "interpreter, which keeps it",
        "debug=True runs in the interpreter (overflow checks, device assertions)",
    )

    def passes_tensor_descriptors(self, call: KernelCall, parameters: Sequence[str]) -> bool:
        return True

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
        traced = _traced.get(call, kernels)
        if not isinstance(traced, UnsupportedKernelError):
            return None
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
            warnings.warn(
                f"triton_call {call.name!r}: {reason}; it runs in Triton's interpreter",
                CpuFallbackWarning,
                stacklevel=2,
            )
        return reason

    def lower(
        self,
        ctx: Any,
        call: KernelCall,
        kernels: Sequence[CompiledKernel],
        operands: Sequence[Any],
        device: Any | None,
    ) -> Sequence[Any]:
        from jax._src import core
        from jax._src.interpreters import mlir

        exporting = _compat.lowering_for_export(ctx)
        traced = _traced.get(call, kernels, exporting)
        if isinstance(traced, BaseException):
            raise traced
        index, jaxpr = traced
        # The kernel was traced on plain avals: inside shard_map, the operands' avals also say which mesh axes they
        # vary over, which the kernel's own constants would not match.
        plain_in = [core.ShapedArray(a.shape, a.dtype) for a in ctx.avals_in]
        plain_out = [core.ShapedArray(a.shape, a.dtype) for a in ctx.avals_out]
        flag = core.ShapedArray((), np.dtype(np.int8))
        # Lowered as the computation around it is: under jax.enable_x64, the functions of a lowering for several
        # platforms would take the platform's index as a 64-bit integer, where the module passes 32 bits.
        *outputs, faults = _compat.lower_closed_jaxpr(
            ctx.replace(avals_in=plain_in, avals_out=[*plain_out, flag]), jaxpr, operands
        )
        if _never_strays(jaxpr):
            results = outputs  # every access was proven inside its buffer when the kernel was traced
        else:
            if exporting:
                after = _poisoned_where_faulty(len(outputs))
            else:
                call_id = checking.register(call, kernels[index], index)
                after = _checking(call, call_id, len(outputs))
            results = mlir.lower_fun(after, multiple_results=True)(
                ctx.replace(avals_in=[*plain_out, flag, *plain_in], avals_out=plain_out),
                *outputs,
                faults,
                *operands,
            )
        if exporting or not differential.enabled() or not _one_device(ctx):
            return results
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
