"""One process of a 2-process ``jax.distributed`` job, started by ``test_multiprocess.py`` through
``jt_core.testing.run_job`` (not collected: its name does not start with ``test_``).

    python core_multiprocess_worker.py SCENARIO PLATFORM [LAUNCHER]

The job's coordinator, size and this process's index come in ``COORDINATOR``, ``NUM_PROCESSES`` and ``PROCESS_ID``,
the file for the findings in ``RESULT_FILE``.
On the CPU each process has 2 devices and the processes run collectives through gloo; on a GPU platform each
process drives one GPU. The scenario's findings are written to that file as JSON (``{"error": ...}`` when it
raised); the test compares the two processes' files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
import traceback
from typing import Any

SCENARIO, PLATFORM = sys.argv[1], sys.argv[2]
LAUNCHER = sys.argv[3] if len(sys.argv) > 3 and sys.argv[3] else None
PROCESS = int(os.environ["PROCESS_ID"])
RESULT = os.environ["RESULT_FILE"]

import jax  # noqa: E402

if PLATFORM == "cpu":
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(
    os.environ["COORDINATOR"],
    num_processes=int(os.environ["NUM_PROCESSES"]),
    process_id=PROCESS,
    initialization_timeout=60,
    local_device_ids=[PROCESS] if PLATFORM != "cpu" else None,
)

import core_kernels as k  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import jt_core as jt  # noqa: E402
from jt_core import files, tuning  # noqa: E402
from jt_core.plugin.registry import get_registry  # noqa: E402


# Two configurations doing the same work: a real tie, which the process's own timing would break either way. The
# kernel writes its BLOCK where program 0 can, so the caller sees which configuration ran on each shard.
@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def tied_kernel(x_ptr, out_ptr, used_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)
    if tl.program_id(0) == 0:
        tl.store(used_ptr, BLOCK)


def add(x: Any, y: Any) -> Any:
    kernel, grid = k.add_current_kernel, (triton.cdiv(x.size, 32),)
    return jt.triton_call(x, y, n=x.size, kernel=kernel, out_shape=x, grid=grid, BLOCK=32, launcher=LAUNCHER)


def tied(x: Any) -> tuple[Any, Any]:
    out, used = jt.triton_call(
        x,
        n=x.size,
        kernel=tied_kernel,
        out_shape=(x, jax.ShapeDtypeStruct((1,), jnp.int32)),
        grid=lambda meta: (triton.cdiv(x.size, meta["BLOCK"]),),
        launcher=LAUNCHER,
    )
    return out, used


def mesh() -> Any:
    return jax.make_mesh((jax.device_count(),), ("x",))


def global_array(shape: tuple[int, ...], seed: int, sharding: Any) -> tuple[Any, np.ndarray]:
    # Every process builds the same global values (one seed) and places its own shards.
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return jax.make_array_from_callback(shape, sharding, lambda index: values[index]), values


def gathered(array: Any) -> np.ndarray:
    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def sharding() -> dict[str, Any]:
    """shard_map and jit with partition rules: correct results, no gather, the same programs everywhere, each
    lowered for a device of this process."""
    from jt_core.lowering import dispatch

    lowered_for: set[int] = set()
    find_device = dispatch.lowering_device

    def recording(*args: Any) -> Any:
        device = find_device(*args)
        lowered_for.add(int(device.process_index))
        return device

    dispatch.lowering_device = recording
    m = mesh()
    spec = NamedSharding(m, P("x"))
    x, xs = global_array((jax.device_count() * 2, 16), 1, spec)
    y, ys = global_array((jax.device_count() * 2, 16), 2, spec)
    found: dict[str, Any] = {}
    programs = {
        "shard_map": jax.jit(jax.shard_map(add, mesh=m, in_specs=(P("x"), P("x")), out_specs=P("x"))),
        "partitioned": jax.jit(jt.partitioned(jt.Elementwise())(add)),
        "partition_argument": jax.jit(
            lambda a, b: jt.triton_call(
                a,
                b,
                kernel=k.add_current_kernel,
                out_shape=a,
                grid=lambda meta: (triton.cdiv(meta["x_ptr"].size, 32),),
                n=a.size // jax.device_count(),  # the shard's size
                BLOCK=32,
                partition=jt.Elementwise(),
                launcher=LAUNCHER,
            )
        ),
    }
    # On an explicit mesh set for the trace, a partition rule splits the call with jax.shard_map.
    explicit = jax.make_mesh((jax.device_count(),), ("x",), axis_types=(jax.sharding.AxisType.Explicit,))
    programs["explicit"] = jax.jit(jt.partitioned(jt.Elementwise())(add))
    for name, f in programs.items():
        with jax.set_mesh(explicit) if name == "explicit" else contextlib.nullcontext():
            a, b = (
                (jax.sharding.reshard(v, NamedSharding(explicit, P("x"))) for v in (x, y))
                if name == "explicit"
                else (x, y)
            )
            out = f(a, b)
            np.testing.assert_allclose(gathered(out), xs + ys, rtol=1e-6)
            # The compiled program, after partitioning (JAX's lowered text of a partition rule names a callback by
            # its address in the process).
            compiled = f.lower(a, b).compile().as_text()
        found[name] = {"all_gather": "all-gather" in compiled, "program": digest(compiled)}
    # The global size given to every shard is refused on every process alike, with a message about local sizes.
    refused = jax.jit(
        lambda a: jt.triton_call(
            a,
            kernel=k.scale_kernel,
            factor=3.0,
            out_shape=a,
            grid=lambda meta: (triton.cdiv(meta["n"], 32),),
            n=a.size,
            BLOCK=32,
            partition=jt.Elementwise(),
            launcher=LAUNCHER,
        )
    )
    found["lowered_for"] = sorted(lowered_for)
    try:
        refused(x)
        found["global_size"] = "ran"
    except Exception as exc:
        found["global_size"] = str(exc)[-2000:]
    return found


def _remembered(index: int) -> int:
    """Makes this process's remembered winners say ``index`` (as if an earlier run of this process had timed
    it best); returns how many records it rewrote."""
    records = sorted(files.cache_folder("autotune").glob("*.json"))
    for record in records:
        tuning.save_choice(record.stem, index, "", [])
    return len(records)


def autotune() -> dict[str, Any]:
    """An autotuned kernel with tied configurations, where each process alone would pick another."""
    found: dict[str, Any] = {}
    if PLATFORM == "cpu":
        # Each process's trials find the configuration of the other's index slower: process 0 prefers config 1
        # and process 1 config 0, deterministically, on every CPU launcher (each times its trials for the tuner).
        choose = tuning.choose_config

        def slowed_choice(call: Any, device_name: str, trial: Any, *rest: Any) -> int:
            def slowed(index: int) -> float:
                return trial(index) + (0.05 if len(call.configs) > 1 and index == PROCESS else 0.0)

            return choose(call, device_name, slowed, *rest)

        tuning.choose_config = slowed_choice
    m = mesh()
    local = jax.local_devices()[0]
    # 1. A computation of this process only (other processes do not take part): tuned locally, remembered.
    x_local = jax.device_put(np.random.default_rng(5).standard_normal(64).astype(np.float32), local)
    out, used = jax.jit(tied)(x_local)
    np.testing.assert_allclose(out, np.asarray(x_local) * 2 + 1, rtol=1e-6)
    found["local_choice"] = int(np.asarray(used)[0])
    found["records_rewritten"] = _remembered(1 - PROCESS)
    # 2. The same tuning problem (64 elements per shard) in a computation of both processes: one configuration,
    # whatever each process remembers.
    spec = NamedSharding(m, P("x"))
    x, xs = global_array((jax.device_count() * 64,), 6, spec)
    f = jax.jit(jax.shard_map(tied, mesh=m, in_specs=P("x"), out_specs=(P("x"), P("x"))))
    out, used = f(x)
    np.testing.assert_allclose(gathered(out), xs * 2 + 1, rtol=1e-6)
    found["remembered"] = [int(v) for v in gathered(used)]
    # 3. A new tuning problem (96 elements per shard): tuned now, with the tie broken differently per process.
    x, xs = global_array((jax.device_count() * 96,), 7, spec)
    out, used = f(x)
    np.testing.assert_allclose(gathered(out), xs * 2 + 1, rtol=1e-6)
    found["tuned"] = [int(v) for v in gathered(used)]
    # 4. Under a partition rule: the shard's computation is lowered while XLA partitions the program.
    x, xs = global_array((jax.device_count() * 80,), 8, spec)
    g = jax.jit(jt.partitioned(jt.Elementwise())(lambda a: tied(a)[0]))
    np.testing.assert_allclose(gathered(g(x)), xs * 2 + 1, rtol=1e-6)
    found["partitioned"] = "ok"
    return found


def order() -> dict[str, Any]:
    """Processes that lowered different things first compile the same program."""
    if PROCESS == 1:
        # A computation of this process only, with another kernel, lowered before the shared one.
        z = jax.device_put(np.ones(48, np.float32), jax.local_devices()[0])
        extra = jax.jit(
            lambda a: jt.triton_call(
                a, n=a.size, factor=3.0, kernel=k.scale_kernel, out_shape=a, grid=(2,), BLOCK=32, launcher=LAUNCHER
            )
        )
        np.testing.assert_allclose(extra(z), 3 * np.ones(48), rtol=1e-6)
    m = mesh()
    spec = NamedSharding(m, P("x"))
    x, xs = global_array((jax.device_count() * 2, 16), 3, spec)
    f = jax.jit(jax.shard_map(add, mesh=m, in_specs=(P("x"), P("x")), out_specs=P("x")))
    lowered = f.lower(x, x)
    np.testing.assert_allclose(gathered(f(x, x)), 2 * xs, rtol=1e-6)
    return {"lowered": digest(lowered.as_text()), "compiled": digest(lowered.compile().as_text())}


def no_compiler() -> dict[str, Any]:
    """A partitioned call where one host has no compiler: without the prebuilt CPU FFI handler both processes must
    stop, at once; with it both run the call."""
    m = mesh()
    spec = NamedSharding(m, P("x"))
    x, _ = global_array((jax.device_count() * 2, 16), 4, spec)
    # The sum needs every shard: a process left alone waits in that collective.
    f = jax.jit(lambda a, b: jt.partitioned(jt.Elementwise())(add)(a, b).sum())
    started = time.monotonic()
    try:
        jax.block_until_ready(f(x, x))
        outcome = "ran"
    except Exception as exc:
        outcome = f"{type(exc).__name__}: {exc}"[-4000:]
    return {"outcome": outcome, "seconds": time.monotonic() - started, "launcher": get_registry().launcher("cpu").name}


def no_compiler_again() -> dict[str, Any]:
    """Calls lowered again after their first lowering was refused, where one host cannot build the CPU handler library:
    refused again, every time, on both processes."""
    m = mesh()
    spec = NamedSharding(m, P("x"))
    x, xs = global_array((jax.device_count() * 2, 16), 4, spec)
    computations = {
        "partitioned": jax.jit(lambda a, b: jt.partitioned(jt.Elementwise())(add)(a, b).sum()),
        "shard_map": jax.jit(
            lambda a, b: jax.shard_map(add, mesh=m, in_specs=(P("x"), P("x")), out_specs=P("x"))(a, b).sum()
        ),
    }
    outcomes = []
    for name, f in computations.items():
        for _ in range(2):  # JAX keeps no failed lowering: calling again lowers the computation again
            started = time.monotonic()
            try:
                total = float(jax.block_until_ready(f(x, x)))
                np.testing.assert_allclose(total, 2 * xs.sum(), rtol=1e-4)
                outcome = "ran"
            except Exception as exc:
                outcome = f"{type(exc).__name__}: {exc}"[-4000:]
            outcomes.append({"computation": name, "outcome": outcome, "seconds": time.monotonic() - started})
    return {"outcomes": outcomes}


def main() -> None:
    scenarios = {
        "sharding": sharding,
        "autotune": autotune,
        "order": order,
        "no_compiler": no_compiler,
        "no_compiler_again": no_compiler_again,
    }
    try:
        found = scenarios[SCENARIO]()
    except Exception as exc:
        found = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    found["process"] = PROCESS
    with open(RESULT, "w", encoding="utf-8") as out:
        json.dump(found, out)
    if "error" in found:
        # The other process may be left in a collective: do not wait for it in JAX's shutdown barrier.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


main()
