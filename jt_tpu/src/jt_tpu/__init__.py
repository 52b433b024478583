"""jt-tpu: Triton kernels on TPUs. A kernel's Triton IR is translated into XLA operations (`jt_core.translation`),
lowered the way a TPU runs them fast: block accesses as slices, a K-loop of ``tl.dot`` as one product, the whole
grid at once, 32-bit arithmetic.

* `plugin` -- the jt plugin module (entry point ``tpu`` of group ``jt``);
* `backend` -- `TpuBackend`: Triton's front end on the kernel, its TTIR kept;
* `launcher` -- `TpuLauncher` and `TPU_STRATEGY`: the translation's choices for a TPU, and what it refuses.
"""

from __future__ import annotations

__all__: list[str] = []
