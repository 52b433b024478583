"""Constexpr values equal in Python but of different types (``2`` and ``2.0``) or bits (``-0.0`` and ``0.0``) compile
to different kernels: a kernel computes with the constexpr's type (integer arithmetic that wraps, or float
arithmetic) and value, so one process must not reuse the kernel compiled for one value for the other. A NaN, unequal
to itself in Python, finds the kernel compiled for a NaN of the same bits."""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import pytest
import triton
import triton.language as tl
from cuda_testlib import lower_for_cuda

import jt_core as jt
from jt_core import cache
from jt_core.testing import backend_config, custom_calls


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, (tl.load(x_ptr + offsets, mask=mask) * FACTOR).to(tl.float32), mask=mask)


@pytest.fixture(autouse=True)
def private_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "cache"))
    cache.clear_memory()


def _binary(factor: object) -> bytes:
    out = jax.ShapeDtypeStruct((64,), jnp.float32)
    lowered = lower_for_cuda(
        lambda x: jt.triton_call(
            x, kernel=scale_kernel, out_shape=out, grid=1, n=64, FACTOR=factor, BLOCK=64, compute_capability=90
        ),
        jax.ShapeDtypeStruct((64,), jnp.int32),
    )
    (op,) = custom_calls(lowered, "triton_kernel_call_jt_cuda") + custom_calls(
        lowered, "triton_kernel_call_jt_cuda_preloaded"
    )
    return bytes(backend_config(op)["binary_0"])


def test_int_and_float_constexprs_of_equal_value_compile_apart() -> None:
    as_int = _binary(2)
    as_float = _binary(2.0)
    assert as_int != as_float
    cache.clear_memory()
    assert _binary(2.0) == as_float  # what a process that only ever saw 2.0 compiles


def test_negative_and_positive_zero_constexprs_compile_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    negative, positive = _binary(-0.0), _binary(0.0)
    assert cache.compiled_count(scale_kernel) == 2  # neither was handed the other's kernel
    monkeypatch.setenv("JT_DISABLE_CACHE", "1")
    cache.clear_memory()
    assert _binary(0.0) == positive  # what a process that only ever saw 0.0 compiles
    assert _binary(-0.0) == negative


def test_a_nan_constexpr_given_again_is_found_in_memory() -> None:
    first = _binary(float("nan"))
    hits = cache.stats()["memory_hits"]
    assert _binary(float("nan")) == first
    assert cache.stats()["memory_hits"] > hits
