"""Running one configuration of a call in Triton's interpreter on host buffers: `execute` and
`execute_into`, the run every CPU launcher and `jt_core.plugin.run_on_host` make."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
from jax import tree_util

from jt_core.call import INPUT, OUTPUT, KernelCall
from jt_core.errors import UnwrittenOutputError, UnwrittenOutputWarning, warn_in_user_code
from jt_core.interpreter import runner
from jt_core.interpreter.races import RaceTracker, describe_elements

__all__ = ["INTERPRETED_DIALECTS", "InterpretedKernel", "execute", "execute_into", "poison"]

#: The dialects whose kernels Triton's interpreter runs: those written in ``triton.language`` (Gluon kernels name
#: GPU layouts, which the interpreter has no model of).
INTERPRETED_DIALECTS = ("triton",)


class InterpretedKernel(Protocol):
    """A compiled configuration as the interpreter runs it (a `jt_core.plugin.CompiledKernel`): its payload
    holds the kernel's Python function (``fn``) and the checks the run makes (``checks``)."""

    @property
    def payload(self) -> Any:
        """The kernel's Python function and checks."""


def poison(array: np.ndarray) -> None:
    """Fills a fresh output with values a correct kernel overwrites: NaN for floats, 0xA5 bytes otherwise."""
    if np.issubdtype(array.dtype, np.floating) or array.dtype.kind == "V" or "float" in array.dtype.name:
        try:
            array.fill(np.nan)
            return
        except (ValueError, TypeError):
            pass
    # NumPy views a 0-d array as bytes only through a 1-d view of it.
    (array.reshape(1) if array.ndim == 0 else array).view(np.uint8).fill(0xA5)


def execute(
    call: KernelCall,
    kernel: InterpretedKernel,
    operands: Sequence[np.ndarray],
    config_index: int = 0,
    fill: Callable[[np.ndarray], None] | None = None,
    keep_subnormals: bool = True,
) -> list[np.ndarray]:
    """Runs one configuration of a call on host buffers and returns its outputs (freshly allocated; ``fill`` and
    ``keep_subnormals`` as for `execute_into`)."""
    outputs = [np.empty(aval.shape, dtype=aval.dtype) for aval in call.out_avals]
    execute_into(call, kernel, operands, outputs, config_index, fill, keep_subnormals)
    return outputs


def execute_into(
    call: KernelCall,
    kernel: InterpretedKernel,
    operands: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
    config_index: int = 0,
    fill: Callable[[np.ndarray], None] | None = None,
    keep_subnormals: bool = True,
) -> None:
    """Runs one configuration of a call writing into caller-provided outputs (XLA's result buffers, say).

    Before the kernel starts, an output aliased with an operand holds that operand's values (nothing is copied
    when the two already share one buffer, as XLA arranges for ``input_output_aliases``), a zeroed output holds
    zeros and every other output is poisoned.

    Args:
        call: The bound call.
        kernel: The compiled configuration.
        operands: The array operands, in ``call.operand_avals`` order.
        outputs: Writable C-contiguous arrays of ``call.out_avals``' shapes and dtypes.
        config_index: Which of ``call.configs`` runs.
        fill: What fills an output that is neither aliased nor zeroed before the kernel runs: `poison`, or for
            the coverage check of an autotuned call the sentinels it counts unwritten elements by
            (`jt_core.coverage`), which then reports them itself instead of the race check.
        keep_subnormals: Whether subnormal floats are kept (``False``: the calling thread's floating-point mode,
            which on XLA's threads flushes them).
    """
    config = call.configs[config_index]
    aliased = dict(call.aliases)
    source_of = {output: operand for operand, output in reversed(call.aliases)}
    zeroed = set(config.zeroed_outputs)
    operands = [np.ascontiguousarray(op) for op in operands]
    for index in range(len(call.out_avals)):
        out = outputs[index]
        source = source_of.get(index)
        if source is not None:
            if out.ctypes.data != operands[source].ctypes.data:
                np.copyto(out, operands[source].reshape(out.shape), casting="unsafe")
            if index in zeroed:
                out[...] = 0
        elif index in zeroed:
            out[...] = 0
        else:
            (fill or poison)(out)

    buffers: list[runner.Buffer] = []
    held_arrays: list[np.ndarray] = []
    must_write: list[tuple[runner.Buffer, int]] = []
    slots = call.slots_for(config)
    for slot in slots:
        if slot.kind == INPUT:
            out_index = aliased.get(slot.index)
            array = outputs[out_index] if out_index is not None else operands[slot.index]
            held = None if out_index is None else array.shape
            buffers.append(_buffer(slot.name, array, out_index is not None, out_index, held))
            held_arrays.append(array)
        elif slot.kind == OUTPUT:
            array = outputs[slot.index]
            buffers.append(_buffer(slot.name, array, True, slot.index, array.shape))
            held_arrays.append(array)
            if slot.index not in zeroed and slot.index not in source_of:
                must_write.append((buffers[-1], slot.index))

    interpreted = kernel.payload
    checks = interpreted.checks
    checked = checks.bounds or checks.races
    # A checked run gives each argument's pointer an address of its own region (`jt_core.interpreter.access`).
    places: list[int | None] = list(runner.addresses(buffers)) if checked else [None] * len(buffers)
    leaves: dict[int, list[Any]] = {}
    pointers = iter(zip(held_arrays, places, strict=True))
    for slot in slots:
        if slot.kind in (INPUT, OUTPUT):
            array, address = next(pointers)
            desc = slot.descriptor
            if desc is not None:
                arg = runner.descriptor_argument(
                    desc.element_type,
                    array,
                    desc.shape,
                    desc.strides,
                    desc.block_shape,
                    desc.padding,
                    desc.round_f32_to_tf32,
                    address,
                )
            else:
                arg = runner.pointer_argument(slot.type_str, array, address)
        else:
            arg = runner.scalar_argument(slot.type_str, slot.value)
        leaves.setdefault(slot.path[0], []).append(arg)

    arguments: dict[str, Any] = {}
    trees = dict(call.param_trees)
    constexprs = config.constexpr_dict
    for param in call.params:
        if param.is_constexpr:
            arguments[param.name] = constexprs[param.name]
        else:
            tree = trees[param.index]
            values = leaves[param.index]
            arguments[param.name] = values[0] if tree is None else tree_util.tree_unflatten(tree, values)

    races = runner.run(
        interpreted.fn,
        call.name,
        arguments,
        config.grid,
        buffers if checked else None,
        debug=config.options.debug,
        race_check=checks.races,
        keep_subnormals=keep_subnormals,
        fuse=config.options.enable_fp_fusion,
    )
    if races is not None and checks.unwritten != "ignore" and fill is None:
        _report_unwritten(call, races, must_write, checks.unwritten)


def _buffer(
    name: str, array: np.ndarray, writable: bool, output: int | None, shape: tuple[int, ...] | None
) -> runner.Buffer:
    start = array.ctypes.data
    return runner.Buffer(name, start, start + array.nbytes, writable, array.dtype.itemsize, output, shape)


def _report_unwritten(
    call: KernelCall, races: RaceTracker, must_write: Sequence[tuple[runner.Buffer, int]], action: str
) -> None:
    """Warns about (or refuses) outputs with elements no program wrote: a GPU would hand back whatever the
    memory held."""
    for buffer, index in must_write:
        missing = races.unwritten(buffer)
        if not missing.size:
            continue
        aval = call.out_avals[index]
        message = (
            f"kernel {call.name!r}: output {buffer.name!r} ({aval.str_short()}) has "
            f"{describe_elements(missing, total=int(np.prod(aval.shape, dtype=np.int64)))} that no program wrote: "
            "on a GPU they hold whatever the memory held (jt's CPU backend fills them with NaN or 0xA5 bytes). "
            "Store every element, or name the output in zeroed_outputs, or alias it to an input with "
            "input_output_aliases. (Found by jt's CPU race check; JT_CPU_UNWRITTEN=ignore or "
            "jt.cpu_checks(unwritten='ignore') silences it.)"
        )
        if action == "error":
            raise UnwrittenOutputError(message)
        warn_in_user_code(message, UnwrittenOutputWarning)
