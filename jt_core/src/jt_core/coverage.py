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

The check compares configurations; it does not judge the kernel. An element that no configuration writes tells
nothing against any of them when what the programs write may depend on values the call passes in arrays: a
variable-length batch's offsets (``cu_seqlens``), indices, lengths, masks, all integer or boolean arrays. The
compiled path checks on scratch operands, whose integers cannot stand for those, and with the call's own operands
such a kernel may leave elements unwritten by design, as Triton runs it. So, for a call with an integer or boolean
array operand, only a configuration that leaves unwritten an element that another one writes is set aside (it
covers less than that one), and the call runs with the first configuration that covers as much as any
(`CoverageCheck`). Without such an operand what the programs write depends only on the grid, the scalars and the
metaparameters, all known exactly, and an element no configuration writes refuses the call as above.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from jt_core.call import KernelCall, LaunchConfig, static_key
from jt_core.errors import ConfigSkippedWarning, NoUsableConfigError, warn_in_user_code

__all__ = [
    "SENTINELS",
    "CoverageCheck",
    "applies",
    "checked_outputs",
    "config_skipped",
    "fill",
    "no_usable_config",
    "operands_may_decide_writes",
    "unwritten",
    "unwritten_elements",
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


def unwritten_elements(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Which elements no program wrote (flat, in row-major order): those holding the first sentinel after the first
    run and the second sentinel after the second."""
    itemsize = first.dtype.itemsize
    a = np.ascontiguousarray(first).view(np.uint8).reshape(-1, itemsize)
    b = np.ascontiguousarray(second).view(np.uint8).reshape(-1, itemsize)
    left = np.all(a == SENTINELS[0], axis=1) & np.all(b == SENTINELS[1], axis=1)
    if first.dtype == np.bool_:  # XLA holds a bool as 0 or 1: the compiled path fills True, then False
        left |= (a[:, 0] == 1) & (b[:, 0] == 0)
    return left


def unwritten(first: np.ndarray, second: np.ndarray) -> int:
    """How many elements no program wrote (`unwritten_elements`)."""
    return int(np.count_nonzero(unwritten_elements(first, second)))


def operands_may_decide_writes(call: KernelCall) -> bool:
    """Whether the call passes an array of integers or booleans, whose values (offsets, indices, lengths, masks) may
    decide what the programs write: then an element no configuration writes is not held against the call."""
    return any(np.dtype(aval.dtype).kind in "iub" and aval.shape for aval in call.operand_avals)


class CoverageCheck:
    """Chooses among a call's configurations by what each leaves unwritten (see the module's rule).

    Args:
        call: The call (`applies` is true for it).
        measure: Runs configuration ``i`` into both sentinels and returns, for each checked output
            (`checked_outputs`), which elements no program wrote (`unwritten_elements`). Called at most once per
            configuration, and only for those the choice needs.
    """

    def __init__(self, call: KernelCall, measure: Callable[[int], Mapping[int, np.ndarray]]) -> None:
        self.call = call
        self._measure = measure
        self._unwritten: dict[int, dict[int, np.ndarray]] = {}

    def _left(self, index: int) -> dict[int, np.ndarray]:
        if index not in self._unwritten:
            masks = {out: np.asarray(mask, bool) for out, mask in self._measure(index).items()}
            self._unwritten[index] = {out: mask for out, mask in masks.items() if mask.any()}
        return self._unwritten[index]

    def covers(self, index: int) -> bool:
        """Whether configuration ``index`` writes every checked element."""
        return not self._left(index)

    def usable(self, index: int) -> bool:
        """Whether configuration ``index`` may run: it covers the outputs, or (for a call whose operands may decide
        what is written) it leaves unwritten only elements that no configuration writes. Measures every
        configuration when ``index`` does not cover."""
        if self.covers(index):
            return True
        if not operands_may_decide_writes(self.call) or any(not left for left in self._unwritten.values()):
            return False  # another configuration writes what this one leaves
        left = self._left(index)
        everyone = [self._left(other) for other in range(len(self.call.configs))]
        for out, mask in left.items():
            by_all = mask.copy()
            for other in everyone:
                by_all &= other.get(out, np.zeros_like(mask))
            if not np.array_equal(by_all, mask):
                return False
        return True

    def first_usable(self) -> int:
        """The first configuration that covers the outputs, else the first `usable` one; warns for those set aside.

        Raises:
            NoUsableConfigError: When no configuration is usable.
        """
        count = len(self.call.configs)
        index = next((i for i in range(count) if self.covers(i)), None)
        if index is None:
            index = next((i for i in range(count) if self.usable(i)), None)
        if index is None:
            raise self.error()
        return self.chosen(index)

    def reasons(self) -> dict[int, str]:
        """Why each configuration measured so far and not usable is set aside."""
        return {
            index: unwritten_message(self.call, {out: int(mask.sum()) for out, mask in left.items()})
            for index, left in sorted(self._unwritten.items())
            if left and not self.usable(index)
        }

    def chosen(self, index: int) -> int:
        """Warns once for each configuration set aside (`config_skipped`) and returns ``index``."""
        for skipped, why in self.reasons().items():
            config_skipped(self.call, self.call.configs[skipped], why)
        return index

    def error(self) -> NoUsableConfigError:
        """The error for a call none of whose configurations is usable."""
        reasons = self.reasons()
        labels = [(config.label, reasons.get(i, "")) for i, config in enumerate(self.call.configs)]
        return no_usable_config(self.call, labels, unwritten_only=True)


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


def no_usable_config(call: KernelCall, reasons: Sequence[tuple[str, str]], unwritten_only: bool) -> NoUsableConfigError:
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
