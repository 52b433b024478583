"""The toy backend and launcher pass jt's conformance suites."""

from __future__ import annotations

import pytest
from jt_example_backend.backend import CUSTOM_CALL_TARGET, ToyBackend, ToyLauncher

from jt_core.testing import BackendConformance, LauncherConformance


class TestToyBackend(BackendConformance):
    @pytest.fixture
    def backend(self) -> ToyBackend:
        return ToyBackend()


class TestToyLauncher(LauncherConformance):
    expected_in_lowering = CUSTOM_CALL_TARGET

    @pytest.fixture
    def launcher(self) -> ToyLauncher:
        return ToyLauncher()
