"""Calls lowered in a job of JAX's multi-process runtime (``jax.distributed.initialize``): what the processes agree on.

Every process of such a job runs the same program, and a computation whose devices belong to several processes must
be compiled alike by all of them (SPMD): a process running another kernel configuration computes something else,
and one that fails or takes another path leaves the others waiting in the next collective. Two things jt decides
on each process could differ: the winner of an autotuned call (each process would time its own trials, or read its
own remembered winner) and the launcher (a host without a C++ compiler cannot build the CPU FFI handler). So, for
each call of such a computation, the processes exchange small records through the job's own key-value store (the
one ``jax.distributed`` runs; jt has no transport of its own):

* `Exchange.decide`: the leader (process 0, or the first of the processes sharing the computation) decides
  (tunes, say) and publishes the decision; the others wait for it and use it;
* `Exchange.compare`: each process publishes how it lowers the call (launcher, configuration); the leader
  compares every other process's record with its own and publishes its verdict, and each other process compares its
  own with the leader's and waits for the verdict, so a difference is an
  `ProcessAgreementError` on every process, naming two that differ, instead of a hang.
  Every lowering is compared: only a record the whole job was found to share is not exchanged again (a refused
  lowering tried again is compared again);
* `Exchange.reporting`: a process that fails while lowering the call publishes its error, so the processes
  waiting for its records fail at once with it instead of waiting.

Records are keyed by `call_digest`, the call's content (the same on every process whatever the order in which
the processes lowered their computations), and by how many times this process lowered the call before (every
process lowers the same computations, so the n-th lowering on one meets the n-th on the others), a count the job's
store keeps. What a process remembers of the exchanges (decisions, agreed records) lives in bounded stores
(`jt_core.memory`): a decision it forgot is read back from the store, an agreement forgotten is made again. A
process waits only while lowering, for the others to lower the same call, never while a computation runs (a wait
inside a running computation could keep it from a collective the others wait in), and for at most
``JT_DISTRIBUTED_TIMEOUT`` seconds (default 600). Computations whose devices all belong to one process (a
``jax.jit`` on a local device) involve no other process and exchange nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import socket
import struct
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from jt_core import _compat, cache, memory, settings
from jt_core.errors import ProcessAgreementError

__all__ = ["Exchange", "Job", "call_digest", "current_job", "job_of", "timeout_seconds"]

#: The variable bounding every wait for another process, in seconds.
TIMEOUT_VARIABLE = "JT_DISTRIBUTED_TIMEOUT"
_DEFAULT_TIMEOUT = 600
_KEY_PREFIX = "jt/lowering"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def timeout_seconds() -> int:
    """How long a process waits for another one's record (``JT_DISTRIBUTED_TIMEOUT``, default 600 s)."""
    return max(1, settings.integer(TIMEOUT_VARIABLE, _DEFAULT_TIMEOUT))


@dataclasses.dataclass(frozen=True)
class Job:
    """This process's place among the processes of a multi-process job that share a computation.

    Attributes:
        process_index: This process's index (``jax.process_index()``).
        processes: The indices of the processes sharing the computation (all of the job's, unless its devices
            belong to some of them only), in order; the first decides for the others.
        client: The job's distributed runtime client (its key-value store).
    """

    process_index: int
    processes: tuple[int, ...]
    client: Any = dataclasses.field(repr=False, compare=False)

    @property
    def leader(self) -> int:
        """The process that decides for the others (the first one sharing the computation)."""
        return self.processes[0]

    @property
    def leads(self) -> bool:
        """Whether this process decides for the others."""
        return self.process_index == self.leader


def current_job() -> Job | None:
    """The multi-process job this process belongs to, with every process of it, or ``None`` (a single process, or
    ``jax.distributed`` not initialised)."""
    process_index, process_count, client = _compat.distributed_state()
    if client is None or process_count < 2:
        return None
    return Job(process_index, tuple(range(process_count)), client)


def job_of(devices: Sequence[Any] | None) -> Job | None:
    """The processes that must agree on a computation running on ``devices``: ``None`` when the devices are unknown
    (lowering without devices) or all belong to this process."""
    if not devices:
        return None
    job = current_job()
    if job is None:
        return None
    processes = sorted({int(getattr(device, "process_index", job.process_index)) for device in devices})
    if processes == [job.process_index]:
        return None
    return dataclasses.replace(job, processes=tuple(processes))


def host_name() -> str:
    """This machine's name, for messages."""
    return socket.gethostname()


# --------------------------------------------------------------------------------------------------------------
# The content of a call, the same on every process.


def call_digest(call: Any) -> str:
    """A digest of everything that defines a bound call (kernel source, parameters, operands, configurations,
    options), computed alike by every process: it does not depend on the order calls were made or lowered, nor on
    object addresses."""
    encoded = json.dumps(_canonical(call), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


def _canonical(value: Any) -> Any:
    # Numbers by their bits too: the text of every NaN is "nan", whatever its bits.
    if isinstance(value, np.generic):
        return [type(value).__name__, repr(value), value.tobytes().hex()]
    if isinstance(value, float):
        return [type(value).__name__, repr(value), struct.pack("<d", value).hex()]
    if value is None or isinstance(value, (bool, int, str)):
        return [type(value).__name__, repr(value)]
    if isinstance(value, bytes):
        return ["bytes", hashlib.sha256(value).hexdigest()]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if field.name == "fn":  # the kernel function: its source and the sources of the functions it calls
                fields[field.name] = ["source", cache.source_key(item)]
            elif field.name in ("kernel", "dialect"):  # wrappers expanded into the configurations; the dialect's kind
                fields[field.name] = ["type", type(item).__qualname__, getattr(item, "name", "")]
            else:
                fields[field.name] = _canonical(item)
        return [type(value).__qualname__, fields]
    if isinstance(value, (tuple, list)):
        return [type(value).__name__, [_canonical(item) for item in value]]
    if isinstance(value, Mapping):
        items = [[_canonical(key), _canonical(item)] for key, item in value.items()]
        return ["mapping", sorted(items, key=lambda pair: json.dumps(pair[0], sort_keys=True))]
    if hasattr(value, "shape") and hasattr(value, "dtype") and hasattr(value, "str_short"):
        return ["aval", value.str_short()]
    return [type(value).__qualname__, _ADDRESS.sub("", repr(value))]


# --------------------------------------------------------------------------------------------------------------
# Exchanging records.

#: The leader's decisions this process received or made, by (exchange key, topic): bounded and emptied by
#: ``jax.clear_caches()`` (`jt_core.memory`). A decision forgotten is read back from the job's store.
_decided: memory.BoundedStore[tuple[str, str], dict[str, Any]] = memory.BoundedStore(
    "decisions of jax.distributed jobs"
)
#: The records of each (exchange key, topic) that every process of the job was found to share: a call lowered again
#: that way is not compared again. Bounded alike: every process of a job lowers the same calls in the same order,
#: so they forget the same records at the same point, and compare a forgotten one again, together.
_agreed: memory.BoundedStore[tuple[str, str], list[dict[str, Any]]] = memory.BoundedStore(
    "records agreed by jax.distributed jobs"
)
#: One lock per (exchange key, topic) while some thread holds it: threads lowering the same call at once exchange it
#: once.
_locks: weakref.WeakValueDictionary[tuple[str, str], _KeyLock] = weakref.WeakValueDictionary()
_locks_lock = threading.Lock()
#: How often a waiting process looks for an error published by the one it waits for, in seconds.
_POLL_SECONDS = 1.0


class _KeyLock:
    """A lock that `_locks` can hold weakly: it goes when no thread holds it or waits for it (a ``with`` block
    holds the object itself, not only its inner lock, which another thread must find under the key)."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> _KeyLock:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class Exchange:
    """The records the processes of a job exchange about one call while lowering it.

    Args:
        job: The job.
        digest: The call's `call_digest`.
        what: Names the call in messages (``"triton_call 'add'"``).
    """

    def __init__(self, job: Job, digest: str, what: str) -> None:
        self.job = job
        self.what = what
        # The same call shared by other sets of processes is another exchange.
        sharing = hashlib.sha256(",".join(map(str, job.processes)).encode()).hexdigest()[:16]
        self.key = f"{digest}/{sharing}"
        # Every process lowers the same computations in the same order, so the n-th lowering of a call on one
        # process meets the n-th on the others: its records, and the error it may end with, carry that number. The
        # job's store counts them (for this process and call), so that this process keeps nothing per call.
        self.lowering = int(job.client.key_value_increment(self._key("lowerings", job.process_index), 1)) - 1

    def _key(self, topic: str, process: int) -> str:
        return f"{_KEY_PREFIX}/{self.key}/{topic}/{process}"

    def _lock(self, topic: str) -> _KeyLock:
        with _locks_lock:
            held = _locks.get((self.key, topic))
            if held is None:
                held = _locks[(self.key, topic)] = _KeyLock()
            return held

    def _publish(self, topic: str, record: Mapping[str, Any], overwrite: bool = False) -> None:
        value = json.dumps({**record, "host": host_name()}, sort_keys=True)
        self.job.client.key_value_set(self._key(topic, self.job.process_index), value, overwrite)

    def _receive(self, topic: str, process: int) -> dict[str, Any]:
        """Process ``process``'s record of ``topic``, waiting for it; raises its error if it published one."""
        timeout = timeout_seconds()
        started = time.monotonic()
        while True:
            left = timeout - (time.monotonic() - started)
            try:
                value = self.job.client.blocking_key_value_get(
                    self._key(topic, process), max(1, int(min(left, _POLL_SECONDS) * 1000))
                )
                break
            except Exception as exc:
                if "DEADLINE_EXCEEDED" not in str(exc):
                    raise
            self._raise_error_of(process)
            if time.monotonic() - started >= timeout:
                raise ProcessAgreementError(
                    f"{self.what}: process {self.job.process_index} (host {host_name()!r}) waited {timeout} s for "
                    f"process {process} to lower the same call, in vain. Every process of a jax.distributed job "
                    "must lower the same computations; a process that runs another program, is stuck, or has "
                    f"another version of the kernel never gets there. {TIMEOUT_VARIABLE} sets how long to wait"
                )
        return dict(json.loads(value))

    def _raise_error_of(self, process: int) -> None:
        try:
            value = self.job.client.key_value_try_get(self._key(f"error.{self.lowering}", process))
        except Exception:
            return  # none published
        record = json.loads(value)
        raise ProcessAgreementError(
            f"{self.what}: process {process} (host {record.get('host', '?')!r}) failed to lower it, so process "
            f"{self.job.process_index} (host {host_name()!r}) stops too instead of waiting for it. Its error: "
            f"{record['error']}"
        )

    def decide(self, topic: str, decide: Callable[[], Mapping[str, Any]]) -> dict[str, Any]:
        """The leader's decision about the call: the leader (process 0, or the first process sharing the computation)
        runs ``decide()`` and publishes what it returns (JSON values); every other process waits for it. Decided
        once per process and call: later lowerings reuse it."""
        with self._lock(topic):
            done = _decided.get((self.key, topic))
            if done is not None:
                return dict(done)
            if not self.job.leads:
                decision = self._receive(topic, self.job.leader)
            else:
                published = self._published(topic, self.job.leader)  # decided before, then forgotten here
                decision = published if published is not None else dict(decide())
                if published is None:
                    self._publish(topic, decision)
            decision.pop("host", None)  # which host published it: the same decision on every process
            _decided.setdefault((self.key, topic), decision)
            return dict(decision)

    def _published(self, topic: str, process: int) -> dict[str, Any] | None:
        """Process ``process``'s record of ``topic`` when it has published one, without waiting."""
        try:
            value = self.job.client.key_value_try_get(self._key(topic, process))
        except Exception:
            return None  # none published
        return dict(json.loads(value))

    def compare(
        self,
        topic: str,
        mine: Mapping[str, Any],
        fields: Sequence[str],
        describe: Callable[[Mapping[str, Any]], str],
        hint: str = "",
    ) -> None:
        """Publishes how this process lowers the call and compares it with the others; returns once every process
        of the job is known to lower it the same way.

        The leader compares the record of every other process with its own and publishes its verdict; each other
        process compares its own with the leader's, then waits for the verdict, so that a difference between any
        two processes stops all of them. A record the whole job agreed on is not exchanged again when the call is
        lowered again that way; any other lowering, a refused one's included, is exchanged again (under the
        lowering's number): every lowering is compared.

        Args:
            topic: What is compared (``"lowering"``).
            mine: This process's record (JSON values).
            fields: The fields that must be equal.
            describe: Says what a record means, for the message.
            hint: How to make the processes agree, for the message.

        Raises:
            ProcessAgreementError: On every process, naming two processes that differ, their hosts and records.
        """
        record = dict(mine)
        with self._lock(topic):  # threads lowering the call at once: the others find the first one's agreement
            agreed = _agreed.setdefault((self.key, topic), [])
            if record in agreed:
                return
            name = f"{topic}.{self.lowering}"
            self._publish(name, record)
            if self.job.leads:
                self._lead_comparison(name, record, fields, describe, hint)
            else:
                self._follow_comparison(name, record, fields, describe, hint)
            agreed.append(record)

    def _lead_comparison(
        self,
        name: str,
        record: dict[str, Any],
        fields: Sequence[str],
        describe: Callable[[Mapping[str, Any]], str],
        hint: str,
    ) -> None:
        """The leader's side of a round: every other record against its own, then the verdict for all."""
        try:
            for process in self.job.processes[1:]:
                self._check(record, process, self._receive(name, process), fields, describe, hint)
        except Exception as exc:
            self._publish(f"{name}.verdict", {"agreed": False, "error": f"{type(exc).__name__}: {exc}"})
            raise
        self._publish(f"{name}.verdict", {"agreed": True})

    def _follow_comparison(
        self,
        name: str,
        record: dict[str, Any],
        fields: Sequence[str],
        describe: Callable[[Mapping[str, Any]], str],
        hint: str,
    ) -> None:
        """Another process's side of a round: its record against the leader's, then the leader's verdict on the
        others."""
        self._check(record, self.job.leader, self._receive(name, self.job.leader), fields, describe, hint)
        verdict = self._receive(f"{name}.verdict", self.job.leader)
        if not verdict.get("agreed"):
            raise ProcessAgreementError(
                f"{self.what}: process {self.job.process_index} (host {host_name()!r}) lowers it as process "
                f"{self.job.leader} does, but another process of this jax.distributed job does not, so every process "
                f"stops. Process {self.job.leader} found: {verdict.get('error')}"
            )

    def _check(
        self,
        record: dict[str, Any],
        process: int,
        theirs: dict[str, Any],
        fields: Sequence[str],
        describe: Callable[[Mapping[str, Any]], str],
        hint: str,
    ) -> None:
        differing = [field for field in fields if theirs.get(field) != record.get(field)]
        if not differing:
            return
        sides = sorted(
            [(self.job.process_index, {**record, "host": host_name()}), (process, theirs)], key=lambda s: s[0]
        )
        described = "; ".join(f"process {p} (host {r.get('host', '?')!r}): {describe(r)}" for p, r in sides)
        verb = "differ" if len(differing) > 1 else "differs"
        raise ProcessAgreementError(
            f"{self.what} would be compiled differently by the processes of this jax.distributed job "
            f"({' and '.join(differing)} {verb}): {described}. Every process must compile the same program, "
            "or the job hangs in its next collective" + (f". {hint}" if hint else "")
        )

    @contextmanager
    def reporting(self) -> Iterator[None]:
        """Publishes an error raised inside the block, so that the processes waiting for this one's records stop at
        once with it, and raises it again."""
        try:
            yield
        except ProcessAgreementError:
            raise  # the processes concerned raise it themselves
        except Exception as exc:
            try:
                self._publish(f"error.{self.lowering}", {"error": f"{type(exc).__name__}: {exc}"}, overwrite=True)
            except Exception:
                pass  # the runtime is gone: nobody waits any more
            raise
