"""Per-machine files: the cache folder is private, checked before anything is executed from it, written atomically."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jt_core import files, integrity, triton_cache

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="ownership checks need POSIX user ids")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_new_folders_are_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "jt"))
    for purpose in files.PURPOSES:
        folder = files.cache_folder(purpose)
        assert folder == tmp_path / "jt" / purpose
        assert _mode(folder) & 0o077 == 0
    assert _mode(tmp_path / "jt") & 0o077 == 0


def test_an_unknown_purpose_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown cache folder 'kernals'"):
        files.cache_folder("kernals")


def test_a_folder_others_may_write_is_explained(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    os.chmod(loose, 0o777)
    problem = files.folder_problem(loose)
    assert problem is not None and "others may write to it" in problem and "777" in problem
    os.chmod(loose, 0o700)
    assert files.folder_problem(loose) is None


def test_a_loose_cache_root_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loose = tmp_path / "shared"
    loose.mkdir()
    os.chmod(loose, 0o777)
    monkeypatch.setenv("JT_CACHE_DIR", str(loose))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    with pytest.warns(RuntimeWarning, match=r"does not use the cache folder .*shared.*others may write to it"):
        root = files.cache_root()
    assert root == tmp_path / "home-cache" / "jt"
    assert files.cache_folder("vmap").parent == root


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "entry"
    files.atomic_write(target, b"first")
    files.atomic_write(target, b"second")
    assert target.read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


_PLANTED = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, sys.argv[1])
    import jax, jax.numpy as jnp, numpy as np
    import jt_core as jt
    from jt_core import batching
    import core_kernels as k

    def add(x, y):
        return jt.triton_call(x, y, 32, kernel=k.add_kernel, out_shape=x, grid=2, BLOCK=16)

    x = jnp.arange(64, dtype=jnp.float32).reshape(2, 32)
    np.testing.assert_array_equal(np.asarray(jax.jit(add)(x[0], x[0])), 2 * np.asarray(x[0]))
    out = jax.vmap(add)(x, x)
    assert np.array_equal(np.asarray(out), 2 * np.asarray(x)), out
    print("wrapper folder:", batching.cache_dir())
    """
)


@pytest.mark.skipif(shutil.which("c++") is None, reason="the planted library is built with c++")
def test_code_planted_in_a_loose_folder_is_never_run(tmp_path: Path) -> None:
    """Someone who can write to a shared JT_CACHE_DIR plants the modules and libraries jt would load from it: the
    vmap wrapper module and the CPU launcher's handler library (a library whose constructor leaves a marker)."""
    shared = tmp_path / "shared"
    # The handler is built into the cache folder, not taken from a platform wheel.
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "private"), "JT_PREBUILT_NATIVE": "0"}
    tests = str(Path(__file__).parent)

    def run(cache_dir: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", _PLANTED, tests], env={**env, "JT_CACHE_DIR": str(cache_dir)},
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    # A first run in a private folder names the files jt generates and builds for this call.
    clean = run(tmp_path / "clean")
    assert clean.returncode == 0, clean.stderr
    (module,) = (tmp_path / "clean" / "vmap").glob("*.py")
    (library,) = (tmp_path / "clean" / "native").glob("libjt_cpu_interpreter_call-*.so")
    marker = tmp_path / "planted-code-ran"
    for purpose in ("vmap", "native"):
        (shared / purpose).mkdir(parents=True)
    (shared / "vmap" / module.name).write_text(f"open({str(marker)!r}, 'w').write('module')\n")
    planted = tmp_path / "planted.cc"
    planted.write_text(
        f'#include <cstdio>\n__attribute__((constructor)) static void plant() {{ std::fopen("{marker}", "w"); }}\n'
    )
    subprocess.run(["c++", "-shared", "-fPIC", str(planted), "-o", str(shared / "native" / library.name)], check=True)
    for folder in (shared, shared / "vmap", shared / "native"):
        os.chmod(folder, 0o777)
    result = run(shared)
    assert result.returncode == 0, result.stderr
    assert not marker.exists()
    assert "does not use the cache folder" in result.stderr and "others may write to it" in result.stderr
    assert f"wrapper folder: {tmp_path / 'private' / 'jt' / 'vmap'}" in result.stdout


def test_file_lock_excludes_other_processes(tmp_path: Path) -> None:
    """A second process waits for the lock until the first releases it."""
    import time

    lock = tmp_path / "work.lock"
    child = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from jt_core import files, integrity, triton_cache
        with files.file_lock(Path({str(lock)!r})) as held:
            print("held" if held else "unlocked", time.monotonic(), flush=True)
        """
    )
    with files.file_lock(lock) as held:
        assert held
        process = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        released = time.monotonic()
    out, _ = process.communicate(timeout=60)
    state, when = out.split()
    assert state == "held" and float(when) >= released


def test_file_lock_in_an_unwritable_folder_goes_on_unlocked(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with files.file_lock(folder / "x.lock") as held:
            assert held is (os.geteuid() == 0)  # root writes anywhere
    finally:
        folder.chmod(0o700)


@pytest.mark.parametrize("configured", ["empty", "uncreatable"])
def test_triton_gets_jts_folder_when_its_own_cannot_be_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, configured: str
) -> None:
    """An emptied TRITON_CACHE_DIR (jax-triton does that) or a home under which nothing can be created: inside a
    compile, Triton's cache folder is jt's private ``triton`` folder; the environment is never written."""
    from triton import knobs

    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "jt-cache"))
    if configured == "empty":
        monkeypatch.setenv("TRITON_CACHE_DIR", "")
    else:
        monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
        home = tmp_path / "home-is-a-file"
        home.write_text("")
        monkeypatch.setenv("TRITON_HOME", str(home))
    before = knobs.cache.dir
    environment = dict(os.environ)
    with triton_cache.triton_cache_folder():
        assert knobs.cache.dir == str(files.cache_folder("triton"))
    assert knobs.cache.dir == before and dict(os.environ) == environment


def test_tritons_own_usable_folder_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from triton import knobs

    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "jt-cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-own"))
    with triton_cache.triton_cache_folder():
        assert knobs.cache.dir == str(tmp_path / "triton-own")


OTHER_USER = 54321  # a user id that is not this process's


def _owned_by_someone_else(path: Path) -> None:
    """Gives ``path`` (a link: the link itself) to another user: needs root, which CI and these machines run as."""
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    os.lchown(path, OTHER_USER, OTHER_USER)


def test_a_cache_root_that_is_another_users_link_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Someone else's link may lead to a private folder of this user's now and to their own folder later: jt
    neither writes through it nor lets ``cache clear`` delete through it."""
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    (mine / "xla").mkdir(mode=0o700)
    precious = mine / "xla" / ("ab" * 32 + ".json")
    precious.write_text("{}")
    link = tmp_path / "shared-cache"
    link.symlink_to(mine)
    _owned_by_someone_else(link)
    monkeypatch.setenv("JT_CACHE_DIR", str(link))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    with pytest.warns(RuntimeWarning, match=r"does not use the cache folder .*symbolic link owned by user id 54321"):
        root = files.cache_root()
    assert root == tmp_path / "home-cache" / "jt"
    from jt_core import cache

    cache.clear()
    assert precious.exists()


def test_cache_clear_deletes_nothing_through_a_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "jt"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    kept = [elsewhere / ("cd" * 32 + ".json"), elsewhere / ("ef" * 32 + ".jtk")]
    for path in kept:
        path.write_text("not jt's to delete")
    root = files.cache_root()
    (root / "xla").symlink_to(elsewhere)  # a whole folder replaced by a link
    files.cache_folder("kernels")
    (root / "kernels" / kept[1].name).symlink_to(kept[1])  # an entry's name on a link
    from jt_core import cache

    assert cache.info()["folders"]["xla"]["files"] == 0 and cache.info()["kernels"] == 0
    cache.clear()
    assert all(path.read_text() == "not jt's to delete" for path in kept)


def test_folders_jt_makes_are_private_whatever_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``umask 000`` the folders above the cache root used to be made world-writable (0777): anyone could
    then swap the root for a folder of their own between jt's check and its use."""
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "a" / "b" / "jt"))
    previous = os.umask(0)
    try:
        for purpose in files.PURPOSES:
            files.cache_folder(purpose)
        scratch = files.scratch_folder("native")
    finally:
        os.umask(previous)
    made = [tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "jt", scratch]
    made += [tmp_path / "a" / "b" / "jt" / purpose for purpose in files.PURPOSES]
    assert {str(path.relative_to(tmp_path)) if tmp_path in path.parents else "scratch": oct(_mode(path))
            for path in made if _mode(path) != 0o700} == {}  # fmt: skip


def _project_folder(root: Path) -> dict[Path, bytes]:
    """A project's own files in folders named like jt's (``JT_CACHE_DIR`` pointed at the project by mistake)."""
    theirs = {
        root / "plugins" / "setup.json": b'{"plugins": ["mine"]}',
        root / "native" / "libfast.so": b"\x7fELF their library",
        root / "native" / "build.log": b"their log",
        root / "triton" / "AAAA" / "kernel.cubin": b"their cubin",
        root / "xla" / "notes.json": b"[]",
        root / "xla" / "README.md": b"# their notes",
        root / "kernels" / "matmul.py": b"print('their code')",
        root / "vmap" / "example.py": b"x = 1",
        root / "autotune" / ".results.tmp": b"their temporary file, written long ago",
    }
    for path, data in theirs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(path.parent, 0o700)
        path.write_bytes(data)
    os.chmod(root, 0o700)
    long_ago = time.time() - 3 * files.STALE_SECONDS
    os.utime(root / "autotune" / ".results.tmp", (long_ago, long_ago))
    return theirs


def test_cache_clear_and_info_touch_only_jts_own_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jt_core import cache
    from jt_core.plugin import faults
    from jt_core.plugin.values import CompiledKernel, Target

    root = tmp_path / "project"
    theirs = _project_folder(root)
    monkeypatch.setenv("JT_CACHE_DIR", str(root))
    # jt's own files, one of each kind that these folders hold, written the way jt writes them.
    cache.store("12" * 32, CompiledKernel(name="k", target=Target("cpu", "interpreter", 1), binary=b"\0" * 64))
    integrity.write_record(files.cache_folder("xla") / ("34" * 32 + ".json"), {"accepted": True})
    integrity.write_record(faults.faults_file("some-plugin"), {"faults": []})
    files.write_file(files.cache_folder("native") / ("libjt_x-" + "5" * 24 + ".so"), b"\x7fELF jt's")
    summary = cache.info()["folders"]
    counted = {purpose: usage["files"] for purpose, usage in summary.items() if usage["files"]}
    assert counted == {"kernels": 1, "xla": 1, "plugins": 1, "native": 1}
    assert cache.clear() == 4
    assert {path: path.read_bytes() for path in theirs} == theirs


def test_tritons_files_count_only_in_a_triton_folder_jt_created(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    from jt_core import cache

    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "jt"))
    made = files.cache_folder("triton")
    assert files.created_by_jt(made)
    (made / "KEY").mkdir()
    (made / "KEY" / "k.cubin").write_bytes(b"triton's")
    assert cache.info()["folders"]["triton"]["files"] == 1
    assert cache.clear() == 1 and not (made / "KEY").exists()
