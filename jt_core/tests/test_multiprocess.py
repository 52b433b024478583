"""``triton_call`` in a job of JAX's multi-process runtime: two processes started with ``jax.distributed``.

Each test starts a 2-process job (``core_multiprocess_worker.py``): on the CPU, 2 devices per process and gloo
collectives; on CUDA (``cuda`` marker, 2 GPUs), one GPU per process, with the ``jt`` and the ``xla`` launchers. Every
process gets its own cache folder, as on hosts with local disks. A job that does not finish in time is killed and
fails the test, so a hang never blocks the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import pytest

WORKER = Path(__file__).with_name("core_multiprocess_worker.py")
#: Seconds a whole job may take (two cold processes: JAX start, distributed start-up, compiles, trials).
JOB_SECONDS = 150


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def private_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def with_cpu_handler(cache: Path) -> Path:
    """A cache folder holding the CPU FFI handler this machine built (so each process need not build it again)."""
    from jt_core.interpreter import ffi_launcher

    built = ffi_launcher.library_spec().build()
    native = private_folder(private_folder(cache) / "native")
    shutil.copy2(built.path, native / built.path.name)
    return cache


def run_job(
    tmp_path: Path,
    scenario: str,
    platform: str = "cpu",
    launcher: str | None = None,
    env: dict[str, str] | None = None,
    per_process: tuple[dict[str, str], dict[str, str]] = ({}, {}),
) -> list[dict[str, Any]]:
    """Runs ``scenario`` in a 2-process job; returns each process's findings (killing the job when it overruns)."""
    port = free_port()
    jobs = []
    for index in (0, 1):
        cache = tmp_path / f"cache{index}"
        if platform == "cpu" and "CXX" not in per_process[index]:
            with_cpu_handler(cache)
        process_env = {
            **os.environ,
            "JT_CACHE_DIR": str(private_folder(cache)),
            "JT_DISTRIBUTED_TIMEOUT": "60",
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
            **per_process[index],
        }
        if platform == "cpu":
            process_env["JAX_PLATFORMS"] = "cpu"
            process_env["XLA_FLAGS"] = (
                process_env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
            ).strip()
        else:
            process_env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        log = (tmp_path / f"process{index}.log").open("w")
        result = tmp_path / f"result{index}.json"
        command = [sys.executable, str(WORKER), scenario, str(index), str(port), str(result), platform, launcher or ""]
        process = subprocess.Popen(
            command, cwd=WORKER.parent, env=process_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        jobs.append((process, log, result))
    deadline = time.monotonic() + JOB_SECONDS
    overran = False
    for process, log, _ in jobs:
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            overran = True
    for process, log, _ in jobs:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
    logs = "\n".join(
        f"--- process {i} (exit {p.returncode}):\n{(tmp_path / f'process{i}.log').read_text()[-6000:]}"
        for i, (p, _, _) in enumerate(jobs)
    )
    assert not overran, f"the job did not finish in {JOB_SECONDS} s (a hang):\n{logs}"
    results = []
    for _, _, result in jobs:
        assert result.is_file(), f"a process wrote no result:\n{logs}"
        results.append(json.loads(result.read_text()))
    for found in results:
        assert "error" not in found, f"process {found['process']}: {found['error']}\n{found.get('traceback')}\n{logs}"
    return results


def check_sharding(results: list[dict[str, Any]]) -> None:
    for name in ("shard_map", "partitioned", "partition_argument"):
        assert [found[name]["all_gather"] for found in results] == [False, False], name
        assert results[0][name]["program"] == results[1][name]["program"], name
    assert [found["lowered_for"] for found in results] == [[0], [1]]
    for found in results:
        message = found["global_size"]
        assert "scalar argument 'n'" in message and "global element count of operand 0" in message, message
        assert "@jt.partitioned" in message, message


def check_autotune(results: list[dict[str, Any]]) -> None:
    # The tie is real and broken differently by each process alone...
    assert [found["local_choice"] for found in results] == [32, 16], results
    assert all(found["records_rewritten"] >= 1 for found in results), results
    # ...yet every shard of every shared computation runs process 0's choice: its remembered winner (config 1,
    # BLOCK 32) and the winner of its own trials (config 1 again).
    for found in results:
        assert found["remembered"] == [32] * len(found["remembered"]), results
        assert found["tuned"] == [32] * len(found["tuned"]), results
        assert found["partitioned"] == "ok"


def test_shard_map_and_partition_rules_run_across_two_processes(tmp_path: Path) -> None:
    check_sharding(run_job(tmp_path, "sharding"))


def test_tied_autotuned_kernel_runs_process_zeros_choice_on_every_process(tmp_path: Path) -> None:
    check_autotune(run_job(tmp_path, "autotune", env={"JT_CPU_AUTOTUNE": "1"}))


def test_processes_that_lowered_other_kernels_first_compile_the_same_program(tmp_path: Path) -> None:
    results = run_job(tmp_path, "order")
    assert results[0]["lowered"] == results[1]["lowered"]
    assert results[0]["compiled"] == results[1]["compiled"]


def test_a_process_without_a_compiler_stops_every_process_at_once(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-compiler")
    started = time.monotonic()
    results = run_job(tmp_path, "no_compiler", per_process=({}, {"CXX": missing}))
    assert time.monotonic() - started < JOB_SECONDS
    for found in results:
        outcome = found["outcome"]
        assert "ProcessAgreementError" in outcome, outcome
        assert "process 1 (host" in outcome and "launcher 'interpreter'" in outcome, outcome
        assert f"CXX={missing!r}" in outcome and "python -m jt_core build-native" in outcome, outcome
        assert found["seconds"] < 20, found  # without agreement: 30 s in gloo, then an error about gloo


def gpus() -> int:
    try:
        return len(jax.devices("cuda"))
    except RuntimeError:
        return 0


@pytest.mark.cuda
@pytest.mark.parametrize("launcher", ["jt", "xla"])
@pytest.mark.parametrize("scenario", ["sharding", "autotune", "order"])
def test_two_processes_on_two_gpus(tmp_path: Path, scenario: str, launcher: str) -> None:
    if gpus() < 2:
        pytest.skip("needs 2 GPUs")
    results = run_job(tmp_path, scenario, platform="cuda", launcher=launcher)
    if scenario == "sharding":
        check_sharding(results)
    elif scenario == "autotune":
        for found in results:
            assert found["remembered"] == [32] * len(found["remembered"]), results
            assert found["tuned"][0] == found["tuned"][-1] and found["tuned"][0] in (16, 32), results
        assert results[0]["tuned"] == results[1]["tuned"], results
    else:
        assert results[0]["lowered"] == results[1]["lowered"]
        assert results[0]["compiled"] == results[1]["compiled"]
