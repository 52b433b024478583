"""The examples in ``examples/`` run on the CPU backend and agree with ``jax.numpy``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "examples"
EXAMPLES = ("vector_add", "fused_softmax", "matmul_autotune", "layer_norm", "fused_attention")


@pytest.fixture(scope="module")
def examples() -> Any:
    sys.path.insert(0, str(EXAMPLES_DIR))
    try:
        yield {name: importlib.import_module(name) for name in (*EXAMPLES, "harness", "run_all")}
    finally:
        sys.path.remove(str(EXAMPLES_DIR))


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_cpu_path_matches_jax_numpy(
    examples: Any, name: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    for variable in ("JT_CPU_RACE_CHECK", "JT_LAUNCHER_CPU"):  # the default path, whatever the run around it
        monkeypatch.delenv(variable, raising=False)
    with caplog.at_level(logging.INFO, logger="jt_core.lowering"):
        result = examples[name].run(False)
    handed = [r.getMessage() for r in caplog.records if "launcher 'compiled' on cpu cannot express" in r.getMessage()]
    assert not handed, f"every example's kernels run on the compiled CPU path: {handed}"
    assert result["kernel"] == name
    assert result["platform"] == "cpu"
    assert np.isfinite(result["max_error"]) and result["max_error"] < 1e-2
    assert result["time_ms"] > 0


def test_vector_add_against_numpy_on_fresh_data(examples: Any) -> None:
    rng = np.random.default_rng(10)
    x = rng.standard_normal(3000).astype(np.float32)
    y = rng.standard_normal(3000).astype(np.float32)
    out = jax.jit(examples["vector_add"].add, static_argnames="block_size")(x, y, block_size=256)
    np.testing.assert_array_equal(np.asarray(out), x + y)


def test_matmul_autotune_against_numpy_float64(examples: Any) -> None:
    rng = np.random.default_rng(11)
    a = rng.standard_normal((40, 24)).astype(np.float16)
    b = rng.standard_normal((24, 56)).astype(np.float16)
    out = jax.jit(examples["matmul_autotune"].matmul)(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(np.asarray(out, np.float64), want, atol=2e-2, rtol=2e-3)


def test_layer_norm_gradient_matches_finite_differences(examples: Any) -> None:
    ln = examples["layer_norm"].layer_norm
    rng = np.random.default_rng(12)
    x = jnp.asarray(rng.standard_normal((6, 20)), jnp.float32)
    w = jnp.asarray(1.0 + 0.1 * rng.standard_normal(20), jnp.float32)
    b = jnp.asarray(0.1 * rng.standard_normal(20), jnp.float32)
    direction = jnp.asarray(rng.standard_normal((6, 20)), jnp.float32)

    def loss(x):
        return jnp.sum(jnp.sin(ln(x, w, b, 1e-5, 4)))

    grad = jax.grad(loss)(x)
    step = 1e-2
    numeric = (loss(x + step * direction) - loss(x - step * direction)) / (2 * step)
    np.testing.assert_allclose(float(jnp.vdot(grad, direction)), float(numeric), rtol=2e-2, atol=2e-2)


def test_check_close_rejects_wrong_results(examples: Any) -> None:
    check_close = examples["harness"].check_close
    want = np.linspace(-1.0, 1.0, 10)
    assert check_close("same", want.copy(), want, atol=0.0, rtol=0.0) == 0.0
    wrong = want.copy()
    wrong[3] += 0.5
    with pytest.raises(AssertionError, match=r"mismatch at \(3,\)"):
        check_close("wrong", wrong, want, atol=1e-3, rtol=1e-3)
    unwritten = want.copy()
    unwritten[7] = np.nan
    with pytest.raises(AssertionError, match="non-finite"):
        check_close("unwritten", unwritten, want, atol=1.0, rtol=1.0)


def test_run_all_prints_table_and_reports_failure(
    examples: Any, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    run_all = examples["run_all"]
    assert run_all.main(["--only", "vector_add"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["kernel", "platform", "max", "error"]
    assert table[2].split()[:3] == ["vector_add", "cpu", "0.00e+00"]

    def broken(platform_is_gpu: bool) -> dict[str, Any]:
        raise AssertionError("vector_add: mismatch")

    monkeypatch.setattr(examples["vector_add"], "run", broken)
    assert run_all.main(["--only", "vector_add"]) == 1
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "1 of 1 examples FAILED" in captured.err
