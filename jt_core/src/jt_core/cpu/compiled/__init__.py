"""The compiled CPU path: a kernel's TTIR traced into JAX operations, which XLA compiles with the computation.

* `program` -- the TTIR as plain data, and its form on disk;
* `extract` -- copying it out of Triton's front end;
* `lang` -- Triton's element-wise operations in JAX;
* `memory` -- buffers, pointers, loads, stores and atomics, and the bounds check;
* `control` -- loops and branches;
* `affine` -- integers affine in the program id, and what they prove about stores;
* `shapes`, `accesses`, `reductions`
  -- the operations that make and move values, reach memory, reduce;
* `kernel` -- tracing operations, calls; `tracer` -- what the
  handlers use of the kernel they trace;
* `grid` -- every program of the grid, in order or side by side;
* `side_by_side` -- programs side by side in boxes, one ``jax.vmap`` per grid axis; `blocks` -- their block
  accesses as slices of the buffers;
* `checking` -- raising a kernel's out-of-bounds error after it ran;
* `launcher` -- the ``compiled`` launcher.
"""
