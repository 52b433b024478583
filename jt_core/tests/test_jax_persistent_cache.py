"""With JAX's persistent compilation cache on, a second process compiles neither the kernel nor the XLA program.

On the CPU this holds for the ``ffi`` launcher (an XLA custom call; JAX never caches executables holding host
callbacks). The CUDA variant runs on a GPU machine.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax._src import monitoring
    events = []
    monitoring.register_event_listener(lambda name, **kw: events.append(name))
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    import jt_core as jt
    from jt_core import cache
    from jt_core.testing import sample_add_kernel
    launcher = sys.argv[2]
    x = jnp.arange(4096, dtype=jnp.float32)
    f = jax.jit(lambda a, b: jt.triton_call(a, b, kernel=sample_add_kernel, out_shape=a, grid=32, n=4096,
                                            BLOCK=128, launcher=launcher))
    out = f(x, x + 1)
    np.testing.assert_array_equal(np.asarray(out), 2 * np.arange(4096, dtype=np.float32) + 1)
    print(json.dumps({"cache_hits": events.count("/jax/compilation_cache/cache_hits"), "jt": cache.stats()}))
    """
)


def _two_processes(tmp_path: pathlib.Path, launcher: str) -> tuple[dict, dict]:
    env = {**os.environ, "JT_CACHE_DIR": str(tmp_path / "jt"), "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    env.pop("JT_DISABLE_CACHE", None)
    runs = []
    for _ in range(2):
        result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "jax"), launcher], env=env,
                                capture_output=True, text=True, check=True)  # fmt: skip
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
    return runs[0], runs[1]


def test_second_process_hits_jax_persistent_cache_on_cpu(tmp_path: pathlib.Path) -> None:
    first, second = _two_processes(tmp_path, "ffi")
    assert first["cache_hits"] == 0
    assert second["cache_hits"] >= 1, "the XLA program was compiled again: the lowering is not deterministic"


@pytest.mark.cuda
def test_second_process_compiles_neither_triton_nor_xla_on_cuda(tmp_path: pathlib.Path) -> None:
    first, second = _two_processes(tmp_path, "jt")
    assert first["cache_hits"] == 0 and first["jt"]["disk_writes"] == 1
    assert second["cache_hits"] >= 1, "the XLA program was compiled again"
    assert second["jt"]["disk_hits"] == 1 and second["jt"]["disk_writes"] == 0, "Triton compiled the kernel again"
