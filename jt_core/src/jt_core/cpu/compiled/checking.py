"""Raising a compiled CPU kernel's out-of-bounds error after it ran.

Every access of the kernel sets a fault when a lane strays outside its buffer (the lane reads zero or writes nothing
instead). After the kernel, one custom call of jt's CPU handler library takes the faults, the outputs (passed
through untouched: aliased) and the operands. When an access strayed, it runs the same call again in Triton's
interpreter, on the same operands: the interpreter stops at the first stray access, in program order, and names the
kernel, the argument, the element and the program, as it does for a call it runs itself. When a program waited in
a loop that could never end (a spin lock no program releases: `jt_core.translation.control`), the check fails
with that, without running the interpreter (which fails such a loop too: `jt_core.interpreter.spins`). No host
callback is involved, so the check works inside ``custom_partitioning`` bodies and in every process of a
``jax.distributed`` job. A kernel whose accesses were all proven inside their buffers when it was traced has no
check, and neither has a call lowered for ``jax.export`` (`jt_core.cpu.compiled.launcher`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax

from jt_core.call import KernelCall
from jt_core.cpu import ffi_launcher
from jt_core.plugin.values import CompiledKernel

__all__ = ["checked", "handler_ready", "register"]


def handler_ready() -> None:
    """Loads jt's CPU handler library (building it where it is not built yet).

    Raises:
        RuntimeError: When the library cannot be built or loaded here.
    """
    ffi_launcher.ensure_registered()


def register(call: KernelCall, kernel: CompiledKernel, config_index: int) -> int:
    """Registers the configuration of ``call`` that runs compiled, for the interpreter to run again on a stray
    access; returns the id its check carries."""
    one = dataclasses.replace(call, configs=(call.configs[config_index],))
    return ffi_launcher.registry().register(one, (kernel,))


def checked(
    outputs: Sequence[jax.Array],
    faults: jax.Array,
    operands: Sequence[jax.Array],
    call_id: int,
    name: str,
    has_side_effect: bool = False,
) -> list[jax.Array]:
    """``outputs``, after a check that fails the computation when ``faults`` holds one: naming the access that
    strayed, or saying that a program waited in a loop that could never end.

    Args:
        outputs: The kernel's outputs.
        faults: The kernel's faults (`jt_core.translation.memory.State`: ``STRAYED``, ``SPINS``).
        operands: The call's operands, for the interpreter to run the call again.
        call_id: What `register` returned for the call.
        name: The call's name.
        has_side_effect: Whether the check must run even when nothing reads the outputs.
    """
    handler_ready()
    types = [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outputs]
    call = jax.ffi.ffi_call(
        ffi_launcher.CHECK_TARGET_NAME,
        types,
        has_side_effect=has_side_effect or not outputs,
        input_output_aliases={i + 1: i for i in range(len(outputs))},
    )
    return list(call(faults.astype(jax.numpy.int8), *outputs, *operands, call_id=call_id, name=name))
