"""The TPU backend: Triton's front end checks the kernel as Triton would and gives its TTIR, which the launcher
translates."""

from __future__ import annotations

from jt_core.translation import TranslatingBackend

__all__ = ["TpuBackend"]


class TpuBackend(TranslatingBackend):
    """Compiles kernels for TPUs: to their TTIR, kept in memory and in jt's disk cache."""

    platform = "tpu"
