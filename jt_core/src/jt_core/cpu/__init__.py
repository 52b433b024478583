"""jt's builtin CPU backend: kernels compiled by XLA from their Triton IR (`jt_core.cpu.compiled`), or run by
Triton's interpreter (`jt_core.interpreter`) where the compiled path cannot take them or a check asks for it.

* `plugin` -- the builtin plugin ``cpu``, which registers the backend and its launchers;
* `backend` -- the backend: Triton's front end on the kernel, which checks it and gives its TTIR;
* `compiled` -- the compiled path and its launcher ``compiled``;
* `lowered` -- a lowered call as the interpreter's launchers run it, its configuration chosen at
  the first run;
* `ffi_launcher` -- the launcher ``ffi``: an XLA FFI handler (``csrc/``) that calls the
  interpreter;
* `interpreter_launcher` -- the launcher ``interpreter``: a JAX host callback that calls it.

Switches:

* ``JT_CPU_BOUNDS_CHECK=0`` turns off the address checks on loads and stores (about 30% faster; an out-of-bounds
  access may then crash the process instead of raising `OutOfBoundsAccessError`).
* ``JT_CPU_RACE_CHECK=1`` (or `jt_core.cpu_checks`) reports data races between the program instances of a
  launch (`DataRaceError`) and outputs no program wrote (``JT_CPU_UNWRITTEN``).
* ``debug=True`` on a call also sanitises integer overflow (slower).

Autotuned kernels run with one configuration on the CPU: the first ``triton.Config`` left after the caller's
fixed values have pruned the list. With ``JT_CPU_AUTOTUNE=1`` they are tuned instead: every configuration runs
once on the first execution, the fastest is kept, and the choice is remembered in the cache directory
(``JT_CACHE_DIR``) so that later processes do not tune again.
"""
