"""``triton_call`` in a job of JAX's multi-process runtime: two processes started with ``jax.distributed``.

Each test starts a 2-process job (``core_multiprocess_worker.py``): on the CPU, 2 devices per process and gloo
collectives; on CUDA (``cuda`` marker, 2 GPUs), one GPU per process, with the ``jt`` and the ``xla`` launchers. Every
process gets its own cache folder, as on hosts with local disks. A job that does not finish in time is killed and
fails the test, so a hang never blocks the run.
"""

from __future__ import annotations

import json
import shutil
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import pytest

from jt_core.testing import run_job

WORKER = Path(__file__).with_name("core_multiprocess_worker.py")
#: Seconds a whole job may take (two cold processes: JAX start, distributed start-up, compiles, trials).
JOB_SECONDS = 150
#: Seconds a job whose calls are refused may take, start-up included: every process ends, none waits for another.
REFUSED_JOB_SECONDS = 60
#: Seconds from a refused call's start (its lowering, Triton's front end included) to its error, on every process.
REFUSED_CALL_SECONDS = 5


def private_folder(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def with_cpu_handler(cache: Path) -> Path:
    """A cache folder holding the CPU handler library this machine built, with its integrity record (so each
    process need not build it again), unless the processes use the one jt-core's platform wheel carries."""
    from jt_core import integrity
    from jt_core.cpu import ffi_launcher

    spec = ffi_launcher.library_spec()
    if spec.prebuilt().path is not None:
        return private_folder(cache)
    built = spec.build()
    native = private_folder(private_folder(cache) / "native")
    for path in (built.path, integrity.integrity_path(built.path)):
        shutil.copy2(path, native / path.name)
    return cache


def run_scenario(
    tmp_path: Path,
    scenario: str,
    platform: str = "cpu",
    launcher: str | None = None,
    env: dict[str, str] | None = None,
    per_process: Sequence[dict[str, str]] = ({}, {}),
    seconds: float = JOB_SECONDS,
) -> list[dict[str, Any]]:
    """Runs ``scenario`` in a job of one process per ``per_process`` entry (its variables), each process with its own
    cache folder; returns each one's findings. A job that takes more than ``seconds`` fails the test."""
    caches = []
    for index in range(len(per_process)):
        cache = private_folder(tmp_path / f"cache{index}")
        if platform == "cpu" and "JT_PREBUILT_NATIVE" not in per_process[index]:
            with_cpu_handler(cache)
        caches.append({"JT_CACHE_DIR": str(cache), **per_process[index]})
    results = [tmp_path / f"result{index}.json" for index in range(len(per_process))]
    finished = run_job(
        [str(WORKER), scenario, platform, launcher or ""],
        processes=len(per_process),
        platform=platform,
        env={"JT_DISTRIBUTED_TIMEOUT": "60", **(env or {})},
        per_process=[{**cache, "RESULT_FILE": str(result)} for cache, result in zip(caches, results)],
        timeout=seconds,
        cwd=WORKER.parent,
    )
    outputs = "\n".join(f"--- process {p.index} (exit {p.returncode}):\n{p.output[-6000:]}" for p in finished)
    found = []
    for result in results:
        assert result.is_file(), f"a process wrote no result:\n{outputs}"
        found.append(json.loads(result.read_text()))
    for item in found:
        assert "error" not in item, f"process {item['process']}: {item['error']}\n{item.get('traceback')}\n{outputs}"
    return found


def check_sharding(results: list[dict[str, Any]]) -> None:
    for name in ("shard_map", "partitioned", "partition_argument", "explicit"):
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
    check_sharding(run_scenario(tmp_path, "sharding"))


def test_tied_autotuned_kernel_runs_process_zeros_choice_on_every_process(tmp_path: Path) -> None:
    check_autotune(run_scenario(tmp_path, "autotune", env={"JT_CPU_AUTOTUNE": "1"}))


def test_processes_that_lowered_other_kernels_first_compile_the_same_program(tmp_path: Path) -> None:
    results = run_scenario(tmp_path, "order")
    assert results[0]["lowered"] == results[1]["lowered"]
    assert results[0]["compiled"] == results[1]["compiled"]


def test_a_process_without_a_compiler_stops_every_process_at_once(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-compiler")
    started = time.monotonic()
    # Process 1 is a host without a compiler where jt was installed from the sdist: it cannot have the handler.
    results = run_scenario(tmp_path, "no_compiler", per_process=({}, {"CXX": missing, "JT_PREBUILT_NATIVE": "0"}))
    assert time.monotonic() - started < JOB_SECONDS
    for found in results:
        outcome = found["outcome"]
        assert "ProcessAgreementError" in outcome, outcome
        assert "process 1 (host" in outcome and "launcher 'interpreter'" in outcome, outcome
        assert f"CXX={missing!r}" in outcome and "python -m jt_core build-native" in outcome, outcome
        # Raised on every process within 5 s (without agreement: 30 s in gloo, then an error about gloo).
        assert found["seconds"] < REFUSED_CALL_SECONDS, found


@pytest.mark.parametrize("processes", [2, 3])
def test_every_lowering_is_compared_and_a_refused_job_ends_on_every_process_in_time(
    tmp_path: Path, processes: int
) -> None:
    # The last process's host has no C++ compiler and no built handler. Each computation is called twice: JAX keeps
    # no failed lowering, so the second call lowers it again. That lowering used to skip the comparison and run
    # another launcher on each process, and the job hung until JAX's shutdown barrier gave up, minutes later. With
    # 3 processes, process 1 (which agrees with process 0) must stop too, not wait for the others in a collective.
    # Installed from the sdist: the platform wheel's prebuilt handler is not there either.
    no_compiler = {
        "CXX": str(tmp_path / "no-such-compiler"),
        "PATH": str(private_folder(tmp_path / "empty-bin")),
        "JT_PREBUILT_NATIVE": "0",
    }
    per_process = [{} for _ in range(processes - 1)] + [no_compiler]
    started = time.monotonic()
    results = run_scenario(tmp_path, "no_compiler_again", per_process=per_process, seconds=REFUSED_JOB_SECONDS)
    assert time.monotonic() - started < REFUSED_JOB_SECONDS
    for found in results:
        attempts = found["outcomes"]
        assert [attempt["computation"] for attempt in attempts] == ["partitioned"] * 2 + ["shard_map"] * 2, found
        for attempt in attempts:
            outcome = attempt["outcome"]
            assert "ProcessAgreementError" in outcome, attempt
            assert "launcher 'compiled'" in outcome and "launcher 'interpreter'" in outcome, attempt
            assert attempt["seconds"] < REFUSED_CALL_SECONDS, attempt


def prebuilt_cpu_handler() -> Path | None:
    from jt_core.cpu import ffi_launcher

    return ffi_launcher.library_spec().prebuilt().path


@pytest.mark.skipif(
    prebuilt_cpu_handler() is None,
    reason="jt-core is not installed from its platform wheel (tests/check_wheelhouse.py runs this test with it)",
)
def test_a_process_without_a_compiler_uses_the_prebuilt_handler_like_the_others(tmp_path: Path) -> None:
    """Installed from the platform wheel, a host without a compiler runs the job to the end like the others: every
    process loads the prebuilt CPU handler, none builds it."""
    results = run_scenario(tmp_path, "no_compiler", per_process=({}, {"CXX": str(tmp_path / "no-such-compiler")}))
    for found in results:
        assert found["outcome"] == "ran" and found["launcher"] == "compiled", found
    for index in (0, 1):
        assert not list((tmp_path / f"cache{index}").rglob("*.so")), f"process {index} built a library"


def test_lowering_device_is_one_this_process_drives() -> None:
    # A computation's device assignment starts with another process's device on every process but the first.
    from jt_core.lowering import devices

    theirs = types.SimpleNamespace(process_index=jax.process_index() + 1, platform="cpu")
    mine = types.SimpleNamespace(process_index=jax.process_index(), platform="cpu")
    ctx = types.SimpleNamespace(
        module_context=types.SimpleNamespace(
            axis_context=types.SimpleNamespace(device_assignment=(theirs, mine)), platforms=["cpu"]
        )
    )
    assert devices.lowering_device(ctx) is mine


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
    results = run_scenario(tmp_path, scenario, platform="cuda", launcher=launcher)
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
