"""Autotuned calls lowered for ``cuda`` sm90 on a host without a GPU: configurations that need more shared memory
than the target has are skipped with one warning each, as Triton's autotuner skips them, and the call lowers with the
others; with none left the error lists each configuration and why."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import triton
from cuda_autotune_kernels import (
    grouped_matmul,
    matmul_configs,
    persistent_configs,
    persistent_matmul,
    persistent_matmul_kernel,
)
from cuda_testlib import lower_for_cuda

import jt_core as jt
from jt_core.testing import backend_config, custom_calls

#: Bytes of shared memory sm90 allows one block (its opt-in maximum).
SM90_SHARED = 227 * 1024


def lowered_labels(lowered: Any) -> list[str]:
    """The configuration labels of the one jt handler call of a lowered module."""
    (op,) = custom_calls(lowered)
    config = backend_config(op)
    return [config[f"label_{c}"].decode() for c in range(config["num_configs"])]


def labels(configs: list[Any], **fixed: Any) -> list[str]:
    """How jt labels the configurations (their constexprs in signature order, then the caller's, then options)."""
    return [
        ", ".join(
            [f"{k}={v!r}" for k, v in {**c.kwargs, **fixed}.items()]
            + [f"num_warps={c.num_warps}", f"num_stages={c.num_stages}"]
        )
        for c in configs
    ]


@pytest.mark.parametrize(
    ("call", "configs", "fixed", "oversized"),
    [(grouped_matmul, matmul_configs(), {}, [8]), (persistent_matmul, persistent_configs(), {"PROGRAMS": 132}, [0, 4])],
    ids=["grouped", "persistent"],
)
def test_configs_over_the_shared_memory_limit_are_skipped_not_fatal(
    call: Any, configs: list[Any], fixed: dict[str, Any], oversized: list[int]
) -> None:
    operand = jax.ShapeDtypeStruct((256, 256), jnp.float16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lowered = lower_for_cuda(lambda a, b: call(a, b, compute_capability=90), operand, operand)
    expected = labels(configs, **fixed)
    assert lowered_labels(lowered) == [label for i, label in enumerate(expected) if i not in oversized]
    skipped = [str(w.message) for w in caught if issubclass(w.category, jt.ConfigSkippedWarning)]
    assert len(skipped) == len(oversized)
    for index, message in zip(oversized, skipped):
        assert f"config [{expected[index]}] is skipped" in message
        needed = int(message.split(" needs ")[1].split(" bytes")[0])
        assert needed > SM90_SHARED and f"above the {SM90_SHARED} bytes" in message and "sm90" in message


def test_with_every_config_over_the_limit_the_error_lists_each() -> None:
    too_deep = [c for i, c in enumerate(persistent_configs()) if i in (0, 4)]
    kernel = triton.autotune(configs=too_deep, key=["M"])(persistent_matmul_kernel.fn)
    operand = jax.ShapeDtypeStruct((256, 256), jnp.float16)
    with pytest.raises(jt.NoUsableConfigError) as info:
        lower_for_cuda(lambda a, b: persistent_matmul(a, b, kernel, compute_capability=90), operand, operand)
    message = str(info.value)
    assert "no @triton.autotune config can run" in message
    for label in labels(too_deep, PROGRAMS=132):
        assert f"[{label}]: " in message
    assert message.count("bytes of shared memory per block") == 2
