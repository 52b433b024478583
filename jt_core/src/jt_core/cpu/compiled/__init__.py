"""The compiled CPU path: a kernel's TTIR translated into XLA operations (`jt_core.translation`), which XLA compiles
with the computation, and what the CPU adds around it.

* `launcher` -- the ``compiled`` launcher;
* `checking` -- raising a kernel's out-of-bounds error after it ran;
* `differential` -- comparing the compiled path with the interpreter (``JT_CPU_DIFFERENTIAL``);
* `handed_over` -- the kernels handed to the interpreter, and the policy for them (``JT_CPU_FALLBACK``).
"""
