"""Which kernels the ``xla`` launcher takes: every example and a set of feature kernels, through ``launcher="xla"``.

Run on a CUDA machine: ``python benchmarks/xla_matrix.py [--json FILE]``. For each kernel it records whether the call
was lowered to XLA's Triton call or went to another launcher (and why), and whether the result matches the same call
through the ``jt`` launcher (or the example's own check against ``jax.numpy``). Prints a table.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import jt_core as jt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
EXAMPLES = ("vector_add", "fused_softmax", "matmul_autotune", "layer_norm", "fused_attention")


class Decisions(logging.Handler):
    """Collects, per call name, what lowering did with it under the ``xla`` launcher."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lowered: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        name = text.split("'")[1] if "'" in text else "?"
        if "lowered to XLA's Triton call" in text:
            self.lowered.setdefault(name, "xla")
        elif "cannot express it" in text:
            self.lowered[name] = "fallback: " + text.split("cannot express it (", 1)[1].rsplit(")", 1)[0]
        elif "tuning" in text:
            self.lowered.setdefault(name + " (tuning)", text.split(": ", 1)[1])


@triton.jit
def _atomic_sum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr, tl.sum(tl.load(x_ptr + offsets, mask=offsets < n, other=0.0), axis=0))


@triton.jit
def _print_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.device_print("x", x)
    tl.store(out_ptr + offsets, x + 1)


@triton.jit
def _asm_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, is_pure=True, pack=1)
    tl.store(out_ptr + offsets, y)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
    rows = tl.arange(0, N)
    a = tl.load(a_ptr + rows[:, None] * N + rows[None, :])
    b = tl.load(b_ptr + rows[:, None] * N + rows[None, :])
    tl.store(c_ptr + rows[:, None] * N + rows[None, :], tl.dot(a, b))


def _feature_calls() -> dict[str, tuple[Callable[..., Any], tuple[Any, ...]]]:
    key = jax.random.key(0)
    x = jax.random.normal(key, (4096,), jnp.float32)
    small = jax.random.normal(key, (128,), jnp.float32)
    ints = jax.random.randint(key, (128,), 0, 1000, jnp.int32)
    calls: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
        "atomics (tl.atomic_add)": (
            lambda launcher, x: jt.triton_call(
                x,
                kernel=_atomic_sum,
                out_shape=jax.ShapeDtypeStruct((1,), jnp.float32),
                zeroed_outputs=(0,),
                grid=16,
                n=4096,
                BLOCK=256,
                launcher=launcher,
                name="atomic_sum",
            ),
            (x,),
        ),
        "tl.device_print": (
            lambda launcher, x: jt.triton_call(
                x, kernel=_print_kernel, out_shape=x, grid=1, BLOCK=128, launcher=launcher, name="device_print"
            ),
            (small,),
        ),
        "inline asm": (
            lambda launcher, x: jt.triton_call(
                x, kernel=_asm_kernel, out_shape=x, grid=1, BLOCK=128, launcher=launcher, name="inline_asm"
            ),
            (ints,),
        ),
    }
    for dtype in ("float16", "bfloat16", "float8_e4m3fn"):
        a = jax.random.normal(key, (64, 64), jnp.float32).astype(dtype)
        out = jax.ShapeDtypeStruct((64, 64), jnp.float32)
        calls[f"tl.dot {dtype}"] = (
            lambda launcher, a, b, out=out, dtype=dtype: jt.triton_call(
                a, b, kernel=_dot_kernel, out_shape=out, grid=1, N=64, launcher=launcher, name=f"dot_{dtype}"
            ),
            (a, a),
        )
    return calls


def _compare(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    got = jax.jit(lambda *a: fn("xla", *a))(*args)
    want = jax.jit(lambda *a: fn("jt", *a))(*args)
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
        return f"WRONG (max difference {np.max(np.abs(got - want)):.3g})"
    return "matches 'jt'"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args()
    decisions = Decisions()
    for name in ("jt_core.lowering", "jt_core.gpu.xla"):
        logging.getLogger(name).addHandler(decisions)
        logging.getLogger(name).setLevel(logging.INFO)
    rows = []
    os.environ["JT_LAUNCHER_CUDA"] = "xla"
    for example in EXAMPLES:
        decisions.lowered.clear()
        try:
            importlib.import_module(example).run(True)
            outcome = "matches jnp"
        except Exception as exc:
            traceback.print_exc()
            outcome = f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        for call, path in sorted(decisions.lowered.items()) or [("?", "not lowered")]:
            rows.append({"kernel": f"{example}: {call}", "path": path, "result": outcome})
    del os.environ["JT_LAUNCHER_CUDA"]
    for label, (fn, call_args) in _feature_calls().items():
        decisions.lowered.clear()
        try:
            outcome = _compare(fn, call_args)
        except Exception as exc:
            traceback.print_exc()
            outcome = f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
        paths = [path for call, path in decisions.lowered.items() if "(tuning)" not in call]
        rows.append({"kernel": label, "path": paths[0] if paths else "not lowered", "result": outcome})
    width = max(len(r["kernel"]) for r in rows)
    print(f"{'kernel':{width}}  {'path':60}  result")
    for r in rows:
        print(f"{r['kernel']:{width}}  {r['path'][:60]:60}  {r['result']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 1 if any(r["result"].startswith(("FAILED", "WRONG")) for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
