"""A test session leaves the user's caches as it found them: jt_core.testing points ``JT_CACHE_DIR`` and
``TRITON_CACHE_DIR`` at folders of the session's own, for its xdist workers and the processes its tests start too."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jt_core.testing import TEST_CACHE_VARIABLE

ROOT = Path(__file__).resolve().parents[2]

# Everything that writes a cache entry: both CPU paths, a batching wrapper, a tuning winner, a kernel the compiled
# path hands to the interpreter (its record is what `python -m jt_core cpu` lists), a process a test starts, and a
# compile for CUDA where jt-cuda is installed (Triton's own cache).
SLICE = textwrap.dedent(
    """
    import os
    import subprocess
    import sys

    import jax
    import jax.numpy as jnp
    import numpy as np
    import pytest
    import triton
    import triton.language as tl

    import jt_core as jt
    from jt_core.testing import sample_add_kernel
    from jt_core.testing.markers import installed_plugins

    X = jnp.asarray(np.random.default_rng(0).standard_normal(64), jnp.float32)


    def add(x, **options):
        return jt.triton_call(x, x, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32, **options)


    @triton.jit
    def printing_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, BLOCK))
        tl.device_print("x", x)
        tl.store(out_ptr + tl.arange(0, BLOCK), x)


    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
    @triton.jit
    def tuned_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


    @pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
    def test_both_cpu_paths(launcher):
        np.testing.assert_allclose(jax.jit(lambda x: add(x, launcher=launcher))(X), 2 * np.asarray(X), rtol=1e-6)


    def test_vmap_wrapper():
        np.testing.assert_allclose(jax.vmap(add)(X[None])[0], 2 * np.asarray(X), rtol=1e-6)


    def test_tuning_winner(monkeypatch):
        monkeypatch.setenv("JT_CPU_AUTOTUNE", "1")
        grid = lambda meta: (jt.cdiv(64, meta["BLOCK"]),)
        out = jt.triton_call(X, kernel=tuned_copy_kernel, out_shape=X, grid=grid, n=64)
        np.testing.assert_array_equal(out, X)


    def test_handed_over_kernel():
        out = jt.triton_call(X[:16], kernel=printing_kernel, out_shape=X[:16], grid=1, BLOCK=16)
        np.testing.assert_array_equal(out, X[:16])


    def test_process_started_by_a_test():
        script = (
            "import jax.numpy as jnp, jt_core as jt; from jt_core.testing import sample_add_kernel as k"
            "; x = jnp.ones(8); print(jt.triton_call(x, x, kernel=k, out_shape=x, grid=1, n=8, BLOCK=8))"
        )
        subprocess.run([sys.executable, "-c", script], env=os.environ, check=True, capture_output=True)


    @pytest.mark.skipif("cuda" not in installed_plugins(), reason="jt-cuda is not installed")
    def test_cuda_compile():
        spec = jax.ShapeDtypeStruct((64,), jnp.float32)
        jax.jit(lambda x: add(x, compute_capability=90)).trace(spec).lower(lowering_platforms=("cuda",))
    """
)

# Tests of the suite itself, one per CPU path and kind of work.
SUITE_TESTS = [
    "jt_core/tests/test_call_behaviour.py::test_classic_convention_appends_outputs_after_inputs",
    "jt_core/tests/test_vmap_strategies.py::test_grid_strategy_batches_on_a_free_axis_in_one_launch",
    "jt_core/tests/test_cpu_compiled.py::test_loops_and_branches_that_depend_on_loaded_values_run_compiled",
]


def _snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` with what it holds (a file's SHA-256, ``dir`` for a folder)."""
    return {
        str(path.relative_to(folder)): "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
    }


def test_a_session_leaves_the_users_caches_as_it_found_them(tmp_path: Path) -> None:
    """Home, ``$XDG_CACHE_HOME``, and the ``JT_CACHE_DIR`` and ``TRITON_CACHE_DIR`` the user set keep exactly what
    they held (a file of the user's in each cache) after a session that compiles, tunes, batches, hands a kernel to
    the interpreter and starts a process, in an xdist worker where xdist is installed."""
    home = tmp_path / "home"
    user = {"HOME": home, "XDG_CACHE_HOME": home / "xdg", "JT_CACHE_DIR": home / "jt", "TRITON_CACHE_DIR": home / "t"}
    for variable in ("JT_CACHE_DIR", "TRITON_CACHE_DIR"):
        user[variable].mkdir(parents=True, mode=0o700)
        (user[variable] / "notes.txt").write_text("the user's own")
    (tmp_path / "test_caches_slice.py").write_text(SLICE)
    before = _snapshot(home)
    env = {key: value for key, value in os.environ.items() if not key.startswith("JT_TEST_")}
    env |= {name: str(path) for name, path in user.items()}
    workers = ["-n", "1"] if importlib.util.find_spec("xdist") else []
    result = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", str(ROOT / "pyproject.toml"),
         "--rootdir", str(ROOT), *workers, str(tmp_path / "test_caches_slice.py"), *SUITE_TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout
    assert _snapshot(home) == before


def test_jt_test_cache_dir_keeps_the_sessions_caches(tmp_path: Path) -> None:
    """With ``JT_TEST_CACHE_DIR`` set, the session's caches go there, and stay after it ends."""
    (tmp_path / "test_kept_slice.py").write_text(
        "import jax.numpy as jnp\nfrom jt_core.testing import sample_add_kernel\nimport jt_core as jt\n\n"
        "def test_call():\n"
        "    x = jnp.arange(64.0)\n"
        "    out = jt.triton_call(x, x, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32)\n"
        "    assert float(out[3]) == 6\n"
    )
    kept = tmp_path / "kept"
    env = {key: value for key, value in os.environ.items() if not key.startswith("JT_TEST_")}
    env |= {TEST_CACHE_VARIABLE: str(kept), "HOME": str(tmp_path / "home")}
    result = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "jt_core.testing",
         str(tmp_path / "test_kept_slice.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert list((kept / "jt" / "kernels").glob("*.jtk")), sorted(p.name for p in kept.rglob("*"))
    assert not (tmp_path / "home").exists()


@pytest.mark.parametrize("variable", ["JT_CACHE_DIR", "TRITON_CACHE_DIR"])
def test_this_session_runs_in_folders_of_its_own(variable: str) -> None:
    """The session running this test has its caches in the folder it chose, not the user's."""
    assert os.environ[variable].endswith(os.sep + {"JT_CACHE_DIR": "jt", "TRITON_CACHE_DIR": "triton"}[variable])
    assert Path(os.environ["JT_TEST_SESSION_CACHE_DIR"]) == Path(os.environ[variable]).parent
