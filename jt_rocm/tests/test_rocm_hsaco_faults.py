"""The HSACO files jaxlib's ROCm handler loads survive every fault in their folder, and ``JT_ROCM_HSACO_DIR`` gets
the same checks as jt's cache folder."""

from __future__ import annotations

import errno
import hashlib
import os
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from rocm_testlib import bound_call, use_launcher

import jt_core as jt
from jt_core import files
from jt_core.testing import custom_calls, damage, decode_jaxlib_call, failing_writes, sample_add_kernel
from jt_core.testing._calls import compile_request
from jt_rocm.backend import RocmBackend
from jt_rocm.launchers import store_hsaco

F32_64 = jax.ShapeDtypeStruct((64,), jnp.float32)


@pytest.fixture(scope="module")
def triton_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Triton's cache for this module's compiles (one shared with other processes may hold a binary that Triton
    built under other settings, which its key does not tell apart)."""
    return tmp_path_factory.mktemp("triton-cache")


@pytest.fixture(scope="module")
def hsaco(triton_dir: Path) -> bytes:
    """A real HSACO, compiled without jt's cache: the reference every stored file must match byte for byte."""
    backend = RocmBackend()
    call = bound_call(backend_options={"arch": "gfx942"})
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(triton_dir))
        return backend.compile(compile_request(backend, call)).binary


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, triton_dir: Path) -> Path:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(triton_dir))
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "jt-cache"))
    monkeypatch.delenv("JT_ROCM_HSACO_DIR", raising=False)
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx942")
    monkeypatch.setattr(files, "_faults", set(), raising=False)
    return files.cache_folder("rocm-hsaco")


def _module_path() -> Path:
    """Lowers a call for jaxlib's handler and returns the HSACO file its custom call names."""

    def add(x: jax.Array, y: jax.Array) -> jax.Array:
        return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32)

    (op,) = custom_calls(jax.jit(add).trace(F32_64, F32_64).lower(lowering_platforms=("rocm",)))
    config = op.attributes["mhlo.backend_config"]
    return Path(decode_jaxlib_call(bytes(config["opaque"].value_bytes))["kernel_call"]["module"])


@pytest.mark.parametrize("fault", ["corrupt", "truncate"])
def test_a_damaged_hsaco_is_never_handed_to_jaxlib(folder: Path, fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    use_launcher(monkeypatch, "jaxlib")
    path = _module_path()
    written = path.read_bytes()
    assert path.parent == folder and path.name.endswith(f"-{hashlib.sha256(written).hexdigest()}.hsaco")
    assert written[:4] == b"\x7fELF"
    damage(path, fault)
    assert (path.stat().st_size == len(written)) is (fault == "corrupt")
    assert _module_path() == path and path.read_bytes() == written


def test_a_folder_in_place_of_the_hsaco_sends_it_elsewhere_with_one_warning(folder: Path, hsaco: bytes) -> None:
    first = store_hsaco("sample_add_kernel", hsaco)
    damage(first, "folder")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = [store_hsaco("sample_add_kernel", hsaco) for _ in range(2)]
    assert all(p != first and p.read_bytes() == hsaco for p in paths)
    reported = [str(w.message) for w in caught if "cannot write to the folder" in str(w.message)]
    assert len(reported) == 1 and str(folder) in reported[0] and "a folder is where a file should be" in reported[0]


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EROFS], ids=["full-disk", "read-only"])
def test_a_folder_that_takes_no_hsaco_sends_it_elsewhere_with_one_warning(folder: Path, hsaco: bytes,
                                                                          error: int) -> None:  # fmt: skip
    with warnings.catch_warnings(record=True) as caught, failing_writes(folder, error):
        warnings.simplefilter("always")
        paths = [store_hsaco("sample_add_kernel", hsaco), store_hsaco("other_kernel", hsaco[::-1])]
    assert paths[0].read_bytes() == hsaco and paths[1].read_bytes() == hsaco[::-1]
    assert all(folder not in p.parents for p in paths)
    reported = [str(w.message) for w in caught if "cannot write to the folder" in str(w.message)]
    assert len(reported) == 1 and str(folder) in reported[0]


def test_a_loose_hsaco_dir_is_not_used(tmp_path: Path, folder: Path, hsaco: bytes,
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    loose = tmp_path / "shared-hsaco"
    loose.mkdir()
    os.chmod(loose, 0o777)
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(loose))
    with pytest.warns(RuntimeWarning, match="does not use the folder .*others may write to it"):
        path = store_hsaco("sample_add_kernel", hsaco)
    assert path.parent == folder and path.read_bytes() == hsaco
    assert not list(loose.iterdir())


def test_a_private_hsaco_dir_is_used(tmp_path: Path, folder: Path, hsaco: bytes,
                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    mine = tmp_path / "my-hsaco"
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(mine))
    path = store_hsaco("sample_add_kernel", hsaco)
    assert path.parent == mine and path.read_bytes() == hsaco
    assert (mine.stat().st_mode & 0o777) == 0o700


def _planted_name(hsaco: bytes) -> str:
    return f"sample_add_kernel-{hashlib.sha256(hsaco).hexdigest()}.hsaco"


def test_a_planted_hsaco_of_the_right_size_in_a_shared_dir_is_never_referenced(
    tmp_path: Path, folder: Path, hsaco: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared-hsaco"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # world-writable, as /tmp is
    planted = shared / _planted_name(hsaco)
    planted.write_bytes(bytes(b ^ 0xFF for b in hsaco))  # the right name and size, other bytes
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(shared))
    with pytest.warns(RuntimeWarning, match="does not use the folder .*others may write to it"):
        path = store_hsaco("sample_add_kernel", hsaco)
    assert path != planted and shared not in path.parents and path.read_bytes() == hsaco


def test_a_lowered_call_never_names_a_planted_hsaco(
    tmp_path: Path, folder: Path, hsaco: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the lowering, as a program meets it: the module jaxlib's handler loads holds the kernel's bytes,
    wherever a file of the right name and size was planted (the shared folder, or jt's own folder)."""
    use_launcher(monkeypatch, "jaxlib")
    shared = tmp_path / "shared-hsaco"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    for where in (shared, folder):
        (where / _planted_name(hsaco)).write_bytes(bytes(b ^ 0xFF for b in hsaco))
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(shared))
    jax.clear_caches()  # compiled here, as the reference was, not taken from an earlier test's compile in memory
    with pytest.warns(RuntimeWarning, match="does not use the folder .*others may write to it"):
        path = _module_path()
    assert shared not in path.parents and path.read_bytes() == hsaco
    assert (shared / _planted_name(hsaco)).read_bytes() != hsaco  # left alone, and never named


def test_a_hsaco_dir_that_is_another_users_link_is_not_used(
    tmp_path: Path, folder: Path, hsaco: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The link leads to a private folder of this user's today; its owner may point it at their own tomorrow,
    after jt has checked it and before jaxlib loads the file."""
    if os.geteuid() != 0:
        pytest.skip("giving a link to another user needs root")
    target = tmp_path / "private-target"
    target.mkdir(mode=0o700)
    link = tmp_path / "their-link"
    link.symlink_to(target)
    os.lchown(link, 54321, 54321)
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(link))
    with pytest.warns(RuntimeWarning, match="symbolic link owned by user id 54321"):
        path = store_hsaco("sample_add_kernel", hsaco)
    assert path.parent == folder and path.read_bytes() == hsaco
    assert not list(target.iterdir())


def test_a_link_in_place_of_the_hsaco_is_replaced_by_the_file(folder: Path, tmp_path: Path, hsaco: bytes) -> None:
    """A link with the entry's name leads to a file whose contents may change after the check: jaxlib is handed
    a plain file only."""
    elsewhere = tmp_path / "elsewhere.hsaco"
    elsewhere.write_bytes(hsaco)
    (folder / _planted_name(hsaco)).symlink_to(elsewhere)
    path = store_hsaco("sample_add_kernel", hsaco)
    assert path == folder / _planted_name(hsaco) and not path.is_symlink() and path.read_bytes() == hsaco
    assert elsewhere.read_bytes() == hsaco
