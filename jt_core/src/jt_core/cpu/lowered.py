"""A lowered call as jt's CPU launchers run it (`LoweredCall`): the configuration is chosen at the first run,
by trials under ``JT_CPU_AUTOTUNE=1``, among those that write every element of the outputs (`jt_core.coverage`)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence

import numpy as np

from jt_core import coverage, settings, tuning
from jt_core.call import KernelCall
from jt_core.interpreter.execute import execute, execute_into
from jt_core.plugin.values import CompiledKernel

__all__ = ["CPU_DEVICE_NAME", "LoweredCall", "cpu_autotune_enabled"]

#: The device name autotuning results on the CPU are remembered under.
CPU_DEVICE_NAME = "cpu-triton-interpreter"


def cpu_autotune_enabled() -> bool:
    """Whether autotuned kernels are tuned on the CPU (``JT_CPU_AUTOTUNE=1``); otherwise the first config runs (the
    first that covers the outputs, for configurations that launch the same grid)."""
    return settings.flag("JT_CPU_AUTOTUNE")


@dataclasses.dataclass
class LoweredCall:
    """A lowered call as the CPU launchers run it: the call, its compiled configurations and the one chosen.

    The configuration is chosen on the first run (by trials when ``JT_CPU_AUTOTUNE=1``, else the first; among those
    that write every element of the outputs where the configurations launch the same grid) and then kept: the
    devices running their shards of the call at the same time wait for that one choice, so every device runs the
    same configuration.

    Attributes:
        call: The bound call.
        kernels: One compiled kernel per ``call.configs`` entry.
        chosen: The configuration that runs (``None`` before the first run).
        keep_subnormals: Whether the interpreter keeps subnormal floats, as a GPU does (``False``: it flushes them,
            as XLA's threads do, for the comparison with the compiled path that ``JT_CPU_DIFFERENTIAL`` makes).
    """

    call: KernelCall
    kernels: tuple[CompiledKernel, ...]
    keep_subnormals: bool = True
    chosen: int | None = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    def run(self, operands: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
        """Runs the chosen configuration on host arrays, writing into ``outputs`` (choosing it on the first run)."""
        index = self.chosen
        if index is None:
            with self.lock:
                index = self.chosen
                if index is None:
                    index, results = self._choose(operands)
                    self.chosen = index
                    tuning.note_best_config(self.call, index)
                    if results is not None:
                        for out, value in zip(outputs, results):
                            np.copyto(out, value)
                        return
        execute_into(self.call, self.kernels[index], operands, outputs, index, keep_subnormals=self.keep_subnormals)

    def _choose(self, operands: Sequence[np.ndarray]) -> tuple[int, list[np.ndarray] | None]:
        """The configuration that runs, and its outputs when choosing it ran it on ``operands``.

        Without ``JT_CPU_AUTOTUNE=1`` the first configuration runs, or, for a call whose configurations launch the
        same grid (`jt_core.coverage`), the first that writes every element of the outputs (or as much as any,
        where the operands may decide what is written). Under it, the fastest of those. Trials and checks run on
        copies (execute() allocates its outputs), so the buffers XLA handed over, an aliased operand's included, are
        untouched until the chosen configuration's results land.

        Raises:
            NoUsableConfigError: When no configuration is usable (`jt_core.coverage.CoverageCheck`).
        """
        call, kernels, kept = self.call, self.kernels, self.keep_subnormals
        if len(kernels) == 1:
            return 0, None
        checked = coverage.applies(call)
        results: dict[int, list[np.ndarray]] = {}
        seconds: dict[int, float] = {}

        def measure(index: int) -> dict[int, np.ndarray]:
            """Runs configuration ``index`` twice into sentinel-filled outputs (its first run's outputs are kept in
            ``results``, the time of one run in ``seconds``): what it left unwritten."""
            start = time.perf_counter()
            first = execute(call, kernels[index], operands, index, lambda out: coverage.fill(out, 0), kept)
            second = execute(call, kernels[index], operands, index, lambda out: coverage.fill(out, 1), kept)
            seconds[index] = (time.perf_counter() - start) / 2
            results[index] = first
            return {
                out: coverage.unwritten_elements(first[out], second[out])
                for out in coverage.checked_outputs(call, call.configs[index])
            }

        check = coverage.CoverageCheck(call, measure)
        if not cpu_autotune_enabled():
            if not checked:
                return 0, None
            index = check.first_usable()
            # A configuration that leaves elements unwritten runs again: they hold the poison, not a sentinel.
            return index, results[index] if check.covers(index) else None

        def trial(index: int) -> float:
            if checked:
                return seconds[index] if check.usable(index) else float("inf")
            start = time.perf_counter()
            results[index] = execute(call, kernels[index], operands, index, keep_subnormals=kept)
            return time.perf_counter() - start

        index = tuning.choose_config(call, CPU_DEVICE_NAME, trial, check.error)
        if not checked:
            return index, results.get(index)
        kept_results = results[index] if index in results and check.covers(index) else None
        return check.chosen(index), kept_results
