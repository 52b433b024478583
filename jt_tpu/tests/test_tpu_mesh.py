"""Partitioned calls over 8 devices with the TPU's strategy, and exported for a TPU mesh: the cases of
``tpu_mesh_cases.py``, run in a fresh interpreter with 8 CPU host devices."""

from __future__ import annotations

from pathlib import Path

from jt_core.testing import run_cases


def test_mesh_cases_on_eight_host_devices() -> None:
    run_cases(Path(__file__).with_name("tpu_mesh_cases.py"), passed=6, host_devices=8)
