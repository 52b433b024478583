"""Running a call's kernel on host arrays, for launchers: `run_on_host`, and `emit_host_callback`, which
makes a lowered call run a Python function on the host when XLA executes it.

Both are part of the plugin surface (`jt_core.plugin`): a launcher that runs kernels on the host builds on them
instead of on Triton's interpreter, whose state and language patches are private to Triton and must be set up for
every run (a kernel that calls ``@triton.jit`` helpers, as the wrapper kernel of a ``jax.vmap`` call does, fails
with "Cannot call @triton.jit'd outside of the scope of a kernel" without them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jt_core import _compat
from jt_core.call import CPU_CHECKS, INPUT, OUTPUT, KernelCall
from jt_core.checks import CpuChecks
from jt_core.errors import KernelCallTypeError, KernelCallValueError, UnsupportedKernelError, short_repr
from jt_core.plugin.values import CompiledKernel

__all__ = ["emit_host_callback", "run_on_host"]


@dataclasses.dataclass(frozen=True)
class _Interpreted:
    """What the interpreter runs of a kernel another backend compiled: its Python function, and the checks the CPU
    backend would make for the call."""

    fn: Any
    checks: CpuChecks


def run_on_host(
    call: KernelCall,
    kernel: CompiledKernel,
    operands: Sequence[Any],
    *,
    config: int = 0,
    outputs: Sequence[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Runs one configuration of a call on host arrays with Triton's interpreter, as jt's CPU backend does, and
    returns its outputs.

    It runs any call a launcher is given, including those ``jax.vmap`` made (their `KernelCall.fn` is a
    generated ``@triton.jit`` wrapper that calls the user's kernel: see `BatchInfo`), with the
    same meaning as jt's CPU backend: nested ``@triton.jit`` helpers, ``and``/``or`` on tensors, ``bfloat16``,
    tensor descriptors, and the memory-access checks (an out-of-bounds access raises
    `OutOfBoundsAccessError` instead of crashing the process). Before the kernel starts, an
    output aliased with an operand holds that operand's values, an output named in ``zeroed_outputs`` holds zeros,
    and every other output is filled with NaN (or ``0xA5`` bytes), so that an element the kernel does not write
    shows. Runs are serialised process-wide (Triton's interpreter keeps global state); it is safe to call from XLA's
    host-callback threads.

    Args:
        call: The bound call, as `Launcher.lower <jt_core.plugin.Launcher.lower>` receives it.
        kernel: The compiled kernel of configuration ``config`` (``kernels[config]`` in ``lower``). A kernel jt's
            CPU backend compiled runs with the checks it was compiled with; a kernel of another backend runs from
            the call's kernel function (its binary is not used), with the checks the CPU backend would make for the
            call.
        operands: The array operands, in `KernelCall.operand_avals` order: NumPy arrays, or anything
            ``numpy.asarray`` takes, of exactly those shapes and dtypes.
        config: Which of `KernelCall.configs` runs.
        outputs: Arrays to write the outputs into (XLA's result buffers, say): writable, C-contiguous, of the shapes
            and dtypes of `KernelCall.out_avals`. ``None`` allocates them.

    Returns:
        The outputs, in `KernelCall.out_avals` order (``outputs`` itself when given).

    Raises:
        KernelCallTypeError: When ``call`` or ``kernel`` is not what a launcher is given.
        KernelCallValueError: When ``config`` is out of range, an operand or an output does not match the call, or
            ``kernel`` was compiled for another kernel.
        UnsupportedKernelError: For a kernel of a dialect Triton's interpreter cannot run (Gluon), or one using
            what it cannot run (inline assembly).
        KernelRuntimeError: When the kernel fails while running (`OutOfBoundsAccessError`,
            `DataRaceError` with the race check on, ...).
    """
    # Loaded at the first run: importing jt_core.plugin (every plugin does) must not load the interpreter.
    from jt_core.interpreter.execute import INTERPRETED_DIALECTS, execute_into

    if not isinstance(call, KernelCall):
        raise KernelCallTypeError(
            f"run_on_host(call=...) takes the KernelCall a launcher's lower() receives, got {short_repr(call)} "
            f"({type(call).__name__})"
        )
    if not isinstance(kernel, CompiledKernel):
        raise KernelCallTypeError(
            f"run_on_host(kernel=...) takes a CompiledKernel (kernels[config] in a launcher's lower()), got "
            f"{short_repr(kernel)} ({type(kernel).__name__})"
        )
    if isinstance(config, bool) or not isinstance(config, int) or not 0 <= config < len(call.configs):
        raise KernelCallValueError(
            f"run_on_host(config=...) takes the index of one of the {len(call.configs)} configurations of "
            f"{call.name!r} (0 to {len(call.configs) - 1}), got {short_repr(config)}"
        )
    if call.dialect.name not in INTERPRETED_DIALECTS:
        raise UnsupportedKernelError(
            f"run_on_host: {call.name!r} is a {call.dialect.name} kernel, which Triton's interpreter cannot run "
            f"(it runs {', '.join(INTERPRETED_DIALECTS)} kernels); run it on a GPU platform"
        )
    arrays = _operands(call, operands)
    given = outputs
    if given is None:
        given = [np.empty(aval.shape, dtype=aval.dtype) for aval in call.out_avals]
    else:
        _check_outputs(call, given)
    execute_into(call, _interpretable(call, kernel), arrays, given, config)
    return list(given)


def _slot_names(call: KernelCall, kind: str) -> dict[int, str]:
    """The parameter leaf each operand (``INPUT``) or output (``OUTPUT``) is passed to, by index."""
    return {slot.index: slot.name for slot in call.slots if slot.kind == kind}


def _describe(shape: Sequence[int], dtype: Any) -> str:
    return f"{np.dtype(dtype).name}{list(shape)}"


def _operands(call: KernelCall, operands: Sequence[Any]) -> list[np.ndarray]:
    """The operands as NumPy arrays, checked against the call's avals."""
    if isinstance(operands, (str, bytes)) or not isinstance(operands, Sequence):
        raise KernelCallTypeError(
            f"run_on_host(operands=...) takes a sequence of {len(call.operand_avals)} arrays, got "
            f"{short_repr(operands)} ({type(operands).__name__})"
        )
    expected = ", ".join(_describe(a.shape, a.dtype) for a in call.operand_avals) or "none"
    if len(operands) != len(call.operand_avals):
        raise KernelCallValueError(
            f"run_on_host(operands=...): {call.name!r} takes {len(call.operand_avals)} array operands ({expected}), "
            f"got {len(operands)}"
        )
    names = _slot_names(call, INPUT)
    arrays = []
    for index, (operand, aval) in enumerate(zip(operands, call.operand_avals)):
        array = np.asarray(operand)
        if array.shape != tuple(aval.shape) or array.dtype != np.dtype(aval.dtype):
            raise KernelCallValueError(
                f"run_on_host(operands=...): operand {index} ({names.get(index, '?')}) of {call.name!r} is "
                f"{_describe(array.shape, array.dtype)}, where the call takes {_describe(aval.shape, aval.dtype)} "
                f"(the operands: {expected})"
            )
        arrays.append(array)
    return arrays


def _check_outputs(call: KernelCall, outputs: Sequence[Any]) -> None:
    """Checks caller-provided outputs against the call's avals."""
    expected = ", ".join(_describe(a.shape, a.dtype) for a in call.out_avals)
    if isinstance(outputs, (str, bytes)) or not isinstance(outputs, Sequence) or len(outputs) != len(call.out_avals):
        raise KernelCallValueError(
            f"run_on_host(outputs=...) takes {len(call.out_avals)} arrays for {call.name!r} ({expected}), got "
            f"{short_repr(outputs)}"
        )
    names = _slot_names(call, OUTPUT)
    for index, (out, aval) in enumerate(zip(outputs, call.out_avals)):
        where = f"run_on_host(outputs=...): output {index}" + (f" ({names[index]})" if index in names else "")
        if not isinstance(out, np.ndarray):
            raise KernelCallTypeError(f"{where} must be a NumPy array, got {type(out).__name__}")
        if out.shape != tuple(aval.shape) or out.dtype != np.dtype(aval.dtype):
            wanted = _describe(aval.shape, aval.dtype)
            raise KernelCallValueError(f"{where} is {_describe(out.shape, out.dtype)}, where the call gives {wanted}")
        if not out.flags.writeable or not out.flags.c_contiguous:
            raise KernelCallValueError(
                f"{where} must be writable and C-contiguous (the kernel writes through its address); pass "
                "numpy.empty(...) of its shape, or outputs=None"
            )


def _interpretable(call: KernelCall, kernel: CompiledKernel) -> CompiledKernel:
    """``kernel`` as the interpreter runs it: a CPU kernel as it is, another backend's with the call's kernel
    function and the CPU checks the call gives."""
    function = getattr(call.fn, "fn", call.fn)
    payload = kernel.payload
    if hasattr(payload, "fn") and hasattr(payload, "checks"):
        if payload.fn is not function:
            raise KernelCallValueError(
                f"run_on_host(kernel=...): the kernel was compiled from {_name(payload.fn)}, but the call runs "
                f"{_name(function)}; pass the kernel compiled for this call (kernels[config] in lower())"
            )
        return kernel
    checks = call.arguments_for_backend().get(CPU_CHECKS, CpuChecks())
    return dataclasses.replace(kernel, payload=_Interpreted(function, checks))


def _name(function: Any) -> str:
    return f"{getattr(function, '__qualname__', function)!s}()"


def emit_host_callback(
    ctx: Any,
    callback: Callable[..., Sequence[Any]],
    operands: Sequence[Any],
    *,
    has_side_effect: bool = False,
) -> Sequence[Any]:
    """Emits, inside `Launcher.lower <jt_core.plugin.Launcher.lower>`, an operation that calls
    ``callback`` on the host when XLA runs the computation, as jt's ``interpreter`` CPU launcher does.

    ``callback`` receives one NumPy array per operand (the lowering context's ``avals_in``) and returns one array
    per output, of the shapes and dtypes of the context's ``avals_out`` (JAX checks them). It runs on a thread of
    XLA's; what it raises reaches the caller as ``jax.errors.JaxRuntimeError``, whose message carries the
    exception's type and text. The operation is a JAX host callback: it runs on the CPU platform (and on GPUs, with
    copies to and from the host), but not inside ``custom_partitioning`` bodies spread over several CPU devices
    (answer `Launcher.runs_through_host_callback <jt_core.plugin.Launcher.runs_through_host_callback>`
    with ``True``, so that jt refuses such calls with a clear error).

    Args:
        ctx: The lowering context ``lower()`` was given.
        callback: ``callback(*operands) -> outputs``.
        operands: The MLIR values ``lower()`` was given.
        has_side_effect: Keep the operation even when its results are unused (pass
            ``call.launch.has_side_effect``).

    Returns:
        The MLIR values of the outputs, for ``lower()`` to return.
    """
    if not callable(callback):
        raise KernelCallTypeError(
            f"emit_host_callback(callback=...) takes a function of the operands, got {short_repr(callback)}"
        )

    def on_host(*arrays: Any) -> tuple[Any, ...]:
        return tuple(callback(*(np.asarray(a) for a in arrays)))

    return _compat.emit_python_callback(ctx, on_host, operands, has_side_effect=has_side_effect)
