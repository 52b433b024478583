"""Autotuning once per machine: an 8-config autotuned matmul, tuned in a first process and reused by a second.

Each process lowers and compiles a jitted 4096^3 fp16 matmul whose kernel has eight ``triton.Config`` candidates,
then times its first execution and a steady execution. Both launchers tune while the call is lowered, through jt's
handler on scratch buffers, and lower the winner alone (``jt`` since it tunes ahead; ``xla`` always did), so the
tuning is part of the compile time; the second process shares the first one's ``JT_CACHE_DIR`` (compiled cubins and
the remembered winner) but not its memory, and skips it. Compare the first-call totals: compile (lowering included)
plus first execution. ``gpu_autotune_speed.py`` measures what the tuned call runs at.

The ``jt`` launcher is measured twice: on a new cache folder (the first call on a machine builds jt's launch handler
while the configurations compile), and on a new cache folder whose handler was built ahead with ``python -m jt_core
build-native`` (the build timed alone): what the configurations' compile costs by itself.

With ``--wheels DIR`` it is measured a third time as a user who ran ``pip install jt-core jt-cuda`` from the platform
wheels in ``DIR`` (``bash .ci/wheels.sh`` builds them into ``dist/``) finds it on a fresh machine: jt-core and jt-cuda
installed from those wheels alone (``pip install --no-deps --no-index --target``, beside the machine's jax and
Triton), a new cache folder, and no compiler (none on ``PATH``, ``CXX`` and ``CC`` unset). The handler must load
prebuilt: the run fails if a library is built or the handler comes from anywhere else. The goal: the first call, in
the first process, within 1.6 s.

Usage: ``python benchmarks/gpu_autotune.py [--wheels DIR] [--json FILE]`` on a CUDA machine.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import triton
import triton.language as tl

SIZE = 4096
#: The first call from the platform wheels on a fresh machine, at most (seconds).
WHEEL_GOAL_S = 1.6
CONFIGS = [(128, 128, 64, 4, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (64, 128, 64, 4, 4),
           (128, 64, 64, 4, 4), (128, 128, 32, 4, 4), (64, 64, 64, 4, 3), (128, 128, 64, 8, 4)]  # fmt: skip


@triton.autotune(
    configs=[triton.Config({"BM": m, "BN": n, "BK": k}, num_warps=w, num_stages=s) for m, n, k, w, s in CONFIGS],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def child(launcher: str) -> dict[str, float]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jt_core as jt

    def f(a: jax.Array, b: jax.Array) -> jax.Array:
        return jt.triton_call(a, b, kernel=matmul_kernel, out_shape=a,
                              grid=lambda m: (SIZE // m["BM"], SIZE // m["BN"]), M=SIZE, N=SIZE, K=SIZE,
                              launcher=launcher)  # fmt: skip

    a = jax.random.normal(jax.random.key(0), (SIZE, SIZE), jnp.float16)
    b = jax.random.normal(jax.random.key(1), (SIZE, SIZE), jnp.float16)
    start = time.perf_counter()
    compiled = jax.jit(f).lower(a, b).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    out = compiled(a, b)
    out.block_until_ready()
    first_s = time.perf_counter() - start
    steady = []
    for _ in range(5):
        start = time.perf_counter()
        compiled(a, b).block_until_ready()
        steady.append(time.perf_counter() - start)
    steady_s = sorted(steady)[len(steady) // 2]
    reference = np.asarray(jnp.dot(a[:256], b, preferred_element_type=jnp.float32))
    np.testing.assert_allclose(np.asarray(out[:256], np.float32), reference, rtol=2e-2, atol=2e-1)
    result: dict[str, Any] = {
        "compile_s": compile_s,
        "first_s": first_s,
        "steady_s": steady_s,
        "tuning_s": first_s - steady_s,
        "first_call_s": compile_s + first_s,
    }
    if launcher == "jt":
        from jt_cuda.launchers import HANDLER

        result["handler"] = HANDLER.library()._name
        result["handler_prebuilt"] = str(HANDLER.spec().prebuilt_path) == result["handler"]
    return result


def wheel_environment(wheels: str, folder: str) -> dict[str, str]:
    """The environment of a fresh machine with jt-core and jt-cuda installed from their platform wheels in
    ``wheels`` into ``folder``: those alone on ``PYTHONPATH``, and no compiler (``PATH`` without one, ``CXX`` and
    ``CC`` unset)."""
    found = [
        sorted(glob.glob(os.path.join(wheels, f"{name}-*-py3-none-manylinux_*.whl"))) for name in ("jt_core", "jt_cuda")
    ]
    if not all(found):
        raise SystemExit(f"no platform wheels of jt-core and jt-cuda in {wheels}: bash .ci/wheels.sh builds them")
    site = os.path.join(folder, "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site,
                    found[0][-1], found[1][-1]], check=True)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("CXX", "CC", "JT_PREBUILT_NATIVE")}
    env["PYTHONPATH"] = site
    made = subprocess.run([sys.executable, "-P", "-c", "import sys; from jt_core.testing import no_compiler_path; "
                           "print(no_compiler_path(sys.argv[1]))", os.path.join(folder, "bin")], env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    env["PATH"] = made.stdout.strip()
    return env


def two_processes(
    launcher: str, prebuilt: bool = False, wheels: str | None = None
) -> tuple[dict[str, Any], dict[str, Any], int]:
    """A first and a second process on one new cache folder; with ``prebuilt``, the launch handler is built into
    that folder first (``python -m jt_core build-native``, timed as the first process's ``handler_build_s``), so the
    first process's compile is the configurations' alone; with ``wheels``, jt comes from the platform wheels there,
    where no compiler is (`wheel_environment`), and nothing may be built."""
    with tempfile.TemporaryDirectory() as tmp:
        env = wheel_environment(wheels, tmp) if wheels else dict(os.environ)
        env.update({"JT_CACHE_DIR": os.path.join(tmp, "jt"), "TRITON_CACHE_DIR": os.path.join(tmp, "t")})
        env.pop("JT_DISABLE_CACHE", None)
        built = None
        if prebuilt:
            start = time.perf_counter()
            made = subprocess.run([sys.executable, "-m", "jt_core", "build-native"], env=env, capture_output=True,
                                  text=True, check=True)  # fmt: skip
            built = time.perf_counter() - start
            print(made.stdout.rstrip())
        runs = []
        for _ in range(2):
            out = subprocess.run([sys.executable, "-P", __file__, "--child", launcher], env=env, capture_output=True,
                                 text=True)  # fmt: skip
            if out.returncode != 0:
                raise SystemExit(f"the {launcher!r} process failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            runs[-1]["said"] = [line for line in out.stderr.splitlines() if line.startswith("jt: ")]
        if built is not None:
            runs[0]["handler_build_s"] = built
        folder = os.path.join(tmp, "jt", "autotune")
        records = len(os.listdir(folder)) if os.path.isdir(folder) else 0
        native = os.path.join(tmp, "jt", "native")
        if wheels and (os.listdir(native) if os.path.isdir(native) else []):
            raise SystemExit(f"from the platform wheels, jt built libraries: {sorted(os.listdir(native))}")
        if wheels and not all(run["handler_prebuilt"] and not run["said"] for run in runs):
            raise SystemExit(f"from the platform wheels, the handler did not load prebuilt: {runs}")
    return runs[0], runs[1], records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help="run one process with this launcher")
    parser.add_argument("--wheels", help="also measure jt installed from the platform wheels in this folder")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return
    results = {}
    cases = [("jt", False, None), ("xla", False, None), ("jt (handler built ahead)", True, None)]
    if args.wheels:
        cases.append(("jt (platform wheels, no compiler)", False, os.path.abspath(args.wheels)))
    for launcher, prebuilt, wheels in cases:
        first, second, records = two_processes(launcher.split()[0], prebuilt, wheels)
        results[launcher] = {"first": first, "second": second, "records": records}
        print(f"launcher {launcher!r}: 8-config autotuned {SIZE}^3 fp16 matmul; tuning records: {records}")
        if prebuilt:
            print(f"python -m jt_core build-native, before the first process: {first['handler_build_s']:.3f} s")
        header = ("process", "compile s", "first run s", "steady ms", "tuning s", "first call s")
        print(f"{header[0]:8} {header[1]:>10} {header[2]:>12} {header[3]:>10} {header[4]:>9} {header[5]:>13}")
        for name, run in (("first", first), ("second", second)):
            print(f"{name:8} {run['compile_s']:10.3f} {run['first_s']:12.4f} {run['steady_s'] * 1e3:10.3f} "
                  f"{run['tuning_s']:9.4f} {run['first_call_s']:13.3f}")  # fmt: skip
    jt_first, xla_first = results["jt"]["first"]["first_call_s"], results["xla"]["first"]["first_call_s"]
    print(f"first process, first call: xla {xla_first:.3f} s vs jt {jt_first:.3f} s ({xla_first / jt_first:.2f}x)")
    ratio = results["jt"]["second"]["first_call_s"] / results["jt"]["first"]["first_call_s"]
    print(f"jt launcher, second/first process's first call: {ratio:.1%}")
    if args.wheels:
        wheel_first = results["jt (platform wheels, no compiler)"]["first"]
        seconds = wheel_first["first_call_s"]
        print(f"jt from the platform wheels, no compiler, new cache folder: first call {seconds:.3f} s "
              f"(goal <= {WHEEL_GOAL_S} s), handler {wheel_first['handler']}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle)


if __name__ == "__main__":
    main()
