"""Code that reads lowered modules finds jt's kernel launches by the name of jax-triton's and jaxlib's custom-call
target, ``triton_kernel_call``: every target that launches a kernel starts with it, on every platform, and no other
target does (tools count them to count kernels, under ``jax.remat`` say). The CPU's compiled path launches nothing:
its kernels are XLA operations, and its one helper custom call, the out-of-bounds check, is named otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
import triton
import triton.language as tl

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


@pytest.mark.usefixtures("jt_cpu_paths_by_name")  # the comparison and the race check add custom calls
def test_the_compiled_cpu_path_launches_nothing_and_names_no_custom_call_triton_kernel_call() -> None:
    def twice(x: Any, y: Any) -> Any:
        return _add(_add(x, y, "compiled"), y, "compiled")

    lowered = jax.jit(twice).trace(F32_64, F32_64).lower(lowering_platforms=("cpu",))
    targets = [str(op.attributes["call_target_name"]).strip('"') for op in custom_calls(lowered)]
    assert NAME not in lowered.as_text()
    assert set(targets) <= {"jt_cpu_compiled_check"}, targets  # at most one check per call, after the kernel
    np.testing.assert_array_equal(jax.jit(twice)(np.ones(64, np.float32), np.ones(64, np.float32)), 3.0)


@triton.jit
def _scale_kernel(x_ptr, n, factor, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)


def _scale(x: Any, factor: float, launcher: str) -> Any:
    return jt.triton_call(x, x.size, factor, kernel=_scale_kernel, out_shape=x, grid=2, BLOCK=32, launcher=launcher)


def _scaled_forward(x: Any, launcher: str) -> tuple[Any, Any]:
    y = _scale(x, 3.0, launcher)
    return y, None


def _scaled_backward(launcher: str, residuals: Any, dy: Any) -> Any:
    return _scale(dy, 3.0, launcher)


_scaled = jt.kernel_vjp(_scaled_forward, _scaled_backward, static_argnums=(1,))


@pytest.mark.usefixtures("jt_cpu_paths_by_name")  # the comparison and the race check add custom calls
@pytest.mark.parametrize(("launcher", "launches"), [("ffi", 2), ("compiled", 0)])
def test_a_rematerialised_gradient_names_one_custom_call_per_kernel_launch(launcher: str, launches: int) -> None:
    """As a remat test counts kernels: the forward kernel under ``jax.remat`` and the backward one are the launches
    of ``value_and_grad``, one ``triton_kernel_call`` each; nothing else carries the name."""
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)

    def loss(v: Any) -> Any:
        return jax.remat(lambda u: _scaled(u, launcher))(v).sum()

    lowered = jax.jit(jax.value_and_grad(loss)).trace(x).lower(lowering_platforms=("cpu",))
    targets = [str(op.attributes["call_target_name"]).strip('"') for op in custom_calls(lowered)]
    assert sum(target.startswith(NAME) for target in targets) == launches, targets
    assert lowered.as_text().count(NAME) == launches
    value, grad = jax.jit(jax.value_and_grad(loss))(x)
    np.testing.assert_allclose(value, (x * 3).sum(), rtol=1e-5)
    np.testing.assert_array_equal(grad, np.full(64, 3.0, np.float32))
