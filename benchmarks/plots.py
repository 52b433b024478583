"""Pictures of the GPU benchmark results: PNG plots for the documentation's performance page.

Reads the files ``benchmarks/run_gpu.sh`` leaves in its output folder (``launch.json``, ``throughput.json``,
``compile_cache.json``, ``autotune.json`` and ``transformations.log``; those missing are skipped) and writes one PNG
per figure:

* ``launch_cost.png`` -- per-kernel and marginal launch cost of each launch path (median over rounds);
* ``add_bandwidth.png`` -- bandwidth of the 64M-element add: jt's launchers, Triton on torch tensors, ``jnp``;
* ``compile_cache.png`` -- lowering six kernels cold, from the caches, and without caching;
* ``autotune.png`` -- the first call of an autotuned matmul in a first and a second process;
* ``vmap_strategies.png`` -- vmap's grid and sequential strategies against ``jax.lax.map``;
* ``tpu_kernels.png`` -- each kernel's time on a TPU over plain ``jnp``'s, from ``tpu.json``
  (``benchmarks/tpu_kernels.py --json``).

Usage: ``python benchmarks/plots.py RESULTS_DIR [--out docs/pages/img]``. Needs matplotlib (a development tool, not
a dependency of jt).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
from typing import Any


def _bar(ax: Any, labels: list[str], values: list[float], color: str | list[str], unit: str) -> None:
    bars = ax.barh(labels, values, color=color)
    for bar, value in zip(bars, values):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {value:.2f} {unit}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, max(values) * 1.3)


def launch_cost(data: dict[str, Any], out: pathlib.Path, plt: Any) -> None:
    paths: dict[str, dict[str, list[float]]] = {}
    for row in data["results"]:
        entry = paths.setdefault(row["path"], {"per_kernel": [], "marginal": []})
        entry["per_kernel"].append(row["per_kernel_us"])
        entry["marginal"].append(row["marginal_us"])
    labels = list(paths)
    per_kernel = [statistics.median(paths[p]["per_kernel"]) for p in labels]
    marginal = [statistics.median(paths[p]["marginal"]) for p in labels]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.2), sharey=True)
    _bar(axes[0], labels, per_kernel, "#4c72b0", "µs")
    axes[0].set_title("per kernel: chain / 100 (dispatch included)")
    _bar(axes[1], labels, marginal, "#55a868", "µs")
    axes[1].set_title("marginal: (chain - one call) / 99")
    fig.suptitle(f"Launch cost of a 1024-element add, 100 chained in one jax.jit ({data['device']})")
    fig.tight_layout()
    fig.savefig(out / "launch_cost.png", dpi=110)
    plt.close(fig)


def add_bandwidth(data: dict[str, Any], out: pathlib.Path, plt: Any) -> None:
    if "summary" in data:  # rounds: medians over the rounds
        seconds = {path: row["median"] for path, row in data["summary"]["add_64M_f32"].items()}
    else:
        seconds = data["seconds"]["add_64M_f32"]
    moved = 3 * 4 * 64 * 1024 * 1024
    labels = list(seconds)
    rates = [moved / seconds[k] / 1e12 for k in labels]
    colors = ["#4c72b0" if k.startswith("jt") else "#8c8c8c" for k in labels]
    traced = data.get("kernel_times") or {}
    fig, axes = plt.subplots(1, 2 if traced else 1, figsize=(12 if traced else 7, 2.6), squeeze=False)
    _bar(axes[0][0], labels, rates, colors, "TB/s")
    axes[0][0].set_title("wall time of 21 chained calls, marginal per call")
    if traced:
        names = list(traced)
        spans = [moved / (traced[k]["span_us"] * 1e-6) / 1e12 for k in names]
        _bar(axes[0][1], names, spans, ["#4c72b0" if k.startswith("jt") else "#8c8c8c" for k in names], "TB/s")
        axes[0][1].set_title("the GPU's timeline (CUPTI): span per call")
    fig.suptitle(f"64M-element f32 add: bytes read and written per second ({data['device']})")
    fig.tight_layout()
    fig.savefig(out / "add_bandwidth.png", dpi=110)
    plt.close(fig)


def autotune(data: dict[str, Any], out: pathlib.Path, plt: Any) -> None:
    labels, values = [], []
    for name, runs in data.items():
        for process in ("first", "second"):
            labels.append(f"{name}, {process} process")
            values.append(runs[process]["first_call_s"])
    fig, ax = plt.subplots(figsize=(8, 2.8))
    _bar(ax, labels, values, ["#c44e52" if "first" in label else "#55a868" for label in labels], "s")
    ax.set_title("First call of an 8-config autotuned 4096³ fp16 matmul, new cache folder", fontsize=10)
    fig.tight_layout()
    fig.savefig(out / "autotune.png", dpi=110)
    plt.close(fig)


def compile_cache(data: dict[str, Any], out: pathlib.Path, plt: Any) -> None:
    rows = [(label, seconds) for label, seconds in data["rows"] if label.startswith("six kernels")]
    labels = [label.replace("six kernels, ", "") for label, _ in rows]
    values = [seconds for _, seconds in rows]
    fig, ax = plt.subplots(figsize=(8, 2.6))
    _bar(ax, labels, values, ["#c44e52", "#55a868", "#55a868", "#8c8c8c"], "s")
    ax.set_title(f"Lowering six kernels for sm90 in a new process ({data['cores']} cores)")
    fig.tight_layout()
    fig.savefig(out / "compile_cache.png", dpi=110)
    plt.close(fig)


def vmap_strategies(log: str, out: pathlib.Path, plt: Any) -> None:
    rows = re.findall(r"^(vmap grid|vmap sequential|jax\.lax\.map)\s+\[batch (\d+) x \((\d+), (\d+)\)[^\]]*\]\s+"
                      r"([0-9.]+)", log, flags=re.M)  # fmt: skip
    shapes = sorted({(int(r), int(c)) for _, _, r, c, _ in rows})
    strategies = ["vmap grid", "vmap sequential", "jax.lax.map"]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    width = 0.25
    for i, strategy in enumerate(strategies):
        values = [next(float(ms) for s, _, r, c, ms in rows if s == strategy and (int(r), int(c)) == shape)
                  for shape in shapes]  # fmt: skip
        positions = [j + (i - 1) * width for j in range(len(shapes))]
        ax.bar(positions, values, width, label=strategy)
    ax.set_xticks(range(len(shapes)), [f"batch 8 x {r}x{c}" for r, c in shapes])
    ax.set_ylabel("ms per call")
    ax.set_title("vmap of a layer-norm triton_call: strategies")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "vmap_strategies.png", dpi=110)
    plt.close(fig)


def tpu_kernels(data: dict[str, Any], out: pathlib.Path, plt: Any) -> None:
    rows = [row for row in data["rows"] if "ratio" in row]
    header = data["header"]
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.2))
    ratios = [row["ratio"] for row in rows]
    colors = ["tab:green" if r <= 1.5 else "tab:red" for r in ratios]
    _bar(ax, [row["case"] for row in rows], ratios, colors, "x")
    ax.axvline(1.0, color="grey", linewidth=0.8)
    ax.axvline(1.5, color="tab:red", linewidth=0.8, linestyle="--")
    ax.set_xlabel(f"jt time / jnp time, median of {header['rounds']} (goal: 1.5x, dashed)")
    ax.set_title(f"{header['device']}, jax {header['jax']}, triton {header['triton']}, {header['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out / "tpu_kernels.png", dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("docs/pages/img"))
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.out.mkdir(parents=True, exist_ok=True)
    drawn = []
    for name, draw in (("launch.json", launch_cost), ("throughput.json", add_bandwidth),
                       ("compile_cache.json", compile_cache), ("autotune.json", autotune),
                       ("tpu.json", tpu_kernels)):  # fmt: skip
        if (args.results / name).exists():
            draw(json.loads((args.results / name).read_text()), args.out, plt)
            drawn.append(name)
    if (args.results / "transformations.log").exists():
        vmap_strategies((args.results / "transformations.log").read_text(), args.out, plt)
        drawn.append("transformations.log")
    print(f"drew {drawn} into {args.out}; missing files were skipped")


if __name__ == "__main__":
    main()
