"""jt's cache across processes: one clearing it while another works, a library broken between two processes, work
done once per machine, builds that cannot happen, the temporary files of killed builds, and a second virtualenv."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core import cache, files, native
from jt_core.cpu.ffi_launcher import WITHOUT_HANDLER
from jt_core.testing._concurrency import distinct_kernels

needs_compiler = pytest.mark.skipif(shutil.which("c++") is None, reason="needs a C++ compiler")


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "jt-cache"
    monkeypatch.setenv("JT_CACHE_DIR", str(root))
    monkeypatch.delenv("JT_DISABLE_CACHE", raising=False)
    return root


#: The libraries these tests build and break are the ones built on the machine, not those a platform wheel carries.
BUILT_HERE = {"JT_PREBUILT_NATIVE": "0"}


def _python(script: str, cache_root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "JT_STRICT_PLUGINS"} | {"JT_CACHE_DIR": str(cache_root)}
    full |= BUILT_HERE
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=full | env, capture_output=True,
                          text=True, timeout=300)  # fmt: skip


def test_cache_clear_in_another_process_leaves_vmapped_calls_working(tmp_path: Path, cache_root: Path) -> None:
    (kernel,) = distinct_kernels(tmp_path, "cleared", 1)
    x = np.random.default_rng().standard_normal((3, 32)).astype(np.float32)

    def scale(v: jax.Array) -> jax.Array:
        return jt.triton_call(v, 32, kernel=kernel, out_shape=v, grid=2, BLOCK=16)

    traced = jax.jit(jax.vmap(scale)).trace(jnp.asarray(x))  # generates the batching wrapper and its file
    assert list((cache_root / "vmap").glob("*.py"))
    cleared = subprocess.run([sys.executable, "-m", "jt_core", "cache", "clear"], capture_output=True, text=True,
                             env={**os.environ, "JT_CACHE_DIR": str(cache_root)})  # fmt: skip
    assert cleared.returncode == 0 and "removed" in cleared.stdout, cleared.stderr
    assert not list((cache_root / "vmap").glob("*.py"))
    out = traced.lower().compile()(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), x * 2 + 1, rtol=1e-6)


def test_a_vmap_file_that_is_not_utf8_is_replaced(tmp_path: Path, cache_root: Path) -> None:
    (kernel,) = distinct_kernels(tmp_path, "garbled", 1)
    x = np.random.default_rng().standard_normal((2, 32)).astype(np.float32)

    def scale(v: jax.Array) -> jax.Array:
        return jt.triton_call(v, 32, kernel=kernel, out_shape=v, grid=2, BLOCK=16)

    jax.jit(jax.vmap(scale)).trace(jnp.asarray(x))
    (source,) = (cache_root / "vmap").glob("*.py")
    text = source.read_bytes()
    source.write_bytes(b"\xff\xfe\x00garbage" + text[11:])
    from jt_core import batching

    batching._wrappers.cache_clear()  # as a new process finds it
    out = jax.jit(jax.vmap(scale))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(out), x * 2 + 1, rtol=1e-6)
    assert source.read_bytes() == text


_PROBE = 'extern "C" int jt_probe_value(int x) {{ return x * {factor} + 7; }}\n'


@needs_compiler
def test_a_truncated_library_is_built_again_by_the_next_process(tmp_path: Path, cache_root: Path) -> None:
    """A library cut short on disk used to kill the next process that loaded it (SIGBUS)."""
    factor = int(np.random.default_rng().integers(2, 1000))
    source = tmp_path / "probe.cc"
    source.write_text(_PROBE.format(factor=factor))
    script = f"""
        import ctypes
        from jt_core.native import LibrarySpec
        lib = LibrarySpec("jt_probe", ({str(source)!r},)).build()
        print(lib.built, ctypes.CDLL(str(lib.path)).jt_probe_value(5))
    """
    first = _python(script, cache_root)
    assert first.returncode == 0 and first.stdout.split() == ["True", str(5 * factor + 7)], first.stderr
    (library,) = (cache_root / "native").glob("libjt_probe-*.so")
    library.write_bytes(library.read_bytes()[: library.stat().st_size // 3])
    second = _python(script, cache_root)
    assert second.returncode == 0, f"exit {second.returncode}: {second.stderr}"
    assert second.stdout.split() == ["True", str(5 * factor + 7)]
    assert "is unusable" in second.stderr and "built again instead of being loaded" in second.stderr


@needs_compiler
def test_an_emptied_cpu_handler_is_built_again_not_skipped(cache_root: Path) -> None:
    """The CPU backend's handler library, emptied between two processes: the second process builds it again and
    uses it, instead of silently falling back to the interpreter through host callbacks. (Garbage of the right size
    is in the fault matrix of test_cache_faults.)"""
    x = np.random.default_rng().standard_normal(32).astype(np.float32)
    np.save(cache_root.parent / "x.npy", x)
    script = f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import jax, jax.numpy as jnp, numpy as np
        import jt_core as jt
        from jt_core.plugin.registry import get_registry
        import core_kernels as k
        x = jnp.asarray(np.load({str(cache_root.parent / "x.npy")!r}))
        out = jax.jit(lambda a: jt.triton_call(a, a, 32, kernel=k.add_kernel, out_shape=a, grid=2, BLOCK=16))(x)
        np.testing.assert_array_equal(np.asarray(out), 2 * np.asarray(x))
        print(get_registry().launcher("cpu").name)
    """
    first = _python(script, cache_root)
    assert first.returncode == 0 and first.stdout.split()[-1] == "compiled", first.stderr
    (library,) = (cache_root / "native").glob("libjt_cpu_interpreter_call-*.so")
    size = library.stat().st_size
    library.write_bytes(b"")
    second = _python(script, cache_root)
    assert second.returncode == 0, second.stderr
    assert second.stdout.split()[-1] == "compiled", second.stderr
    assert "is unusable" in second.stderr and "jt: building jt_cpu_interpreter_call" in second.stderr
    assert library.stat().st_size == size


_SLOW_BACKEND = """
    import hashlib, os, sys, time
    from pathlib import Path
    from jt_core import cache
    from jt_core.plugin.roles import Backend
    from jt_core.plugin.values import CompiledKernel, Target
    from jt_core.testing._calls import compile_request, sample_call
    from jt_core.triton_dialect import TritonDialect

    class SlowBackend(Backend):
        platform = "slow"

        def may_keep_on_disk(self, request):
            return True

        def target(self):
            return Target("slow", 90, 32)

        def compile(self, request):
            with open(sys.argv[1], "a") as log:
                log.write(f"{os.getpid()}\\n")
            time.sleep(0.5)
            return CompiledKernel(name=request.call.name, target=request.target, binary=os.urandom(256), asm={},
                                  metadata={}, num_warps=4, shared_mem=0, cluster_dims=(1, 1, 1))

    Path(sys.argv[2] + f".ready-{os.getpid()}").touch()
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.005)
    backend = SlowBackend()
    call = sample_call(BLOCK=64)
    kernel = cache.compile_cached(compile_request(backend, call))
    print(hashlib.sha256(kernel.binary).hexdigest())
"""


def _release_together(procs: list[subprocess.Popen[str]], start: Path) -> None:
    """Waits until every process has imported jt and stands at the start line (``<start>.ready-<pid>``), then
    releases them at once."""
    deadline = time.monotonic() + 120
    while len(list(start.parent.glob(start.name + ".ready-*"))) < len(procs):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a process did not start"
        time.sleep(0.01)
    start.touch()


def test_processes_compiling_one_kernel_at_once_compile_it_once(tmp_path: Path, cache_root: Path) -> None:
    log, start = tmp_path / "compiles.log", tmp_path / "start"
    env = {k: v for k, v in os.environ.items() if k != "JT_STRICT_PLUGINS"} | {"JT_CACHE_DIR": str(cache_root)}
    script = textwrap.dedent(_SLOW_BACKEND)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(log), str(start)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    _release_together(procs, start)
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    assert len(log.read_text().split()) == 1, "more than one process compiled the kernel"
    assert len({out.split()[-1] for out, _ in results}) == 1, "the processes got different binaries"


@needs_compiler
def test_a_build_that_fails_says_so_once_and_plugins_shows_it(tmp_path: Path, cache_root: Path) -> None:
    compiler = tmp_path / "failing-c++"
    compiler.write_text(
        '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "failing-c++ 1.0"; exit 0; fi\n'
        'echo "probe.cc:1: error: the compiler was told to fail" >&2\nexit 3\n'
    )
    compiler.chmod(compiler.stat().st_mode | stat.S_IEXEC)
    script = """
        import jax, jax.numpy as jnp, numpy as np
        import jt_core as jt
        from jt_core.testing import sample_add_kernel
        x = jnp.asarray(np.random.default_rng().standard_normal(64), jnp.float32)
        f = jax.jit(lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32))
        np.testing.assert_array_equal(np.asarray(f(x)), 2 * np.asarray(x))
    """
    ran = _python(script, cache_root, CXX=str(compiler))
    assert ran.returncode == 0, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.startswith("jt: ")]
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("jt: building jt_cpu_interpreter_call for this machine")
    assert "... failed (exit 3: probe.cc:1: error: the compiler was told to fail)" in lines[0]
    assert f"; without it, {WITHOUT_HANDLER}" in lines[0]
    env = {**os.environ, **BUILT_HERE, "JT_CACHE_DIR": str(cache_root), "CXX": str(compiler)}
    listing = subprocess.run(
        [sys.executable, "-m", "jt_core", "plugins"], capture_output=True, text=True, env=env
    ).stdout
    assert "not built: the last build failed: exit 3: probe.cc:1: error: the compiler was told to fail" in listing


def test_without_a_compiler_one_line_says_what_jt_does_instead(cache_root: Path) -> None:
    script = """
        import jax, jax.numpy as jnp, numpy as np
        import jt_core as jt
        from jt_core.testing import sample_add_kernel
        x = jnp.asarray(np.random.default_rng().standard_normal(64), jnp.float32)
        f = jax.jit(lambda a: jt.triton_call(a, a, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32))
        np.testing.assert_array_equal(np.asarray(f(x)), 2 * np.asarray(x))
        np.testing.assert_array_equal(np.asarray(f(x + 1)), 2 * np.asarray(x + 1))
    """
    ran = _python(script, cache_root, CXX="/nonexistent/c++")
    assert ran.returncode == 0, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.startswith("jt: ")]
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith(
        "jt: cannot build jt_cpu_interpreter_call: CXX='/nonexistent/c++' does not name an executable compiler"
    )
    assert lines[0].endswith(f"; without it, {WITHOUT_HANDLER}")


@needs_compiler
def test_a_killed_build_leaves_no_temporary_file_for_ever(tmp_path: Path, cache_root: Path) -> None:
    source = tmp_path / "probe.cc"
    source.write_text(_PROBE.format(factor=3))
    spec = native.LibrarySpec("jt_probe", (source,))
    target = spec.build().path
    folder = target.parent
    own = folder / f".{target.name}.k1ll3d.tmp"  # this library's build, killed: no live builder holds its lock
    old = folder / ".libjt_other-0123456789ab.so.abcdef.tmp"  # another library's, killed two days ago
    young = folder / ".libjt_other-0123456789ab.so.ghijkl.tmp"  # another library's build at work
    for path in (own, old, young):
        path.write_bytes(b"partial output")
    past = time.time() - 2 * 86400
    os.utime(old, (past, past))
    target.unlink()
    assert spec.build().built
    assert not own.exists() and not old.exists() and young.exists()


@needs_compiler
def test_a_second_virtualenv_finds_the_library_the_first_one_built(tmp_path: Path, cache_root: Path) -> None:
    """The key holds the contents of the include folders, not their paths, which differ between virtualenvs."""
    from jt_core.cpu import ffi_launcher

    spec = ffi_launcher.library_spec()
    first = spec.build()
    elsewhere = tmp_path / "other-venv" / "site-packages" / "jaxlib" / "include"
    shutil.copytree(spec.include_dirs[0], elsewhere)
    source = tmp_path / "other-venv" / "site-packages" / "jt_core" / spec.sources[0].name
    source.parent.mkdir(parents=True)
    shutil.copy(spec.sources[0], source)
    moved = native.LibrarySpec(spec.name, (source,), include_dirs=(str(elsewhere),))
    second = moved.build()
    assert not second.built and second.path == first.path
    (elsewhere / "xla" / "ffi" / "api" / "ffi.h").write_text("// another jaxlib's header\n")
    assert moved.status().path is None, "a header that changed must change the key"


def test_cache_info_and_clear_cover_tritons_files_under_jts_folder(cache_root: Path) -> None:
    triton_folder = files.cache_folder("triton")
    blobs = {triton_folder / key / name: os.urandom(64) for key in ("AAAA", "BBBB") for name in ("k.cubin", "k.json")}
    for path, data in blobs.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
    summary = cache.info()["folders"]["triton"]
    assert summary["files"] == 4 and summary["bytes"] == 4 * 64
    assert cache.clear() >= 4
    assert [p.name for p in triton_folder.iterdir()] == [files.MARKER]  # jt's mark of a folder it created stays
