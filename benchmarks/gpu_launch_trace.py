"""Where a launch's cost goes inside XLA's command buffers (CUDA graphs): a trace of the 100-kernel chain.

Run on the GPU machine: ``python benchmarks/gpu_launch_trace.py --out DIR``. For each launch path of
``gpu_launch.py`` (jt's ``jt`` launcher with its record stage, without PDL and with stream capture, ``xla`` and
Pallas) it

* traces five executions of the jitted chain with torch's profiler (CUPTI: every kernel on the GPU's timeline and
  every CUDA runtime and driver call on the host) and reports, per execution, how many kernels ran, their mean
  duration, the mean idle gap between one kernel's end and the next one's start, the GPU span per kernel, and which
  CUDA calls the host made (``cuGraphLaunch`` alone means a replay without host work per node);
* runs the chain with XLA's command-buffer logging on (``TF_CPP_VMODULE``) and counts what XLA did per path: command
  buffers created or updated, commands traced by stream capture, record-stage calls.

Everything goes under ``--out``: ``trace_summary.json``, the chrome traces and XLA's log; a table is printed last.
XLA turns command buffers off while its own profiler runs unless told otherwise, so the script sets
``--xla_enable_command_buffers_during_profiling=true`` before JAX starts.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import statistics
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

_FLAG = "--xla_enable_command_buffers_during_profiling=true"
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}".strip()
sys.path.insert(0, str(Path(__file__).parent))  # gpu_launch, also under ``python -P``

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from gpu_launch import CHAIN, SIZE, chain_of, jt_add, pallas_add  # noqa: E402

#: Path name: (the add, the environment it is lowered in).
PATHS = {
    "jt (record stage)": (lambda: jt_add("jt"), {}),
    "jt (no PDL)": (lambda: jt_add("jt"), {"JT_CUDA_PDL": "0"}),
    "jt (stream capture)": (lambda: jt_add("jt"), {"JT_CUDA_RECORD": "0"}),
    "xla": (lambda: jt_add("xla"), {}),
    "pallas": (pallas_add, {}),
}

# XLA's sources that log command buffers (missing names are ignored).
VMODULE = (
    "command_buffer_thunk=3,command_buffer_cmd=1,command_executor=1,command_buffer_cmd_executor=1,"
    "custom_call_thunk=5,record_ffi=3,cuda_command_buffer=1,gpu_command_buffer=1,command_buffer_conversion_pass=1"
)
LOG_MARKERS = {
    "stream capture": "fallback to stream capture",
    "record stage called": "c_bundle->record",
    "kernel nodes by the record API": "FfiCreateLaunch for kernel",
    "commands created": "Create ",
    "commands updated": "Update ",
    "traced (child graph)": "trace",
}


def inputs() -> tuple[Any, Any]:
    x = jax.random.normal(jax.random.key(0), (SIZE,), jnp.float32)
    y = jax.random.normal(jax.random.key(1), (SIZE,), jnp.float32) * 1e-3
    return x, y


def executions(kernels: list[dict[str, Any]], split_us: float = 30.0) -> list[list[dict[str, Any]]]:
    """Kernel events (sorted by start) cut into executions wherever the GPU idles longer than ``split_us``."""
    groups: list[list[dict[str, Any]]] = []
    for event in sorted(kernels, key=lambda e: e["ts"]):
        if groups and event["ts"] - (groups[-1][-1]["ts"] + groups[-1][-1]["dur"]) <= split_us:
            groups[-1].append(event)
        else:
            groups.append([event])
    return groups


def summarize(events: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    """Per-execution GPU figures of a chrome trace's kernel events, and the host's CUDA calls per execution."""
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    chains = [g for g in executions(kernels) if len(g) >= CHAIN // 2]
    rows = []
    for group in chains:
        gaps = [b["ts"] - (a["ts"] + a["dur"]) for a, b in itertools.pairwise(group)]
        span = group[-1]["ts"] + group[-1]["dur"] - group[0]["ts"]
        rows.append(
            {
                "kernels": len(group),
                "mean_kernel_us": statistics.fmean(e["dur"] for e in group),
                "mean_gap_us": statistics.fmean(gaps) if gaps else 0.0,
                "span_per_kernel_us": span / len(group),
                "names": sorted({e["name"] for e in group})[:4],
            }
        )
    calls = collections.Counter(e["name"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver"))
    return {
        "executions": rows,
        "median": {key: statistics.median(r[key] for r in rows) for key in rows[0] if key != "names"} if rows else {},
        "cuda_calls_per_execution": {name: count / runs for name, count in calls.most_common(25)},
    }


def trace_path(name: str, out: Path, runs: int = 5) -> dict[str, Any]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    make, environment = PATHS[name]
    chain = chain_of(make(), CHAIN, environment)
    x, y = inputs()
    for _ in range(10):
        chain(x, y).block_until_ready()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            chain(x, y).block_until_ready()
    torch.cuda.synchronize()
    path = out / f"trace_{name.split()[0]}_{len(name)}.json"
    prof.export_chrome_trace(str(path))
    return summarize(json.loads(path.read_text())["traceEvents"], runs)


def host_profile(name: str, out: Path, runs: int = 20) -> dict[str, float]:
    """XLA's own profiler (host events: what the runtime does on the CPU per execution): microseconds per execution
    spent in each host event, the longest 15."""
    from jax.profiler import ProfileData

    make, environment = PATHS[name]
    chain = chain_of(make(), CHAIN, environment)
    x, y = inputs()
    for _ in range(10):
        chain(x, y).block_until_ready()
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    folder = out / f"xprof_{name.split()[0]}_{len(name)}"
    with jax.profiler.trace(str(folder), profiler_options=options):
        for _ in range(runs):
            chain(x, y).block_until_ready()
    totals: collections.Counter[str] = collections.Counter()
    for path in folder.rglob("*.xplane.pb"):
        for plane in ProfileData.from_file(str(path)).planes:
            if plane.name.startswith("/host:CPU"):
                for line in plane.lines:
                    for event in line.events:
                        totals[event.name] += event.duration_ns / 1e3 / runs
    return dict(totals.most_common(15))


def vlog_child() -> None:
    """Runs each path's chain (8 calls, so that XLA forms a command buffer) three times, with markers."""
    x, y = inputs()
    for name, (make, environment) in PATHS.items():
        print(f"=== path {name}", file=sys.stderr, flush=True)
        chain = chain_of(make(), 8, environment)
        for _ in range(3):
            chain(x, y).block_until_ready()
        print(f"=== done {name}", file=sys.stderr, flush=True)


def vlog(out: Path) -> dict[str, dict[str, int]]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE=VMODULE, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    result = subprocess.run(
        [sys.executable, __file__, "--vlog-child"], env=env, capture_output=True, text=True, timeout=240
    )
    log = result.stderr
    (out / "xla_command_buffer_log.txt").write_text(log)
    counts: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        if line.startswith("=== path "):
            current = line[len("=== path ") :]
            counts[current] = dict.fromkeys(LOG_MARKERS, 0)
        elif current is not None:
            for label, marker in LOG_MARKERS.items():
                counts[current][label] += marker in line
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("launch-trace"))
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated path names (default: all)")
    parser.add_argument("--no-xla-log", action="store_true", help="skip the run with XLA's command-buffer log")
    parser.add_argument("--host-profile", action="store_true", help="also profile the host with XLA's profiler")
    parser.add_argument("--vlog-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.vlog_child:
        vlog_child()
        return
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {"device": jax.devices()[0].device_kind, "traces": {}, "xla_log": {}}
    for name in args.paths.split(","):
        try:
            summary["traces"][name] = trace_path(name, args.out)
        except Exception:
            summary["traces"][name] = {"error": traceback.format_exc()}
    if args.host_profile:
        summary["host"] = {}
        for name in args.paths.split(","):
            try:
                summary["host"][name] = host_profile(name, args.out)
            except Exception:
                summary["host"][name] = {"error": traceback.format_exc()}
    if not args.no_xla_log:
        try:
            summary["xla_log"] = vlog(args.out)
        except Exception:
            summary["xla_log"] = {"error": traceback.format_exc()}
    from jt_cuda.launchers import HANDLER

    summary["record_counts"] = HANDLER.record_counts()
    (args.out / "trace_summary.json").write_text(json.dumps(summary, indent=2))
    print(f"{'path':22} {'kernels':>7} {'kernel us':>9} {'gap us':>7} {'span/kernel':>11}  CUDA calls per execution")
    for name, data in summary["traces"].items():
        if "error" in data:
            print(f"{name:22} ERROR {data['error'].splitlines()[-1]}")
            continue
        m = data["median"]
        calls = ", ".join(f"{k} {v:g}" for k, v in list(data["cuda_calls_per_execution"].items())[:6])
        print(
            f"{name:22} {m.get('kernels', 0):7.0f} {m.get('mean_kernel_us', 0):9.2f} {m.get('mean_gap_us', 0):7.2f} "
            f"{m.get('span_per_kernel_us', 0):11.2f}  {calls}"
        )
    for name, events in summary.get("host", {}).items():
        print(f"host, {name}: " + ", ".join(f"{k[:60]} {v:.1f}" for k, v in events.items() if isinstance(v, float)))
    print("XLA log counts:", json.dumps(summary["xla_log"]))
    print("record counts (created, updated, captured):", summary["record_counts"])


if __name__ == "__main__":
    main()
