"""Compiling for CUDA without a GPU: cubin per architecture, metadata, options, limits, debug output, dumps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from cuda_testlib import big_shared_kernel, f32, matmul_kernel

from jt_core.call import CallOptions, KernelCall
from jt_core.errors import KernelCallValueError
from jt_core.plugin import CompiledKernel, facade
from jt_core.testing import sample_add_kernel
from jt_core.testing._calls import bind as bind_kernel
from jt_core.testing._calls import compile_request
from jt_cuda.backend import CudaBackend
from jt_cuda.target import limits_for, parse_compute_capability

ELF_MAGIC = b"\x7fELF"


def bind(
    kernel: Any = sample_add_kernel,
    args: tuple[Any, ...] | None = None,
    meta: dict[str, Any] | None = None,
    out: Any = None,
    grid: Any = 2,
    compute_capability: int | None = 90,
    backend_options: dict[str, Any] | None = None,
    **options: Any,
) -> KernelCall:
    spec = jax.ShapeDtypeStruct((64,), jnp.float32)
    call_options = CallOptions(
        out if out is not None else spec,
        grid=grid,
        compile_options=options,
        backend_options=backend_options,
        compute_capability=compute_capability,
    )
    return bind_kernel(
        kernel,
        args if args is not None else (spec, spec),
        meta if meta is not None else {"n": 64, "BLOCK": 32},
        call_options,
    )


def compile_call(call: KernelCall, backend: CudaBackend | None = None) -> CompiledKernel:
    """Compiles the call's first configuration as a lowering does: through the compile hook (jt's caches, dumps,
    IR printing)."""
    backend = backend or CudaBackend()
    return facade.compile_kernel(compile_request(backend, call))


def small_matmul_call(cc: int, block: int, stages: int, dtype: Any = jnp.float16) -> KernelCall:
    a = jax.ShapeDtypeStruct((256, 256), dtype)
    meta = dict(
        M=256, N=256, K=256, stride_am=256, stride_ak=1, stride_bk=256, stride_bn=1, stride_cm=256, stride_cn=1,
        BLOCK_M=block, BLOCK_N=block, BLOCK_K=64, GROUP_M=8,
    )  # fmt: skip
    return bind(matmul_kernel, (a, a), meta, a, grid=1, compute_capability=cc, num_stages=stages)


@pytest.mark.parametrize("cc", [80, 90, 100])
def test_compiles_to_cubin_for_each_architecture(cc: int) -> None:
    kernel = compile_call(bind(compute_capability=cc))
    assert kernel.binary[:4] == ELF_MAGIC
    assert kernel.asm["cubin"] == kernel.binary
    assert kernel.metadata["arch"] == f"sm{cc}"
    assert kernel.target.arch == cc and kernel.target.platform == "cuda"
    suffix = "a" if cc >= 90 else ""
    assert f".target sm_{cc}{suffix}" in kernel.asm["ptx"]
    for stage in ("ttir", "ttgir", "llir", "ptx", "cubin"):
        assert stage in kernel.asm
    assert kernel.name == "sample_add_kernel"
    assert kernel.num_warps == 4 and kernel.cluster_dims == (1, 1, 1)


def test_warp_count_and_shared_memory_come_from_the_compiled_metadata() -> None:
    kernel = compile_call(small_matmul_call(cc=90, block=64, stages=3))
    assert kernel.num_warps == kernel.metadata["num_warps"]
    assert kernel.shared_mem == kernel.metadata["shared"] > 0


def test_options_reach_triton() -> None:
    kernel = compile_call(bind(num_warps=8, num_stages=2, enable_fp_fusion=False, backend_options={"maxnreg": 128}))
    assert kernel.num_warps == 8
    assert kernel.metadata["num_stages"] == 2
    assert kernel.metadata["enable_fp_fusion"] is False
    assert kernel.metadata["maxnreg"] == 128


def test_unknown_backend_option_is_an_error_naming_it() -> None:
    with pytest.raises(KernelCallValueError, match=r"backend_options\['max_nreg'\].*known options.*maxnreg"):
        compile_call(bind(backend_options={"max_nreg": 128}))


def test_arch_in_backend_options_is_refused() -> None:
    with pytest.raises(KernelCallValueError, match=r"backend_options\['arch'\].*compute_capability="):
        compile_call(bind(backend_options={"arch": "sm80"}))


def test_clusters_before_sm90_are_refused() -> None:
    with pytest.raises(KernelCallValueError, match=r"num_ctas=2 .*sm90.*target is sm80") as info:
        compile_call(bind(compute_capability=80, num_ctas=2))
    assert "sample_add_kernel" in str(info.value) and "BLOCK=32" in str(info.value)


def test_clusters_on_sm90_record_the_cluster_shape() -> None:
    kernel = compile_call(bind(compute_capability=90, num_ctas=2))
    assert kernel.cluster_dims == (2, 1, 1)


def test_shared_memory_above_the_architecture_limit_is_refused() -> None:
    call = small_matmul_call(cc=86, block=128, stages=5)
    with pytest.raises(KernelCallValueError) as info:
        compile_call(call)
    message = str(info.value)
    assert "matmul_kernel" in message and "BLOCK_M=128" in message and "num_stages=5" in message
    assert f"{limits_for(86).max_shared_mem} bytes (99 KiB) that sm86 allows" in message


def test_the_same_kernel_fits_a_larger_architecture() -> None:
    kernel = compile_call(small_matmul_call(cc=90, block=128, stages=5))
    assert limits_for(86).max_shared_mem < kernel.shared_mem <= limits_for(90).max_shared_mem


def test_shared_memory_table() -> None:
    assert limits_for(80).max_shared_mem == 163 * 1024
    assert limits_for(86).max_shared_mem == limits_for(89).max_shared_mem == 99 * 1024
    assert limits_for(90).max_shared_mem == limits_for(100).max_shared_mem == 227 * 1024
    assert limits_for(120).max_shared_mem == 99 * 1024
    assert limits_for(91).max_shared_mem == 227 * 1024  # unknown minor: nearest known of the same major


@pytest.mark.parametrize(
    ("value", "expected"), [(90, 90), ("9.0", 90), ("90", 90), ("sm_90a", 90), ("sm100", 100), ((8, 6), 86)]
)
def test_compute_capability_spellings(value: Any, expected: int) -> None:
    assert parse_compute_capability(value, "compute_capability") == expected


@pytest.mark.parametrize("value", [9, "nine", True, "9.x"])
def test_bad_compute_capability_is_an_error_naming_the_argument(value: Any) -> None:
    with pytest.raises(ValueError, match="compute_capability"):
        parse_compute_capability(value, "compute_capability")


def test_compile_is_cached_per_backend() -> None:
    backend = CudaBackend()
    call = bind(compute_capability=80)
    assert compile_call(call, backend) is compile_call(call, backend)


def test_debug_prints_the_irs(capsys: pytest.CaptureFixture[str]) -> None:
    compile_call(bind(compute_capability=90, debug=True))
    out = capsys.readouterr().out
    for stage in ("ttir", "ttgir", "llir", "ptx"):
        assert f"{stage} (sm90) ----" in out
    assert "tt.func" in out and ".visible .entry sample_add_kernel" in out


def test_dump_dir_receives_every_ir_and_survives_a_second_write(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAX_TRITON_DUMP_DIR", str(tmp_path))
    backend = CudaBackend()
    call = bind(compute_capability=90)
    kernel = compile_call(call, backend)
    compile_call(call, backend)  # the same kernel again: files are replaced, not an error
    (folder,) = list(tmp_path.iterdir())
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(
        ["compile_info.json"] + [f"sample_add_kernel.{s}" for s in ("ttir", "ttgir", "llir", "ptx", "cubin")]
    )
    assert (folder / "sample_add_kernel.cubin").read_bytes() == kernel.binary
    info = json.loads((folder / "compile_info.json").read_text())
    assert info["kernel"] == "sample_add_kernel"
    assert info["target"]["arch"] == 90
    assert info["shared_mem"] == kernel.shared_mem
    assert info["config"] == call.configs[0].label
    assert not [p for p in os.listdir(folder) if p.endswith(".tmp")]


def test_compile_error_keeps_triton_message_and_names_the_call() -> None:
    import jt_core as jt

    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=big_shared_kernel, out_shape=x, grid=1, BLOCK=48, compute_capability=90, name="bad_block"
        )

    with pytest.raises(Exception) as info:
        jax.jit(f).trace(f32((48 * 48,))).lower(lowering_platforms=("cuda",))
    message = str(info.value)
    assert "triton_call 'bad_block'" in message and "cuda sm90" in message and "BLOCK=48" in message
    assert "power of 2" in message  # Triton's own message, pointing at the source


def test_second_process_reads_the_cubin_from_jt_disk_cache(tmp_path: Path) -> None:
    script = (
        "import json, jax, jax.numpy as jnp\n"
        "import jt_core as jt\n"
        "from jt_core import cache\n"
        "from jt_core.testing import sample_add_kernel\n"
        "x = jax.ShapeDtypeStruct((1024,), jnp.float32)\n"
        "f = lambda a, b: jt.triton_call(a, b, kernel=sample_add_kernel, out_shape=a, grid=8, n=1024, BLOCK=128,"
        " compute_capability=90)\n"
        "text = jax.jit(f).trace(x, x).lower(lowering_platforms=('cuda',)).as_text()\n"
        "print(json.dumps({'stats': cache.stats(), 'length': len(text)}))\n"
    )
    env = {**os.environ, "JT_CACHE_DIR": str(tmp_path / "jt"), "TRITON_CACHE_DIR": str(tmp_path / "triton1")}
    env.pop("JT_DISABLE_CACHE", None)
    first = json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                      check=True).stdout.splitlines()[-1])  # fmt: skip
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton2")  # an empty Triton cache: only jt's can avoid the compile
    second = json.loads(subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                                       check=True).stdout.splitlines()[-1])  # fmt: skip
    assert first["stats"]["disk_writes"] == 1 and first["stats"]["disk_hits"] == 0
    assert second["stats"]["disk_hits"] == 1 and second["stats"]["disk_writes"] == 0
    assert second["length"] == first["length"]
    assert not list((tmp_path / "triton2").rglob("*.cubin")), "Triton compiled again despite jt's cache"
