"""Autotuning winners: choosing a configuration of an autotuned call and remembering the choice per machine.

A tuning problem is identified by the kernel's source, the values of the autotuner's ``key`` arguments, the device
kind and the candidate configurations (`tuning_key`); its winner is kept as a small JSON record in the cache
root's ``autotune`` folder, with its integrity record (size and SHA-256, checked before every use), so later
processes on the machine skip the trials. The CPU backend tunes through
`choose_config`; GPU launch handlers read and write the same records themselves (`tuning_path`).

In a ``jax.distributed`` job, the processes sharing a computation must run one configuration: each timing its own
trials (or reading its own record) would let them differ. `agreed_config` makes the choice of the first of them
(process 0 for a global mesh) everyone's (`jt_core.distributed`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import pathlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from jt_core import cache, distributed, files, integrity, memory
from jt_core.call import INPUT, OUTPUT, KernelCall, LaunchConfig
from jt_core.errors import ProcessAgreementError
from jt_core.options import exact_form

__all__ = [
    "agreed_config",
    "caller_reports_skips",
    "choose_config",
    "load_choice",
    "note_best_config",
    "record_path",
    "save_choice",
    "skipped_configs",
    "skips_reported_by_caller",
    "take_recent_choice",
    "tuning_key",
    "tuning_path",
    "tuning_stats",
]

#: Counters of this process: trial runs made and choices read back from the cache.
tuning_stats = {"trials": 0, "cached_choices": 0, "tunings": 0}

_tuning_log = logging.getLogger("jt_core.tuning")

#: The configuration `choose_config` chose last for each tuning problem (by `tuning_key` without a
#: device), so that trials run on scratch buffers tell their winner even when records are not kept on disk: bounded
#: and emptied by ``jax.clear_caches()`` (`jt_core.memory`).
_recent: memory.BoundedStore[str, int] = memory.BoundedStore("recent autotuning choices")


def autotune_key_values(call: KernelCall) -> dict[str, Any]:
    """The values of the autotuner's ``key`` arguments: shapes and dtypes of arrays, values of scalars."""
    values: dict[str, Any] = {}
    for slot in call.slots:
        if slot.name not in call.autotune_keys:
            continue
        if slot.kind == INPUT:
            aval = call.operand_avals[slot.index]
            values[slot.name] = [list(aval.shape), str(aval.dtype)]
        elif slot.kind == OUTPUT:
            aval = call.out_avals[slot.index]
            values[slot.name] = [list(aval.shape), str(aval.dtype)]
        else:
            values[slot.name] = exact_form(slot.value)  # by type and bits: every NaN's repr is "nan"
    constexprs = call.configs[0].constexpr_dict
    for name in call.autotune_keys:
        if name not in values and name in constexprs:
            values[name] = exact_form(constexprs[name])
    return values


def tuning_key(call: KernelCall, device_name: str) -> str:
    """Identifies one tuning problem: kernel source, key values, device name and the candidate configs."""
    parts = {
        "source": cache.source_key(call.fn),
        "name": call.name,
        "keys": autotune_key_values(call),
        "device": device_name,
        "configs": [exact_form((config.constexprs, config.options)) for config in call.configs],
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def tuning_path(key: str) -> pathlib.Path:
    """The file remembering the winner of tuning problem ``key`` (in ``JT_CACHE_DIR/autotune``)."""
    return files.cache_folder("autotune") / f"{key}.json"


def record_path(key: str) -> pathlib.Path | None:
    """`tuning_path`, or ``None`` when the cache has no usable folder (reported once): tune uncached."""
    return files.entry_path("autotune", f"{key}.json")


def load_choice(key: str, num_configs: int) -> int | None:
    """The remembered winning config index for a tuning problem, or ``None`` (none remembered, the cache disabled or
    unusable, or a record that fails its integrity check or names no candidate: then it is deleted and the problem
    is tuned again)."""
    if not cache.enabled():
        return None
    path = record_path(key)
    record = None if path is None else _read_record(path, num_configs)
    if path is None or record is None:
        return None
    index = record.get("index")
    if not isinstance(index, int) or not 0 <= index < num_configs:
        files.unusable(path, f"it names config {index!r} of {num_configs}")
        return None
    return index


#: What GPU launch handlers (C++) name themselves as in the records they write after tuning at run time.
HANDLER_PREFIX = "jt_"


def _read_record(path: pathlib.Path, num_configs: int) -> dict[str, Any] | None:
    """A tuning record: one written here carries its integrity record (`jt_core.integrity.write_record`); one a
    GPU launch handler wrote after tuning at run time (``"tuned_by": "jt_cuda_launch"``, no SHA-256 at hand there)
    must agree with itself instead: a timing for every candidate (``null`` for one it set aside, whose reason is
    under ``"skipped"``), and the index of the fastest (the first of equals, as the handler picks). A record that
    fails is deleted, with a warning."""
    data = files.read_file(path)
    if data is None:
        return None
    try:
        raw = json.loads(data)
    except ValueError:
        raw = None
    if not (
        isinstance(raw, dict) and "integrity" not in raw and str(raw.get("tuned_by", "")).startswith(HANDLER_PREFIX)
    ):
        return integrity.read_record(path, data)
    seconds, index = raw.get("seconds"), raw.get("index")
    timings = seconds if isinstance(seconds, list) else []
    numbers = [t for t in timings if isinstance(t, (int, float)) and t == t and t >= 0]
    skipped = [t for t in timings if t is None]
    if len(numbers) + len(skipped) != num_configs or len(timings) != num_configs or not numbers:
        files.unusable(path, f"it holds {len(numbers)} timings for {num_configs} configurations")
        return None
    fastest = min(numbers)
    if index != next(i for i, t in enumerate(timings) if t == fastest and t is not None):
        files.unusable(path, f"its index {index!r} is not that of its fastest timing")
        return None
    return raw


_reporting = threading.local()


@contextlib.contextmanager
def skips_reported_by_caller() -> Iterator[None]:
    """While lowering in this thread, the configurations a launch handler sets aside as it tunes are reported by the
    caller (which reads them from the record: `skipped_configs`), not by the handler itself."""
    previous = getattr(_reporting, "caller", False)
    _reporting.caller = True
    try:
        yield
    finally:
        _reporting.caller = previous


def caller_reports_skips() -> bool:
    """Whether a lowering in this thread is inside `skips_reported_by_caller`."""
    return bool(getattr(_reporting, "caller", False))


def skipped_configs(key: str, num_configs: int) -> list[tuple[int, str]]:
    """The configurations a GPU launch handler set aside when it tuned problem ``key``, with why (it wrote them
    into its record): ``[(index, reason), ...]``."""
    path = record_path(key)
    record = None if path is None or not cache.enabled() else _read_record(path, num_configs)
    skipped = record.get("skipped") if record is not None else None
    found = []
    for entry in skipped if isinstance(skipped, list) else []:
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], int) and 0 <= entry[0] < num_configs:
            found.append((entry[0], str(entry[1])))
    return found


def save_choice(key: str, index: int, label: str, timings: Sequence[float]) -> None:
    """Remembers the winning config index (atomically, with its integrity record; skipped when the cache is
    disabled, and when the folder cannot take it, which is reported once)."""
    if not cache.enabled():
        return
    record = {"index": index, "config": label, "seconds": list(timings)}
    path = record_path(key)
    if path is not None:
        integrity.write_record(path, record)


def choose_config(
    call: KernelCall,
    device_name: str,
    trial: Callable[[int], float],
    none_usable: Callable[[], Exception] | None = None,
) -> int:
    """Picks the fastest configuration of an autotuned call, or the remembered one.

    Args:
        call: The call; ``call.configs`` are the candidates.
        device_name: Names the device the timings hold for (part of the remembered key).
        trial: Runs configuration ``i`` once on scratch copies of the buffers and returns its time in seconds;
            infinity for a configuration set aside (one that leaves part of an output unwritten, say).
        none_usable: Makes the error raised when every configuration is set aside.

    Returns:
        The index of the chosen configuration.

    Raises:
        Exception: ``none_usable()``, when every trial gave infinity (nothing is remembered then).
    """
    if len(call.configs) == 1:
        return 0
    key = tuning_key(call, device_name)
    remembered = load_choice(key, len(call.configs))
    if remembered is not None:
        tuning_stats["cached_choices"] += 1
        _tuning_log.info("triton_call %r: using remembered config [%s]", call.name, call.configs[remembered].label)
        _recent.put(tuning_key(call, ""), remembered)
        return remembered
    start = time.perf_counter()
    timings = []
    for index in range(len(call.configs)):
        tuning_stats["trials"] += 1
        timings.append(trial(index))
        elapsed = time.perf_counter() - start
        if elapsed > 1.0:
            _tuning_log.info(
                "triton_call %r: autotuning %d/%d configs (%.1f s so far)",
                call.name,
                index + 1,
                len(call.configs),
                elapsed,
            )
    best = min(range(len(timings)), key=timings.__getitem__)
    if timings[best] == float("inf"):
        raise (none_usable or (lambda: RuntimeError(f"triton_call {call.name!r}: no config could run")))()
    tuning_stats["tunings"] += 1
    _tuning_log.info(
        "triton_call %r: config [%s] won (%.3f ms) after tuning %d configs in %.2f s",
        call.name,
        call.configs[best].label,
        timings[best] * 1e3,
        len(timings),
        time.perf_counter() - start,
    )
    save_choice(key, best, call.configs[best].label, timings)
    _recent.put(tuning_key(call, ""), best)
    return best


def take_recent_choice(call: KernelCall) -> int | None:
    """The configuration `choose_config` chose last in this process for the tuning problem of ``call`` (on
    any device), or ``None``; taken, so that a later question gets only a later choice."""
    index = _recent.pop(tuning_key(call, ""))
    return index if index is not None and 0 <= index < len(call.configs) else None


def _autotuner(kernel: Any) -> Any | None:
    """The ``@triton.autotune`` object among the wrappers of the kernel a caller passed, or ``None``."""
    from triton.runtime.autotuner import Autotuner

    current = kernel
    for _ in range(16):  # as deep as `jt_core.configs.unwrap_kernel` looks
        if isinstance(current, Autotuner):
            return current
        current = getattr(current, "fn", None)
        if current is None:
            return None
    return None


def _config_of(autotuner: Any, config: LaunchConfig) -> Any:
    """The autotuner's ``triton.Config`` that ``config`` runs with: the first whose values and compile options are
    the configuration's (its values alone where a heuristic set an option). A prune function may return configs
    of its own, not among the autotuner's: then one made like them."""
    from triton import Config

    values, options = config.constexpr_dict, config.options

    def fits(candidate: Any, with_options: bool) -> bool:
        if any(name not in values or values[name] != value for name, value in candidate.kwargs.items()):
            return False
        return not with_options or all(
            getattr(candidate, option, None) in (None, getattr(options, option))
            for option in ("num_warps", "num_stages", "num_ctas")
        )

    for with_options in (True, False):
        found = next((c for c in autotuner.configs if fits(c, with_options)), None)
        if found is not None:
            return found
    names = {name for candidate in autotuner.configs for name in candidate.kwargs}
    return Config(
        {name: values[name] for name in values if name in names},
        num_warps=options.num_warps,
        num_stages=options.num_stages,
        num_ctas=options.num_ctas,
    )


def note_best_config(call: KernelCall, index: int) -> None:
    """Sets ``best_config`` of the caller's ``@triton.autotune`` object to the ``triton.Config`` that configuration
    ``index`` of ``call`` runs with, as Triton's autotuner sets it when it has chosen. Nothing else of the object
    changes; a call of a kernel that is not autotuned is left alone."""
    autotuner = _autotuner(call.kernel)
    if autotuner is None or not 0 <= index < len(call.configs):
        return
    autotuner.best_config = _config_of(autotuner, call.configs[index])


def agreed_config(exchange: distributed.Exchange, call: KernelCall, choose: Callable[[], int | None]) -> int:
    """The configuration every process sharing a computation runs for an autotuned call: the leader's choice (the
    first process sharing it: process 0 for a global mesh).

    The leader calls ``choose()`` (its remembered winner or the winner of its trials; ``None`` when it has none,
    which picks the first configuration) and publishes it; the other processes receive it and never use their own
    timings or records, so that neither makes them differ.

    Raises:
        ProcessAgreementError: When the leader's choice is not one of this process's configurations.
    """

    def decide() -> dict[str, Any]:
        index = choose()
        if index is None:
            index = 0
            _tuning_log.info(
                "triton_call %r: no tuned winner on the leading process; every process runs the first config [%s]",
                call.name,
                call.configs[0].label,
            )
        return {"index": index, "config": call.configs[index].label}

    decision = exchange.decide("choice", decide)
    index = int(decision["index"])
    if not 0 <= index < len(call.configs) or decision["config"] != call.configs[index].label:
        raise ProcessAgreementError(
            f"triton_call {call.name!r}: the leading process chose config {index} [{decision['config']}], not one of "
            f"this process's {len(call.configs)} configs ({[config.label for config in call.configs]})"
        )
    label = decision["config"]
    _tuning_log.info("triton_call %r: every process runs config [%s], the leading process's choice", call.name, label)
    return index
