"""The ``interpreter`` CPU launcher: a JAX host callback that runs the call in Triton's interpreter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jt_core import _compat
from jt_core.call import KernelCall
from jt_core.cpu.lowered import LoweredCall
from jt_core.plugin.roles import Launcher
from jt_core.plugin.values import CompiledKernel

__all__ = ["CpuLauncher"]


class CpuLauncher(Launcher):
    """Lowers a call to a host callback that runs the interpreter."""

    platform = "cpu"
    name = "interpreter"
    priority = 0

    def passes_tensor_descriptors(self, call: KernelCall, parameters: Sequence[str]) -> bool:
        return True

    def runs_through_host_callback(self, call: KernelCall) -> bool:
        return True

    def lower(
        self,
        ctx: Any,
        call: KernelCall,
        kernels: Sequence[CompiledKernel],
        operands: Sequence[Any],
        device: Any | None,
    ) -> Sequence[Any]:
        lowered = LoweredCall(call, tuple(kernels))

        def callback(*arrays: Any) -> tuple[np.ndarray, ...]:
            outputs = [np.empty(aval.shape, dtype=aval.dtype) for aval in call.out_avals]
            lowered.run([np.asarray(a) for a in arrays], outputs)
            return tuple(outputs)

        return _compat.emit_python_callback(ctx, callback, operands, has_side_effect=call.launch.has_side_effect)
