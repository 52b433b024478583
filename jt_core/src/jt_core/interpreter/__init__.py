"""The embedded CPU backend: runs Triton kernels with Triton's interpreter inside ``jax.jit``.

Switches:

* ``JT_CPU_BOUNDS_CHECK=0`` turns off the address checks on loads and stores (about 30% faster; an out-of-bounds
  access may then crash the process instead of raising :class:`~jt_core.errors.OutOfBoundsAccessError`).
* ``JT_CPU_RACE_CHECK=1`` (or :func:`jt_core.cpu_checks`) reports data races between the program instances of a
  launch (:class:`~jt_core.errors.DataRaceError`) and outputs no program wrote (``JT_CPU_UNWRITTEN``).
* ``debug=True`` on a call also sanitises integer overflow (slower).

Autotuned kernels run with one configuration on the CPU: the first ``triton.Config`` left after the caller's
fixed values have pruned the list. With ``JT_CPU_AUTOTUNE=1`` they are tuned instead: every configuration runs
once on the first execution, the fastest is kept, and the choice is remembered in the cache directory
(``JT_CACHE_DIR``) so that later processes do not tune again.
"""
