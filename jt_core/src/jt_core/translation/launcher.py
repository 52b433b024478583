"""A launcher that lowers a call to the XLA operations its kernel's TTIR translates into: `TranslatingLauncher`,
the base of the CPU's ``compiled`` launcher and of jt-tpu's.

The kernel runs at the speed of compiled code, with no custom call and no host callback, so it works wherever XLA
runs the computation. Its plan (`jt_core.translation.plan`) is chosen from the analyses before anything is traced:
what the translation cannot express, the plan refuses, naming the construct and its source line, and the platform's
launcher handles that (the CPU hands the call to Triton's interpreter, a platform without one refuses it). An
autotuned call runs its first configuration, or, where the launcher tunes (`TranslatingLauncher.tunes`), the
fastest, timed compiled when the call is lowered (`jt_core.trials`).

Every access sets a fault when a lane strays outside its buffer (it reads zero or writes nothing instead), and a
program that waits in a loop that could never end sets another and leaves it (`jt_core.translation.memory.State`).
What the faults do after the kernel is the platform's (`TranslatingLauncher.after_kernel`): by default, and in every
artifact made for ``jax.export``, every output comes back poisoned (NaN, bytes 0xA5, ``True``) rather than with values
that look right. A call whose every access was proven inside its buffer when the kernel was traced has no faults at
all.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jt_core import _compat, coverage, trials, tuning
from jt_core.call import INPUT, OUTPUT, KernelCall
from jt_core.errors import NoUsableConfigError, UnsupportedKernelError
from jt_core.plugin.roles import Launcher
from jt_core.plugin.values import CompiledKernel
from jt_core.translation import descriptors, floats, plan
from jt_core.translation.accesses import pointer_argument, pointer_parameter
from jt_core.translation.analysis.affine import Affine
from jt_core.translation.analysis.facts import Fact
from jt_core.translation.descriptors import Descriptor, block_of
from jt_core.translation.grid import run_grid
from jt_core.translation.kernel import Job
from jt_core.translation.memory import BufferSpec, Memory, State, no_error
from jt_core.translation.plan import Plan
from jt_core.translation.program import Program
from jt_core.translation.strategy import Strategy
from jt_core.translation.values import Unsupported

__all__ = ["TranslatingLauncher", "kernel_function", "poison", "poisoned_where_strayed"]


def poison(aval: Any) -> jax.Array:
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
    strategy: Strategy,
    fuse: bool = True,
    sentinel_run: int | None = None,
) -> Callable[..., list[jax.Array]]:
    """The function of the call's operands that runs one configuration of it: it returns the outputs, then the
    faults (`jt_core.translation.memory.State`: an access strayed outside its buffer, a program spun).

    Args:
        call: The call.
        kernel: The configuration's compiled kernel (its payload's ``program``, and ``checks`` where it has them).
        config_index: Which configuration.
        strategy: The platform's choices.
        fuse: Whether products and sums may be fused into multiply-adds where the configuration's
            ``enable_fp_fusion`` allows it (as GPUs fuse them); ``False`` rounds each as the interpreter does.
        sentinel_run: For the coverage check, which sentinel fills the outputs that are neither aliased nor zeroed
            (`jt_core.coverage`); ``None``: they are poisoned as usual.

    Raises:
        UnsupportedKernelError: When the kernel has no TTIR, or uses what the translation cannot express (before
            tracing; more is found when the function is traced).
    """
    payload = kernel.payload
    program: Program | None = getattr(payload, "program", None)
    if program is None:
        raise Unsupported(
            getattr(payload, "why_not", None) or "its Triton IR is not available", getattr(payload, "why_not_at", None)
        )
    config = call.configs[config_index]
    checks = getattr(payload, "checks", None)
    bounds_check = True if checks is None else bool(checks.bounds)
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
    facts: list[Fact] = []
    for (kind, value), parameter in zip(arguments_plan, parameters, strict=True):
        ty = program.type_of(parameter)
        if kind == "pointer":
            if not ty.is_pointer or ty.pointee is None:
                raise Unsupported(f"a pointer passed where the kernel's TTIR takes {ty.text}")
            arguments.append(pointer_argument(value, ty.pointee))
            facts.append(pointer_parameter(value))
        elif kind == "descriptor":
            buffer, desc = value
            block, element = block_of(ty.text)
            facts.append(descriptors.parameter(buffer, desc.shape, desc.strides, block))
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
            facts.append(_scalar_fact(value, ty.element))
    for output in range(len(call.out_avals)):
        if ("out", output) not in keys:  # an output the kernel has no pointer to: returned as initialised
            keys[("out", output)] = len(specs)
            aval = call.out_avals[output]
            specs.append(BufferSpec(f"output {output}", np.dtype(aval.dtype), tuple(aval.shape), True, output))

    scalars = [a if not isinstance(a, (Descriptor,)) and not hasattr(a, "buffer") else None for a in arguments]
    chosen = _plans.get(program, facts, scalars, config.grid, strategy, specs, call.name)
    if chosen.refused:
        raise Unsupported(chosen.reason, chosen.line)

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
                    initial[buffer] = poisoned[kind] if kind in poisoned else poisoned.setdefault(kind, poison(aval))
        constants = [
            None
            if spec.writable
            else jnp.reshape(operands[next(i for (w, i), b in keys.items() if b == n and w == "in")], spec.shape)
            for n, spec in enumerate(specs)
        ]
        memory = Memory(specs, constants, bounds_check, strategy.stray_loads_fault, strategy.row_stores)
        state = State(memory.initial([initial[i] for i in memory.writable]), no_error())
        fused = config.options.enable_fp_fusion and fuse
        with floats.opaque_constants(floats.opaque_zero()):
            state = run_grid(Job(chosen, program, memory, arguments, fused, strategy), state)
        finals = dict(zip(memory.writable, memory.final(state), strict=True))
        outputs = [finals[keys[("out", index)]] for index in range(len(call.out_avals))]
        if strategy.fenced_outputs:
            outputs = list(lax.optimization_barrier(outputs))
        return [*outputs, state.faults]

    return run


def _scalar_fact(value: Any, element: str) -> Fact:
    """What the analyses know of a scalar argument: its value (the call's scalars are known when tracing)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return Fact(static=value, varies=False)
    return Fact(form=Affine.constant(value), static=value, varies=False)


class _Plans:
    """The plans made for each kernel's program, for each call's scalars, grid and strategy: kept as long as the
    program is (a compiled kernel's), emptied by ``jax.clear_caches()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: weakref.WeakKeyDictionary[Program, dict[Any, Plan]] = weakref.WeakKeyDictionary()
        self._choices: weakref.WeakKeyDictionary[Program, dict[Any, int]] = weakref.WeakKeyDictionary()

    def get(
        self,
        program: Program,
        parameters: Sequence[Fact],
        scalars: Sequence[Any],
        grid: tuple[int, int, int],
        strategy: Strategy,
        specs: Sequence[BufferSpec],
        name: str,
    ) -> Plan:
        key = (tuple(parameters), tuple(map(repr, scalars)), grid, strategy, tuple(specs))
        with self._lock:
            known = self._plans.get(program, {}).get(key)
        if known is not None:
            return known
        made = plan.choose(
            program,
            parameters,
            scalars,
            grid,
            strategy,
            [spec.dtype for spec in specs],
            frozenset(i for i, spec in enumerate(specs) if spec.writable),
            name,
        )
        with self._lock:
            self._plans.setdefault(program, {})[key] = made
        return made

    def choice(self, program: Program | None, key: Any, choose: Callable[[], int]) -> int:
        """The configuration chosen for a call of a kernel whose first configuration's program is ``program``
        (``choose`` makes the choice the first time)."""
        if program is None:
            return choose()
        with self._lock:
            known = self._choices.get(program, {}).get(key)
        if known is not None:
            return known
        made = choose()
        with self._lock:
            self._choices.setdefault(program, {})[key] = made
        return made

    def cache_clear(self) -> None:
        """Forgets every plan and choice (``jax.clear_caches()`` calls it)."""
        with self._lock:
            self._plans = weakref.WeakKeyDictionary()
            self._choices = weakref.WeakKeyDictionary()


_plans = _Plans()
_compat.on_clear_caches(_plans, "jt_core translation plans")


def _without_dead_code(closed: Any) -> Any:
    """``closed`` less the equations nothing uses (the hidden zero of a kernel with no float zero, say), so that
    XLA is not handed them."""
    from jax._src.interpreters import partial_eval as pe

    jaxpr, _ = pe.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars), instantiate=True)
    return closed.replace(jaxpr=jaxpr)


def _never_strays(closed: Any) -> bool:
    """Whether the traced kernel's faults (its last result) are the constant zero."""
    from jax._src import core

    flag = closed.jaxpr.outvars[-1]
    return isinstance(flag, core.Literal) and not np.asarray(flag.val).any()


def poisoned_where_strayed(count: int) -> Callable[..., list[jax.Array]]:
    """What stands for a check after the kernel where nothing can raise (an exported artifact, a platform without
    jt's handlers), as a function of the ``count`` outputs, the faults and the operands (unused): when an access
    strayed (or a program left a loop that could never end), every output comes back poisoned as an unwritten one is
    (NaN, bytes 0xA5, ``True``), rather than with values that look right."""

    def poisoned(*arrays: jax.Array) -> list[jax.Array]:
        outputs, faults = arrays[:count], arrays[count]
        return [lax.select(jnp.broadcast_to(faults != 0, o.shape), poison(o.aval), o) for o in outputs]

    return poisoned


class TranslatingLauncher(Launcher):
    """Lowers a call to XLA operations translated from its kernel's TTIR.

    Subclasses set `platform` and `name`, and choose: `strategy` (how the translation expresses the kernel on
    the platform), `tunes` (whether autotuned calls are timed), `after_kernel` (what a stray access does),
    `untranslatable` (what becomes of a call the translation cannot express).
    """

    priority = 20

    def strategy(self) -> Strategy:
        """The platform's choices for the translation (`Strategy`); the default is the CPU's."""
        return Strategy()

    def fuses(self) -> bool:
        """Whether products and sums are fused where a configuration's ``enable_fp_fusion`` allows it (``True``, the
        default; ``False`` rounds each, as Triton's interpreter does)."""
        return True

    def tunes(self) -> bool:
        """Whether an autotuned call times its configurations, compiled, when it is lowered (``True``, the default);
        ``False`` runs the first that writes every element of the outputs."""
        return True

    def device_name(self) -> str:
        """The device name under which autotuning winners are remembered (`jt_core.tuning`)."""
        return f"{self.platform}-xla"

    def passes_tensor_descriptors(self, call: KernelCall, parameters: Sequence[str]) -> bool:
        return True

    def chosen(self, call: KernelCall, kernels: Sequence[CompiledKernel]) -> int:
        """The configuration the call runs (`jt_core.trials`): the first, or the fastest where the launcher tunes;
        for configurations that launch the same grid, only those that write every element of the outputs.

        Raises:
            NoUsableConfigError: When no configuration is usable.
            UnsupportedKernelError: When a configuration the call would run cannot be translated.
        """
        if len(call.configs) == 1:
            return 0
        program = getattr(kernels[0].payload, "program", None)
        key = (call, tuple(id(k) for k in kernels), self.strategy(), self.fuses(), self.device_name())

        def choose() -> int:
            return trials.chosen_config(
                call,
                self.device_name(),
                self.tunes(),
                lambda index, run: kernel_function(
                    call, kernels[index], index, self.strategy(), self.fuses(), sentinel_run=run
                ),
                lambda index: self.checked_function(call, kernels[index], index),
            )

        return _plans.choice(program, key, choose)

    def untranslatable(
        self, call: KernelCall, kernels: Sequence[CompiledKernel], error: UnsupportedKernelError
    ) -> str | None:
        """What becomes of a call the translation cannot express: a reason hands it to the platform's next
        launcher (`fallback_reason`). The default raises an error naming the construct and the kernel source line:
        a platform with no other way to run the kernel refuses it."""
        where = f" (at {error.line})" if isinstance(error, Unsupported) and error.line else ""
        what = error.what if isinstance(error, Unsupported) else str(error)
        raise UnsupportedKernelError(f"triton_call {call.name!r} cannot run on {self.platform}: it uses {what}{where}")

    def fallback_reason(self, call: KernelCall, kernels: Sequence[CompiledKernel], device: Any | None) -> str | None:
        """Why the translation cannot express the call, from its plan (nothing is traced), or ``None``."""
        try:
            index = self.chosen(call, kernels)
            kernel_function(call, kernels[index], index, self.strategy(), self.fuses())
        except NoUsableConfigError:
            raise  # no configuration writes the outputs: another path would find the same
        except UnsupportedKernelError as exc:
            return self.untranslatable(call, kernels, exc)
        except Exception as exc:  # a kernel this jt cannot analyse is the launcher's to hand over or refuse
            return self.untranslatable(
                call, kernels, Unsupported(f"what it failed to analyse ({type(exc).__name__}: {exc})")
            )
        return None

    def after_kernel(
        self, call: KernelCall, kernel: CompiledKernel, index: int, count: int, exporting: bool
    ) -> Callable[..., list[jax.Array]]:
        """What runs after a kernel whose accesses may stray, as a function of its ``count`` outputs, its faults
        (`jt_core.translation.memory.State`), and the call's operands; it returns the outputs. The default, and what
        the CPU makes for ``jax.export``: `poisoned_where_strayed`."""
        return poisoned_where_strayed(count)

    def checked_function(self, call: KernelCall, kernel: CompiledKernel, index: int, **options: Any) -> Any:
        """The function of the operands that runs configuration ``index`` and returns its outputs after
        `after_kernel` (for tuning and the coverage check, which run it under ``jax.jit``)."""
        run = kernel_function(call, kernel, index, self.strategy(), self.fuses(), **options)
        after = self.after_kernel(call, kernel, index, len(call.out_avals), False)

        def checked(*operands: jax.Array) -> list[jax.Array]:
            *outputs, faults = run(*operands)
            return after(*outputs, faults, *operands)

        return checked

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
        index = self.chosen(call, kernels)
        tuning.note_best_config(call, index)  # the configuration it runs, on the user's autotuner, as Triton sets it
        run = kernel_function(call, kernels[index], index, self.strategy(), self.fuses())
        with jax.enable_x64(True):
            jaxpr = _without_dead_code(_compat.low_level_jaxpr(jax.make_jaxpr(run)(*call.operand_avals)))
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
            return outputs  # every access was proven inside its buffer when the kernel was traced
        after = (
            poisoned_where_strayed(len(outputs))
            if exporting
            else self.after_kernel(call, kernels[index], index, len(outputs), exporting)
        )
        return mlir.lower_fun(after, multiple_results=True)(
            ctx.replace(avals_in=[*plain_out, flag, *plain_in], avals_out=plain_out),
            *outputs,
            faults,
            *operands,
        )
