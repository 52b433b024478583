"""Shared helpers of the examples: the platform, a timer and the comparison against ``jax.numpy``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

GPU_PLATFORMS = ("gpu", "cuda", "rocm")


def default_platform_is_gpu() -> bool:
    """Whether JAX's default backend is a GPU."""
    return jax.default_backend() in GPU_PLATFORMS


def median_time_ms(fn: Callable[..., Any], *args: Any, repeats: int = 5) -> float:
    """Median wall time of ``fn(*args)`` in milliseconds, after one warm-up call (which compiles)."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def check_close(what: str, got: Any, want: Any, *, atol: float, rtol: float) -> float:
    """Returns the largest absolute error of ``got`` against ``want``; raises if it exceeds the tolerance.

    The tolerance is NumPy's: ``|got - want| <= atol + rtol * |want|`` element-wise. Both are compared in float64.

    Raises:
        AssertionError: Naming ``what``, the worst element and the tolerance.
    """
    got64 = np.asarray(got, dtype=np.float64)
    want64 = np.asarray(want, dtype=np.float64)
    if got64.shape != want64.shape:
        raise AssertionError(f"{what}: shape {got64.shape}, expected {want64.shape}")
    if not np.all(np.isfinite(got64)):
        raise AssertionError(f"{what}: {int(np.sum(~np.isfinite(got64)))} non-finite values (unwritten output?)")
    error = np.abs(got64 - want64)
    excess = error - (atol + rtol * np.abs(want64))
    if np.any(excess > 0):
        worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
        raise AssertionError(
            f"{what}: mismatch at {tuple(int(i) for i in worst)}: got {got64[worst]}, expected {want64[worst]} "
            f"(atol={atol}, rtol={rtol}; max abs error {error.max():.3g})"
        )
    return float(error.max()) if error.size else 0.0


def report(kernel: str, max_error: float, time_ms: float, **details: Any) -> dict[str, Any]:
    """The dict every example's ``run`` returns."""
    return {
        "kernel": kernel,
        "platform": jax.default_backend(),
        "max_error": max_error,
        "time_ms": time_ms,
        **details,
    }
