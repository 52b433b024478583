"""jt's own calls print no warning: a fresh process runs them with every warning turned into an error."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import warnings
    warnings.simplefilter("error")
    import jax, jax.numpy as jnp, numpy as np
    import jt_core as jt
    from jt_core.testing import sample_add_kernel

    def add(launcher=None, **options):
        def call(x, y):
            return jt.triton_call(
                x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32, launcher=launcher, **options
            )
        return call

    x = jnp.asarray(np.random.default_rng(0).standard_normal(64), jnp.float32)
    np.testing.assert_allclose(jax.jit(add())(x, x), 2 * np.asarray(x), rtol=1e-6)
    np.testing.assert_allclose(jax.jit(jax.vmap(add()))(x[None], x[None])[0], 2 * np.asarray(x), rtol=1e-6)
    spec = jax.ShapeDtypeStruct((64,), jnp.float32)
    for platform, options in (("cuda", {"compute_capability": 90}), ("rocm", {"backend_options": {"arch": "gfx942"}})):
        for launcher in ("jt", "xla"):
            jax.jit(add(launcher, **options)).trace(spec, spec).lower(lowering_platforms=(platform,))
    print("no warnings")
    """
)


def test_jt_calls_print_no_warning() -> None:
    # Triton's switches are left out (TRITON_DEFAULT_FP_FUSION would silence a warning), but not its cache folder,
    # which the test session points at a folder of its own.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TRITON_", "PYTHONWARNINGS")) or key == "TRITON_CACHE_DIR"
    }
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", _SCRIPT], capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no warnings" in result.stdout
    assert "Warning" not in result.stderr
    assert "nanobind: leaked" not in result.stderr  # native objects kept past the interpreter's teardown
