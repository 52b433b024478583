"""Triton's interpreter on host buffers: what jt's CPU launchers and :func:`jt_core.plugin.run_on_host` run.

* :mod:`~jt_core.interpreter.execute` -- one configuration of a call on host arrays: outputs prepared, the kernel
  run, unwritten outputs reported;
* :mod:`~jt_core.interpreter.runner` -- the kernel in Triton's interpreter, without torch, under a process-wide lock;
* :mod:`~jt_core.interpreter.rewriting` -- the kernel's source made to mean what compiled Triton makes of it;
* :mod:`~jt_core.interpreter.access`, :mod:`~jt_core.interpreter.races` -- the bounds check and the race check;
* :mod:`~jt_core.interpreter.numerics` -- where the interpreter's numbers differ from a GPU's, put right.
"""
