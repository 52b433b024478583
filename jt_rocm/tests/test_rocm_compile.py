"""Compiling for AMD GPUs without one: Triton's AMD backend down to AMDGCN and HSACO."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax
import numpy as np
import pytest
import triton
import triton.language as tl
from rocm_testlib import bound_call

from jt_core.errors import KernelCallValueError
from jt_core.plugin import CompiledKernel, facade
from jt_core.testing._calls import compile_request
from jt_rocm.backend import RocmBackend

ELF_MAGIC = b"\x7fELF"
EM_AMDGPU = 224  # ELF e_machine of AMD GPU code objects


def compile_for(arch: str, call=None) -> CompiledKernel:  # type: ignore[no-untyped-def]
    """Compiles the call's first configuration as a lowering does: through the compile hook (jt's caches and
    dumps)."""
    call = call if call is not None else bound_call(backend_options={"arch": arch})
    backend = RocmBackend()
    return facade.compile_kernel(compile_request(backend, call))


@pytest.mark.parametrize(("arch", "warp_size"), [("gfx942", 64), ("gfx90a", 64), ("gfx1100", 32)])
def test_compiles_to_hsaco_with_the_architectures_wavefront_size(arch: str, warp_size: int) -> None:
    kernel = compile_for(arch)
    assert kernel.target.warp_size == warp_size
    assert f'"ttg.threads-per-warp" = {warp_size}' in kernel.asm["ttgir"]
    assert f'ttg.target = "hip:{arch}"' in kernel.asm["ttgir"]
    assert re.search(rf'\.amdgcn_target\s+"[^"]*-{arch}[":]', kernel.asm["amdgcn"])
    assert f".wavefront_size: {warp_size}" in kernel.asm["amdgcn"]
    assert kernel.binary[:4] == ELF_MAGIC
    assert int.from_bytes(kernel.binary[18:20], "little") == EM_AMDGPU
    assert kernel.name == "sample_add_kernel"
    assert kernel.name.encode() in kernel.binary
    assert kernel.num_warps == 4
    assert set(kernel.asm) >= {"ttir", "ttgir", "llir", "amdgcn"}


def test_metadata_is_seeded_from_the_options() -> None:
    call = bound_call(backend_options={"arch": "gfx942", "waves_per_eu": 2}, num_warps=8, num_stages=1)
    kernel = compile_for("gfx942", call)
    assert kernel.num_warps == 8
    assert kernel.metadata["arch"] == "gfx942"
    assert kernel.metadata["warp_size"] == 64
    assert kernel.metadata["waves_per_eu"] == 2
    assert kernel.metadata["num_stages"] == 1
    assert re.search(r'"amdgpu-waves-per-eu"="2, ?2"', kernel.asm["llir"])


def test_divisibility_hint_reaches_the_ir() -> None:
    text = compile_for("gfx942").asm["ttir"]
    assert text.count("tt.divisibility = 16") >= 3  # three pointers


@triton.jit
def _staged_dot_kernel(a_ptr, b_ptr, c_ptr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, 4):
        a = tl.load(a_ptr + rm[:, None] * (4 * BK) + (k * BK + rk)[None, :])
        b = tl.load(b_ptr + (k * BK + rk)[:, None] * BN + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * BN + rn[None, :], acc)


def test_shared_memory_above_the_lds_size_is_refused() -> None:
    a = jax.ShapeDtypeStruct((256, 256), np.float16)
    b = jax.ShapeDtypeStruct((256, 256), np.float16)
    c = jax.ShapeDtypeStruct((256, 256), np.float32)
    call = bound_call(
        _staged_dot_kernel,
        (a, b),
        {"BM": 256, "BN": 256, "BK": 64},
        c,
        1,
        backend_options={"arch": "gfx942"},
        num_stages=3,
        num_warps=4,
    )
    with pytest.raises(KernelCallValueError, match=r"needs \d+ bytes of shared memory \(LDS\) but gfx942 offers 65536"):
        compile_for("gfx942", call)


def test_dump_dir_gets_every_stage_and_survives_a_second_dump(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAX_TRITON_DUMP_DIR", str(tmp_path))
    first = compile_for("gfx942")
    second = compile_for("gfx942")
    (folder,) = tmp_path.iterdir()
    names = sorted(p.name for p in folder.iterdir())
    stem = first.name
    for ext in ("ttir", "ttgir", "llir", "amdgcn", "hsaco"):
        assert f"{stem}.{ext}" in names
    assert "compile_info.json" in names
    assert (folder / f"{stem}.hsaco").read_bytes() == first.binary == second.binary
    assert (folder / f"{stem}.amdgcn").read_text() == first.asm["amdgcn"]
    info = json.loads((folder / "compile_info.json").read_text())
    assert info["target"] == {"platform": "rocm", "arch": "gfx942", "warp_size": 64}
    assert info["shared_mem"] == first.shared_mem
    assert info["options"]["num_warps"] == 4
