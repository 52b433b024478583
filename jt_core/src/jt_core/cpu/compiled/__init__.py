"""The compiled CPU path: a kernel's TTIR traced into JAX operations, which XLA compiles with the computation.

* :mod:`~jt_core.cpu.compiled.program` -- the TTIR as plain data, and its form on disk;
* :mod:`~jt_core.cpu.compiled.extract` -- copying it out of Triton's front end;
* :mod:`~jt_core.cpu.compiled.lang` -- Triton's element-wise operations in JAX;
* :mod:`~jt_core.cpu.compiled.memory` -- buffers, pointers, loads, stores and atomics, and the bounds check;
* :mod:`~jt_core.cpu.compiled.control` -- loops and branches;
* :mod:`~jt_core.cpu.compiled.affine` -- integers affine in the program id, and what they prove about stores;
* :mod:`~jt_core.cpu.compiled.shapes`, :mod:`~jt_core.cpu.compiled.accesses`, :mod:`~jt_core.cpu.compiled.reductions`
  -- the operations that make and move values, reach memory, reduce;
* :mod:`~jt_core.cpu.compiled.kernel` -- tracing operations, calls; :mod:`~jt_core.cpu.compiled.tracer` -- what the
  handlers use of the kernel they trace;
* :mod:`~jt_core.cpu.compiled.grid` -- every program of the grid, in order or side by side;
* :mod:`~jt_core.cpu.compiled.checking` -- raising a kernel's out-of-bounds error after it ran;
* :mod:`~jt_core.cpu.compiled.launcher` -- the ``compiled`` launcher.
"""
