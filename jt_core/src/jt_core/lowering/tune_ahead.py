"""Choosing an autotuned call's configuration before it is lowered: for a launcher that lowers one, and for a
call of a computation that the processes of a ``jax.distributed`` job share."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from jt_core import distributed, tuning
from jt_core.call import KernelCall
from jt_core.lowering.reporting import report
from jt_core.plugin import facade
from jt_core.plugin.roles import Launcher
from jt_core.primitive import triton_kernel_call_p

__all__ = ["tune_ahead"]


def tune_ahead(
    call: KernelCall,
    platform: str,
    device: Any | None,
    launcher: Launcher,
    exchange: distributed.Exchange | None = None,
    through_next_launcher: bool = False,
) -> KernelCall:
    """The call with its one configuration, chosen before lowering, for a launcher that lowers one or for a call of
    a computation that several processes share (``exchange``).

    The choice is the remembered winner for this device kind, else the winner of trials run now on scratch buffers
    through the launcher, or ``through_next_launcher`` through the platform's next one (for a launcher that cannot
    run the candidates itself: `needs_tuning_ahead`). In a job, the first process
    sharing the computation chooses and every process runs its choice (`jt_core.tuning.agreed_config`).
    Returns ``call`` unchanged when no winner can be had outside a job (no device, tuning records disabled): the
    launcher then says why it cannot express the call.
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
    if index is None:
        tuner = facade.next_launcher(platform, launcher) if through_next_launcher else launcher
        report(call, f"tuning {len(call.configs)} configurations with launcher {tuner.name!r} before lowering")
        tuning.take_recent_choice(call)  # an earlier choice, on another device say, is not this run's
        _run_on_scratch(dataclasses.replace(call, launch=dataclasses.replace(call.launch, launcher=tuner.name)), device)
        index = tuning.take_recent_choice(call)
        if index is None:
            index = tuning.load_choice(key, len(call.configs))
    return index


def _run_on_scratch(call: KernelCall, device: Any) -> None:
    import jax

    rng = np.random.default_rng(0)
    operands = []
    for aval in call.operand_avals:
        dtype = np.dtype(aval.dtype)
        if dtype.kind == "f" or "float" in dtype.name:
            values = rng.standard_normal(aval.shape).astype(dtype)
        elif dtype.kind == "b":
            values = rng.integers(0, 2, aval.shape).astype(dtype)
        else:
            values = rng.integers(0, 8, aval.shape).astype(dtype)
        operands.append(jax.device_put(values, device))
    results = jax.jit(lambda *ops: triton_kernel_call_p.bind(*ops, call=call))(*operands)
    jax.block_until_ready(results)
