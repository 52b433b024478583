"""A Triton kernel's TTIR translated into XLA operations: the compiled path of jt's CPU backend, and of any platform
whose XLA runs it (jt-tpu's TPU backend).

Triton's front end gives a kernel's TTIR; this package traces it, operation by operation, into JAX operations that
XLA compiles with the rest of the computation, whatever device XLA runs it on. No custom call is involved, so the
result is plain StableHLO.

* `program` -- the TTIR as plain data, and its form on disk; `extract` -- copying it out of Triton's front end;
* `lang` -- Triton's element-wise operations in JAX; `floats` -- where XLA would round otherwise than Triton;
* `memory` -- buffers, pointers, loads, stores and atomics, and the bounds check;
* `control` -- loops and branches; `mapped` -- a scalar function mapped over blocks (``tl.map_elementwise``);
* `affine` -- integers affine in the program id, and what they prove about stores;
* `shapes`, `accesses`, `reductions`, `descriptors`, `extern` -- the operations that make and move values, reach
  memory, reduce, and call libdevice;
* `kernel` -- tracing operations, calls; `tracer` -- what the handlers use of the kernel they trace;
  `values` -- the kinds of values besides numbers, and the refusal of what cannot be expressed;
* `grid` -- every program of the grid, in order or side by side;
* `side_by_side` -- programs side by side in boxes, one ``jax.vmap`` per grid axis; `blocks` -- their block
  accesses as slices of the buffers;
* `strategy` -- `Strategy`, what a platform chooses; `backend` -- `TranslatingBackend`, which compiles a kernel to
  its TTIR; `launcher` -- `TranslatingLauncher`, which lowers a call to the translated operations.

A platform plugin imports the names below from ``jt_core.translation`` itself (they are part of jt's plugin
surface, with `jt_core.plugin`); each loads its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jt_core._surface import lazy_surface

if TYPE_CHECKING:
    from jt_core.translation.backend import TranslatedKernel, TranslatingBackend
    from jt_core.translation.launcher import TranslatingLauncher, poisoned_where_strayed
    from jt_core.translation.numerics import GPU_NUMERICS, XLA_NUMERICS, Numerics
    from jt_core.translation.strategy import CPU_STRATEGY, Strategy

#: The names of the translation's plugin surface, and the module of each.
_SURFACE = {
    "CPU_STRATEGY": "strategy",
    "GPU_NUMERICS": "numerics",
    "Numerics": "numerics",
    "XLA_NUMERICS": "numerics",
    "Strategy": "strategy",
    "TranslatedKernel": "backend",
    "TranslatingBackend": "backend",
    "TranslatingLauncher": "launcher",
    "poisoned_where_strayed": "launcher",
}

__all__ = [
    "CPU_STRATEGY",
    "GPU_NUMERICS",
    "XLA_NUMERICS",
    "Numerics",
    "Strategy",
    "TranslatedKernel",
    "TranslatingBackend",
    "TranslatingLauncher",
    "poisoned_where_strayed",
]


__getattr__, __dir__ = lazy_surface(__name__, _SURFACE, __all__)
