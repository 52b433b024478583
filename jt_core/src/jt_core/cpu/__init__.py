"""jt's builtin CPU backend: kernels compiled by XLA from their Triton IR (:mod:`jt_core.cpu.compiled`), or run by
Triton's interpreter (:mod:`jt_core.interpreter`) where the compiled path cannot take them or a check asks for it."""
