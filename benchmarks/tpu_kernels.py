"""Triton kernels on a TPU through jt-tpu, each against plain ``jax.numpy`` doing the same work, measured side by side.

The cases are jt-tpu's (``jt_tpu/tests/tpu_kernels.py``): seven kernels written as a user would (a vector add, a row
softmax, a layer norm, a bf16 matrix product at 1024^3 and 4096^3, a histogram through ``tl.atomic_add``, a row
cumsum), Triton's tutorials 02, 03 and 05 (forward), and three Liger-Kernel-style kernels (rms_norm, swiglu,
cross_entropy). Tutorial 01 is the vector add. ``--model`` runs instead the kernels language models are built from
(``jt_tpu/tests/tpu_model_cases.py``: attention forward with descriptors, causal and not, made in the kernel or on
the host; paged decode attention; rotary in place; a 128k-vocabulary cross entropy with its gradient in place; a
chunked cumsum; a 13-config autotuned matmul; a state-space decode step) at a model's sizes. For each case, in one
process:

* the first call of the jitted kernel (jt's trace and lowering, XLA's compile, one run), wall time;
* the error of both against a float64 NumPy reference, relative to its norm (the kernel's must be within the
  case's tolerance and, for float32 work, within 4x jnp's own error plus 1e-6);
* the time of a call, median over ``--rounds`` rounds (fewer, at least three, once they took ``--seconds``), jt
  and jnp alternating, each call waited for.

Prints a table and writes every figure as JSON (``--json``). ``--small`` runs the sizes of jt-tpu's CPU tests, to
check the script anywhere.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import platform
import statistics
import sys
import time
from typing import Any

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _cases_module(name: str) -> Any:
    """jt-tpu's test module ``name`` (the case modules import each other by name from that folder)."""
    tests = str(ROOT / "jt_tpu" / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module(name)


def _error(got: Any, want: Any) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = float(np.linalg.norm(want)) or 1.0
    return float(np.linalg.norm(got - want)) / scale


def _errors(outputs: Any, exact: Any) -> float:
    outs = jax.tree.leaves(outputs)
    wants = exact if isinstance(exact, tuple) else (exact,)
    return max(_error(o, w) for o, w in zip(outs, wants, strict=True))


def _timed(fn: Any, args: Any) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def measure(case: Any, rounds: int, seconds: float = float("inf")) -> dict[str, Any]:
    """One case's figures: ``rounds`` timed rounds, fewer (at least three) once they have taken ``seconds``."""
    host = case.inputs(np.random.default_rng(0))
    args = [jax.device_put(x) for x in host]
    jax.block_until_ready(args)
    first = _timed(case.kernel, args)
    jnp_first = _timed(case.reference, args)
    exact = case.exact(*host)
    error = _errors(case.kernel(*args), exact)
    jnp_error = _errors(case.reference(*args), exact)
    jt_times, jnp_times = [], []
    for _ in range(2):
        _timed(case.kernel, args)
        _timed(case.reference, args)
    started = time.perf_counter()
    for done in range(rounds):
        if done >= 3 and time.perf_counter() - started > seconds:
            break
        jt_times.append(_timed(case.kernel, args))
        jnp_times.append(_timed(case.reference, args))
    jt_ms, jnp_ms = 1e3 * statistics.median(jt_times), 1e3 * statistics.median(jnp_times)
    allowed = max(case.tolerance, 4 * jnp_error + 1e-6)
    return {
        "case": case.name,
        "first_call_s": first,
        "jnp_first_call_s": jnp_first,
        "error": error,
        "jnp_error": jnp_error,
        "right": bool(np.isfinite(error) and error <= allowed),
        "jt_ms": jt_ms,
        "jnp_ms": jnp_ms,
        "jt_ms_range": [1e3 * min(jt_times), 1e3 * max(jt_times)],
        "jnp_ms_range": [1e3 * min(jnp_times), 1e3 * max(jnp_times)],
        "ratio": jt_ms / jnp_ms,
        "rounds": len(jt_times),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--seconds", type=float, default=120.0, help="stop a case's timed rounds after this long (at least three)"
    )
    parser.add_argument("--small", action="store_true", help="the CPU tests' sizes")
    parser.add_argument(
        "--model", action="store_true", help="the language-model kernels (tpu_model_cases.py) instead of the others"
    )
    parser.add_argument("--only", nargs="*", default=[], help="cases whose name contains one of these")
    parser.add_argument("--json", type=pathlib.Path, default=None)
    options = parser.parse_args()
    if options.model:
        model = _cases_module("tpu_model_cases")
        cases = model.small_model_cases() if options.small else model.model_cases()
    else:
        kernels = _cases_module("tpu_kernels")
        cases = kernels.small_cases() if options.small else kernels.benchmark_cases()
    if options.only:
        cases = [c for c in cases if any(o in c.name for o in options.only)]
    import triton

    import jt_core

    device = jax.devices()[0]
    header = {
        "date": time.strftime("%Y-%m-%d"),
        "device": f"{device.platform} {device.device_kind}",
        "python": platform.python_version(),
        "jax": jax.__version__,
        "triton": triton.__version__,
        "jt_core": jt_core.__version__,
        "rounds": options.rounds,
    }
    print(json.dumps(header))
    rows = []
    failed = 0
    for case in cases:
        try:
            row = measure(case, options.rounds, options.seconds)
        except Exception as exc:  # a case that fails is reported, and the others still run
            row = {"case": case.name, "failed": f"{type(exc).__name__}: {str(exc)[:500]}"}
            failed += 1
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{'case':56s} {'first s':>8s} {'jt ms':>9s} {'jnp ms':>9s} {'jt/jnp':>7s} {'error':>9s} {'jnp err':>9s}")
    for row in rows:
        if "failed" in row:
            print(f"{row['case']:56s} FAILED {row['failed'][:100]}")
            continue
        mark = "" if row["right"] else "  WRONG"
        print(
            f"{row['case']:56s} {row['first_call_s']:8.2f} {row['jt_ms']:9.3f} {row['jnp_ms']:9.3f} "
            f"{row['ratio']:7.2f} {row['error']:9.1e} {row['jnp_error']:9.1e}{mark}"
        )
    if options.json is not None:
        options.json.write_text(json.dumps({"header": header, "rows": rows}, indent=1))
    wrong = sum(1 for r in rows if "failed" not in r and not r["right"])
    return 1 if failed or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
