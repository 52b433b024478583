"""Sharding of ``triton_call`` on 4 CPU host devices: ``shard_map`` and declared partition rules.

JAX fixes the number of host devices when it starts, so the cases (``core_sharding_testlib.py``) run in a fresh
interpreter with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``; this test reports their outcome.
"""

from __future__ import annotations

from pathlib import Path

from jt_core.testing import run_cases


def test_sharding_cases_on_four_host_devices() -> None:
    run_cases(Path(__file__).with_name("core_sharding_testlib.py"), passed=10, host_devices=4)
