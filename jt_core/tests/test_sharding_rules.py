"""Sharding of ``triton_call`` on 4 CPU host devices: ``shard_map`` and declared partition rules.

JAX fixes the number of host devices when it starts, so the cases (``core_sharding_testlib.py``) run in a fresh
interpreter with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``; this test reports their outcome.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).with_name("core_sharding_testlib.py")


def test_sharding_cases_on_four_host_devices() -> None:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4").strip()
    env["JAX_PLATFORMS"] = "cpu"
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", str(CASES)],
        cwd=CASES.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    summary = re.search(r"(\d+) passed", output)
    assert summary is not None and int(summary.group(1)) >= 10, output
    assert "skipped" not in output and "failed" not in output, output
