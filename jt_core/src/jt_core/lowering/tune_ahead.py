"""Choosing an autotuned call's configuration before it is lowered: for a launcher that lowers one, for a launcher
that tunes ahead itself so that the winner runs alone (jt's GPU launch handler), and for a call of a computation
that the processes of a ``jax.distributed`` job share.

Tuning ahead runs the call with every configuration once, on scratch buffers of the call's shapes, through a
launcher that can run them all: it times them (checking, where the configurations launch the same grid, that each
writes every element of the outputs: `jt_core.coverage`) and remembers the winner for the device kind. The call is
then lowered with the winner alone, which runs exactly as the same configuration called fixed: one module, no
initialize stage, no choice left for run time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from jt_core import cache, coverage, distributed, tuning
from jt_core.call import KernelCall
from jt_core.errors import NoUsableConfigError
from jt_core.lowering.reporting import report
from jt_core.plugin import facade
from jt_core.plugin.roles import Launcher
from jt_core.primitive import triton_kernel_call_p

__all__ = ["in_scratch_run", "tune_ahead"]

#: The calls this thread runs on scratch buffers to tune them: their lowering keeps every configuration.
_scratch = threading.local()

#: What jt's GPU launch handler says when no configuration of a call can run (`jt_core.coverage`).
_NO_USABLE = "no @triton.autotune config can run"


def in_scratch_run(call: KernelCall) -> bool:
    """Whether ``call`` is being run on scratch buffers to tune it (its lowering must not tune ahead again)."""
    return any(running == call for running in getattr(_scratch, "calls", ()))


@contextlib.contextmanager
def _scratch_run(call: KernelCall) -> Iterator[None]:
    running = getattr(_scratch, "calls", [])
    _scratch.calls = [*running, call]
    try:
        yield
    finally:
        _scratch.calls = running


def tune_ahead(
    call: KernelCall,
    platform: str,
    device: Any | None,
    launcher: Launcher,
    exchange: distributed.Exchange | None = None,
    through_next_launcher: bool = False,
) -> KernelCall:
    """The call with its one configuration, chosen before lowering, for a launcher that lowers one or tunes ahead
    itself, or for a call of a computation that several processes share (``exchange``).

    The choice is the remembered winner for this device kind, else the winner of trials run now on scratch buffers
    through the launcher, or ``through_next_launcher`` through the platform's next one (for a launcher that cannot
    run the candidates itself: `needs_tuning_ahead`). In a job, the first process sharing the computation chooses
    and every process runs its choice (`jt_core.tuning.agreed_config`).
    Returns ``call`` unchanged when no winner can be had outside a job (no device, tuning records disabled, scratch
    buffers that do not fit the device's memory): the launcher then chooses when the call runs, or says why it
    cannot express the call.

    Raises:
        NoUsableConfigError: When no configuration can run (each one and why).
    """
    if exchange is not None:
        index: int | None = tuning.agreed_config(
            exchange, call, lambda: _local_winner(call, platform, device, launcher, through_next_launcher)
        )
    else:
        index = _local_winner(call, platform, device, launcher, through_next_launcher)
    if index is None:
        return call
    return dataclasses.replace(call, configs=(call.configs[index],))


def _local_winner(
    call: KernelCall, platform: str, device: Any | None, launcher: Launcher, through_next_launcher: bool
) -> int | None:
    kind = str(getattr(device, "device_kind", "") or "") if device is not None else ""
    if not kind:
        return None
    key = tuning.tuning_key(call, f"{platform}:{kind}")
    index = tuning.load_choice(key, len(call.configs))
    if index is None and not through_next_launcher and (not cache.enabled() or tuning.record_path(key) is None):
        return None  # a launcher tuning for itself tells its winner through the record: it chooses when it runs
    if index is None and _reads_integer_arrays(call):
        # Scratch integers cannot stand for offsets (a variable-length batch's cu_seqlens, token ids): a kernel
        # indexing memory with them strays on scratch data, and on a GPU that fails the whole process's context.
        report(
            call,
            "not tuned before lowering: an integer array operand may hold offsets that scratch data cannot stand "
            "for; the configurations are timed on the call's own operands when it runs",
        )
        return None
    if index is None:
        tuner = _tuner(call, platform, launcher) if through_next_launcher else launcher
        report(call, f"tuning {len(call.configs)} configurations with launcher {tuner.name!r} before lowering")
        tuning.take_recent_choice(call)  # an earlier choice, on another device say, is not this run's
        scratch = dataclasses.replace(call, launch=dataclasses.replace(call.launch, launcher=tuner.name))
        if not _run_on_scratch(scratch, device):
            return None
        index = tuning.take_recent_choice(call)
        if index is None:
            index = tuning.load_choice(key, len(call.configs))
            for skipped, why in tuning.skipped_configs(key, len(call.configs)) if index is not None else ():
                coverage.config_skipped(call, call.configs[skipped], why)
    return index


def _tuner(call: KernelCall, platform: str, launcher: Launcher) -> Launcher:
    """The launcher that runs the candidates for a launcher that cannot: the platform's first available one, by
    priority, that runs them itself (else the next one after ``launcher``)."""
    for other in facade.launchers_for(platform):
        if other is launcher or facade.unavailable_reason(other) is not None:
            continue
        if not facade.ask(other, "needs_tuning_ahead", otherwise=True, call=call):
            return other
    return facade.next_launcher(platform, launcher)


def _reads_integer_arrays(call: KernelCall) -> bool:
    """Whether an operand of the call is an array of integers (that the kernel may index memory with)."""
    return any(np.dtype(aval.dtype).kind in "iu" and aval.shape for aval in call.operand_avals)


def _scratch_operands(call: KernelCall, device: Any) -> list[Any]:
    """Operands of the call's shapes and dtypes on ``device``, made there: random normals for floating types,
    small integers otherwise (the timings of some kernels depend on the values)."""
    import jax
    import jax.numpy as jnp

    operands = []
    key = jax.random.key(0)
    with jax.default_device(device):
        for aval in call.operand_avals:
            key, sub = jax.random.split(key)
            dtype = np.dtype(aval.dtype)
            if dtype.kind == "f" or "float" in dtype.name:
                values = jax.random.normal(sub, aval.shape, jnp.float32).astype(dtype)
            elif dtype.kind == "b":
                values = jax.random.bernoulli(sub, 0.5, aval.shape)
            else:
                values = jax.random.randint(sub, aval.shape, 0, 8).astype(dtype)
            operands.append(jax.device_put(values, device))
    return operands


def _run_on_scratch(call: KernelCall, device: Any) -> bool:
    """Runs ``call`` on scratch operands on ``device``; whether it ran (``False``: they do not fit its memory).

    Raises:
        NoUsableConfigError: When the launcher found no configuration that can run.
    """
    import jax

    try:
        operands = _scratch_operands(call, device)
        with _scratch_run(call), tuning.skips_reported_by_caller():
            results = jax.jit(lambda *ops: triton_kernel_call_p.bind(*ops, call=call))(*operands)
            jax.block_until_ready(results)
    except jax.errors.JaxRuntimeError as exc:
        text = str(exc)
        said = f"triton_call '{call.name}': {_NO_USABLE}"
        if said in text:
            raise NoUsableConfigError(text[text.index(said) :]) from None
        if "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower():
            report(call, "scratch buffers to tune it ahead do not fit the device's memory; it is tuned when it runs")
            return False
        raise
    return True
