"""Triton's autotuner as jt runs it on the CPU: ``prune_configs_by`` (early prune, perf model, top_k) with stand-ins
for the arguments, heuristics stacked either way, hooks that set tensor descriptors' block shapes, and fixed grids,
whose configs are used only where they write every element of the outputs."""

from __future__ import annotations

import json
import uuid
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core import tuning
from jt_core.call import KernelCall
from jt_core.cpu.compiled.launcher import COMPILED_DEVICE_NAME
from jt_core.cpu.lowered import CPU_DEVICE_NAME
from jt_core.errors import KernelCallTypeError, KernelCallValueError
from jt_core.stand_ins import ArrayStandIn, HookEffectError

RNG = np.random.default_rng()
BLOCKS = (16, 32, 64, 128)


def rand(*shape: int) -> jax.Array:
    return jnp.asarray(RNG.standard_normal(shape).astype(np.float32))


@triton.jit
def scale_kernel(x_ptr, n, out_ptr, used_ptr, BLOCK: tl.constexpr, EVEN: tl.constexpr = False):
    """``out = 2 x``; program 0 writes the ``BLOCK`` it ran with (and ``EVEN``) to ``used``."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        value = tl.load(x_ptr + offsets)
        tl.store(out_ptr + offsets, value + value)
    else:
        mask = offsets < n
        value = tl.load(x_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, value + value, mask=mask)
    if tl.program_id(0) == 0:
        tl.store(used_ptr, BLOCK)
        if EVEN:
            tl.store(used_ptr + 1, 1)
        else:
            tl.store(used_ptr + 1, 0)


def configs() -> list[Any]:
    return [triton.Config({"BLOCK": block}, num_warps=warps) for block, warps in zip(BLOCKS, (1, 2, 4, 4))]


def autotuned(prune_configs_by: dict[str, Any] | None = None, kernel: Any = scale_kernel, **kwargs: Any) -> Any:
    return triton.autotune(configs=configs(), key=["n"], prune_configs_by=prune_configs_by, **kwargs)(kernel)


def scale(kernel: Any, x: jax.Array, grid: Any = None, **meta: Any) -> Any:
    n = x.size
    return jt.triton_call(
        x,
        n,
        kernel=kernel,
        out_shape=(x, jax.ShapeDtypeStruct((2,), jnp.int32)),
        grid=grid or (lambda m: (triton.cdiv(n, m["BLOCK"]),)),
        **meta,
    )


def bound_call(kernel: Any, x: jax.Array, **meta: Any) -> KernelCall:
    """The call ``scale`` binds (jt binds while tracing: prune functions and hooks run then)."""
    jaxpr = jax.make_jaxpr(lambda v: scale(kernel, v, **meta))(x)
    (eqn,) = [e for e in jaxpr.eqns if "call" in e.params]
    return eqn.params["call"]


def blocks(call: KernelCall) -> list[int]:
    return [config.constexpr_dict["BLOCK"] for config in call.configs]


def test_early_config_prune_gets_stand_ins_and_what_it_returns_is_all_that_compiles_and_runs() -> None:
    n = int(RNG.integers(200, 400))
    x = rand(n)
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def prune(candidates: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        seen.append((named_args, kwargs))
        candidates[0].num_warps = 8  # a copy: the autotuner's own config keeps its value
        return [c for c in reversed(candidates) if c.kwargs["BLOCK"] >= 64]

    kernel = autotuned({"early_config_prune": prune})
    before = [(dict(c.kwargs), c.num_warps) for c in kernel.configs]
    out, used = scale(kernel, x)
    np.testing.assert_array_equal(out, np.asarray(x) * 2)
    assert int(used[0]) == 128  # the first config of those pruned, on the CPU without tuning
    assert [(dict(c.kwargs), c.num_warps) for c in kernel.configs] == before
    assert blocks(bound_call(kernel, x)) == [128, 64]
    named, kwargs = seen[0]
    assert kwargs == {} and named["n"] == n
    array = named["x_ptr"]
    assert (array.shape, array.dtype, array.ndim, array.dim()) == ((n,), np.dtype(np.float32), 1, 1)
    assert (array.stride(), array.stride(0), array.element_size(), array.numel()) == ((1,), 1, 4, n)
    assert (array.size, array.size(), array.size(0), array.is_contiguous()) == (n, (n,), n, True)
    assert named["used_ptr"].shape == (2,) and named["used_ptr"].dtype == np.dtype(np.int32)


def test_prune_functions_find_positional_arguments_in_named_args_and_keywords_in_kwargs() -> None:
    """As Triton's autotuner splits a launch's arguments: ``named_args`` by position (jt's outputs too, as a Triton
    launch passes their buffers), ``kwargs`` every keyword, operands (stand-ins) and compile options included."""
    x = rand(64)
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def prune(candidates: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        seen.append((named_args, kwargs))
        return candidates

    kernel = autotuned({"early_config_prune": prune})
    jax.make_jaxpr(
        lambda v: jt.triton_call(
            x_ptr=v, n=64, kernel=kernel, out_shape=(v, jax.ShapeDtypeStruct((2,), jnp.int32)), grid=4, num_warps=4,
            EVEN=True,
        )
    )(x)  # fmt: skip
    named, kwargs = seen[0]
    assert sorted(named) == ["out_ptr", "used_ptr"] and named["out_ptr"].shape == (64,)
    assert sorted(kwargs) == ["EVEN", "n", "num_warps", "x_ptr"]
    assert (kwargs["n"], kwargs["EVEN"], kwargs["num_warps"], kwargs["x_ptr"].shape) == (64, True, 4, (64,))
    seen.clear()
    jax.make_jaxpr(lambda v: scale(kernel, v, EVEN=False))(x)  # x and n by position
    named, kwargs = seen[0]
    assert sorted(named) == ["n", "out_ptr", "used_ptr", "x_ptr"] and kwargs == {"EVEN": False}


def test_the_configs_the_caller_rules_out_are_dropped_before_pruning() -> None:
    given: list[list[int]] = []

    def prune(candidates: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        given.append([c.kwargs["BLOCK"] for c in candidates])
        assert kwargs == {"BLOCK": 32}
        return candidates

    call = bound_call(autotuned({"early_config_prune": prune}), rand(64), BLOCK=32)
    assert blocks(call) == [32] and given == [[32]]


@pytest.mark.parametrize(("top_k", "kept"), [(2, [128, 64]), (0.5, [128, 64]), (0.1, [128]), (1.0, list(BLOCKS))])
def test_perf_model_keeps_the_top_k_it_estimates_fastest(top_k: Any, kept: list[int]) -> None:
    x = rand(100)
    asked: list[dict[str, Any]] = []

    def perf_model(**arguments: Any) -> float:
        asked.append(arguments)
        return -arguments["BLOCK"] + 0.001 * arguments["x_ptr"].numel() * arguments["num_warps"]

    call = bound_call(autotuned({"perf_model": perf_model, "top_k": top_k}), x)
    assert blocks(call) == kept
    assert all(a["n"] == 100 and a["x_ptr"].shape == (100,) and a["num_stages"] == 3 for a in asked)


def test_top_k_that_is_neither_an_int_nor_a_fraction_is_refused() -> None:
    kernel = autotuned({"perf_model": lambda **a: 0.0, "top_k": "2"})
    with pytest.raises(KernelCallTypeError, match=r"prune_configs_by\['top_k'\] of scale_kernel\(.*\) is '2'"):
        bound_call(kernel, rand(64))


@pytest.mark.parametrize(
    ("prune", "pattern"),
    [
        (lambda c, a, **k: [], r"early_config_prune'\] of scale_kernel\(.*\) pruned every config"),
        (lambda c, a, **k: None, r"returned None; it must return a list of triton.Config"),
        (lambda c, a, **k: [{"BLOCK": 16}], r"it must return a list of triton.Config"),
        (
            lambda c, a, **k: [x for x in c if a["x_ptr"].data_ptr() % 16 == 0],
            r"raised AttributeError: 'data_ptr': argument 'x_ptr' is a stand-in for an array.*it answers shape, "
            r"dtype",
        ),
        (lambda c, a, **k: c[:1] if a["missing"] else c, r"early_config_prune'\] of .* raised KeyError: 'missing'"),
    ],
    ids=["empty", "none", "not configs", "asks for memory", "raises"],
)
def test_a_prune_function_that_fails_is_named(prune: Any, pattern: str) -> None:
    with pytest.raises(KernelCallValueError, match=pattern):
        bound_call(autotuned({"early_config_prune": prune}), rand(64))


@pytest.mark.parametrize("outside", [True, False], ids=["heuristics outside", "heuristics inside"])
def test_heuristics_stack_either_way(outside: bool) -> None:
    n = 256
    x = rand(n)
    pruned_with: list[dict[str, Any]] = []

    def prune(candidates: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        pruned_with.append(kwargs)
        return candidates[1:3]

    if outside:  # Triton computes it from the arguments before the autotuner prunes: the prune function sees it
        even = triton.heuristics({"EVEN": lambda args: args["n"] % 128 == 0})
        kernel = even(autotuned({"early_config_prune": prune}))
    else:  # computed per config, after pruning
        even = triton.heuristics({"EVEN": lambda args: args["n"] % (8 * args["BLOCK"]) == 0})
        kernel = autotuned({"early_config_prune": prune}, kernel=even(scale_kernel))
    call = bound_call(kernel, x)
    assert blocks(call) == [32, 64]
    assert pruned_with[0] == ({"EVEN": True} if outside else {})
    assert [config.constexpr_dict["EVEN"] for config in call.configs] == ([True, True] if outside else [True, False])
    out, used = scale(kernel, x)
    np.testing.assert_array_equal(out, np.asarray(x) * 2)
    assert used.tolist() == [32, 1]


def test_array_stand_ins_answer_shape_questions_and_refuse_the_rest() -> None:
    stand_in = ArrayStandIn("q", (2, 3, 4), jnp.bfloat16)
    assert stand_in.stride() == (12, 4, 1) and stand_in.stride(1) == 4
    assert stand_in.size == 24 and stand_in.size(2) == 4 and stand_in.size + 1 == 25
    assert (stand_in.itemsize, stand_in.nbytes, stand_in.numel()) == (2, 48, 24)
    assert not ArrayStandIn("k", (4, 4), np.float32, strides=(1, 4)).is_contiguous()
    with pytest.raises(AttributeError, match=r"'zero_': argument 'q' is a stand-in for an array"):
        stand_in.zero_()
    with pytest.raises(HookEffectError):
        stand_in.shape = (1,)


# -- hooks ---------------------------------------------------------------------------------------------------------


@triton.jit
def scale_tiles_kernel(src_desc, out_desc, BM: tl.constexpr, BN: tl.constexpr):
    """``out = 3 src``, one (BM, BN) tile per program, both through descriptors whose block shapes hooks set."""
    m = tl.program_id(0) * BM
    n = tl.program_id(1) * BN
    out_desc.store([m, n], src_desc.load([m, n]) * 3)


TILES = [(8, 16), (16, 8), (16, 16)]


def tiled(config_hook: Any = None, **autotune: Any) -> Any:
    return triton.autotune(
        configs=[triton.Config({"BM": bm, "BN": bn}, num_warps=1, pre_hook=config_hook) for bm, bn in TILES],
        key=["BM"],
        **autotune,
    )(scale_tiles_kernel)


def scale_tiles(kernel: Any, x: jax.Array, launcher: str = "interpreter") -> jax.Array:
    src = jt.TensorDescriptor(x, block_shape=[16, 16])
    out = jt.TensorDescriptor(jnp.empty_like(x), block_shape=[16, 16])
    (m, n) = x.shape
    return jt.triton_call(
        src,
        out,
        kernel=kernel,
        out_shape=x,
        input_output_aliases={1: 0},
        grid=lambda meta: (m // meta["BM"], n // meta["BN"]),
        launcher=launcher,
    )


def set_blocks(nargs: dict[str, Any]) -> None:
    """The hook of Triton's fused-attention tutorial, in small: the descriptors' block shapes from the config."""
    from triton.tools.tensor_descriptor import TensorDescriptor as TritonDescriptor

    assert isinstance(nargs["src_desc"], jt.TensorDescriptor) and isinstance(nargs["src_desc"], TritonDescriptor)
    nargs["src_desc"].block_shape = [nargs["BM"], nargs["BN"]]
    nargs["out_desc"].block_shape = [nargs["BM"], nargs["BN"]]


@pytest.mark.parametrize("where", ["config", "autotuner"])
def test_hooks_that_set_descriptor_block_shapes_run_per_config(where: str) -> None:
    x = rand(32, 32)
    kernel = tiled(set_blocks) if where == "config" else tiled(None, pre_hook=set_blocks)
    jaxpr = jax.make_jaxpr(lambda v: scale_tiles(kernel, v))(x)
    (call,) = [e.params["call"] for e in jaxpr.eqns if "call" in e.params]
    for config, (bm, bn) in zip(call.configs, TILES):
        expected = (bm, bn) if (bm, bn) != (16, 16) else None  # the descriptors' own block shape is kept as is
        assert dict(config.descriptor_blocks) == (
            {} if expected is None else {"src_desc": expected, "out_desc": expected}
        )
        types = [slot.type_str for slot in call.slots_for(config)]
        assert types == [f"tensordesc<fp32[{bm}, {bn}]>"] * 2
    np.testing.assert_array_equal(scale_tiles(kernel, x), np.asarray(x) * 3)


def test_the_block_shapes_a_hook_sets_are_the_ones_each_config_runs_with() -> None:
    """Every config runs on the CPU (one at a time, by fixing its block), tiling the output exactly."""
    x = rand(32, 32)
    for bm, bn in TILES:
        kernel = triton.autotune(configs=[triton.Config({"BM": bm, "BN": bn}, pre_hook=set_blocks)], key=["BM"])(
            scale_tiles_kernel
        )
        np.testing.assert_array_equal(scale_tiles(kernel, x), np.asarray(x) * 3)


@pytest.mark.parametrize(
    ("hook", "effect"),
    [
        (lambda nargs: nargs["out_desc"].base.zero_(), r"raised AttributeError: 'zero_'"),
        (lambda nargs: nargs.__setitem__("BM", 4), r"changes the dict of arguments it was given"),
        (lambda nargs: setattr(nargs["src_desc"], "shape", [4, 4]), r"sets 'shape' of tensor descriptor argument"),
        (lambda nargs: 1 / 0, r"raised ZeroDivisionError"),
    ],
    ids=["zeroes", "writes the dict", "sets the shape", "raises"],
)
def test_a_hook_that_does_more_than_set_block_shapes_is_refused(hook: Any, effect: str) -> None:
    with pytest.raises(NotImplementedError, match=effect + r".*sets block_shape of jt.TensorDescriptor arguments"):
        scale_tiles(tiled(hook), rand(32, 32))


def test_a_hook_that_sets_nothing_for_a_call_without_descriptors_runs_and_the_call_proceeds() -> None:
    seen: list[tuple[Any, ...]] = []

    def hook(nargs: dict[str, Any]) -> None:
        seen.append((nargs["BLOCK"], nargs["num_warps"], nargs["n"], type(nargs["x_ptr"]).__name__))

    configs = [triton.Config({"BLOCK": block}, num_warps=1, pre_hook=hook) for block in (32, 64)]
    kernel = triton.autotune(configs=configs, key=["n"], pre_hook=hook, post_hook=lambda nargs, exception: None)(
        scale_kernel
    )
    x = rand(200)
    out, used = scale(kernel, x)
    np.testing.assert_array_equal(out, np.asarray(x) * 2)
    assert used.tolist()[0] == 32  # the first config runs on the CPU
    assert sorted(set(seen)) == [(32, 1, 200, "ArrayStandIn"), (64, 1, 200, "ArrayStandIn")]


@pytest.mark.parametrize(
    ("hook", "effect"),
    [
        (lambda nargs: nargs["out_ptr"].zero_(), r"raised AttributeError: 'zero_'"),
        (lambda nargs: setattr(nargs["x_ptr"], "shape", (4,)), r"sets 'shape' of array argument 'x_ptr'"),
    ],
    ids=["zeroes", "sets an attribute"],
)
def test_a_hook_that_sets_something_jt_cannot_honour_is_refused_without_descriptors_too(hook: Any, effect: str) -> None:
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 32}, num_warps=1, pre_hook=hook)], key=["n"])(
        scale_kernel
    )
    with pytest.raises(NotImplementedError, match=r"the triton.Config pre_hook of .*" + effect + r".*reset_to_zero"):
        scale(kernel, rand(64))


def test_a_block_shape_that_is_not_a_list_of_ints_is_named() -> None:
    def hook(nargs: dict[str, Any]) -> None:
        nargs["src_desc"].block_shape = [nargs["BM"], "16"]

    with pytest.raises(KernelCallValueError, match=r"sets block_shape of tensor descriptor argument 'src_desc'"):
        scale_tiles(tiled(hook), rand(32, 32))


# -- fixed grids: coverage -----------------------------------------------------------------------------------------


def fresh_name() -> str:
    """A call name no tuning record on this machine has yet (the name is part of a tuning problem's key)."""
    return f"scale_{uuid.uuid4().hex[:12]}"


def skipped_warnings(caught: list[Any]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, jt.ConfigSkippedWarning)]


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_a_fixed_grid_runs_the_first_config_that_covers_the_output(launcher: str) -> None:
    x = rand(64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, used = jax.block_until_ready(jax.jit(lambda v: scale(autotuned(), v, grid=(1,), launcher=launcher))(x))
    np.testing.assert_array_equal(out, np.asarray(x) * 2)
    assert int(used[0]) == 64  # one program: BLOCK=64 is the first config that covers the 64 elements
    assert [message.split(" is skipped")[0] for message in skipped_warnings(caught)] == [
        "triton_call 'scale_kernel': config [BLOCK=16, EVEN=False, num_warps=1, num_stages=3]",
        "triton_call 'scale_kernel': config [BLOCK=32, EVEN=False, num_warps=2, num_stages=3]",
    ]


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_a_config_that_leaves_elements_unwritten_is_skipped_with_the_count(launcher: str) -> None:
    x = rand(96)
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 32})], key=["n"])(
        scale_kernel
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, used = jax.block_until_ready(scale(kernel, x, grid=(3,), launcher=launcher))
    np.testing.assert_array_equal(out, np.asarray(x) * 2)
    assert int(used[0]) == 32
    (message,) = skipped_warnings(caught)
    assert "config [BLOCK=8, EVEN=False, num_warps=4, num_stages=3] is skipped" in message
    assert "it left 72 of 96 elements of output 0 (float32[96]) unwritten" in message


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_tuning_on_the_cpu_never_chooses_a_config_that_leaves_elements_unwritten(
    launcher: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JT_CPU_AUTOTUNE", "1")
    x = rand(96)
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 32})], key=["n"])(
        scale_kernel
    )
    name = fresh_name()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, used = jax.block_until_ready(scale(kernel, x, grid=(3,), launcher=launcher, name=name))
    np.testing.assert_array_equal(out, np.asarray(x) * 2)
    assert int(used[0]) == 32
    assert len(skipped_warnings(caught)) == 1
    call = bound_call(kernel, x, grid=(3,), name=name)
    # The compiled path may hand the kernel to the interpreter, which tunes it itself.
    (record,) = [
        path
        for device in (COMPILED_DEVICE_NAME, CPU_DEVICE_NAME)
        if (path := tuning.record_path(tuning.tuning_key(call, device))) is not None and path.exists()
    ]
    saved = json.loads(record.read_text())
    assert saved["index"] == 1 and saved["seconds"][0] == float("inf")  # timed as infinitely slow, as Triton does
    record.unlink()


@triton.jit
def gather_kernel(x_ptr, index_ptr, n, out_ptr, BLOCK: tl.constexpr):
    """``out[i] = x[index[i]]``: an integer operand, whose values could decide what a program writes."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + tl.load(index_ptr + offsets, mask=mask, other=0)), mask=mask)


@pytest.mark.parametrize("launcher", ["compiled", "interpreter"])
def test_with_an_integer_operand_elements_no_config_writes_refuse_nothing(launcher: str) -> None:
    """One program for 96 elements: neither config writes elements 32 to 95. Offsets read from an integer array
    could decide that (a variable-length batch's), so the call runs with the config that writes as much as any;
    the one that writes less than another is still set aside. Without an integer operand the same grid is refused
    (`test_call_errors`)."""
    x, index = rand(96), jnp.asarray(RNG.permutation(96).astype(np.int32))
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 32})], key=["n"])(
        gather_kernel
    )
    with warnings.catch_warnings(record=True) as caught, jt.cpu_checks(unwritten="ignore"):  # (the point here)
        warnings.simplefilter("always")
        out = jax.block_until_ready(
            jt.triton_call(x, index, 96, kernel=kernel, out_shape=x, grid=(1,), launcher=launcher)
        )
    np.testing.assert_array_equal(np.asarray(out)[:32], np.asarray(x)[np.asarray(index)[:32]])
    assert np.isnan(np.asarray(out)[32:]).all()
    (message,) = skipped_warnings(caught)
    assert "config [BLOCK=8, num_warps=4, num_stages=3] is skipped: it left 88 of 96 elements" in message


def test_outputs_that_are_zeroed_or_aliased_are_not_checked() -> None:
    x = rand(64)
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 32})], key=["n"])(
        scale_kernel
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, used = jax.block_until_ready(scale(kernel, x, grid=(2,), zeroed_outputs=(0,)))
    assert int(used[0]) == 8 and not skipped_warnings(caught)  # the first config runs: only 16 elements written
    np.testing.assert_array_equal(out, np.concatenate([np.asarray(x[:16]) * 2, np.zeros(48, np.float32)]))


@triton.jit
def add_to_pair_kernel(pair, n, BLOCK: tl.constexpr):
    """Adds 1 to ``pair[0]`` and 2 to ``pair[1]`` in place, ``BLOCK`` elements per program."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(pair[0] + offsets, tl.load(pair[0] + offsets, mask=mask) + 1, mask=mask)
    tl.store(pair[1] + offsets, tl.load(pair[1] + offsets, mask=mask) + 2, mask=mask)


@pytest.mark.parametrize("jit", [False, True])
def test_an_autotuned_kernel_updates_a_tuple_of_refs_with_a_fixed_grid(jit: bool) -> None:
    """As jax-triton 0.4 does: ``grid=(8,)`` with ``BLOCK`` 1 or 8, on two ``jax.new_ref`` operands in a tuple."""
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 1}), triton.Config({"BLOCK": 8})], key=["n"])(
        add_to_pair_kernel
    )
    a, b = rand(8), rand(8)
    a_ref, b_ref = jax.new_ref(a), jax.new_ref(b)

    def update(refs: Any) -> Any:
        return jt.triton_call(refs, 8, kernel=kernel, out_type=(), grid=(8,))

    assert (jax.jit(update) if jit else update)((a_ref, b_ref)) == ()
    np.testing.assert_array_equal(a_ref[...], np.asarray(a) + 1)
    np.testing.assert_array_equal(b_ref[...], np.asarray(b) + 2)


def test_a_handlers_record_with_skipped_configs_names_them_and_its_winner() -> None:
    key = uuid.uuid4().hex * 2
    path = tuning.tuning_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    skipped = [[0, "it left 48 of 64 elements of output 0 unwritten"], [2, "it cannot launch: too many resources"]]
    path.write_text(json.dumps({"index": 1, "seconds": [None, 2e-5, None], "skipped": skipped, "tuned_by": "jt_x"}))
    assert tuning.load_choice(key, 3) == 1
    assert tuning.skipped_configs(key, 3) == [tuple(entry) for entry in skipped]
    path.write_text(json.dumps({"index": 0, "seconds": [None, 2e-5, 1e-5], "tuned_by": "jt_x"}))
    with pytest.warns(RuntimeWarning, match="is unusable"):
        assert tuning.load_choice(key, 3) is None  # its index names a config it set aside
    assert not path.exists()


# -- tuning before lowering ------------------------------------------------------------------------------------------


def lowerings_tuning_ahead(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Makes the compiled CPU launcher tune ahead of lowering; returns the list that records, per lowering of a
    call, the ``BLOCK`` of each config it keeps."""
    from jt_core.cpu.compiled.launcher import CpuCompiledLauncher
    from jt_core.lowering import dispatch

    monkeypatch.setenv("JT_CPU_AUTOTUNE", "1")
    monkeypatch.setattr(CpuCompiledLauncher, "tunes_ahead", lambda self, call: True)
    lowered: list[list[int]] = []
    lower_with = dispatch.lower_with

    def spy(ctx: Any, call: KernelCall, *args: Any, **kwargs: Any) -> Any:
        lowered.append(blocks(call))
        return lower_with(ctx, call, *args, **kwargs)

    monkeypatch.setattr(dispatch, "lower_with", spy)
    return lowered


def test_a_launcher_that_tunes_ahead_lowers_the_winner_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidates run first, on scratch buffers, through the launcher itself (whose lowering of that run keeps
    every config); the call is then lowered with the winner alone."""
    lowered = lowerings_tuning_ahead(monkeypatch)
    x = rand(100)
    before = dict(tuning.tuning_stats)
    name = fresh_name()
    out, used = jax.jit(lambda v: scale(autotuned(), v, launcher="compiled", name=name))(x)
    np.testing.assert_array_equal(out, np.asarray(x) * 2)
    assert lowered == [list(BLOCKS), [int(used[0])]]
    assert tuning.tuning_stats["tunings"] == before["tunings"] + 1


@triton.jit
def gather_scale_kernel(x_ptr, index_ptr, n, out_ptr, used_ptr, BLOCK: tl.constexpr):
    """``out = 2 x[index]``, ``index`` offsets into ``x``; program 0 writes the ``BLOCK`` it ran with to ``used``."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    value = tl.load(x_ptr + tl.load(index_ptr + offsets, mask=mask, other=0), mask=mask)
    tl.store(out_ptr + offsets, value + value, mask=mask)
    if tl.program_id(0) == 0:
        tl.store(used_ptr, BLOCK)


def test_a_call_reading_integer_arrays_is_tuned_on_its_own_operands_not_ahead(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Scratch integers cannot stand for offsets (a gather's indices, a variable-length batch's cu_seqlens): such a
    call is not run on scratch data before lowering, which says so; every config is lowered and the call tunes
    on its own operands when it runs."""
    lowered = lowerings_tuning_ahead(monkeypatch)
    kernel = triton.autotune(configs=configs(), key=["n"])(gather_scale_kernel)
    x = rand(100)
    index = jnp.asarray(RNG.permutation(100).astype(np.int32))
    before = dict(tuning.tuning_stats)
    name = fresh_name()

    def call(x: jax.Array, index: jax.Array) -> Any:
        return jt.triton_call(
            x, index, x.size, kernel=kernel, out_shape=(x, jax.ShapeDtypeStruct((1,), jnp.int32)),
            grid=lambda m: (triton.cdiv(x.size, m["BLOCK"]),), launcher="compiled", name=name,
        )  # fmt: skip

    with caplog.at_level("INFO", logger="jt_core.lowering"):
        out, used = jax.jit(call)(x, index)
    np.testing.assert_array_equal(out, np.asarray(x)[np.asarray(index)] * 2)
    assert lowered == [list(BLOCKS)]  # lowered once, with every config: no run on scratch data
    assert int(used[0]) in BLOCKS
    assert tuning.tuning_stats["tunings"] == before["tunings"] + 1  # tuned when it ran
    said = [r.getMessage() for r in caplog.records if name in r.getMessage()]
    assert any("not tuned before lowering: an integer array operand" in m for m in said), said


def test_the_gpu_launchers_say_who_tunes_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    from jt_core.gpu import launchers

    class Handler(launchers.HandlerLauncher):
        platform = "cuda"

    class Jaxlib(launchers.JaxlibLauncher):
        platform = "cuda"

    fixed = bound_call(autotuned(), rand(64), grid=(4,))
    sized = bound_call(autotuned(), rand(64))
    assert Jaxlib().needs_tuning_ahead(fixed) and not Jaxlib().needs_tuning_ahead(sized)
    assert not Handler().tunes_ahead(sized)  # lowering without a device: the handler chooses when it runs
    monkeypatch.setattr(launchers, "devices_present", lambda platform: True)
    assert Handler().tunes_ahead(sized)
    monkeypatch.setenv("JT_TUNE_AHEAD", "0")
    assert not Handler().tunes_ahead(sized)
