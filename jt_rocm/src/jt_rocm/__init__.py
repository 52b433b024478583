"""ROCm backend for jt: compile Triton kernels to HSACO and launch them on AMD GPUs from JAX.

Installing the distribution is all it takes: jt finds the plugin through its entry point. Import this package only
for `register_handlers`, needed by a process that runs a serialized module (``jax.export``) containing jt
calls without making a ``triton_call`` itself.
"""

from __future__ import annotations

__version__ = "0.1.0"


def register_handlers() -> None:
    """Builds (first time on a machine) and registers jt's ROCm launch handler with XLA.

    Raises:
        jt_core.native.NativeBuildError: When no C++ compiler is available or the build fails.
    """
    from jt_rocm.launchers import HANDLER

    HANDLER.register()


__all__ = ["__version__", "register_handlers"]
