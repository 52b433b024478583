"""jt-rocm's backend and launcher pass the conformance suites of ``jt_core.testing``."""

from __future__ import annotations

import pytest

from jt_core.testing import BackendConformance, LauncherConformance
from jt_rocm.backend import RocmBackend
from jt_rocm.launchers import RocmJaxlibLauncher


@pytest.fixture(autouse=True)
def _arch(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    # Without an AMD GPU the architecture comes from the environment.
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx942")
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(tmp_path_factory.mktemp("hsaco")))


class TestRocmBackendConformance(BackendConformance):
    @pytest.fixture
    def backend(self) -> RocmBackend:
        return RocmBackend()


class TestRocmJaxlibLauncherConformance(LauncherConformance):
    expected_in_lowering = "triton_kernel_call_ffi"

    @pytest.fixture
    def launcher(self) -> RocmJaxlibLauncher:
        return RocmJaxlibLauncher()
