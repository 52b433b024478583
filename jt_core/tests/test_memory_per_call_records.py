"""What jt remembers per call besides compiled kernels stays bounded too: autotuning's recent choices, the
exchanges of ``jax.distributed`` jobs, the kernels handed to the interpreter, the CPU launcher's released ids. Each
store keeps at most ``JT_MEMORY_CACHE_ENTRIES`` entries, and what it forgets is found or made again."""

from __future__ import annotations

import gc
import json
import threading
from pathlib import Path
from typing import Any

import core_kernels as k
import jax
import numpy as np
import pytest
import triton

from jt_core import distributed, memory, tuning
from jt_core.call import CallOptions
from jt_core.cpu.compiled import handed_over
from jt_core.cpu.ffi_launcher import CallRegistry
from jt_core.testing._calls import bind

BOUND = 4
F32_64 = jax.ShapeDtypeStruct((64,), np.float32)


@pytest.fixture(autouse=True)
def bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    monkeypatch.setenv(memory.ENTRIES_VARIABLE, str(BOUND))
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "cache"))
    jax.clear_caches()
    yield
    jax.clear_caches()


def tuned_call(n: int) -> Any:
    """An autotuned call whose tuning problem is its own (the autotuner's key is ``n``)."""
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    return bind(k.autotuned_scale_kernel, (F32_64,), {"n": n}, CallOptions(F32_64, grid=grid))


def test_recent_autotuning_choices_keep_the_latest_few() -> None:
    calls = [tuned_call(n) for n in range(1, 21)]
    for call in calls:
        assert tuning.choose_config(call, "test-device", lambda index: [3.0, 1.0, 2.0][index]) == 1
        assert len(tuning._recent) <= BOUND
    assert tuning.take_recent_choice(calls[-1]) == 1  # taken: a later question gets only a later choice
    assert tuning.take_recent_choice(calls[-1]) is None
    assert tuning.take_recent_choice(calls[0]) is None  # forgotten: tuned again when asked


class JobStore:
    """The key-value store of a ``jax.distributed`` job, as its client offers it, in memory."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.lock = threading.Lock()

    def key_value_set(self, key: str, value: str, allow_overwrite: bool = False) -> None:
        with self.lock:
            if key in self.values and not allow_overwrite:
                raise RuntimeError(f"ALREADY_EXISTS: {key}")
            self.values[key] = value

    def key_value_try_get(self, key: str) -> str:
        with self.lock:
            if key not in self.values:
                raise RuntimeError(f"NOT_FOUND: {key}")
            return self.values[key]

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        return self.key_value_try_get(key)  # the tests publish every record awaited before

    def key_value_increment(self, key: str, increment: int) -> int:
        with self.lock:
            value = int(self.values.get(key, "0")) + increment
            self.values[key] = str(value)
            return value


def exchange(store: JobStore, process: int, digest: str) -> distributed.Exchange:
    return distributed.Exchange(distributed.Job(process, (0, 1), store), digest, f"triton_call {digest!r}")


def test_decisions_of_a_job_keep_the_latest_few_and_a_forgotten_one_is_read_back() -> None:
    store = JobStore()
    decided: list[str] = []

    def decide(digest: str) -> dict[str, Any]:
        decided.append(digest)
        return {"config": len(decided)}

    digests = [f"call{i}" for i in range(12)]
    first = [exchange(store, 0, d).decide("config", lambda d=d: decide(d)) for d in digests]
    assert len(distributed._decided) <= BOUND and decided == digests
    # Lowered again: the leader finds the decisions it forgot in the job's store and never decides again, and the
    # other process receives the same ones.
    assert [exchange(store, 0, d).decide("config", lambda d=d: decide(d)) for d in digests] == first
    assert decided == digests
    assert [exchange(store, 1, d).decide("config", lambda: {"config": -1}) for d in digests] == first
    assert len(distributed._decided) <= BOUND


def test_agreements_of_a_job_keep_the_latest_few_and_a_forgotten_one_is_compared_again() -> None:
    store = JobStore()
    record = {"launcher": "compiled"}

    def round_for(digest: str) -> None:
        """One lowering of the call on both processes: process 1 publishes its record, process 0 compares."""
        leader, follower = exchange(store, 0, digest), exchange(store, 1, digest)
        assert leader.lowering == follower.lowering
        key = follower._key(f"lowering.{follower.lowering}", 1)
        store.values[key] = json.dumps({**record, "host": "other"})
        leader.compare("lowering", record, ["launcher"], str)

    digests = [f"call{i}" for i in range(12)]
    for digest in digests:
        round_for(digest)
    assert len(distributed._agreed) <= BOUND
    assert not distributed._locks  # a lock lives while a thread holds it
    verdicts = [key for key in store.values if key.endswith(".verdict/0")]
    assert len(verdicts) == len(digests)
    round_for(digests[-1])  # still remembered: not exchanged again
    assert len([key for key in store.values if key.endswith(".verdict/0")]) == len(digests)
    round_for(digests[0])  # forgotten: compared again, under the next lowering's number
    assert f"{exchange(store, 1, digests[0]).key}" in "".join(store.values)
    assert len([key for key in store.values if key.endswith(".verdict/0")]) == len(digests) + 1


def test_a_call_s_lock_is_one_while_a_thread_holds_it_and_goes_after() -> None:
    first = exchange(JobStore(), 0, "call")
    with first._lock("lowering") as held:
        gc.collect()
        assert first._lock("lowering") is held  # another thread lowering the call waits for this one
    del held
    gc.collect()
    assert not distributed._locks


def test_kernels_handed_to_the_interpreter_are_remembered_for_the_latest_few() -> None:
    for i in range(12):
        handed_over.remember(f"kernel_{i}(x_ptr)", "device printing")
        assert len(handed_over._seen) <= BOUND
    assert [entry["kernel"] for entry in handed_over.recorded()] == [f"kernel_{i}(x_ptr)" for i in range(12)]


def test_released_ids_are_remembered_for_the_latest_few() -> None:
    registry = CallRegistry()
    for n in range(1, 13):
        registry.register(tuned_call(n), ())
        registry.cache_clear()
        assert registry.released_count() <= BOUND
