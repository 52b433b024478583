"""Lowering a ``triton_kernel_call``: one module per job.

* `dispatch` -- the lowering rule: per platform, the backend's target, the launcher, the
  compiles, then the launcher's emission;
* `fallback` -- handing a call to the platform's next launcher while one cannot express it
  or raises;
* `tune_ahead` -- choosing an autotuned call's configuration before lowering, for launchers
  that lower one and for computations several processes share;
* `compiling` -- compiling the configurations, in parallel and ahead of native builds;
* `agreement` -- comparing the lowerings of the processes of a ``jax.distributed`` job;
* `devices` -- the devices a lowering runs on;
* `reporting` -- what a lowering says about its choices.

Importing the package registers the lowering rule with JAX.
"""

from __future__ import annotations

from jt_core.lowering import dispatch

__all__ = ["dispatch"]
