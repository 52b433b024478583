"""Raising a compiled CPU kernel's out-of-bounds error after it ran.

The kernel's loads, stores and atomics keep the first access that strayed in an error record
(:mod:`jt_core.cpu.compiled.memory`). After the kernel, one custom call of jt's CPU handler library takes the record
and the outputs (passed through untouched, aliased); when the record holds an error, the handler asks
:func:`describe` for the message (the same words the interpreter uses, with the kernel source line) and fails the
computation with it. No host callback is involved, so the check works inside ``custom_partitioning`` bodies and in
every process of a ``jax.distributed`` job.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import jax

from jt_core.cpu.compiled.memory import INTO_INPUT, Access, BufferSpec
from jt_core.errors import OutOfBoundsAccessError
from jt_core.interpreter import ffi_launcher
from jt_core.interpreter.access import Buffer, describe_out_of_bounds, describe_store_into_input

__all__ = ["checked", "describe", "description", "handler_ready"]


def description(name: str, grid: Sequence[int], buffers: Sequence[BufferSpec], accesses: Sequence[Access]) -> str:
    """What :func:`describe` needs to word an error record of a kernel, as JSON text."""
    return json.dumps(
        {
            "kernel": name,
            "grid": list(grid),
            "buffers": [[b.name, b.dtype.itemsize, b.size, b.writable, b.output, list(b.shape)] for b in buffers],
            "accesses": [[a.op, a.buffer, a.itemsize, a.line] for a in accesses],
        }
    )


def describe(text: str, record: Sequence[int]) -> OutOfBoundsAccessError:
    """The error a kernel's error record stands for (``record`` as :data:`~jt_core.cpu.compiled.memory.ERROR_FIELDS`
    orders it; ``text`` from :func:`description`)."""
    info = json.loads(text)
    kind, program, access_index, first, furthest, count = (int(v) for v in record[:6])
    op, buffer_index, itemsize, line = info["accesses"][access_index]
    name, element_size, size, writable, output, shape = info["buffers"][buffer_index]
    kernel = info["kernel"]
    grid = info["grid"]
    program_id = (program // (grid[1] * grid[2]), (program // grid[2]) % grid[1], program % grid[2])
    if kind == INTO_INPUT:
        message = describe_store_into_input(kernel, op, name)
    else:
        buffer = Buffer(name, 0, size * element_size, writable, element_size, output, tuple(shape))
        empty = [b[0] for b in info["buffers"] if b[2] == 0]
        message = describe_out_of_bounds(
            kernel, op, itemsize, buffer, first * itemsize, furthest * itemsize, count, empty, known=True
        )
    where = f" at {line}" if line else ""
    return OutOfBoundsAccessError(f"{message} [program_id {program_id}{where}]")


def handler_ready() -> None:
    """Loads jt's CPU handler library (building it where it is not built yet) and installs :func:`describe` as its
    reporter.

    Raises:
        RuntimeError: When the library cannot be built or loaded here.
    """
    ffi_launcher.ensure_registered()
    ffi_launcher.set_reporter(describe)


def checked(
    outputs: Sequence[jax.Array], error: jax.Array, name: str, text: str, has_side_effect: bool = False
) -> list[jax.Array]:
    """``outputs``, after a check that fails the computation when ``error`` records an error.

    Args:
        outputs: The kernel's outputs.
        error: Its error record.
        name: The call's name.
        text: What :func:`description` says of the kernel.
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
    return list(call(error, *outputs, name=name, description=text))
