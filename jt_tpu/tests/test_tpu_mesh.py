"""Partitioned calls over 8 devices with the TPU's strategy, and exported for a TPU mesh: the cases of
``tpu_mesh_cases.py``, run in a fresh interpreter with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

CASES = Path(__file__).with_name("tpu_mesh_cases.py")


def test_mesh_cases_on_eight_host_devices() -> None:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
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
    assert summary is not None and int(summary.group(1)) == 6, output
    assert "skipped" not in output and "failed" not in output, output
