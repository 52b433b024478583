"""The ``logged`` CPU launcher: runs each call's kernel on the host and logs the run.

``LoggedLauncher.lower`` emits a host callback (``emit_host_callback``): when XLA runs the computation, the callback
gets the operands as NumPy arrays and runs the call's kernel on them in Triton's interpreter (``run_on_host``), then
adds a `Run` to the log (`runs`). Under ``jax.vmap`` jt hands the launcher a call whose kernel is a
generated ``@triton.jit`` wrapper around the user's kernel, with the batch on a grid axis (``call.batch`` says how);
``run_on_host`` runs it like any other kernel, and the log keeps the batch shape.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from typing import Any

from jt_core.plugin import CompiledKernel, KernelCall, Launcher, emit_host_callback, run_on_host


@dataclasses.dataclass(frozen=True)
class Run:
    """One run of a call.

    Attributes:
        name: The call's name (the kernel's, unless ``name=`` was given).
        grid: The grid that ran; under ``jax.vmap``, with the batch on one axis.
        batch_shape: The ``jax.vmap`` batch dimensions (``()`` for a call that is not batched).
        seconds: How long the kernel ran.
    """

    name: str
    grid: tuple[int, int, int]
    batch_shape: tuple[int, ...]
    seconds: float


_runs: list[Run] = []
_lock = threading.Lock()  # XLA runs host callbacks on threads of its own


def runs() -> list[Run]:
    """Every run logged in this process, oldest first."""
    with _lock:
        return list(_runs)


class LoggedLauncher(Launcher):
    """Runs calls on the host, in Triton's interpreter, and logs each run."""

    platform = "cpu"
    name = "logged"
    #: Below jt's own CPU launchers: used when a call asks for it (``launcher="logged"`` or
    #: ``JT_LAUNCHER_CPU=logged``).
    priority = -10

    def runs_through_host_callback(self, call: KernelCall) -> bool:
        return True  # so that jt refuses it, with a clear error, where JAX drops host callbacks

    def passes_tensor_descriptors(self, call: KernelCall, parameters: Sequence[str]) -> bool:
        return True  # run_on_host passes host-side tensor descriptors

    def lower(
        self, ctx: Any, call: KernelCall, kernels: Sequence[CompiledKernel], operands: Sequence[Any], device: Any
    ) -> Sequence[Any]:
        # An autotuned call comes with one compiled kernel per configuration; like jt's CPU backend, run the first.
        kernel, grid = kernels[0], call.configs[0].grid
        batch_shape = call.batch.batch_shape if call.batch is not None else ()

        def run(*arrays: Any) -> list[Any]:
            start = time.perf_counter()
            outputs = run_on_host(call, kernel, arrays)
            with _lock:
                _runs.append(Run(call.name, grid, batch_shape, time.perf_counter() - start))
            return outputs

        return emit_host_callback(ctx, run, operands, has_side_effect=call.launch.has_side_effect)
