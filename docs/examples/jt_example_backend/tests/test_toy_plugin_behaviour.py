"""The toy plugin is found through its entry point, compiles real Triton IR and lowers to its custom call."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from jt_example_backend import plugin
from jt_example_backend.backend import CUSTOM_CALL_TARGET, ToyOptions

import jt_core as jt
from jt_core.testing import fake_entry_point, sample_add_kernel


def lower_for_toy(size: int = 96, block: int = 32, **options) -> str:
    def add(x, y):
        return jt.triton_call(
            x, y, kernel=sample_add_kernel, out_shape=x, grid=jt.cdiv(size, block), n=size, BLOCK=block, **options
        )

    spec = jax.ShapeDtypeStruct((size,), jnp.float32)
    return jax.jit(add).trace(spec, spec).lower(lowering_platforms=("toy",)).as_text()


def test_listed_by_jt_with_what_it_provides(jt_plugin_manager) -> None:
    records = {record.name: record for record in jt_plugin_manager.list_plugins()}
    toy = records["toy"]
    assert toy.status == "loaded", toy.error
    assert toy.distribution == "jt-example-backend"
    assert toy.platforms == ["toy"]
    assert toy.launchers == ["toy:toy-custom-call"]


def test_lowering_emits_the_custom_call_with_kernel_and_grid(jt_plugin_manager) -> None:
    text = lower_for_toy(size=96, block=32)
    assert CUSTOM_CALL_TARGET in text
    call_line = next(line for line in text.splitlines() if CUSTOM_CALL_TARGET in line)
    assert 'kernel = "sample_add_kernel"' in call_line
    assert re.search(r"grid = dense<\[3, 1, 1\]>", call_line), call_line
    assert int(re.search(r"ttir_bytes = (\d+)", call_line).group(1)) > 100


def test_compile_goes_through_the_compile_hook(jt_hook_recorder) -> None:
    lower_for_toy(size=64, block=16)
    requests = [kwargs["request"] for name, kwargs in jt_hook_recorder.calls if name == "jt_compile_kernel"]
    assert [r.target.platform for r in requests] == ["toy"]
    assert requests[0].specialization.constexprs[(4,)] == 16  # BLOCK, the fifth parameter


def test_a_broken_plugin_does_not_stop_the_toy_backend(jt_fake_entry_points) -> None:
    manager = jt_fake_entry_points(
        [
            fake_entry_point("toy", plugin, distribution="jt-example-backend"),
            fake_entry_point("broken", ImportError("no")),
        ]
    )
    with pytest.warns(RuntimeWarning, match="broken"):
        records = {r.name: r for r in manager.list_plugins()}
    assert records["broken"].status == "failed"
    assert records["toy"].status == "loaded"
    assert CUSTOM_CALL_TARGET in lower_for_toy()


def test_disabled_with_jt_disable_plugins(jt_fake_entry_points) -> None:
    manager = jt_fake_entry_points(
        [fake_entry_point("toy", plugin, distribution="jt-example-backend")], environ={"JT_DISABLE_PLUGINS": "toy"}
    )
    assert {r.name: r.status for r in manager.list_plugins()}["toy"] == "blocked"
    with pytest.raises(Exception, match="no jt backend for platform 'toy'"):
        lower_for_toy()


def test_the_backend_parses_its_own_options(jt_hook_recorder) -> None:
    lower_for_toy(size=64, block=16, num_warps=2, backend_options={"unroll": 2})
    (request,) = [kwargs["request"] for name, kwargs in jt_hook_recorder.calls if name == "jt_compile_kernel"]
    assert request.options == ToyOptions(num_warps=2, unroll=2)


def test_an_option_the_backend_does_not_take_is_refused_naming_it(jt_plugin_manager) -> None:
    with pytest.raises(jt.KernelCallValueError, match=r"backend_options \['unrol'\] are not options of 'toy'"):
        lower_for_toy(backend_options={"unrol": 2})
    with pytest.raises(jt.KernelCallValueError, match=r"backend_options\['unroll'\] must be 1, 2 or 4 on 'toy', got 3"):
        lower_for_toy(backend_options={"unroll": 3})
