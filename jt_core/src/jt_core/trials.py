"""The trials of an autotuned call whose configurations XLA compiles (a translating launcher's: the CPU's
compiled path, a TPU's): which configuration runs, chosen by running them on scratch operands.

Where the call is tuned, every configuration is lowered first; configurations that lower to the same XLA program
(on a TPU, those that differ only in ``num_warps``, ``num_stages``, or a block size the translation folds into
one product) are compiled and timed once, and the compiles of the others run at once, in threads (XLA's compiles,
seconds each for a TPU, then overlap). The winner is remembered per machine (`jt_core.tuning`), so a later process
reads it. Where the call is not tuned, the first configuration that writes every element of the outputs runs
(`jt_core.coverage`).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jt_core import coverage, tuning
from jt_core.call import KernelCall
from jt_core.errors import UnsupportedKernelError

__all__ = ["chosen_config", "scratch_operands"]

#: A configuration's function of the operands (`jt_core.translation.launcher.kernel_function`): given the index
#: and the coverage check's sentinel run (or ``None``), the outputs then the faults.
Runner = Callable[[int, "int | None"], Callable[..., list[jax.Array]]]


def scratch_operands(call: KernelCall) -> list[jax.Array]:
    """Operands to run the configurations on: random floats, small integers (seed 0, the same every time)."""
    rng = np.random.default_rng(0)
    scratch = []
    for aval in call.operand_avals:
        dtype = np.dtype(aval.dtype)
        if jnp.issubdtype(dtype, jnp.floating):
            scratch.append(jnp.asarray(rng.standard_normal(aval.shape).astype(dtype)))
        else:
            scratch.append(jnp.asarray(rng.integers(0, 2 if dtype == np.bool_ else 8, aval.shape).astype(dtype)))
    return scratch


def chosen_config(
    call: KernelCall,
    device_name: str,
    tuned: bool,
    runner: Runner,
    checked: Callable[[int], Callable[..., list[jax.Array]]],
) -> int:
    """The configuration an autotuned call runs: the first, or where ``tuned``, the fastest compiled (remembered per
    machine like every autotuning winner); for configurations that launch the same grid, only those that write
    every element of the outputs, checked on scratch operands (`jt_core.coverage`).

    Args:
        call: The call.
        device_name: The device the winner is remembered for.
        tuned: Whether the configurations are timed.
        runner: Each configuration's function of the operands, with a sentinel run or not.
        checked: Each configuration's function of the operands that returns its outputs, checked after the kernel.

    Raises:
        NoUsableConfigError: When no configuration is usable.
        UnsupportedKernelError: When a configuration cannot be translated and none other is usable.
    """
    if len(call.configs) == 1:
        return 0
    covered = coverage.applies(call)
    if not (covered or tuned):
        return 0
    scratch = scratch_operands(call)

    def measure(index: int) -> dict[int, np.ndarray]:
        """Runs configuration ``index`` into both sentinels: what it left unwritten. Its faults are not looked at:
        scratch integers may send an access astray, which is dropped and says nothing about coverage."""
        runs = []
        for run in (0, 1):
            with jax.enable_x64(True):
                fn = jax.jit(runner(index, run))
                runs.append([np.asarray(out) for out in jax.block_until_ready(fn(*scratch))[:-1]])
        return {
            out: coverage.unwritten_elements(runs[0][out], runs[1][out])
            for out in coverage.checked_outputs(call, call.configs[index])
        }

    check = coverage.CoverageCheck(call, measure)
    if not tuned:
        return check.first_usable()  # an UnsupportedKernelError is the launcher's to hand over or refuse
    timer = _Timer(call, checked, scratch)

    def trial(index: int) -> float:
        if covered and not check.usable(index):
            return float("inf")
        return timer.time(index)

    def none_usable() -> Exception:
        return timer.unsupported[0] if timer.unsupported else check.error()

    index = tuning.choose_config(call, device_name, trial, none_usable)
    return check.chosen(index) if covered else index


class _Timer:
    """Compiles each configuration (the alike ones once, the others at once in threads) and times it."""

    def __init__(self, call: KernelCall, checked: Callable[[int], Any], scratch: Sequence[jax.Array]) -> None:
        self.call = call
        self.checked = checked
        self.scratch = scratch
        self.unsupported: list[UnsupportedKernelError] = []
        #: Each configuration's program (the digest of its lowered text), and each program's executable.
        self._program: dict[int, str] = {}
        self._compiled: dict[str, Any] = {}
        self._times: dict[str, float] = {}

    def _lowered(self, index: int) -> Any:
        try:
            with jax.enable_x64(True):
                return jax.jit(self.checked(index)).lower(*self.scratch)
        except UnsupportedKernelError as exc:
            return exc

    def _prepare(self) -> None:
        lowered = {index: self._lowered(index) for index in range(len(self.call.configs))}
        unique: dict[str, Any] = {}
        for index, found in lowered.items():
            if isinstance(found, UnsupportedKernelError):
                self._program[index] = f"unsupported {index}"
                self._compiled[self._program[index]] = found
                continue
            digest = hashlib.sha256(found.as_text().encode()).hexdigest()
            self._program[index] = digest
            unique.setdefault(digest, found)
        workers = max(1, min(len(unique), os.cpu_count() or 1, 8))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for digest, executable in zip(unique, pool.map(lambda low: low.compile(), unique.values()), strict=True):
                self._compiled[digest] = executable

    def time(self, index: int) -> float:
        """The median of three runs of configuration ``index`` (its program's, where another has the same)."""
        if not self._program:
            self._prepare()
        program = self._program[index]
        executable = self._compiled[program]
        if isinstance(executable, UnsupportedKernelError):
            self.unsupported.append(executable)
            return float("inf")
        if program not in self._times:
            jax.block_until_ready(executable(*self.scratch))
            times = []
            for _ in range(3):
                start = time.perf_counter()
                jax.block_until_ready(executable(*self.scratch))
                times.append(time.perf_counter() - start)
            self._times[program] = sorted(times)[1]
        return self._times[program]

    @property
    def programs(self) -> int:
        """How many different programs the configurations lowered to."""
        return len(set(self._program.values()))
