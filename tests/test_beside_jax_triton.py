"""Living beside jax-triton in one process: its 0.3 releases empty ``TRITON_CACHE_DIR`` when imported.

After ``os.environ["TRITON_CACHE_DIR"] = ""`` Triton refuses every compile ("Could not create or locate cache
dir"). jt gives Triton its own private folder while it compiles, without writing to the environment, so CUDA
compiles (no GPU needed) and CPU calls keep working. The scenario runs in a fresh process, since the variable is
read by Triton at each compile and this test must not change the test process's environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = r"""
import json, os, sys
import jax, jax.numpy as jnp, numpy as np, triton, triton.language as tl
import jt_core as jt


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3, mask=mask)


def call(x, **options):
    return jt.triton_call(x, kernel=scale_kernel, out_shape=x, grid=triton.cdiv(x.size, 64), n=x.size, BLOCK=64,
                          **options)


# What Triton alone does with the emptied variable: refuse to compile.
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
source = ASTSource(scale_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                   constexprs={(3,): 64})
try:
    triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": True})
    plain = "compiled"
except RuntimeError as exc:
    plain = str(exc)

spec = jax.ShapeDtypeStruct((200,), jnp.float32)
# sm80 compiles through triton.compile (which needs the cache folder); sm90 through jt-cuda's own run of Triton's
# stages (the wait at entry), which keeps no Triton cache.
lowered = {cc: jax.jit(lambda x: call(x, compute_capability=cc)).trace(spec).lower(lowering_platforms=("cuda",))
           for cc in (80, 90)}
x = jnp.asarray(np.random.default_rng(0).standard_normal(200).astype(np.float32))
cpu = np.asarray(call(x))
print(json.dumps({
    "plain_triton": plain,
    "cuda_lowered": all("triton_kernel_call_jt_cuda" in low.as_text() for low in lowered.values()),
    "cpu_ok": bool(np.allclose(cpu, np.asarray(x) * 3)),
    "env_after": os.environ.get("TRITON_CACHE_DIR"),
    "triton_knob_after": triton.knobs.cache.dir,
}))
"""


def test_jt_compiles_and_runs_after_triton_cache_dir_is_emptied(tmp_path: Path) -> None:
    environ = dict(os.environ, TRITON_CACHE_DIR="", JT_CACHE_DIR=str(tmp_path / "jt"))
    environ.pop("JAX_TRITON_DUMP_DIR", None)
    script = tmp_path / "beside_jax_triton.py"  # a file: Triton reads kernels' source
    script.write_text(SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script)], env=environ, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert "Could not create or locate cache dir" in result["plain_triton"]  # the failure jt must not inherit
    assert result["cuda_lowered"] and result["cpu_ok"]
    assert result["env_after"] == "" and result["triton_knob_after"] == ""  # nothing written, knob restored
    cached = list((tmp_path / "jt" / "triton").rglob("*.json"))
    assert cached, "Triton's compile went to jt's private folder"
