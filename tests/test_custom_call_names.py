"""Code that reads lowered modules finds jt's kernel calls by the name of jax-triton's and jaxlib's custom-call
target, ``triton_kernel_call``: every target jt's own handlers register starts with it, on every platform."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import jt_core as jt
from jt_core.testing import custom_calls, sample_add_kernel
from jt_cuda.launchers import CudaJaxlibLauncher
from jt_rocm.launchers import RocmJaxlibLauncher

F32_64 = jax.ShapeDtypeStruct((64,), np.float32)
NAME = "triton_kernel_call"


def _add(x: Any, y: Any, launcher: str | None) -> Any:
    return jt.triton_call(
        x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32, compute_capability=90, launcher=launcher
    )


@pytest.fixture(autouse=True)
def _lowering_without_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lets every launcher lower here: jaxlib's lowerings need no jaxlib objects, ROCm needs an architecture. Each
    call lowers alone (JT_CPU_DIFFERENTIAL=1 would add the compiled path's twin and the comparison's callback)."""
    monkeypatch.delenv("JT_CPU_DIFFERENTIAL", raising=False)
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx942")
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(tmp_path / "hsaco"))
    for launcher in (CudaJaxlibLauncher, RocmJaxlibLauncher):
        monkeypatch.setattr(launcher, "unavailable_reason", lambda self: None)


@pytest.mark.parametrize(
    ("platform", "launcher"),
    [
        ("cpu", None),
        ("cpu", "ffi"),
        ("cuda", None),
        ("cuda", "jt"),
        ("cuda", "jaxlib"),
        ("rocm", "jt"),
        ("rocm", "jaxlib"),
    ],
)
def test_each_lowered_call_is_found_by_the_name_triton_kernel_call(platform: str, launcher: str | None) -> None:
    def twice(x: Any, y: Any) -> Any:
        return _add(_add(x, y, launcher), y, launcher)

    lowered = jax.jit(twice).trace(F32_64, F32_64).lower(lowering_platforms=(platform,))
    targets = [str(op.attributes["call_target_name"]).strip('"') for op in custom_calls(lowered)]
    assert len(targets) == 2 and all(target.startswith(NAME) for target in targets), targets
    assert lowered.as_text().count(NAME) == 2
