"""What ``import jt_core`` and the first plain CPU call cost in a new process.

Run anywhere: ``python benchmarks/import_cost.py [--rounds N] [--json FILE]``. Each round starts fresh processes:

* ``import jt_core`` in wall time, after ``import jax, jax.numpy, numpy, triton`` (what jt cannot avoid: it
  calls into all four), and alone under ``python -X importtime`` (jt-core's own modules and what they import
  beyond JAX, NumPy and Triton, and all of it in a process that imported nothing before);
* the first plain ``triton_call`` on the CPU (a vector add, 100 elements, two programs: bind, trace, lower,
  compile, run), with warm caches (the kernel's front-end check and the CPU launch handler on disk, as in any
  process after the first on a machine), and with ``JT_DISABLE_CACHE=1`` (Triton's front end checks the kernel).

Every installed plugin is loaded, as users have them. Prints the median and the range of each figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import textwrap

_CHILD = textwrap.dedent(
    """
    import json, time
    start = time.perf_counter()
    import jax, jax.numpy as jnp, numpy as np, triton, triton.language as tl
    deps = time.perf_counter()
    import jt_core as jt
    imported = time.perf_counter()

    @triton.jit
    def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
                 mask=mask)

    rng = np.random.default_rng()
    x, y = (jnp.asarray(rng.standard_normal(100), jnp.float32) for _ in range(2))
    jax.block_until_ready((x, y))
    called = time.perf_counter()
    out = jax.block_until_ready(jt.triton_call(x, y, kernel=add, out_shape=x, grid=2, n=100, BLOCK=64))
    done = time.perf_counter()
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) + np.asarray(y), rtol=1e-6)
    print(json.dumps({"deps": deps - start, "import": imported - deps, "first_call": done - called}))
    """
)

_IMPORTTIME = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| jt_core$", re.MULTILINE)


def _child(script: str, env: dict[str, str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, check=True).stdout
    return {key: value * 1e3 for key, value in json.loads(out.splitlines()[-1]).items()}


def _importtime(code: str, env: dict[str, str]) -> float:
    """``jt_core``'s cumulative import time under ``-X importtime``, in ms."""
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=env
    ).stderr
    return int(_IMPORTTIME.findall(err)[-1]) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="jt-import-cost-") as folder:
        script = os.path.join(folder, "first_call.py")
        with open(script, "w") as handle:
            handle.write(_CHILD)
        env = {key: value for key, value in os.environ.items() if not key.startswith("JT_")}
        env["JT_CACHE_DIR"] = os.path.join(folder, "cache")
        _child(script, env)  # warms the caches: the launch handler's build, the kernel's front-end check
        for _ in range(args.rounds):
            warm = _child(script, env)
            uncached = _child(script, {**env, "JT_DISABLE_CACHE": "1"})
            for key, value in (
                ("import jax, jax.numpy, numpy, triton", warm["deps"]),
                ("import jt_core, after those", warm["import"]),
                (
                    "import jt_core, -X importtime, after JAX and NumPy",
                    _importtime("import jax, jax.numpy, numpy; import jt_core", env),
                ),
                ("import jt_core, -X importtime, alone", _importtime("import jt_core", env)),
                ("first CPU call, warm caches", warm["first_call"]),
                ("first CPU call, JT_DISABLE_CACHE=1", uncached["first_call"]),
            ):
                figures.setdefault(key, []).append(value)
    width = max(len(key) for key in figures)
    print(f"{'ms':{width}}  median  range ({args.rounds} rounds)")
    for key, values in figures.items():
        print(f"{key:{width}}  {statistics.median(values):6.1f}  {min(values):.1f}-{max(values):.1f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=1)


if __name__ == "__main__":
    main()
