"""Triton's interpreter on host buffers: what jt's CPU launchers and `jt_core.plugin.run_on_host` run.

* `execute` -- one configuration of a call on host arrays: outputs prepared, the kernel
  run, unwritten outputs reported;
* `runner` -- the kernel in Triton's interpreter, without torch, under a process-wide lock;
* `rewriting` -- the kernel's source made to mean what compiled Triton makes of it;
* `access`, `races` -- the bounds check and the race check;
* `numerics` -- where the interpreter's numbers differ from a GPU's, put right;
* `mapped` -- ``tl.map_elementwise``, which the stock interpreter cannot run.
"""
