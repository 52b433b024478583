"""Gluon kernels compile without a GPU: to cubin for sm90 and, through jt-rocm, to HSACO for gfx942."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import triton
from gluon_kernels import (
    blocked_1d,
    blocked_cols,
    blocked_rows,
    copy_scalar_kernel,
    memcpy_kernel,
    row_sum_kernel,
    tile_axpy_kernel,
    tma_copy_kernel,
)
from gluon_testlib import gluon_call
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl

import jt_core as jt
from jt_core.call import KernelCall
from jt_core.errors import KernelCompileError
from jt_core.plugin import CompiledKernel, Target, facade
from jt_core.testing._calls import compile_request
from jt_gluon import _compat
from jt_gluon.dialect import GluonDialect

ELF_MAGIC = b"\x7fELF"
SM90 = Target(platform="cuda", arch=90, warp_size=32)


def memcpy_call(warp_size: int, **kw: Any) -> KernelCall:
    return gluon_call(memcpy_kernel, 500, {"n": 500, "BLOCK": 4 * warp_size, "layout": blocked_1d(warp_size)}, **kw)


def axpy_call(warp_size: int, **kw: Any) -> KernelCall:
    meta = {
        "M": 64,
        "N": 48,
        "alpha": 1.5,
        "BM": 32,
        "BN": 32,
        "load_layout": blocked_rows(warp_size),
        "store_layout": blocked_cols(warp_size),
    }
    return gluon_call(tile_axpy_kernel, (64, 48), meta, n_inputs=2, **kw)


def row_sum_call(warp_size: int, **kw: Any) -> KernelCall:
    meta = {"M": 64, "N": 30, "BM": 16, "BN": 32, "layout": blocked_rows(warp_size)}
    return gluon_call(row_sum_kernel, (64, 30), meta, out_size=64, **kw)


KERNELS = {"memcpy": memcpy_call, "tile_axpy": axpy_call, "row_sum": row_sum_call}


def compile_sm90(call: KernelCall) -> Any:
    spec = call.specialization(call.configs[0])
    source = GluonDialect().make_source(call.fn, spec, SM90)
    return triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "enable_fp_fusion": True})


@pytest.mark.parametrize("which", sorted(KERNELS))
def test_gluon_kernel_compiles_to_cubin_for_sm90(which: str) -> None:
    compiled = compile_sm90(KERNELS[which](32))
    assert compiled.asm["cubin"][:4] == ELF_MAGIC
    assert _compat.first_gluon_stage() in compiled.asm  # the Gluon stage list ran, not the Triton one
    assert "ttir" not in compiled.asm
    assert ".target sm_90" in compiled.asm["ptx"]
    assert compiled.metadata.name == KERNELS[which](32).fn.fn.__name__
    ttgir = compiled.asm["ttgir"]
    assert "#ttg.blocked<{sizePerThread = [1" in ttgir
    if which == "tile_axpy":
        assert "ttg.convert_layout" in ttgir
        assert "sizePerThread = [1, 4], threadsPerWarp = [4, 8]" in ttgir
        assert "sizePerThread = [4, 1], threadsPerWarp = [8, 4]" in ttgir
    if which == "row_sum":
        assert '"tt.reduce"' in ttgir or "tt.reduce" in ttgir


def test_gluon_scalar_copy_compiles_for_sm90() -> None:
    call = gluon_call(copy_scalar_kernel, (), {})
    compiled = compile_sm90(call)
    assert compiled.asm["cubin"][:4] == ELF_MAGIC
    assert compiled.metadata.global_scratch_size == 0


def test_device_side_tma_copy_compiles_for_sm90_with_global_scratch() -> None:
    layout = gl.NVMMASharedLayout.get_default_for([32, 32], gl.float32)
    call = gluon_call(tma_copy_kernel, (64, 64), {"M": 64, "N": 64, "BM": 32, "BN": 32, "smem_layout": layout})
    compiled = compile_sm90(call)
    assert compiled.metadata.global_scratch_size >= 2 * 128  # two TMA descriptors built on the device
    assert "tensormap" in compiled.asm["ptx"]
    assert re.search(r"cp\.async\.bulk\.tensor", compiled.asm["ptx"])


def compile_rocm(call: KernelCall) -> CompiledKernel:
    from jt_rocm.backend import RocmBackend

    backend = RocmBackend()
    return backend.compile(compile_request(backend, call))


@pytest.mark.requires_plugin("rocm")
@pytest.mark.parametrize("which", sorted(KERNELS))
def test_gluon_kernel_compiles_to_hsaco_for_gfx942(which: str) -> None:
    kernel = compile_rocm(KERNELS[which](64, backend_options={"arch": "gfx942"}))
    assert kernel.binary[:4] == ELF_MAGIC
    assert '"ttg.threads-per-warp" = 64' in kernel.asm["ttgir"]
    assert _compat.first_gluon_stage() in kernel.asm
    assert "ttir" not in kernel.asm
    assert "gfx942" in kernel.asm["amdgcn"]


@pytest.mark.requires_plugin("rocm")
def test_layout_for_the_wrong_wavefront_size_fails_with_the_call_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx942")
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(tmp_path))
    x = jax.ShapeDtypeStruct((500,), jnp.float32)

    def f(a: Any) -> Any:  # a 32-thread layout on a 64-thread wavefront
        return jt.triton_call(a, kernel=memcpy_kernel, out_shape=a, grid=4, n=500, BLOCK=128, layout=blocked_1d(32))

    with pytest.raises(KernelCompileError, match=r"compiling triton_call 'memcpy_kernel' .* for rocm gfx942"):
        jax.jit(f).trace(x).lower(lowering_platforms=("rocm",))


@pytest.mark.requires_plugin("rocm")
def test_gluon_call_lowers_for_rocm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx942")
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(tmp_path))
    x = jax.ShapeDtypeStruct((500,), jnp.float32)

    def f(a: Any) -> Any:
        return jt.triton_call(a, kernel=memcpy_kernel, out_shape=a, grid=2, n=500, BLOCK=256, layout=blocked_1d(64))

    text = jax.jit(f).trace(x).lower(lowering_platforms=("rocm",)).as_text()
    # jt's ROCm handler (the default launcher) carries the HSACO in the call; nothing is written to disk.
    assert "stablehlo.custom_call @triton_kernel_call_jt_rocm_preloaded" in text
    assert 'symbol_0 = "memcpy_kernel"' in text and 'binary_0 = "\\7FELF' in text
    assert list(tmp_path.iterdir()) == []


@pytest.mark.requires_plugin("cuda")
def test_gluon_compiles_and_lowers_through_the_cuda_backend() -> None:
    backend = facade.backend_for("cuda")
    call = memcpy_call(32, compute_capability=90)
    kernel = backend.compile(compile_request(backend, call))
    assert kernel.binary[:4] == ELF_MAGIC
    assert kernel.name == "memcpy_kernel"
    assert "ttir" not in kernel.asm  # no plain-Triton stage ran
    assert "\tgriddepcontrol.wait;" in kernel.asm["ptx"] and kernel.metadata["entry_gdc_wait"] is True  # sm90
    x = jax.ShapeDtypeStruct((500,), jnp.float32)

    def f(a: Any) -> Any:
        return jt.triton_call(
            a, kernel=memcpy_kernel, out_shape=a, grid=4, n=500, BLOCK=128, layout=blocked_1d(32), compute_capability=90
        )

    text = jax.jit(f).trace(x).lower(lowering_platforms=("cuda",)).as_text()
    assert "stablehlo.custom_call" in text


@pytest.mark.requires_plugin("cuda")
def test_a_failed_compile_kept_until_exit_leaves_no_leak_report(tmp_path: Path) -> None:
    """A script (or notebook) that keeps the error of a failed Gluon compile kept Triton's code generator until
    exit, where Triton's bindings reported its builder, values and attributes as leaked."""
    import os
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "keeps_its_error.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            sys.path.insert(0, sys.argv[1])
            import jax, jax.numpy as jnp
            from triton.experimental import gluon
            from triton.experimental.gluon import language as gl
            import jt_core as jt
            from gluon_kernels import blocked_1d

            @gluon.jit
            def unknown_name(in_ptr, out_ptr, n, BLOCK: gl.constexpr, layout: gl.constexpr):
                offsets = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
                mask = offsets < n
                gl.store(out_ptr + offsets, gl.load(in_ptr + offsets, mask=mask) + defined_nowhere, mask=mask)

            def f(a):
                return jt.triton_call(a, kernel=unknown_name, out_shape=a, grid=4, n=512, BLOCK=128,
                                      layout=blocked_1d(32), compute_capability=90)

            try:
                jax.jit(f).trace(jax.ShapeDtypeStruct((512,), jnp.float32)).lower(lowering_platforms=("cuda",))
            except jt.errors.KernelCompileError as error:
                KEPT = [error]  # as a notebook keeps its last error
            print("kept", type(KEPT[0]).__name__)
            """
        )
    )
    environment = {key: value for key, value in os.environ.items() if key != "JT_CACHE_DIR"}
    result = subprocess.run(
        [sys.executable, str(script), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**environment, "JT_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert result.returncode == 0, result.stderr
    assert "kept KernelCompileError" in result.stdout
    assert "leaked" not in result.stderr, result.stderr[-2000:]


_CONVERTING_LAYOUTS = """
import sys
sys.path.insert(0, sys.argv[1])
import jax, jax.numpy as jnp
import jt_core as jt
from gluon_kernels import blocked_rows, row_sum_kernel

def row_sums(x):
    return jt.triton_call(x, kernel=row_sum_kernel, out_shape=jax.ShapeDtypeStruct((64,), x.dtype), grid=4, M=64,
                          N=30, BM=16, BN=32, layout=blocked_rows(32), compute_capability=90)

lowered = jax.jit(row_sums).trace(jax.ShapeDtypeStruct((64, 30), jnp.float32)).lower(lowering_platforms=("cuda",))
print("custom calls", lowered.as_text().count("stablehlo.custom_call"))
"""


@pytest.mark.requires_plugin("cuda")
def test_a_process_that_compiled_gluon_layout_conversions_exits_without_a_leak_report(tmp_path: Path) -> None:
    """``rows[:, None]`` makes Triton's Gluon bindings keep layout classes, and with them binding types, past the
    interpreter's teardown: the process ended with "nanobind: leaked ..." on stderr (Triton 3.9)."""
    import os
    import subprocess
    import sys

    script = tmp_path / "converts_layouts.py"
    script.write_text(_CONVERTING_LAYOUTS)
    # Empty caches: the kernel compiles, so Triton's builder runs (a kernel found in a cache builds nothing).
    jt_cache = tmp_path / "jt"
    environment = {**os.environ, "JT_CACHE_DIR": str(jt_cache), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    result = subprocess.run(
        [sys.executable, str(script), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment,
    )
    assert result.returncode == 0, result.stderr
    assert "custom calls 1" in result.stdout
    assert list((jt_cache / "kernels").glob("*.jtk")), "nothing was compiled: the run proves nothing"
    assert "nanobind: leaked" not in result.stderr, result.stderr[-2000:]
