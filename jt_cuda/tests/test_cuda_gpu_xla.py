"""On an NVIDIA GPU: calls lowered to XLA's Triton call (launcher ``xla``) compute what the ``jt`` launcher does."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
from cuda_testlib import add_call

import jt_core as jt
from jt_core.gpu.xla import TARGET_NAME, probe_records
from jt_core.testing import (
    accumulate_kernel,
    autotuned_scale_inplace_kernel,
    custom_calls,
    out_first_kernel,
    scale_inplace_kernel,
)

pytestmark = pytest.mark.cuda

N = 4096


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "jt"))
    return tmp_path / "jt"


def rand(seed: int, shape: tuple[int, ...] = (N,)) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape), jnp.float32)


def test_an_add_runs_through_xla_and_is_lowered_there() -> None:
    x, y = rand(0), rand(1)
    f = jax.jit(lambda x, y: add_call(x, y, launcher="xla"))
    assert len(custom_calls(f.lower(x, y), TARGET_NAME)) == 1
    np.testing.assert_allclose(np.asarray(f(x, y)), np.asarray(x) + np.asarray(y), rtol=1e-6)


def test_output_declared_first_and_scalars_baked_in() -> None:
    x = rand(2)
    out = jax.jit(
        lambda x: jt.triton_call(
            x_ptr=x, scale=-1.75, kernel=out_first_kernel, out_shape=x, grid=N // 128, n=N, BLOCK=128,
            launcher="xla",
        )
    )(x)  # fmt: skip
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) * -1.75, rtol=1e-6)


def test_an_aliased_output_updates_the_donated_buffer() -> None:
    x = rand(3)
    expected = np.asarray(x) * 3.0
    f = jax.jit(
        lambda x: jt.triton_call(
            x, N, 3.0, kernel=scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0}, grid=N // 128,
            BLOCK=128, launcher="xla",
        ),
        donate_argnums=0,
    )  # fmt: skip
    np.testing.assert_allclose(np.asarray(f(x)), expected, rtol=1e-6)


def test_a_zeroed_output_starts_at_zero() -> None:
    x = rand(4)
    f = jax.jit(
        lambda x: jt.triton_call(
            x, kernel=accumulate_kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.float32), zeroed_outputs=(0,),
            grid=N // 128, n=N, BLOCK=128, launcher="xla",
        )
    )  # fmt: skip
    for _ in range(2):  # twice: the buffer is zeroed on every call, not once
        np.testing.assert_allclose(np.asarray(f(x))[0], np.asarray(x, np.float64).sum(), rtol=1e-4, atol=1e-3)


def test_an_autotuned_call_is_tuned_before_lowering_and_remembered(
    private_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, N, 2.0, kernel=autotuned_scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=lambda meta: (triton.cdiv(N, meta["BLOCK"]),), launcher="xla",
        )  # fmt: skip

    x = rand(5)
    with caplog.at_level(logging.INFO, logger="jt_core.lowering"):
        first = jax.jit(f)
        assert len(custom_calls(first.lower(x), TARGET_NAME)) == 1
    assert any("tuning 3 configurations with launcher 'jt'" in r.getMessage() for r in caplog.records)
    assert len(list((private_cache / "autotune").glob("*.json"))) == 1
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jt_core.lowering"):
        again = jax.jit(lambda x: f(x) + 0)
        np.testing.assert_allclose(np.asarray(again(x)), np.asarray(x) * 2.0, rtol=1e-6)
    assert not any("tuning" in r.getMessage() for r in caplog.records)  # the remembered winner


def test_clusters_run_through_the_jt_launcher() -> None:
    x, y = rand(6), rand(7)
    f = jax.jit(lambda x, y: add_call(x, y, launcher="xla", num_ctas=2))
    assert custom_calls(f.lower(x, y), TARGET_NAME) == []
    np.testing.assert_allclose(np.asarray(f(x, y)), np.asarray(x) + np.asarray(y), rtol=1e-6)


def test_vmap_batches_through_xla() -> None:
    x, y = rand(8, (4, N)), rand(9, (4, N))
    out = jax.jit(jax.vmap(lambda x, y: add_call(x, y, launcher="xla")))(x, y)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) + np.asarray(y), rtol=1e-6)


def test_each_kernel_is_compiled_once_by_xla_on_its_own_and_recorded(private_cache: Path) -> None:
    x, y = rand(10), rand(11)
    jax.jit(lambda x, y: add_call(x, y, block=256, launcher="xla"))(x, y).block_until_ready()
    records = probe_records()
    assert len(records) == 1 and records[0]["accepted"] and records[0]["kernel"] == "sample_add_kernel"
    assert records[0]["seconds"] > 0
    jax.jit(lambda x, y: add_call(x, y, block=256, launcher="xla") * 1)(x, y).block_until_ready()
    assert len(probe_records()) == 1  # the same kernel again: the record answers


def test_without_the_probe_nothing_is_recorded(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_XLA_PROBE", "0")
    x, y = rand(12), rand(13)
    out = jax.jit(lambda x, y: add_call(x, y, block=512, launcher="xla"))(x, y)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) + np.asarray(y), rtol=1e-6)
    assert probe_records() == []


def test_an_exported_call_runs_from_its_serialized_form() -> None:
    from jax import export

    x, y = rand(14), rand(15)
    exported = export.export(
        jax.jit(lambda x, y: add_call(x, y, launcher="xla")),
        disabled_checks=[export.DisabledSafetyCheck.custom_call(TARGET_NAME)],
    )(x, y)
    restored = export.deserialize(exported.serialize())
    assert TARGET_NAME in restored.mlir_module() and "triton_kernel_call_jt_cuda" not in restored.mlir_module()
    np.testing.assert_allclose(np.asarray(restored.call(x, y)), np.asarray(x) + np.asarray(y), rtol=1e-6)
