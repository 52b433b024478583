"""A call's static values (scalar operands, constexprs) count by their type and bits in every cache that holds
calls: ``-0.0`` and ``0.0`` (equal in Python) give two calls, and a NaN given again (unequal to itself in Python)
is the same call, whatever object holds it."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import core_kernels as k
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core.call import CallOptions, KernelCall, static_key
from jt_core.cpu import ffi_launcher
from jt_core.testing._calls import bind

RNG = np.random.default_rng(2024)
LAUNCHERS = ["ffi", "interpreter"]
F32_16 = jax.ShapeDtypeStruct((16,), np.float32)


def _fresh_nan() -> float:
    return float("nan")  # a new object on every call, as a computed NaN is


def _scale(x: jax.Array, factor: Any, launcher: str) -> jax.Array:
    return jt.triton_call(
        x, kernel=k.scale_kernel, out_shape=x, grid=1, n=x.size, factor=factor, BLOCK=16, launcher=launcher
    )


def _bound(factor: Any) -> KernelCall:
    return bind(k.scale_kernel, (F32_16,), {"n": 16, "factor": factor, "BLOCK": 16}, CallOptions(F32_16, grid=1))


@pytest.fixture
def backend_compiles() -> Iterator[list[str]]:
    """The XLA compiles made while the test runs (JAX reports each one's duration)."""
    events: list[str] = []

    def listen(event: str, duration: float, **kwargs: Any) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield events
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_an_eager_call_with_zero_after_one_with_negative_zero_uses_zero(launcher: str) -> None:
    x = jnp.asarray(RNG.uniform(0.5, 2.0, 16).astype(np.float32))
    for factor in (-0.0, 0.0, -0.0):
        got = np.asarray(_scale(x, factor, launcher))
        want = np.asarray(x) * np.float32(factor)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"factor={factor!r}")


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_a_nan_given_again_is_the_same_call(launcher: str, backend_compiles: list[str]) -> None:
    x = jnp.asarray(RNG.standard_normal(16).astype(np.float32))
    assert np.isnan(np.asarray(_scale(x, _fresh_nan(), launcher))).all()
    compiles, registered = len(backend_compiles), len(ffi_launcher.registry())
    for _ in range(3):
        assert np.isnan(np.asarray(_scale(x, _fresh_nan(), launcher))).all()
    assert len(backend_compiles) == compiles
    assert len(ffi_launcher.registry()) == registered


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (-0.0, 0.0),
        (1, 1.0),
        (1, True),
        (1.0, True),
        (np.float32(-0.0), np.float32(0.0)),
        (np.float32(2.0), 2.0),
        (np.float32(2.0), np.float64(2.0)),
        (np.int32(3), np.int64(3)),
        ((1, -0.0), (1, 0.0)),
        ((1,), [1]),
        (_fresh_nan(), -_fresh_nan()),  # a NaN of other bits
    ],
    ids=repr,
)
def test_values_equal_in_python_key_apart_by_type_or_bits(a: Any, b: Any) -> None:
    assert static_key(a) != static_key(b)


@pytest.mark.parametrize(
    "make",
    [_fresh_nan, lambda: np.float32("nan"), lambda: struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000123))[0]],
    ids=["float", "float32", "payload"],
)
def test_nans_of_equal_bits_key_alike(make: Any) -> None:
    assert static_key(make()) == static_key(make())
    assert hash(static_key(make())) == hash(static_key(make()))


@pytest.mark.parametrize(("a", "b"), [(-0.0, 0.0), (1, 1.0), (1, True), (2, 2.0), (np.float32(0.5), np.float64(0.5))])
def test_calls_with_values_equal_in_python_are_distinct_calls(a: Any, b: Any) -> None:
    assert _bound(a) != _bound(b)
    assert _bound(a) == _bound(a)


def test_calls_with_a_nan_made_twice_are_one_call() -> None:
    first, again = _bound(_fresh_nan()), _bound(_fresh_nan())
    assert first == again and hash(first) == hash(again)
    assert first.slots == again.slots


def _scaled_by_constexpr(factor: Any) -> KernelCall:
    kwargs = {"n": 16, "FACTOR": factor, "BLOCK": 16}
    return bind(k.scale_by_constexpr_kernel, (F32_16,), kwargs, CallOptions(F32_16, grid=1))


def _specialization_key(call: KernelCall) -> Any:
    return call.specialization(call.configs[0]).key()


@pytest.mark.parametrize(("a", "b"), [(-0.0, 0.0), (2, 2.0), (1.0, True)])
def test_constexprs_equal_in_python_specialise_apart(a: Any, b: Any) -> None:
    assert _specialization_key(_scaled_by_constexpr(a)) != _specialization_key(_scaled_by_constexpr(b))


def test_constexpr_nans_made_twice_specialise_alike() -> None:
    first, again = _scaled_by_constexpr(_fresh_nan()), _scaled_by_constexpr(_fresh_nan())
    assert first == again
    assert _specialization_key(first) == _specialization_key(again)
