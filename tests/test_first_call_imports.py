"""Nothing heavy on the way to a first call: ``import jt_core`` imports no plugin, and a call imports only the
plugin modules of the platform it runs on (with every distribution installed)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

_KERNEL = """
import sys

import jax
import jax.numpy as jnp
import numpy as np
import triton
import triton.language as tl

import jt_core as jt

print(" ".join(sorted(sys.modules)))


@triton.jit
def add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def call(a, b, **options):
    return jt.triton_call(a, b, kernel=add, out_shape=a, grid=2, n=100, BLOCK=64, **options)
"""

_CPU_CALL = """
rng = np.random.default_rng()
x, y = (jnp.asarray(rng.standard_normal(100), jnp.float32) for _ in range(2))
np.testing.assert_allclose(np.asarray(jax.jit(call)(x, y)), np.asarray(x) + np.asarray(y), rtol=1e-6)
print(" ".join(sorted(sys.modules)))
"""

_CUDA_LOWERING = """
x = jax.ShapeDtypeStruct((100,), jnp.float32)
lowered = jax.jit(lambda a, b: call(a, b, compute_capability=90)).trace(x, x).lower(lowering_platforms=("cuda",))
assert "triton_kernel_call_jt_cuda" in lowered.as_text()
print(" ".join(sorted(sys.modules)))
"""

#: What a plain CPU call never uses: the GPU plugins' backends and launchers, the GPU launch layer, Pallas.
_GPU_ONLY = ("jt_cuda.backend", "jt_cuda.launchers", "jt_rocm.backend", "jt_rocm.launchers", "jt_core.gpu")


def _modules(tmp_path: pathlib.Path, body: str) -> tuple[set[str], set[str]]:
    """Runs the kernel module and ``body`` in a fresh process with its own cache folder; returns the modules
    imported after ``import jt_core`` and at the end."""
    script = tmp_path / "first_call.py"
    script.write_text(_KERNEL + body)
    unset = ("JT_LOAD_PLUGINS", "JT_DISABLE_PLUGINS", "JT_DISABLE_CACHE", "JT_CPU_COMPILE_CHECK", "JT_LAUNCHER_CUDA")
    env = {name: value for name, value in os.environ.items() if name not in unset}
    env["JT_CACHE_DIR"] = str(tmp_path / "cache")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    return set(lines[0].split()), set(lines[-1].split())


def _under(modules: set[str], *packages: str) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_import_jt_core_imports_no_plugin_and_nothing_of_the_gpu(tmp_path: pathlib.Path) -> None:
    after_import, _ = _modules(tmp_path, "")
    assert _under(after_import, "jt_cuda", "jt_rocm", "jt_gluon", "jt_tpu", "jt_core.gpu", "jt_core.interpreter") == []
    assert _under(after_import, "jax.extend", "jax._src.pallas") == []  # jax.extend's package imports Pallas


def test_a_plain_cpu_call_imports_no_gpu_plugin_module(tmp_path: pathlib.Path) -> None:
    _, at_end = _modules(tmp_path, _CPU_CALL)
    assert "jt_cuda.plugin" in at_end and "jt_rocm.plugin" in at_end, "the GPU plugins were loaded and asked"
    assert _under(at_end, *_GPU_ONLY) == []
    assert _under(at_end, "jax.extend", "jax._src.pallas") == []


@pytest.mark.parametrize("cache", ["cold", "warm"])
def test_a_cuda_lowering_imports_no_cpu_backend_nor_other_platform(tmp_path: pathlib.Path, cache: str) -> None:
    if cache == "warm":
        _modules(tmp_path, _CUDA_LOWERING)  # compiles once on this machine
    _, at_end = _modules(tmp_path, _CUDA_LOWERING)
    assert "jt_cuda.launchers" in at_end
    cpu = (
        "jt_core.cpu.backend",
        "jt_core.cpu.lowered",
        "jt_core.cpu.interpreter_launcher",
        "jt_core.interpreter.execute",
    )
    assert _under(at_end, *cpu, "triton.runtime.interpreter", "jt_rocm.backend") == []
    if cache == "warm":  # Triton's own front end, which a cold compile runs, imports the Gluon language
        assert _under(at_end, "triton.experimental", "triton.compiler.code_generator") == []
