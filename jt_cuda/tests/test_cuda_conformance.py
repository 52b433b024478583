"""jt-cuda's backend and launchers pass jt-core's conformance suites."""

from __future__ import annotations

import pytest

from jt_core.plugin import Backend, Launcher
from jt_core.testing import BackendConformance, LauncherConformance
from jt_cuda.backend import CudaBackend
from jt_cuda.launchers import CudaJaxlibLauncher, CudaJtLauncher, CudaXlaLauncher


class TestCudaBackendConformance(BackendConformance):
    compute_capability = 90

    @pytest.fixture
    def backend(self) -> Backend:
        return CudaBackend()


class TestJtLauncherConformance(LauncherConformance):
    compute_capability = 90
    expected_in_lowering = "triton_kernel_call_jt_cuda"

    @pytest.fixture
    def launcher(self) -> Launcher:
        return CudaJtLauncher()


class TestJaxlibLauncherConformance(LauncherConformance):
    compute_capability = 90
    expected_in_lowering = "triton_kernel_call"

    @pytest.fixture
    def launcher(self) -> Launcher:
        return CudaJaxlibLauncher()


class TestXlaLauncherConformance(LauncherConformance):
    compute_capability = 90
    expected_in_lowering = "__gpu$xla.gpu.triton"

    @pytest.fixture
    def launcher(self) -> Launcher:
        return CudaXlaLauncher()


def test_launchers_are_ordered_by_priority() -> None:
    import jt_core as jt

    (record,) = [r for r in jt.list_plugins() if r.name == "cuda"]
    by_priority = sorted(record.launchers, key=lambda label: -record.launcher_details[label]["priority"])
    assert by_priority == ["cuda:jt", "cuda:jaxlib", "cuda:xla"]
