"""Which configurations of an autotuned call write every element of its outputs, and what happens to the others.

A grid that is not sized by the metaparameters (a fixed grid, or a callable that gives every config the same grid)
launches the same programs whichever configuration runs. A configuration whose blocks are too small for that grid
leaves part of an output unwritten, and being quick it could win the tuning: a wrong number. So, for such calls,
every configuration about to be chosen first runs into outputs pre-filled with a sentinel, and again into outputs
pre-filled with a second one: an element that holds the first sentinel after the first run and the second after the
second was written by no program (no value a kernel writes can be both). Outputs aliased to an input or zeroed
before the launch start from data, not garbage, and are not checked.

A configuration that leaves elements unwritten is set aside with one warning naming it and the count
(`jt_core.ConfigSkippedWarning`); when every one does, the call fails with an error naming ``grid`` and the fix
(`jt_core.NoUsableConfigError`). Where the check runs: the CPU launchers when they choose a configuration (the
first that covers the outputs, or the fastest that does under ``JT_CPU_AUTOTUNE=1``), and jt's GPU launch handler
in its tuning trials (its ``coverage`` attribute lists the outputs to check).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from jt_core.call import KernelCall, LaunchConfig, static_key
from jt_core.errors import ConfigSkippedWarning, NoUsableConfigError, warn_in_user_code

__all__ = [
    "SENTINELS",
    "applies",
    "checked_outputs",
    "config_skipped",
    "fill",
    "no_usable_config",
    "unwritten",
    "unwritten_message",
]

#: The bytes the two runs' outputs are filled with.
SENTINELS = (0xA5, 0x5A)


def applies(call: KernelCall) -> bool:
    """Whether the call's configurations are checked: several of them, differing in their metaparameters, all
    launching the same grid."""
    configs = call.configs
    if len(configs) < 2 or len({config.grid for config in configs}) != 1:
        return False
    return len({static_key((config.constexprs, config.descriptor_blocks)) for config in configs}) > 1


def checked_outputs(call: KernelCall, config: LaunchConfig | None = None) -> list[int]:
    """The outputs checked for ``config`` (for any configuration, when ``None``): those neither aliased to an input
    nor zeroed; none when the call is not checked (`applies`)."""
    if not applies(call):
        return []
    aliased = {out for _, out in call.aliases}
    zeroed = set(config.zeroed_outputs) if config is not None else set()
    return [index for index in range(len(call.out_avals)) if index not in aliased and index not in zeroed]


def fill(array: np.ndarray, run: int) -> None:
    """Fills an output with the sentinel of run ``run`` (0 or 1) before the configuration runs into it."""
    (array.reshape(1) if array.ndim == 0 else array).view(np.uint8).fill(SENTINELS[run])


def unwritten(first: np.ndarray, second: np.ndarray) -> int:
    """How many elements no program wrote: those holding the first sentinel after the first run and the second
    sentinel after the second."""
    itemsize = first.dtype.itemsize
    a = np.ascontiguousarray(first).view(np.uint8).reshape(-1, itemsize)
    b = np.ascontiguousarray(second).view(np.uint8).reshape(-1, itemsize)
    return int(np.count_nonzero(np.all(a == SENTINELS[0], axis=1) & np.all(b == SENTINELS[1], axis=1)))


def unwritten_message(call: KernelCall, counts: Mapping[int, int]) -> str:
    """What a configuration left unwritten: ``1000 of 4096 elements of output 0 (f32[4096])``."""
    parts = []
    for index, count in sorted(counts.items()):
        aval = call.out_avals[index]
        total = int(np.prod(aval.shape, dtype=np.int64))
        parts.append(f"{count} of {total} elements of output {index} ({aval.str_short()})")
    return "it left " + " and ".join(parts) + " unwritten"


def _grid_text(call: KernelCall) -> str:
    axes = list(call.configs[0].grid)
    while len(axes) > 1 and axes[-1] == 1:
        axes.pop()
    return str(tuple(axes))


def config_skipped(call: KernelCall, config: LaunchConfig, why: str) -> None:
    """Warns that ``config`` is set aside (`jt_core.ConfigSkippedWarning`), saying ``why``."""
    warn_in_user_code(f"triton_call {call.name!r}: config [{config.label}] is skipped: {why}", ConfigSkippedWarning)


def no_usable_config(call: KernelCall, reasons: Sequence[tuple[str, str]], unwritten_only: bool) -> Exception:
    """The error for a call none of whose configurations can run: each configuration and why.

    Args:
        call: The call.
        reasons: ``(config label, why)`` for every configuration.
        unwritten_only: Whether every one left part of an output unwritten (then the error says how to fix
            ``grid``).
    """
    listed = "; ".join(f"[{label}]: {why}" for label, why in reasons)
    message = f"triton_call {call.name!r}: no @triton.autotune config can run ({listed})"
    if unwritten_only:
        message += (
            f". grid={_grid_text(call)} launches the same programs whichever config runs, and none of them writes "
            "every element of the outputs: pass grid as a callable of the metaparameters, so that each config "
            "launches the programs its block sizes need (grid=lambda meta: (triton.cdiv(n, meta['BLOCK']),)); if "
            "the kernel leaves part of an output unwritten by design, name it in zeroed_outputs= (or alias it to an "
            "input with input_output_aliases=)"
        )
    return NoUsableConfigError(message)
