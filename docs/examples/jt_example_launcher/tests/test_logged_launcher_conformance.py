"""The logged launcher passes jt's launcher conformance suite: jt lowers a call named for it with its own lower(),
and the call computes what NumPy computes, plainly and under jax.vmap."""

from __future__ import annotations

import pytest
from jt_example_launcher.launcher import LoggedLauncher

from jt_core.testing import LauncherConformance


class TestLoggedLauncher(LauncherConformance):
    @pytest.fixture
    def launcher(self) -> LoggedLauncher:
        return LoggedLauncher()
