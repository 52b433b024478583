"""A keyword that names a kernel parameter fills it, as Triton's launcher binds it, even where ``triton_call`` has an
argument of that name: a compile option (``num_stages=``) then sets both the parameter and the option, any other
(``name=``) the parameter alone. Keywords of Pallas habits get a hint."""

from __future__ import annotations

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
from jt_core.call import KernelCall


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    # Random data, seeded per test so that a failure reproduces.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


#: The keywords of triton_call a kernel parameter may share a name with, each with a value for the parameter.
SHARED = {
    "num_warps": 2,
    "num_stages": 2,
    "num_ctas": 2,
    "enable_fp_fusion": False,
    "debug": True,
    "name": 7,
    "launcher": 8,
    "vmap": 9,
    "partition": 10,
    "compute_capability": 11,
    "backend_options": 12,
    "input_output_aliases": 13,
    "zeroed_outputs": 14,
    "serialized_metadata": 15,
    "cost_estimate": 16,
    "has_side_effect": 17,
}
#: Those that are compile options too.
OPTIONS = ("num_warps", "num_stages", "num_ctas", "enable_fp_fusion", "debug")


@triton.jit
def keywords_kernel(
    out_ptr, num_warps: tl.constexpr = -1, num_stages: tl.constexpr = -1, num_ctas: tl.constexpr = -1,
    enable_fp_fusion: tl.constexpr = -1, debug: tl.constexpr = -1, name: tl.constexpr = -1,
    launcher: tl.constexpr = -1, vmap: tl.constexpr = -1, partition: tl.constexpr = -1,
    compute_capability: tl.constexpr = -1, backend_options: tl.constexpr = -1,
    input_output_aliases: tl.constexpr = -1, zeroed_outputs: tl.constexpr = -1,
    serialized_metadata: tl.constexpr = -1, cost_estimate: tl.constexpr = -1, has_side_effect: tl.constexpr = -1,
):  # fmt: skip
    tl.store(out_ptr + 0, num_warps)
    tl.store(out_ptr + 1, num_stages)
    tl.store(out_ptr + 2, num_ctas)
    tl.store(out_ptr + 3, name)
    tl.store(out_ptr + 4, launcher)
    tl.store(out_ptr + 5, debug)


def _bound_call(fn: Any, *args: Any) -> KernelCall:
    """The `KernelCall` that ``fn(*args)`` binds."""
    eqns = jax.make_jaxpr(fn)(*args).eqns
    return next(e.params["call"] for e in eqns if "call" in e.params)


def _keywords(**keywords: Any) -> Any:
    return jt.triton_call(kernel=keywords_kernel, out_shape=jax.ShapeDtypeStruct((6,), np.int32), grid=1, **keywords)


def test_num_stages_keyword_fills_the_parameter_and_is_the_compile_option(rng: np.random.Generator) -> None:
    x = rng.standard_normal((7, 50)).astype(np.float32)
    got = lib.softmax(jnp.asarray(x), num_stages=2, num_warps=2)
    np.testing.assert_allclose(np.asarray(got), lib.softmax_reference(x), rtol=1e-5, atol=1e-7)
    (config,) = _bound_call(lambda x: lib.softmax(x, num_stages=2, num_warps=2), x).configs
    assert config.constexpr_dict["num_stages"] == 2
    assert (config.options.num_stages, config.options.num_warps) == (2, 2)


@pytest.mark.parametrize("keyword", list(SHARED))
def test_a_keyword_naming_a_parameter_fills_it(keyword: str) -> None:
    value = SHARED[keyword]
    call = _bound_call(lambda: _keywords(**{keyword: value}))
    (config,) = call.configs
    assert config.constexpr_dict[keyword] == value
    if keyword in OPTIONS:
        assert getattr(config.options, keyword) == value, "a compile option sets the option too, as in Triton"
    else:
        defaults = {
            "name": call.name == "keywords_kernel",
            "launcher": call.launch.launcher is None,
            "vmap": call.launch.vmap == "auto",
            "has_side_effect": call.launch.has_side_effect is False,
            "serialized_metadata": call.launch.serialized_metadata == b"",
            "cost_estimate": call.launch.cost_estimate is None,
            "compute_capability": "compute_capability" not in dict(call.backend_arguments),
            "backend_options": "backend_options" not in dict(call.backend_arguments),
            "zeroed_outputs": config.zeroed_outputs == (),
            "input_output_aliases": call.aliases == (),
            "partition": True,  # a partitioned call would have raised: the grid is no callable
        }
        assert defaults[keyword], f"{keyword}= went to the parameter, so its own meaning keeps its default"


def test_values_given_by_shared_keywords_reach_the_kernel() -> None:
    got = _keywords(num_warps=2, num_stages=1, name=7, launcher=8)
    # num_ctas takes its declared default; debug, which Triton's launcher always passes, the debug option (off).
    np.testing.assert_array_equal(np.asarray(got), [2, 1, -1, 7, 8, 0])


@triton.jit
def debug_kernel(out_ptr, debug: tl.constexpr = 5):
    tl.store(out_ptr, debug)


@pytest.mark.parametrize(("given", "expected"), [({}, False), ({"debug": True}, True)], ids=["not given", "given"])
def test_a_debug_parameter_receives_the_debug_option(given: dict[str, Any], expected: bool) -> None:
    # Triton's launcher passes debug= to every launch, so a parameter of that name never sees its own default.
    (config,) = _bound_call(
        lambda: jt.triton_call(kernel=debug_kernel, out_shape=jax.ShapeDtypeStruct((1,), np.int32), grid=1, **given)
    ).configs
    assert config.constexpr_dict["debug"] is expected
    assert config.options.debug is expected


def test_an_autotune_config_options_fill_parameters_of_their_name(rng: np.random.Generator) -> None:
    tuned = triton.autotune(
        configs=[triton.Config({}, num_warps=1, num_stages=1), triton.Config({}, num_warps=2, num_stages=3)],
        key=["n_cols"],
    )(lib.softmax_kernel)
    x = rng.standard_normal((5, 30)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(lib.softmax(jnp.asarray(x), kernel=tuned, grid=lambda meta: (2,))),
        lib.softmax_reference(x),
        rtol=1e-5,
    )
    call = _bound_call(lambda x: lib.softmax(x, kernel=tuned, grid=lambda meta: (2,)), x)
    assert [(c.constexpr_dict["num_stages"], c.options.num_stages) for c in call.configs] == [(1, 1), (3, 3)]


def test_heuristics_see_the_options_and_parameters_the_call_gives() -> None:
    seen: list[tuple[Any, Any]] = []

    def block(args: dict[str, Any]) -> int:
        seen.append((args["num_warps"], args["num_stages"]))
        return 32

    kernel = triton.heuristics({"BLOCK_SIZE": block})(lib.softmax_kernel)
    x = jnp.ones((2, 20), jnp.float32)
    _bound_call(
        lambda x: jt.triton_call(
            input_ptr=x, input_row_stride=20, output_row_stride=20, n_rows=2, n_cols=20, kernel=kernel, out_shape=x,
            grid=2, num_stages=1, num_warps=8,
        ),
        x,
    )  # fmt: skip
    assert seen == [(8, 1)]


@triton.jit
def warps_kernel(out_ptr, num_warps: tl.constexpr):
    tl.store(out_ptr, num_warps)


def test_a_heuristic_for_an_option_named_by_a_parameter_sets_both() -> None:
    kernel = triton.heuristics({"num_warps": lambda args: 2})(warps_kernel)
    (config,) = _bound_call(
        lambda: jt.triton_call(kernel=kernel, out_shape=jax.ShapeDtypeStruct((1,), np.int32), grid=1)
    ).configs
    assert (config.constexpr_dict["num_warps"], config.options.num_warps) == (2, 2)


def test_without_a_parameter_of_its_name_a_keyword_is_the_option_alone(rng: np.random.Generator) -> None:
    @triton.jit
    def plain_kernel(output_ptr, input_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(output_ptr + offsets, tl.load(input_ptr + offsets, mask=offsets < n) * 2, mask=offsets < n)

    x = rng.standard_normal(10).astype(np.float32)

    def double(x: Any) -> Any:
        return jt.triton_call(
            input_ptr=x, n=10, kernel=plain_kernel, out_shape=x, grid=1, BLOCK=16, num_stages=1, name="twice"
        )

    np.testing.assert_array_equal(np.asarray(double(jnp.asarray(x))), 2 * x)
    call = _bound_call(double, x)
    assert (call.name, call.configs[0].options.num_stages) == ("twice", 1)


@pytest.mark.parametrize(
    ("keyword", "hint"),
    [
        ("interpret", r"interpret= is Pallas's: .* launcher=\"interpreter\" runs it in Triton's interpreter"),
        ("compiler_params", r"compiler_params= is Pallas's: pass the compile options as triton_call's own keywords"),
        ("maxnreg", r"maxnreg= is an option of Triton's backend, .* backend_options=\{'maxnreg': True\}"),
    ],
)
def test_keywords_of_other_apis_get_a_hint(keyword: str, hint: str) -> None:
    x = jnp.ones((2, 20), jnp.float32)
    with pytest.raises(jt.KernelCallTypeError, match=rf"got keyword '{keyword}', which is neither .* {hint}"):
        lib.softmax(x, num_stages=1, **{keyword: True})
