"""Two versions of jt's compiled CPU path, timed in one process: what a change costs.

Timing two versions in two processes, one after the other, on a shared host measures the host as much as the
change: `cpu_paths.py` run before and after a change, in interleaved processes, gave figures 10-20% apart for the
same code. Here each version compiles the four kernels of `cpu_paths.py` and saves the XLA executables
(``jax.experimental.serialize_executable``); one process then loads both sets and times them in interleaved
rounds, alternating which runs first, so that a change of load falls on both alike. An executable holds the
compiled kernel whole (jt is not involved when it runs, beyond the custom-call handlers of its CPU library, which
the process registers), so the figures are those of the code each version generated.

``python benchmarks/cpu_versions.py save FILE`` (with the version to save importable, e.g. through ``PYTHONPATH``);
``python benchmarks/cpu_versions.py compare BEFORE AFTER [--rounds R] [--calls C]`` prints, per kernel, each
version's median milliseconds per call and the median and quartiles of the per-round ratio after / before.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
from collections.abc import Sequence

import jax
import numpy as np
from jax.experimental import serialize_executable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_paths


def save(path: str) -> None:
    """Compiles the four kernels through the compiled path and writes their executables to ``path``."""
    data = cpu_paths.inputs()
    cases = cpu_paths.triton_cases("compiled")
    saved = {name: serialize_executable.serialize(cases[name].lower(*ops).compile()) for name, ops in data.items()}
    with open(path, "wb") as out:
        pickle.dump(saved, out)


def compare(before_path: str, after_path: str, rounds: int, calls: int) -> None:
    """Loads both sets of executables and times them in interleaved rounds."""
    from jt_core.cpu import ffi_launcher

    ffi_launcher.ensure_registered()  # the handlers the executables call (the bounds check's, among others)
    data = cpu_paths.inputs()

    def load(path: str) -> dict[str, object]:
        with open(path, "rb") as source:
            return {
                name: serialize_executable.deserialize_and_load(*parts) for name, parts in pickle.load(source).items()
            }

    before, after = load(before_path), load(after_path)
    for name, ops in data.items():
        np.testing.assert_allclose(
            np.asarray(after[name](*ops), np.float64), cpu_paths.reference(name, ops), rtol=1e-4, atol=1e-4
        )
        np.testing.assert_allclose(
            np.asarray(before[name](*ops), np.float64), cpu_paths.reference(name, ops), rtol=1e-4, atol=1e-4
        )
    ratios: dict[str, list[float]] = {name: [] for name in data}
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in data}
    for index in range(rounds):
        for name, ops in data.items():
            if index % 2:
                old = cpu_paths.timed(before[name], ops, calls)
                new = cpu_paths.timed(after[name], ops, calls)
            else:
                new = cpu_paths.timed(after[name], ops, calls)
                old = cpu_paths.timed(before[name], ops, calls)
            ratios[name].append(new / old)
            times[name][0].append(old * 1e3)
            times[name][1].append(new * 1e3)
    print(cpu_paths.machine())
    print(f"{rounds} interleaved rounds of {calls} calls; ratio = after / before, per round")
    print(f"{'kernel':8} {'before ms':>10} {'after ms':>10} {'ratio':>7}  {'quartiles':>15}")
    for name in data:
        low, high = np.percentile(ratios[name], [25, 75])
        print(
            f"{name:8} {statistics.median(times[name][0]):10.3f} {statistics.median(times[name][1]):10.3f} "
            f"{statistics.median(ratios[name]):7.3f}  {low:7.3f} {high:7.3f}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    saving = commands.add_parser("save", help="compile the kernels with the importable jt and save them")
    saving.add_argument("file")
    comparing = commands.add_parser("compare", help="time two saved sets in one process")
    comparing.add_argument("before")
    comparing.add_argument("after")
    comparing.add_argument("--rounds", type=int, default=40)
    comparing.add_argument("--calls", type=int, default=20)
    args = parser.parse_args(argv)
    jax.config.update("jax_platforms", "cpu")
    if args.command == "save":
        save(args.file)
    else:
        compare(args.before, args.after, args.rounds, args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
