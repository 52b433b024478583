"""``None`` as a kernel argument means what it means to Triton: the parameter is specialised as a constant ``None``,
which ``is None`` tests and heuristics see at compile time, with no argument passed for it; ``None`` where the
kernel needs a value is refused, naming the parameter."""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

import core_library_kernels as lib
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core import tuning
from jt_core.call import SCALAR, KernelCall


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    # Random data, seeded per test so that a failure reproduces.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


@triton.jit
def scale_rows_classic_kernel(x_ptr, w_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    if w_ptr is not None:
        x = x * tl.load(w_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x, mask=mask)


@triton.jit
def weighted_unguarded_kernel(x_ptr, w_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * tl.load(w_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def scaled_unguarded_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale, mask=mask)


@triton.jit
def pair_kernel(pair, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(pair[0] + offsets, mask=mask)
    if pair[1] is not None:
        x = x + tl.load(pair[1] + offsets, mask=mask)
    tl.store(out_ptr + offsets, x, mask=mask)


def _scale_rows(x: Any, w: Any, **options: Any) -> Any:
    return jt.triton_call(
        x, w, x.size, kernel=scale_rows_classic_kernel, out_shape=x, grid=triton.cdiv(x.size, 16), BLOCK=16, **options
    )


def _bound_call(fn: Any, *args: Any) -> KernelCall:
    """The `KernelCall` that ``fn(*args)`` binds."""
    eqns = jax.make_jaxpr(fn)(*args).eqns
    return next(e.params["call"] for e in eqns if "call" in e.params)


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_none_fills_a_pointer_positionally_in_the_classic_convention(rng: np.random.Generator, launcher: str) -> None:
    x = rng.standard_normal(40).astype(np.float32)
    got = _scale_rows(jnp.asarray(x), None, launcher=launcher)
    np.testing.assert_array_equal(np.asarray(got), x)


def test_none_and_an_array_for_one_parameter_are_two_calls(rng: np.random.Generator) -> None:
    x, w = rng.standard_normal(40).astype(np.float32), rng.standard_normal(40).astype(np.float32)

    @jax.jit
    def both(x: Any, w: Any) -> tuple[Any, Any]:
        return _scale_rows(x, None), _scale_rows(x, w)

    plain, weighted = both(x, w)
    np.testing.assert_array_equal(np.asarray(plain), x)
    np.testing.assert_allclose(np.asarray(weighted), x * w, rtol=1e-6)
    # A zero is a number, not None: a third specialisation (bound only; the kernel loads through w_ptr).
    absent = _bound_call(lambda x: _scale_rows(x, None), x)
    keys = {absent.specialization(absent.configs[0]).key()}
    for other in (_bound_call(lambda x, w: _scale_rows(x, w), x, w), _bound_call(lambda x: _scale_rows(x, 0), x)):
        keys.add(other.specialization(other.configs[0]).key())
        assert other != absent
    assert len(keys) == 3
    slot = next(s for s in absent.slots if s.name == "w_ptr")
    assert (slot.kind, slot.type_str, slot.value) == (SCALAR, "constexpr", None)


@pytest.mark.parametrize("has_weight", [False, True], ids=["no weight", "weight"])
def test_rms_norm_forward_with_an_optional_weight(rng: np.random.Generator, has_weight: bool) -> None:
    x = rng.standard_normal((6, 40)).astype(np.float32)
    w = rng.standard_normal(40).astype(np.float32) if has_weight else None
    y, rstd = lib.rms_norm_forward(jnp.asarray(x), None if w is None else jnp.asarray(w), 1e-6, 0.25)
    want_y, want_rstd = lib.rms_norm_reference(x, w, 1e-6, 0.25)
    np.testing.assert_allclose(np.asarray(y), want_y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(rstd), want_rstd, rtol=1e-5)


@pytest.mark.parametrize("has_weight", [False, True], ids=["no weight and no weight gradient", "weight"])
def test_rms_norm_backward_with_an_absent_weight_and_weight_gradient(
    rng: np.random.Generator, has_weight: bool
) -> None:
    x, dy = rng.standard_normal((7, 24)).astype(np.float32), rng.standard_normal((7, 24)).astype(np.float32)
    w = rng.standard_normal(24).astype(np.float32) if has_weight else None
    _, rstd = lib.rms_norm_reference(x, w, 1e-6, 0.5)
    dx, dw = lib.rms_norm_backward(
        jnp.asarray(dy), jnp.asarray(x), None if w is None else jnp.asarray(w), rstd.astype(np.float32), 0.5, 3
    )
    want_dx, want_dw = lib.rms_norm_backward_reference(dy, x, w, 1e-6, 0.5)
    np.testing.assert_allclose(np.asarray(dx), want_dx, rtol=1e-4, atol=1e-5)
    if has_weight:
        np.testing.assert_allclose(np.asarray(dw), want_dw, rtol=1e-4, atol=1e-5)
    else:
        assert dw is None


@pytest.mark.parametrize(
    ("has_weight", "softcap", "z_loss", "gradients"),
    [(False, None, False, False), (True, 4.0, True, True), (False, 3.0, True, False)],
    ids=["all absent", "all present", "softcap and z-loss"],
)
def test_cross_entropy_with_absent_weight_softcap_and_outputs(
    rng: np.random.Generator, has_weight: bool, softcap: float | None, z_loss: bool, gradients: bool
) -> None:
    rows, vocab = 6, 40
    logits = (3 * rng.standard_normal((rows, vocab))).astype(np.float32)
    target = rng.integers(0, vocab, rows).astype(np.int32)
    weight = rng.uniform(0.5, 2.0, vocab).astype(np.float32) if has_weight else None
    got = lib.cross_entropy(
        jnp.asarray(logits),
        jnp.asarray(target),
        None if weight is None else jnp.asarray(weight),
        softcap,
        lse_square_scale=0.01,
        return_z_loss=z_loss,
        gradients=gradients,
    )
    want = lib.cross_entropy_reference(logits, target, weight, softcap, 0.01)
    assert set(got) == {"loss"} | ({"z_loss"} if z_loss else set()) | ({"dx"} if gradients else set())
    for name, value in got.items():
        np.testing.assert_allclose(np.asarray(value), want[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    ("reverse", "scale", "varlen"),
    [(False, None, False), (True, 0.5, True)],
    ids=["plain", "reverse, scaled, variable length"],
)
def test_chunk_cumsum_heuristics_see_none(
    rng: np.random.Generator, reverse: bool, scale: float | None, varlen: bool
) -> None:
    g = rng.standard_normal((1 if varlen else 2, 20, 3)).astype(np.float32)
    cu_seqlens = np.array([0, 5, 12, 20], np.int32) if varlen else None
    got = lib.chunk_local_cumsum(
        jnp.asarray(g), 8, reverse, scale, None if cu_seqlens is None else jnp.asarray(cu_seqlens)
    )
    want = lib.chunk_local_cumsum_reference(g, 8, reverse, scale, cu_seqlens)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_heuristics_and_autotune_keys_see_none_apart_from_an_array(rng: np.random.Generator) -> None:
    g = jnp.asarray(rng.standard_normal((1, 20, 3)).astype(np.float32))
    cu_seqlens = jnp.asarray(np.array([0, 5, 12, 20], np.int32))
    dense = _bound_call(lambda g: lib.chunk_local_cumsum(g, 8), g)
    varlen = _bound_call(lambda g: lib.chunk_local_cumsum(g, 8, cu_seqlens=cu_seqlens), g)
    for call, expected in ((dense, False), (varlen, True)):
        assert {c.constexpr_dict["IS_VARLEN"] for c in call.configs} == {expected}
        assert {c.constexpr_dict["HAS_SCALE"] for c in call.configs} == {False}
    assert tuning.autotune_key_values(dense)["IS_VARLEN"] != tuning.autotune_key_values(varlen)["IS_VARLEN"]
    # A key naming the None argument itself keys it apart from an array and from a number.
    keyed = [
        tuning.autotune_key_values(_with_keys(call, ("cu_seqlens", "scale")))
        for call in (dense, varlen, _bound_call(lambda g: lib.chunk_local_cumsum(g, 8, scale=0.5), g))
    ]
    assert keyed[0]["cu_seqlens"] != keyed[1]["cu_seqlens"]
    assert keyed[0]["scale"] != keyed[2]["scale"]
    assert tuning.tuning_key(dense, "cpu") != tuning.tuning_key(varlen, "cpu")


def _with_keys(call: KernelCall, keys: tuple[str, ...]) -> KernelCall:
    return dataclasses.replace(call, autotune_keys=call.autotune_keys + keys)


@pytest.mark.parametrize("vmap", ["grid", "sequential"])
def test_none_is_not_batched_under_vmap(rng: np.random.Generator, vmap: str) -> None:
    x = rng.standard_normal((3, 40)).astype(np.float32)
    batched = jax.vmap(lambda row, w: _scale_rows(row, w, vmap=vmap), in_axes=(0, None))(jnp.asarray(x), None)
    np.testing.assert_array_equal(np.asarray(batched), x)


def test_none_inside_a_tuple_argument_is_a_constant_leaf(rng: np.random.Generator) -> None:
    x, y = rng.standard_normal(24).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    for pair, want in (((jnp.asarray(x), None), x), ((jnp.asarray(x), jnp.asarray(y)), x + y)):
        got = jt.triton_call(pair, kernel=pair_kernel, out_shape=x, grid=2, n=24, BLOCK=16)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6)


def test_none_where_the_kernel_loads_unconditionally_is_refused_naming_the_parameter() -> None:
    x = jnp.ones(20, jnp.float32)
    with pytest.raises(
        jt.KernelCallTypeError,
        match=r"argument 'w_ptr' .* is None, but the kernel uses w_ptr where it "
        r"needs an array.*if w_ptr is not None",
    ):
        jt.triton_call(x, None, kernel=weighted_unguarded_kernel, out_shape=x, grid=2, n=20, BLOCK=16)


def test_none_where_the_kernel_computes_with_a_number_is_refused_naming_the_parameter() -> None:
    x = jnp.ones(20, jnp.float32)
    with pytest.raises(jt.KernelCallTypeError, match=r"argument 'scale' .* is None, .* needs a number"):
        jt.triton_call(x, kernel=scaled_unguarded_kernel, out_shape=x, grid=2, n=20, scale=None, BLOCK=16)
