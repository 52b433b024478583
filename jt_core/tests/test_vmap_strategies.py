"""``jax.vmap`` of ``triton_call`` on the CPU backend: the grid and sequential strategies and their edge cases."""

from __future__ import annotations

import zlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.batching import program_axes_read
from jt_core.errors import KernelCallValueError
from jt_core.testing import accumulate_kernel, sample_add_kernel, scale_inplace_kernel

BLOCK = 32


@triton.jit
def row_of(AXIS: tl.constexpr):
    return tl.program_id(AXIS)


@triton.jit
def scale_rows_kernel(x_ptr, s_ptr, out_ptr, n_cols, BLOCK: tl.constexpr, AXIS: tl.constexpr):
    # One program per row; the row index comes from a helper reading axis AXIS.
    row = row_of(AXIS)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, x * tl.load(s_ptr), mask=mask)


@triton.jit
def dynamic_axis_kernel(x_ptr, out_ptr, axis):
    tl.store(out_ptr, tl.load(x_ptr) + tl.program_id(axis).to(tl.float32))


@triton.jit
def pair_kernel(pair, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(pair[0] + offs, mask=mask)
    b = tl.load(pair[1] + offs, mask=mask)
    tl.store(out_ptr + offs, a * b, mask=mask)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 16}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2)], key=["n"]
)
@triton.jit
def autotuned_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add(x: Any, y: Any, vmap: str = "auto") -> Any:
    return jt.triton_call(
        x,
        y,
        n=x.size,
        kernel=sample_add_kernel,
        out_shape=x,
        grid=(triton.cdiv(x.size, BLOCK),),
        BLOCK=BLOCK,
        vmap=vmap,
    )


def kernel_calls(fn: Any, *args: Any) -> list[Any]:
    """The ``KernelCall`` of every triton_kernel_call in ``fn``'s jaxpr (sub-jaxprs included)."""
    found: list[Any] = []

    def walk(jaxpr: Any) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name == "triton_kernel_call":
                found.append(eqn.params["call"])
            for value in eqn.params.values():
                for inner in value if isinstance(value, (tuple, list)) else [value]:
                    if hasattr(inner, "jaxpr") and hasattr(inner.jaxpr, "eqns"):
                        walk(inner.jaxpr)
                    elif hasattr(inner, "eqns"):
                        walk(inner)

    walk(jax.make_jaxpr(fn)(*args).jaxpr)
    return found


def has_scan(fn: Any, *args: Any) -> bool:
    return "scan" in str(jax.make_jaxpr(fn)(*args))


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    # Random data, seeded per test so that a failure reproduces.
    return np.random.default_rng(zlib.crc32(request.node.name.encode()))


def test_grid_strategy_batches_on_a_free_axis_in_one_launch(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 50), dtype=np.float32)
    y = rng.standard_normal((3, 50), dtype=np.float32)
    f = jax.vmap(lambda a, b: add(a, b, "grid"))
    np.testing.assert_allclose(jax.jit(f)(x, y), x + y, rtol=1e-6)
    (call,) = kernel_calls(f, x, y)
    assert call.batch.batch_shape == (3,)
    assert call.configs[0].grid == (2, 1, 3)
    assert not has_scan(f, x, y)


def test_sequential_strategy_launches_once_per_element(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 50), dtype=np.float32)
    y = rng.standard_normal((3, 50), dtype=np.float32)
    f = jax.vmap(lambda a, b: add(a, b, "sequential"))
    np.testing.assert_allclose(jax.jit(f)(x, y), x + y, rtol=1e-6)
    (call,) = kernel_calls(f, x, y)
    assert call.batch is None and call.operand_avals[0].shape == (50,)
    assert has_scan(f, x, y)


@pytest.mark.parametrize(("in_axes", "x_shape"), [((1, None), (50, 3)), ((0, None), (3, 50)), ((1, 0), (50, 3))])
def test_in_axes_other_than_zero_and_unbatched_operands(
    rng: np.random.Generator, in_axes: tuple[Any, Any], x_shape: tuple[int, int]
) -> None:
    x = rng.standard_normal(x_shape, dtype=np.float32)
    y = rng.standard_normal((50,) if in_axes[1] is None else (3, 50), dtype=np.float32)
    out = jax.jit(jax.vmap(add, in_axes=in_axes))(x, y)
    xs = np.moveaxis(x, in_axes[0], 0)
    np.testing.assert_allclose(out, xs + y, rtol=1e-6)


def test_unbatched_operand_is_shared_not_copied(rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 50), dtype=np.float32)
    y = rng.standard_normal(50, dtype=np.float32)
    f = jax.vmap(add, in_axes=(0, None))
    (call,) = kernel_calls(f, x, y)
    assert call.operand_avals[1].shape == (50,)  # y is passed as is
    strides = dict(call.configs[0].constexprs)
    assert strides["_JT_S1_0"] == 0 and strides["_JT_S0_0"] == 50
    assert "broadcast_in_dim" not in str(jax.make_jaxpr(f)(x, y))
    np.testing.assert_allclose(jax.jit(f)(x, y), x + y, rtol=1e-6)


@pytest.mark.parametrize("vmap", ["grid", "sequential"])
def test_nested_vmap_flattens_batch_dimensions(rng: np.random.Generator, vmap: str) -> None:
    x = rng.standard_normal((2, 3, 40), dtype=np.float32)
    y = rng.standard_normal((2, 40), dtype=np.float32)
    inner = jax.vmap(lambda a, b: add(a, b, vmap), in_axes=(0, None))
    f = jax.vmap(inner, in_axes=(0, 0))
    np.testing.assert_allclose(jax.jit(f)(x, y), x + y[:, None], rtol=1e-6)
    (call,) = kernel_calls(f, x, y)
    if vmap == "grid":
        assert call.batch.batch_shape == (2, 3)
        assert call.batch.operand_dims == ((True, True), (True, False))
        assert call.configs[0].grid == (2, 1, 6)


def test_three_levels_with_mixed_axes(rng: np.random.Generator) -> None:
    x = rng.standard_normal((20, 2, 2, 3), dtype=np.float32)  # element axis first, batch axes after
    y = rng.standard_normal((2, 20), dtype=np.float32)
    f = jax.vmap(jax.vmap(jax.vmap(add, in_axes=(1, None)), in_axes=(1, None)), in_axes=(1, 0))
    out = jax.jit(f)(x, y)
    expected = np.transpose(x, (1, 2, 3, 0)) + y[:, None, None, :]
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    (call,) = kernel_calls(f, x, y)
    assert call.batch.batch_shape == (2, 2, 3)


def test_auto_uses_grid_when_the_kernel_leaves_an_axis_free(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 20), dtype=np.float32)
    (call,) = kernel_calls(jax.vmap(add), x, x)
    assert call.batch is not None and call.batch.axis == 2


def scale_rows(x: Any, s: Any, axis: int, vmap: str = "auto") -> Any:
    grid = [1, 1, 1]
    grid[axis] = x.shape[0]
    return jt.triton_call(
        x,
        s,
        n_cols=x.shape[1],
        kernel=scale_rows_kernel,
        out_shape=x,
        grid=tuple(grid),
        BLOCK=32,
        AXIS=axis,
        vmap=vmap,
    )


def test_helper_reading_an_axis_is_detected(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3, 20), dtype=np.float32)
    s = rng.standard_normal((2,), dtype=np.float32)
    # The kernel reads axis 2 (through the helper, with AXIS a constexpr): the batch must avoid it.
    f = jax.vmap(lambda a, b: scale_rows(a, b, 2))
    (call,) = kernel_calls(f, x, s)
    assert call.batch.axis == 0
    np.testing.assert_allclose(jax.jit(f)(x, s), x * s[:, None, None], rtol=1e-6)
    assert program_axes_read(scale_rows_kernel, {"AXIS": 1, "BLOCK": 32}) == {1}


def test_auto_falls_back_to_sequential_when_the_axes_read_are_unknown(
    rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tl.program_id(axis) with an axis known only at run time: only the interpreter runs it, Triton's front end
    # (which the CPU backend runs at lowering) refuses it.
    monkeypatch.setenv("JT_CPU_COMPILE_CHECK", "0")
    xs = rng.standard_normal(3, dtype=np.float32)
    f = jax.vmap(
        lambda a: jt.triton_call(
            a, axis=0, kernel=dynamic_axis_kernel, out_shape=jax.ShapeDtypeStruct((), a.dtype), grid=(1,)
        )
    )
    assert program_axes_read(dynamic_axis_kernel) is None
    assert has_scan(f, xs)
    np.testing.assert_allclose(jax.jit(f)(xs), xs, rtol=1e-6)


def test_grid_strategy_refuses_clearly_when_not_applicable(rng: np.random.Generator) -> None:
    xs = rng.standard_normal(2, dtype=np.float32)
    f = jax.vmap(
        lambda a: jt.triton_call(
            a, axis=0, kernel=dynamic_axis_kernel, out_shape=jax.ShapeDtypeStruct((), a.dtype), grid=(1,), vmap="grid"
        )
    )
    with pytest.raises(KernelCallValueError, match=r"vmap='grid'.*axis that is not a constant.*vmap='sequential'"):
        jax.make_jaxpr(f)(xs)


def test_batch_above_the_axis_limit_uses_sequential_or_refuses() -> None:
    x = jnp.zeros((70000, 8), jnp.float32)
    assert has_scan(jax.vmap(add), x, x)
    with pytest.raises(KernelCallValueError, match="exceeds the launch limit 65535 of grid axis 2"):
        jax.make_jaxpr(jax.vmap(lambda a, b: add(a, b, "grid")))(x, x)


def test_invalid_strategy_is_rejected() -> None:
    x = jnp.ones(8, jnp.float32)
    with pytest.raises(
        KernelCallValueError, match=r"vmap= must be one of \['auto', 'grid', 'sequential'\], got 'fast'"
    ):
        add(x, x, "fast")


def test_batched_zero_dimensional_operand(rng: np.random.Generator) -> None:
    # A traced scalar is passed by pointer (a 0-d array), so batching it is batching a pointer: stride 1.
    x = rng.standard_normal((3, 2, 20), dtype=np.float32)
    s = rng.standard_normal(3, dtype=np.float32)
    f = jax.vmap(lambda a, b: scale_rows(a, b, 0))
    (call,) = kernel_calls(f, x, s)
    assert call.batch is not None and dict(call.configs[0].constexprs)["_JT_S1_0"] == 1
    np.testing.assert_allclose(jax.jit(f)(x, s), x * s[:, None, None], rtol=1e-6)


@pytest.mark.parametrize("vmap", ["grid", "sequential"])
def test_aliased_unbatched_input_gets_a_copy_per_element(rng: np.random.Generator, vmap: str) -> None:
    x = rng.standard_normal(40, dtype=np.float32)
    factors = rng.standard_normal(3, dtype=np.float32)

    def scale(a: Any, f: Any) -> Any:
        del f
        return jt.triton_call(
            a,
            a.size,
            2.5,
            kernel=scale_inplace_kernel,
            out_shape=a,
            input_output_aliases={0: 0},
            grid=(triton.cdiv(a.size, BLOCK),),
            BLOCK=BLOCK,
            vmap=vmap,
        )

    out = jax.jit(jax.vmap(scale, in_axes=(None, 0)))(x, factors)
    np.testing.assert_allclose(out, np.broadcast_to(x * 2.5, (3, 40)), rtol=1e-6)


def test_zeroed_outputs_are_zeroed_for_every_batch_element(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 70), dtype=np.float32)

    def total(a: Any) -> Any:
        return jt.triton_call(
            a,
            n=a.size,
            kernel=accumulate_kernel,
            out_shape=jax.ShapeDtypeStruct((1,), a.dtype),
            zeroed_outputs=(0,),
            grid=(triton.cdiv(a.size, BLOCK),),
            BLOCK=BLOCK,
        )

    f = jax.vmap(total)
    assert kernel_calls(f, x)[0].batch is not None
    # The kernel sums in float32 in block order: compare with a float64 reference, within float32 rounding of
    # sums of this size (a relative bound alone fails on sums that happen to land near zero).
    reference = x.astype(np.float64).sum(axis=1)
    atol = 1e-6 * np.abs(x).sum(axis=1).max()
    np.testing.assert_allclose(jax.jit(f)(x)[:, 0], reference, rtol=1e-5, atol=atol)


def test_autotuned_kernel_gets_a_wrapper_per_config(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 60), dtype=np.float32)
    y = rng.standard_normal((2, 60), dtype=np.float32)

    def f(a: Any, b: Any) -> Any:
        return jt.triton_call(
            a,
            b,
            n=a.size,
            kernel=autotuned_add_kernel,
            out_shape=a,
            grid=lambda meta: (triton.cdiv(a.size, meta["BLOCK"]),),
        )

    (call,) = kernel_calls(jax.vmap(f), x, y)
    assert [(c.constexpr_dict["BLOCK"], c.grid) for c in call.configs] == [(16, (4, 1, 2)), (64, (1, 1, 2))]
    np.testing.assert_allclose(jax.jit(jax.vmap(f))(x, y), x + y, rtol=1e-6)


def test_tuple_parameters_are_offset_leaf_by_leaf(rng: np.random.Generator) -> None:
    a = rng.standard_normal((3, 20), dtype=np.float32)
    b = rng.standard_normal(20, dtype=np.float32)

    def f(p: Any, q: Any) -> Any:
        return jt.triton_call((p, q), n=20, kernel=pair_kernel, out_shape=p, grid=(1,), BLOCK=32)

    out = jax.jit(jax.vmap(f, in_axes=(0, None)))(a, b)
    np.testing.assert_allclose(out, a * b, rtol=1e-6)


def test_refs_are_updated_per_batch_element(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 40), dtype=np.float32)

    def f(a: Any) -> Any:
        ref = jax.new_ref(a)
        jt.triton_call(ref, a.size, 3.0, kernel=scale_inplace_kernel, out_shape=(), grid=(2,), BLOCK=BLOCK)
        return ref[...]

    np.testing.assert_allclose(jax.jit(jax.vmap(f))(x), x * 3.0, rtol=1e-6)


def test_grid_and_sequential_agree_with_lax_map(rng: np.random.Generator) -> None:
    x = rng.standard_normal((4, 33), dtype=np.float32)
    y = rng.standard_normal((4, 33), dtype=np.float32)
    reference = jax.lax.map(lambda ab: add(*ab), (x, y))
    for vmap in ("grid", "sequential"):
        np.testing.assert_array_equal(jax.jit(jax.vmap(lambda a, b, v=vmap: add(a, b, v)))(x, y), reference)


def test_wrapper_source_is_cached_on_disk(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    from jt_core import batching

    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(batching, "_wrappers", {})
    x = rng.standard_normal((2, 10), dtype=np.float32)
    np.testing.assert_allclose(jax.jit(jax.vmap(add))(x, x), 2 * x, rtol=1e-6)
    (source,) = (tmp_path / "vmap").glob("*.py")
    text = source.read_text()
    assert "tl.program_id(2)" in text and "_jt_kernel(" in text
    assert not list((tmp_path / "vmap").glob(".tmp-*"))


def test_wrapper_kernel_compiles_for_cuda_without_a_gpu(rng: np.random.Generator) -> None:
    from triton.backends.compiler import GPUTarget

    from jt_core.triton_dialect import TritonDialect

    x = rng.standard_normal((3, 50), dtype=np.float32)
    (call,) = kernel_calls(jax.vmap(add, in_axes=(0, None)), x, x[0])
    config = call.configs[0]
    source = TritonDialect().make_source(call.fn, call.specialization(config), None)  # type: ignore[arg-type]
    compiled = triton.compile(
        source, target=GPUTarget("cuda", 80, 32), options={"num_warps": 4, "enable_fp_fusion": True}
    )
    ptx = compiled.asm["ptx"]
    assert "ctaid.z" in ptx  # the batch index comes from grid axis 2


def _renamed_add_kernel(name: str) -> Any:
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    add_kernel.__name__ = name
    return triton.jit(add_kernel)


def test_a_kernel_named_with_a_path_writes_nothing_outside_the_cache(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    """A function's ``__name__`` can be anything; the wrapper's file (and its temporary file) used to be named after
    it, so ``../`` in it wrote outside the cache folder."""
    cache_root = tmp_path / "deep" / "cache"
    monkeypatch.setenv("JT_CACHE_DIR", str(cache_root))
    kernel = _renamed_add_kernel("../../../escaped")
    x = jax.ShapeDtypeStruct((2, 40), jnp.float32)

    def f(a: jax.Array, b: jax.Array) -> jax.Array:
        return jt.triton_call(a, b, kernel=kernel, out_shape=a, grid=2, n=a.size, BLOCK=BLOCK, vmap="grid")

    (call,) = kernel_calls(jax.vmap(f), x, x)  # batching generates the wrapper (and writes its file)
    assert call.name == "../../../escaped" and call.batch is not None
    outside = [p for p in tmp_path.rglob("*") if p.is_file() and cache_root not in p.parents]
    assert outside == []
    (source,) = (cache_root / "vmap").glob("*.py")
    assert source.name.startswith("_jt_vmap_" + "_" * 9 + "escaped_")


def test_vmap_works_under_a_cache_path_that_is_not_utf8(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    """A home folder named in Latin-1 (``b"caf\\xe9"``): Python holds its path with surrogate escapes, which MLIR,
    given the wrapper's file name by Triton, refused, so that every vmap call failed."""
    import os

    from jt_core import batching

    folder = tmp_path / os.fsdecode(b"caf\xe9")
    monkeypatch.setenv("JT_CACHE_DIR", str(folder / "jt"))
    monkeypatch.setattr(batching, "_wrappers", {})
    x = rng.standard_normal((3, 40), dtype=np.float32)
    np.testing.assert_allclose(jax.jit(jax.vmap(add))(x, x), 2 * x, rtol=1e-6)
    (source,) = (folder / "jt" / "vmap").glob("*.py")
    assert "_jt_kernel(" in source.read_text()
