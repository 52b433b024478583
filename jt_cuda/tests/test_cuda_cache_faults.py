"""CUDA compiles and jt's cache: a cubin entry damaged, in a folder that takes no file, or Triton without a cache
folder of its own (a home that cannot be written): the compile goes on and gives the same cubin."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from jt_core import cache, files, triton_cache
from jt_core.call import CallOptions
from jt_core.plugin import CompiledKernel, CompileRequest
from jt_core.testing import damage, failing_writes, sample_add_kernel
from jt_core.testing._calls import bind, compile_request
from jt_cuda.backend import CudaBackend


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "jt-cache"
    monkeypatch.setenv("JT_CACHE_DIR", str(root))
    monkeypatch.delenv("JT_DISABLE_CACHE", raising=False)
    monkeypatch.setattr(files, "_faults", set(), raising=False)
    return root


def _request() -> CompileRequest:
    """A compile through ``triton.compile`` and Triton's own cache: for sm80 (for sm90 and later jt-cuda runs
    Triton's stages itself, to make the kernel wait for the grids before it, and Triton's cache plays no part)."""
    spec = jax.ShapeDtypeStruct((256,), jnp.float32)
    call = bind(
        sample_add_kernel, (spec, spec), {"n": 256, "BLOCK": 64}, CallOptions(spec, grid=4, compute_capability=80)
    )
    backend = CudaBackend()
    return compile_request(backend, call)


@pytest.fixture(scope="module")
def triton_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Triton's cache for this module's compiles: a cache shared with other processes may hold a cubin that Triton
    built under other settings, which its key does not tell apart."""
    return tmp_path_factory.mktemp("triton-cache")


@pytest.fixture(autouse=True)
def _own_triton_cache(triton_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_dir))


@pytest.fixture(scope="module")
def reference(triton_dir: Path) -> CompiledKernel:
    """The kernel compiled by Triton directly, without jt's cache."""
    request = _request()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(triton_dir))
        return request.backend.compile(request)


@pytest.mark.parametrize("fault", ["corrupt", "truncate", "folder"])
def test_a_damaged_cubin_entry_is_compiled_again(cache_root: Path, reference: CompiledKernel, fault: str) -> None:
    assert cache.compile_cached(_request()).binary == reference.binary
    (entry,) = files.cache_folder("kernels").glob("*.jtk")
    damage(entry, fault)
    before = cache.stats()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = cache.compile_cached(_request())
    assert again.binary == reference.binary and again.asm["ptx"] == reference.asm["ptx"]
    assert cache.stats()["disk_hits"] == before["disk_hits"]
    expected = "cannot write to the folder" if fault == "folder" else "is unusable"
    assert [w for w in caught if expected in str(w.message)], [str(w.message) for w in caught]


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EROFS], ids=["full-disk", "read-only"])
def test_a_kernels_folder_that_takes_no_file_leaves_the_cubin_uncached(cache_root: Path, reference: CompiledKernel,
                                                                       error: int) -> None:  # fmt: skip
    folder = files.cache_folder("kernels")
    with warnings.catch_warnings(record=True) as caught, failing_writes(folder, error):
        warnings.simplefilter("always")
        kernels = [cache.compile_cached(_request()) for _ in range(2)]
    assert all(k.binary == reference.binary for k in kernels)
    assert len([w for w in caught if "cannot write to the folder" in str(w.message)]) == 1
    assert not list(folder.glob("*.jtk"))


_COMPILE = """
import json, jax, jax.numpy as jnp
import jt_core as jt
from jt_core.testing import sample_add_kernel
x = jax.ShapeDtypeStruct((1024,), jnp.float32)
for arch in (80, 90):  # sm80 through triton.compile and Triton's cache; sm90 through jt-cuda's own stage run
    f = lambda a, b: jt.triton_call(a, b, kernel=sample_add_kernel, out_shape=a, grid=8, n=1024, BLOCK=128,
                                    compute_capability=arch)
    print(len(jax.jit(f).trace(x, x).lower(lowering_platforms=("cuda",)).as_text()))
"""


def test_with_a_home_that_cannot_be_written_triton_compiles_in_jts_folder(tmp_path: Path) -> None:
    home = tmp_path / "home-is-a-file"
    home.write_text("")  # nothing can be created under it, not even by root
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_") and k != "JT_STRICT_PLUGINS"}
    env |= {"HOME": str(home), "JT_CACHE_DIR": str(tmp_path / "jt-cache"), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    ran = subprocess.run([sys.executable, "-c", _COMPILE], env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    triton_files = [p for p in (tmp_path / "jt-cache" / "triton").rglob("*") if p.is_file() and p.name != files.MARKER]
    assert any(p.suffix == ".cubin" for p in triton_files), triton_files
    info = subprocess.run([sys.executable, "-m", "jt_core", "cache", "info", "--json"], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    assert json.loads(info.stdout)["folders"]["triton"]["files"] == len(triton_files)
    subprocess.run([sys.executable, "-m", "jt_core", "cache", "clear"], env=env, check=True, capture_output=True)
    assert [p.name for p in (tmp_path / "jt-cache" / "triton").rglob("*") if p.is_file()] == [files.MARKER]


@pytest.fixture
def triton_folder(cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRITON_CACHE_DIR", "")  # as jax-triton leaves it: Triton keeps its cache in jt's folder
    return files.cache_folder("triton")


def _triton_compile() -> CompiledKernel:
    """A compile as jt's compile hook runs it (Triton's cache folder provided), without jt's own cache."""
    request = _request()
    with triton_cache.triton_cache_folder():
        return request.backend.compile(request)


@pytest.mark.parametrize("fault", ["corrupt", "truncate", "folder"])
def test_a_damaged_file_of_tritons_cache_in_jts_folder_is_compiled_again(
    triton_folder: Path, reference: CompiledKernel, fault: str
) -> None:
    assert _triton_compile().binary == reference.binary
    (cubin,) = triton_folder.rglob("*.cubin")
    damage(cubin, fault)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = _triton_compile()
    assert again.binary == reference.binary and again.asm["ptx"] == reference.asm["ptx"]
    assert [w for w in caught if "is unusable" in str(w.message)], [str(w.message) for w in caught]


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EROFS], ids=["full-disk", "read-only"])
def test_tritons_cache_in_a_folder_that_takes_no_file_fails_no_compile(
    triton_folder: Path, reference: CompiledKernel, error: int
) -> None:
    with warnings.catch_warnings(record=True) as caught, failing_writes(triton_folder, error):
        warnings.simplefilter("always")
        kernels = [_triton_compile() for _ in range(2)]
    assert all(k.binary == reference.binary for k in kernels)
    reported = [str(w.message) for w in caught if "cannot write to the folder" in str(w.message)]
    assert len(reported) == 1 and str(triton_folder) in reported[0], [str(w.message) for w in caught]
    assert not [p for p in triton_folder.rglob("*.cubin")]
