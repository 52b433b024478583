"""Autotuned calls on an NVIDIA GPU: configurations the device cannot run are skipped, a fixed grid never returns an
unwritten element whichever launcher tunes it, and the tuned call runs at its winner's speed."""

from __future__ import annotations

import statistics
import time
import uuid
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from cuda_autotune_kernels import grouped_matmul, persistent_matmul

import jt_core as jt
from jt_core.testing import backend_config, custom_calls

pytestmark = pytest.mark.cuda


def rand(key: int, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
    return jax.random.normal(jax.random.key(key), shape, jnp.float32).astype(dtype)


def skipped(caught: list[Any]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, jt.ConfigSkippedWarning)]


def fresh_name() -> str:
    """A call name no tuning record on this machine has yet (the name is part of a tuning problem's key)."""
    return f"tuned_{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("launcher", ["jt", "jaxlib", "xla"])
@pytest.mark.parametrize("call", [grouped_matmul, persistent_matmul], ids=["grouped", "persistent"])
def test_configs_over_the_devices_shared_memory_are_skipped_and_the_call_runs(launcher: str, call: Any) -> None:
    a, b = rand(1, (512, 384), jnp.float16), rand(2, (384, 256), jnp.float16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = jax.jit(lambda x, y: call(x, y, launcher=launcher, name=fresh_name()))(a, b)
    reference = np.asarray(a, np.float32) @ np.asarray(b, np.float32)
    np.testing.assert_allclose(np.asarray(out, np.float32), reference, rtol=2e-2, atol=5e-2)
    assert any("bytes of shared memory per block" in message for message in skipped(caught))


@triton.jit
def triple_kernel(x_ptr, n, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3, mask=mask)


#: The fastest of these with a fixed grid of ``n // 1024`` programs is the one that writes a quarter of the output.
COVERING = triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=2), triton.Config({"BLOCK": 1024}, num_warps=4)], key=["n"]
)(triple_kernel)


@pytest.mark.parametrize(
    ("launcher", "ahead"),
    [("jt", "1"), ("jt", "0"), ("jaxlib", "1"), ("xla", "1")],
    ids=["jt", "jt in-handler", "jaxlib", "xla"],
)
def test_a_fixed_grid_never_returns_an_unwritten_element(
    launcher: str, ahead: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JT_TUNE_AHEAD", ahead)
    n = 1 << 22
    x = rand(3, (n,))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = jax.jit(
            lambda v: jt.triton_call(
                v, n, kernel=COVERING, out_shape=v, grid=(n // 1024,), launcher=launcher, name=fresh_name()
            )
        )
        for _ in range(3):
            np.testing.assert_array_equal(np.asarray(fn(x)), np.asarray(x) * 3)
    said = skipped(caught) + [line for line in capfd.readouterr().err.splitlines() if "is skipped" in line]
    assert any("config [BLOCK=256" in line and f"it left {n - n // 4} of {n} elements" in line for line in said)


@pytest.mark.parametrize("ahead", ["1", "0"], ids=["tuned ahead", "in-handler"])
def test_when_every_config_leaves_elements_unwritten_the_error_names_grid(
    ahead: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JT_TUNE_AHEAD", ahead)
    n = 1 << 20
    x = rand(4, (n,))
    with pytest.raises(Exception, match=r"no @triton.autotune config can run.*grid=\(64,\) launches the same"):
        jax.block_until_ready(
            jt.triton_call(x, n, kernel=COVERING, out_shape=x, grid=(64,), launcher="jt", name=fresh_name())
        )


@triton.jit
def add_to_pair_kernel(pair, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(pair[0] + offsets, tl.load(pair[0] + offsets, mask=mask) + 1, mask=mask)
    tl.store(pair[1] + offsets, tl.load(pair[1] + offsets, mask=mask) + 2, mask=mask)


@pytest.mark.parametrize("launcher", ["jt", "jaxlib"])
def test_an_autotuned_kernel_updates_a_tuple_of_refs_with_a_fixed_grid(launcher: str) -> None:
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 1}), triton.Config({"BLOCK": 8})], key=["n"])(
        add_to_pair_kernel
    )
    a, b = rand(5, (8,)), rand(6, (8,))
    a_ref, b_ref = jax.new_ref(a), jax.new_ref(b)
    assert jt.triton_call((a_ref, b_ref), 8, kernel=kernel, out_type=(), grid=(8,), launcher=launcher) == ()
    np.testing.assert_array_equal(np.asarray(a_ref[...]), np.asarray(a) + 1)
    np.testing.assert_array_equal(np.asarray(b_ref[...]), np.asarray(b) + 2)


# -- the tuned call at the winner's speed ----------------------------------------------------------------------------


@triton.jit
def tiled_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        acc = tl.dot(a, tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :]), acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(c_ptr.dtype.element_ty))


SIZE = 4096
EIGHT = [(128, 128, 64, 4, 3), (128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (64, 128, 64, 4, 4),
         (128, 64, 64, 4, 4), (128, 128, 32, 4, 4), (64, 64, 64, 4, 3), (128, 128, 64, 8, 4)]  # fmt: skip


def tuned_matmul(name: str) -> Any:
    kernel = triton.autotune(
        configs=[triton.Config({"BM": m, "BN": n, "BK": k}, num_warps=w, num_stages=s) for m, n, k, w, s in EIGHT],
        key=["M", "N", "K"],
    )(tiled_matmul_kernel)
    return lambda a, b: jt.triton_call(
        a, b, kernel=kernel, out_shape=a, grid=lambda m: (SIZE // m["BM"], SIZE // m["BN"]), M=SIZE, N=SIZE, K=SIZE,
        name=name, launcher="jt",
    )  # fmt: skip


def fixed_matmul(name: str, config: dict[str, Any]) -> Any:
    return lambda a, b: jt.triton_call(
        a, b, kernel=tiled_matmul_kernel, out_shape=a, grid=(SIZE // config["BM"], SIZE // config["BN"]), M=SIZE,
        N=SIZE, K=SIZE, name=name, launcher="jt", **config,
    )  # fmt: skip


def only_config(fn: Any, a: Any, b: Any) -> dict[str, Any]:
    (op,) = custom_calls(jax.jit(fn).trace(a, b).lower())
    return backend_config(op)


def test_a_tuned_call_lowers_as_its_winner_called_fixed_and_runs_as_fast() -> None:
    """Through jt's handler (named, so that JT_LAUNCHER_CUDA=xla does not send it to XLA's Triton call, whose
    attributes are its own): the tuned call's attributes are the fixed winner's, and it runs as fast."""
    a, b = rand(7, (SIZE, SIZE), jnp.bfloat16), rand(8, (SIZE, SIZE), jnp.bfloat16)
    name = fresh_name()
    tuned = jax.jit(tuned_matmul(name))
    out = tuned(a, b)  # tunes, in this process
    attributes = only_config(tuned_matmul(name), a, b)
    assert attributes["num_configs"] == 1  # the winner alone, as the fixed call
    values = dict(part.split("=") for part in attributes["label_0"].decode().replace(" ", "").split(","))
    config = {key: int(values[key]) for key in ("BM", "BN", "BK", "num_warps", "num_stages")}
    fixed = jax.jit(fixed_matmul(name, config))
    fixed_attributes = only_config(fixed_matmul(name, config), a, b)
    assert {k: v for k, v in attributes.items() if k != "tuning_file"} == fixed_attributes
    reference = jnp.dot(a[:256], b, preferred_element_type=jnp.float32)
    np.testing.assert_allclose(np.asarray(out[:256], np.float32), np.asarray(reference), rtol=2e-2, atol=2e-1)

    def seconds(fn: Any) -> float:
        fn(a, b).block_until_ready()
        start = time.perf_counter()
        for _ in range(20):
            result = fn(a, b)
        result.block_until_ready()
        return (time.perf_counter() - start) / 20

    ratios = []  # the tuned call's speed over the fixed call's, per round; the order alternates between rounds
    for r in range(7):
        if r % 2 == 0:
            fixed_s, tuned_s = seconds(fixed), seconds(tuned)
        else:
            tuned_s, fixed_s = seconds(tuned), seconds(fixed)
        ratios.append(fixed_s / tuned_s)
    assert statistics.median(ratios) >= 0.98, ratios
