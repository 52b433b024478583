"""``best_config`` of a ``@triton.autotune`` object is set as Triton's autotuner sets it: to the ``triton.Config``
the call runs with, once jt has chosen it (when the call is lowered, or when it first runs in the interpreter). The
object is otherwise left as it was."""

from __future__ import annotations

import uuid
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt

RNG = np.random.default_rng()


@triton.jit
def double_kernel(x_ptr, n, out_ptr, used_ptr, BLOCK: tl.constexpr):
    """``out = 2 x``; program 0 writes the ``BLOCK`` it ran with to ``used``."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)
    if tl.program_id(0) == 0:
        tl.store(used_ptr, BLOCK)


def autotuned(*blocks: int, **autotune: Any) -> Any:
    configs = [triton.Config({"BLOCK": block}, num_warps=1 + i % 2) for i, block in enumerate(blocks)]
    return triton.autotune(configs=configs, key=["n"], **autotune)(double_kernel)


def double(kernel: Any, x: jax.Array, grid: Any = None, **options: Any) -> tuple[jax.Array, jax.Array]:
    n = x.size
    out, used = jt.triton_call(
        x,
        n,
        kernel=kernel,
        out_shape=(x, jax.ShapeDtypeStruct((), jnp.int32)),
        grid=grid or (lambda meta: (triton.cdiv(n, meta["BLOCK"]),)),
        name=f"double_{uuid.uuid4().hex[:12]}",  # no tuning record of an earlier run decides
        **options,
    )
    jax.block_until_ready(out)
    np.testing.assert_array_equal(out, 2 * np.asarray(x))
    return out, used


def rand(n: int) -> jax.Array:
    return jnp.asarray(RNG.standard_normal(n).astype(np.float32))


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_best_config_is_the_config_the_call_ran_with(launcher: str) -> None:
    kernel = autotuned(32, 64, 128)
    assert getattr(kernel, "best_config", None) is None
    _, used = double(kernel, rand(300), launcher=launcher)
    assert kernel.best_config is kernel.configs[0]  # without JT_CPU_AUTOTUNE the CPU runs the first
    assert kernel.best_config.kwargs["BLOCK"] == int(used)


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_best_config_after_tuning_on_the_cpu_is_the_winner(launcher: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_CPU_AUTOTUNE", "1")
    kernel = autotuned(16, 64, 256)
    _, used = double(kernel, rand(500), launcher=launcher)
    assert any(kernel.best_config is config for config in kernel.configs)
    assert kernel.best_config.kwargs["BLOCK"] == int(used)


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_best_config_of_a_fixed_grid_is_the_first_config_that_covers_the_output(launcher: str) -> None:
    kernel = autotuned(16, 64, 128)
    with pytest.warns(jt.ConfigSkippedWarning):
        _, used = double(kernel, rand(64), grid=(1,), launcher=launcher)
    assert int(used) == 64 and kernel.best_config is kernel.configs[1]


def test_best_config_of_the_one_config_a_prune_keeps_is_that_config() -> None:
    kernel = autotuned(32, 64, 128, prune_configs_by={"early_config_prune": lambda configs, named, **kw: configs[2:]})
    _, used = double(kernel, rand(300))
    assert kernel.best_config is kernel.configs[2] and int(used) == 128


def test_best_config_of_configs_a_prune_made_itself_is_one_like_them() -> None:
    def made(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        return [triton.Config({"BLOCK": 256}, num_warps=2)]

    kernel = autotuned(32, 64, prune_configs_by={"early_config_prune": made})
    _, used = double(kernel, rand(300))
    best = kernel.best_config
    assert isinstance(best, triton.Config) and int(used) == 256
    assert (best.kwargs, best.num_warps) == ({"BLOCK": 256}, 2)


def test_best_config_is_all_that_changes_on_the_autotuner() -> None:
    kernel = autotuned(32, 64)
    before = dict(vars(kernel))
    configs = [(dict(c.kwargs), c.num_warps, c.num_stages) for c in kernel.configs]
    double(kernel, rand(100))
    after = dict(vars(kernel))
    assert after.pop("best_config") is kernel.configs[0]
    before.pop("best_config", None)
    assert after.keys() == before.keys() and all(after[name] is before[name] for name in before)
    assert [(dict(c.kwargs), c.num_warps, c.num_stages) for c in kernel.configs] == configs


def test_a_kernel_that_is_not_autotuned_gets_no_best_config() -> None:
    double(double_kernel, rand(100), BLOCK=64)
    assert not hasattr(double_kernel, "best_config")
