"""The TPU backend: Triton's front end checks the kernel as Triton would and gives its TTIR, which the launcher
translates."""

from __future__ import annotations

from jt_core.plugin import Dialect
from jt_core.translation import TranslatingBackend

__all__ = ["TpuBackend"]


class TpuBackend(TranslatingBackend):
    """Compiles kernels for TPUs: to their TTIR, kept in memory and in jt's disk cache."""

    platform = "tpu"

    def unsupported_dialect_reason(self, dialect: Dialect) -> str | None:
        if dialect.name == "triton":
            return None
        return (
            "they name GPU layouts and run through GPU-only stages of Triton's compiler; a TPU runs plain "
            "@triton.jit kernels"
        )
