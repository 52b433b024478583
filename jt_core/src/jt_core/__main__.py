"""``python -m jt_core``: inspect jt's plugins, caches and what the CPU backend ran in the interpreter."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

from jt_core.plugin import faults, records


def _native_launchers() -> list[tuple[str, Any]]:
    """``(platform:name, its library spec)`` for every registered launcher that builds a library."""
    from jt_core.plugin.registry import SET_ASIDE, get_registry

    registry = get_registry().ensure_loaded()
    found = []
    for platform, launchers in registry.launchers.items():
        for _, launcher in launchers:
            spec = registry.serve(launcher, "native_library")
            if spec is not None and spec is not SET_ASIDE:
                found.append((f"{platform}:{launcher.name}", spec))
    return found


def _native_status() -> dict[str, dict[str, Any]]:
    statuses = {}
    for label, spec in _native_launchers():
        status = spec.status()
        statuses[label] = {
            "library": spec.name,
            "built": status.path is not None,
            "prebuilt": status.prebuilt,
            "path": str(status.path) if status.path else None,
            "compiler": status.compiler,
            "error": status.error,
            "failure": status.failure,
            "prebuilt_problem": status.prebuilt_problem,
            "without_it": spec.without_it,
        }
    return statuses


def _lowers_only(records: Sequence[Any]) -> set[str]:
    """The platforms of the registered launchers that JAX sees no device of here: there a launcher only lowers
    (``jax.export``, cross-platform lowering), so what matters when running (its native library, its rules for
    handing calls on) is left out of the table."""
    from jt_core.gpu.launchers import devices_present

    # Asking JAX for a platform's devices starts its client: without this, a GPU client would take most of the
    # GPU's memory for the few seconds the listing runs.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    platforms = {label.split(":", 1)[0] for r in records for label in r.launchers}
    return {platform for platform in platforms if not devices_present(platform)}


def _provides(record: Any) -> str:
    """The table's last column: what a plugin provides, or why it provides nothing, and its newest fault."""
    if record.status in (records.FAILED, records.BLOCKED):
        return f"nothing: {record.error}"
    provides = []
    if record.platforms:
        provides.append("backends: " + ",".join(record.platforms))
    if record.launchers:
        provides.append("launchers: " + ",".join(record.launchers))
    if record.dialects:
        provides.append("dialects: " + ",".join(record.dialects))
    if record.faults:
        newest = record.faults[-1]
        count = f"{len(record.faults)} fault{'s' if len(record.faults) > 1 else ''}"
        provides.append(f"{count} (below), the newest: {newest.where} raised {newest.error}")
    if record.deprecations:
        provides.append("uses names of an earlier jt contract (below)")
    return "; ".join(provides) or "-"


def _plugins(args: argparse.Namespace) -> int:
    from jt_core.plugin.registry import list_plugins

    if args.forget_faults:
        print(f"forgot the faults of {faults.forget_faults()} plugins")
        return 0
    with warnings.catch_warnings():
        # The table says why a plugin failed or what it still uses of an earlier contract: the loader's warning
        # would say it again, pointing at runpy.
        warnings.filterwarnings("ignore", message="jt plugin ", category=RuntimeWarning)
        warnings.filterwarnings("ignore", message="jt plugin ", category=DeprecationWarning)
        records = faults.with_recorded_faults(list_plugins())
    native = _native_status()
    lowers_only = _lowers_only(records)
    if args.json:
        data = [r.as_dict() for r in records]
        for entry in data:
            for label, details in entry["provides"]["launcher_details"].items():
                details["lowers_only"] = label.split(":", 1)[0] in lowers_only
                if label in native:
                    details["native"] = native[label]
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    rows = [("NAME", "DISTRIBUTION", "VERSION", "STATUS", "PROVIDES")]
    rows += [(r.name, r.distribution, r.version, r.status, _provides(r)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths)) + "  " + row[4])
    details = {label: d for r in records for label, d in r.launcher_details.items()}
    here = {label: d for label, d in details.items() if label.split(":", 1)[0] not in lowers_only}
    elsewhere = [label for label in details if label not in here]
    if elsewhere:
        print()
    for label in elsewhere:
        platform = label.split(":", 1)[0]
        print(f"{label:20} lowers only: JAX sees no {platform} device here (jax.export, cross-platform lowering)")
    for label, launcher in here.items():
        if launcher["falls_back_for"]:
            rules = "; ".join(launcher["falls_back_for"])
            print(f"\n{label} hands a call to the platform's next launcher for: {rules}")
    native = {label: status for label, status in native.items() if label in here}
    if native:
        print(
            "\nnative libraries (prebuilt in platform wheels; else built once per machine, at first use or by "
            "`python -m jt_core build-native`):"
        )
        for label, status in native.items():
            unused = status["prebuilt_problem"] and f"the prebuilt one is not used ({status['prebuilt_problem']}); "
            unused = unused or ""
            if status["prebuilt"]:
                state = f"prebuilt: {status['path']}"
            elif status["built"]:
                state = f"{unused}built: {status['path']} ({status['compiler']})"
            elif status["error"]:
                state = f"{unused}cannot be built here: {status['error']}; without it, {status['without_it']}"
            elif status["failure"]:
                state = (
                    f"{unused}not built: {status['failure']}; the next use builds it again; without it, "
                    f"{status['without_it']}"
                )
            else:
                state = f"{unused}not built yet; {status['compiler']} will build it"
            print(f"  {label:16} {status['library']:24} {state}")
    for r in records:
        for note in r.deprecations:
            print(f"\n{r.name} ({r.distribution} {r.version}) {note}")
        if r.faults:
            _print_faults(r)
    return 0


def _print_faults(record: Any) -> None:
    """A plugin's faults: what raised, where and when, what jt did, and the traceback."""
    count = f"{len(record.faults)} fault{'s' if len(record.faults) > 1 else ''}"
    print(
        f"\n{record.name}: {count} while serving calls, kept on this machine (newest last). Set "
        f"JT_DISABLE_PLUGINS={record.name} to skip the plugin; `python -m jt_core plugins --forget-faults` forgets "
        "them."
    )
    for fault in record.faults:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(fault.time))
        print(f"  {fault.where} raised {fault.error} (process {fault.pid}, {when})")
        if fault.consequence:
            print(f"  {fault.consequence}")
        for line in fault.traceback.rstrip("\n").splitlines():
            print(f"    {line}")


def _build_native(args: argparse.Namespace) -> int:
    """Builds every library at once (each is its own compiler process), then prints a line per library in the
    registry's order."""
    import concurrent.futures

    from jt_core.native import NativeBuildError

    def build(spec: Any) -> tuple[Any, float]:
        started = time.perf_counter()
        return spec.build(announce=False), time.perf_counter() - started

    launchers = _native_launchers()
    prebuilt = {label: spec.prebuilt() for label, spec in launchers}
    # Launchers may share a library: each library not prebuilt is built once.
    wanted = {spec.name: spec for label, spec in launchers if prebuilt[label].path is None}
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(wanted))) as pool:
        futures = {name: pool.submit(build, spec) for name, spec in wanted.items()}
    failed = 0
    for label, spec in launchers:
        if spec.name not in futures:
            print(f"{label:16} {spec.name:24} prebuilt, nothing to build: {prebuilt[label].path}")
            continue
        unused = f" (the prebuilt one is not used: {prebuilt[label].problem})" if prebuilt[label].problem else ""
        try:
            built, seconds = futures[spec.name].result()
        except NativeBuildError as exc:
            failed += 1
            print(f"{label:16} {spec.name:24} FAILED{unused}: {exc}\n  without it, {spec.without_it}")
            continue
        how = "built" if built.built else "already built"
        print(f"{label:16} {spec.name:24} {how} in {seconds:.1f} s{unused}: {built.path}")
    if wanted:
        count = f"{len(wanted)} librar{'ies' if len(wanted) > 1 else 'y'}"
        print(f"{count} in {time.perf_counter() - started:.1f} s, built side by side")
    return 1 if failed else 0


def _cpu(args: argparse.Namespace) -> int:
    from jt_core.cpu.compiled import handed_over

    if args.forget:
        print(f"forgot {handed_over.forget()} kernels")
        return 0
    entries = handed_over.recorded()
    if args.json:
        json.dump(entries, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not entries:
        print("the compiled CPU path has handed no kernel to Triton's interpreter on this machine")
        return 0
    print(f"kernels the compiled CPU path handed to Triton's interpreter on this machine (the last {len(entries)}):")
    for entry in entries:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(entry.get("time", 0))))
        print(f"  {entry['kernel']}  ({when})\n    {entry.get('reason', '')}")
    return 0


def _cache(args: argparse.Namespace) -> int:
    from jt_core import cache

    if args.action == "clear":
        removed = cache.clear()
        print(f"removed {removed} entries from {cache.cache_dir()}")
        return 0
    data = cache.info()
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    for key, value in data.items():
        if key != "folders":
            print(f"{key:17} {value}")
    print()
    for purpose, usage in data["folders"].items():
        print(f"{purpose + '/':12} {usage['files']:6} files {usage['bytes']:12} bytes  {usage['holds']}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m jt_core``."""
    parser = argparse.ArgumentParser(prog="python -m jt_core", description="Inspect jt's plugins and caches.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plugins", help="list plugins: distribution, version, what they provide, status, errors")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument(
        "--forget-faults", action="store_true", help="forget what plugins raised while serving calls on this machine"
    )
    p.set_defaults(func=_plugins)
    b = sub.add_parser("build-native", help="build every C++ library the installed plugins use (once per machine)")
    b.set_defaults(func=_build_native)
    u = sub.add_parser("cpu", help="list the kernels the compiled CPU path handed to Triton's interpreter, and why")
    u.add_argument("--json", action="store_true", help="print JSON instead of text")
    u.add_argument("--forget", action="store_true", help="forget the kernels kept on this machine")
    u.set_defaults(func=_cpu)
    c = sub.add_parser("cache", help="show or clear every folder jt keeps on this machine (JT_CACHE_DIR)")
    c.add_argument("action", choices=["info", "clear"])
    c.add_argument("--json", action="store_true", help="print JSON (info)")
    c.set_defaults(func=_cache)
    args = parser.parse_args(argv)
    try:
        status = int(args.func(args))
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (`| head -1`): stop quietly, as a program killed by SIGPIPE, and point stdout at
        # nothing so that the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return status


if __name__ == "__main__":
    raise SystemExit(main())
