"""A lowered call as jt's CPU launchers run it (`LoweredCall`): the configuration is chosen at the first run,
by trials under ``JT_CPU_AUTOTUNE=1``."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence

import numpy as np

from jt_core import settings, tuning
from jt_core.call import KernelCall
from jt_core.interpreter.execute import execute, execute_into
from jt_core.plugin.values import CompiledKernel

__all__ = ["CPU_DEVICE_NAME", "LoweredCall", "cpu_autotune_enabled"]

#: The device name autotuning results on the CPU are remembered under.
CPU_DEVICE_NAME = "cpu-triton-interpreter"


def cpu_autotune_enabled() -> bool:
    """Whether autotuned kernels are tuned on the CPU (``JT_CPU_AUTOTUNE=1``); otherwise the first config runs."""
    return settings.flag("JT_CPU_AUTOTUNE")


@dataclasses.dataclass
class LoweredCall:
    """A lowered call as the CPU launchers run it: the call, its compiled configurations and the one chosen.

    The configuration is chosen on the first run (by trials when ``JT_CPU_AUTOTUNE=1``, else the first) and then
    kept: the devices running their shards of the call at the same time wait for that one choice, so every device
    runs the same configuration.

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
        call, kernels = self.call, self.kernels
        index = self.chosen
        if index is None:
            with self.lock:
                index = self.chosen
                if index is None:
                    if len(kernels) == 1 or not cpu_autotune_enabled():
                        index = 0
                    else:
                        # Trials run on copies (execute() allocates its outputs), so the buffers XLA handed over,
                        # an aliased operand's included, are untouched until the chosen configuration's results land.
                        results: dict[int, list[np.ndarray]] = {}

                        def trial(i: int) -> float:
                            start = time.perf_counter()
                            results[i] = execute(call, kernels[i], operands, i)
                            return time.perf_counter() - start

                        index = tuning.choose_config(call, CPU_DEVICE_NAME, trial)
                        self.chosen = index
                        if index in results:
                            for out, value in zip(outputs, results[index]):
                                np.copyto(out, value)
                            return
                    self.chosen = index
        execute_into(call, kernels[index], operands, outputs, index, keep_subnormals=self.keep_subnormals)
