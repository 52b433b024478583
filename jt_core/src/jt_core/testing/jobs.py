"""Running a script as the processes of a ``jax.distributed`` job on this machine (`run_job`), and a module of test
cases in a fresh interpreter, where JAX starts with what they need (`run_cases`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence

import pytest

__all__ = ["JobProcess", "run_cases", "run_job"]


@dataclasses.dataclass(frozen=True)
class JobProcess:
    """How one process of a job started by `run_job` ended.

    Attributes:
        index: The process's index in the job.
        returncode: Its exit status.
        output: What it wrote to stdout and stderr.
    """

    index: int
    returncode: int
    output: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_job(
    args: Sequence[str],
    processes: int = 2,
    platform: str = "cpu",
    devices: int = 2,
    env: Mapping[str, str] | None = None,
    per_process: Sequence[Mapping[str, str]] = (),
    timeout: float = 150,
    cwd: str | os.PathLike[str] | None = None,
) -> list[JobProcess]:
    """Runs ``python *args`` as the processes of one ``jax.distributed`` job on this machine and waits for them.

    Each process finds its part in ``COORDINATOR`` (``host:port`` of process 0), ``NUM_PROCESSES`` and ``PROCESS_ID``,
    to pass to ``jax.distributed.initialize``. On the CPU (``platform="cpu"``) each process gets ``devices`` CPU
    devices (``XLA_FLAGS``) and JAX on the CPU only; the program should use gloo collectives
    (``jax.config.update("jax_cpu_collectives_implementation", "gloo")``). On a GPU platform each process should
    take one device (``local_device_ids=[PROCESS_ID]``), and GPU memory is not preallocated.

    Args:
        args: The script and its arguments.
        processes: How many processes the job has.
        platform: ``"cpu"`` or a GPU platform.
        devices: CPU devices per process.
        env: Variables for every process (on top of this process's environment).
        per_process: Variables for each process, by index.
        timeout: Seconds the whole job may take: then every process is killed and the test fails, with each
            process's output, so a hang never blocks the run.
        cwd: The working folder.

    Returns:
        Each process's exit status and output.
    """
    port = _free_port()
    with contextlib.ExitStack() as stack:
        started = []
        for index in range(processes):
            process_env = {
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                **(env or {}),
                **(per_process[index] if index < len(per_process) else {}),
                "COORDINATOR": f"127.0.0.1:{port}",
                "NUM_PROCESSES": str(processes),
                "PROCESS_ID": str(index),
            }
            if platform == "cpu":
                process_env["JAX_PLATFORMS"] = "cpu"
                flags = process_env.get("XLA_FLAGS", "")
                process_env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
            else:
                process_env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
            log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            command = [sys.executable, *args]
            process = subprocess.Popen(
                command, cwd=cwd, env=process_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            started.append((process, log))
        deadline = time.monotonic() + timeout
        overran = False
        for process, _ in started:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                overran = True
        finished = []
        for index, (process, log) in enumerate(started):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.seek(0)
            finished.append(JobProcess(index, process.returncode, log.read()))
    if overran:
        outputs = "\n".join(f"--- process {p.index}:\n{p.output[-6000:]}" for p in finished)
        pytest.fail(f"the job did not finish in {timeout} s (a hang?); every process was killed\n{outputs}")
    return finished


def run_cases(
    path: os.PathLike[str] | str, passed: int, environ: Mapping[str, str] | None = None, host_devices: int | None = None
) -> str:
    """Runs the test cases of ``path`` with pytest in a fresh interpreter, on the CPU, with ``environ`` added to
    the environment (and ``host_devices`` CPU devices, which JAX fixes when it starts); fails the calling test
    unless they all pass, at least ``passed`` of them, none skipped. Returns their output."""
    path = os.fspath(path)
    env = {**os.environ, **(environ or {}), "JAX_PLATFORMS": "cpu"}
    if host_devices is not None:
        flags = f"{env.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={host_devices}"
        env["XLA_FLAGS"] = flags.strip()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", path],
        cwd=os.path.dirname(path) or None,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    ran = re.search(r"(\d+) passed", output)
    if result.returncode or ran is None or int(ran.group(1)) < passed or "skipped" in output or "failed" in output:
        pytest.fail(f"the cases of {path} (at least {passed} to pass, none skipped):\n{output}", pytrace=False)
    return output
