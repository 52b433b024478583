"""jt-tpu's backend and launcher pass jt's conformance suites (lowered for ``tpu`` without a device; run on one where
JAX sees it)."""

from __future__ import annotations

import pytest

from jt_core.testing import BackendConformance, LauncherConformance
from jt_tpu.backend import TpuBackend
from jt_tpu.launcher import TpuLauncher


class TestTpuBackendConformance(BackendConformance):
    @pytest.fixture
    def backend(self) -> TpuBackend:
        return TpuBackend()


class TestTpuLauncherConformance(LauncherConformance):
    @pytest.fixture
    def launcher(self) -> TpuLauncher:
        return TpuLauncher()
