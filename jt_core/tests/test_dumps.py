"""``JAX_TRITON_DUMP_DIR``: jt-core writes the dumps of every backend, from the compiled kernel's IRs."""

from __future__ import annotations

import dataclasses
import errno
import json
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core.plugin import facade
from jt_core.plugin.roles import Backend, CompileRequest
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.testing import failing_writes, sample_add_kernel
from jt_core.testing._calls import compile_request, sample_call


class IrBackend(Backend):
    """A backend that 'compiles' to two IR stages and a binary."""

    platform = "irplat"

    def target(self) -> Target:
        return Target("irplat", "v1", 32)

    def compile(self, request: CompileRequest) -> CompiledKernel:
        name = request.call.name
        return CompiledKernel(
            name=name,
            target=request.target,
            binary=b"BIN:" + name.encode(),
            asm={"ttir": f"module @{name}", "ptx": f".entry {name}"},
            metadata={"shared": 0},
        )


class FakebinBackend(IrBackend):
    """Names the file of its binary."""

    def binary_file_suffix(self, kernel: CompiledKernel) -> str:
        return "fakebin"


def test_every_ir_the_backend_kept_and_its_binary_are_dumped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAX_TRITON_DUMP_DIR", str(tmp_path))
    backend = FakebinBackend()
    call = sample_call()
    request = compile_request(backend, call)
    kernel = facade.compile_kernel(request)
    facade.compile_kernel(request)  # the same kernel again: files are replaced, not an error
    (folder,) = tmp_path.iterdir()
    assert folder.name.startswith("sample_add_kernel-")
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "compile_info.json",
        "sample_add_kernel.fakebin",
        "sample_add_kernel.ptx",
        "sample_add_kernel.ttir",
    ]
    assert (folder / "sample_add_kernel.fakebin").read_bytes() == kernel.binary
    assert (folder / "sample_add_kernel.ttir").read_text() == "module @sample_add_kernel"
    info = json.loads((folder / "compile_info.json").read_text())
    assert info["target"] == {"platform": "irplat", "arch": "v1", "warp_size": 32}
    assert info["config"] == call.configs[0].label and info["binary_bytes"] == len(kernel.binary)


def test_a_binary_without_a_named_suffix_is_dumped_as_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAX_TRITON_DUMP_DIR", str(tmp_path))
    backend = IrBackend()
    call = sample_call()
    kernel = facade.compile_kernel(compile_request(backend, call))
    (folder,) = tmp_path.iterdir()
    assert (folder / "sample_add_kernel.bin").read_bytes() == kernel.binary


def test_the_cpu_backend_dumps_its_compile_info(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAX_TRITON_DUMP_DIR", str(tmp_path))
    x = jnp.asarray(np.random.default_rng(3).standard_normal(64), jnp.float32)
    out = jax.jit(
        lambda x: jt.triton_call(x, x, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32, name="dumped")
    )(x)
    np.testing.assert_allclose(out, 2 * np.asarray(x), rtol=1e-6)
    (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith("dumped-")]
    info = json.loads((folder / "compile_info.json").read_text())
    assert info["call"] == "dumped" and info["target"]["platform"] == "cpu"
    assert info["grid"] == [2, 1, 1] and "BLOCK=32" in info["config"]


def test_no_dump_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JAX_TRITON_DUMP_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    backend = IrBackend()
    call = sample_call(BLOCK=16)
    facade.compile_kernel(compile_request(backend, call))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EROFS], ids=["full-disk", "read-only"])
def test_a_dump_folder_that_takes_no_file_fails_no_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           error: int) -> None:  # fmt: skip
    monkeypatch.setenv("JAX_TRITON_DUMP_DIR", str(tmp_path / "dumps"))
    backend = IrBackend()
    requests = [compile_request(backend, call) for call in (sample_call(), sample_call(BLOCK=16))]
    with warnings.catch_warnings(record=True) as caught, failing_writes(tmp_path / "dumps", error):
        warnings.simplefilter("always")
        kernels = [facade.compile_kernel(request) for request in requests]
    assert [k.binary for k in kernels] == [b"BIN:sample_add_kernel"] * 2
    reported = [str(w.message) for w in caught if "cannot write to the folder" in str(w.message)]
    assert len(reported) == 1 and "JAX_TRITON_DUMP_DIR" in reported[0]


class PathNamingBackend(IrBackend):
    """Names its stages and its binary's suffix with path separators, as a careless backend might."""

    def compile(self, request: CompileRequest) -> CompiledKernel:
        kernel = super().compile(request)
        return CompiledKernel(name="../../kernel", target=kernel.target, binary=kernel.binary,
                              asm={"../ttir": "module"})  # fmt: skip

    def binary_file_suffix(self, kernel: CompiledKernel) -> str:
        return "../../bin"


def test_dumps_stay_in_the_dump_folder_and_are_private_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import stat

    root = tmp_path / "dumps" / "run"
    monkeypatch.setenv("JAX_TRITON_DUMP_DIR", str(root))
    request = compile_request(PathNamingBackend(), dataclasses.replace(sample_call(), name="../../call"))
    previous = os.umask(0)
    try:
        facade.compile_kernel(request)
    finally:
        os.umask(previous)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(root in p.parents for p in written), written
    folders = [tmp_path / "dumps", root, *(p for p in root.rglob("*") if p.is_dir())]
    assert {str(p): oct(stat.S_IMODE(p.stat().st_mode)) for p in folders if p.stat().st_mode & 0o077} == {}
