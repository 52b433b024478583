"""Lowering for ``rocm`` on a machine without an AMD GPU: the custom call jaxlib's ROCm Triton handler runs.

Every test here selects that launcher (``"jaxlib"``); jt's own handler (the default) is tested in
``test_rocm_ffi_lowering.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import triton
import triton.language as tl
from rocm_testlib import add_one_kernel, bound_call, use_launcher

import jt_core as jt
from jt_core.errors import KernelCallTypeError, KernelCallValueError
from jt_core.testing import custom_calls, decode_jaxlib_call, out_first_kernel, sample_add_kernel
from jt_core.testing._calls import compile_request
from jt_core.testing._concurrency import distinct_kernels
from jt_rocm.backend import RocmBackend

F32_64 = jax.ShapeDtypeStruct((64,), jnp.float32)


@pytest.fixture(autouse=True)
def _hsaco_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "hsaco"
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(folder))
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx942")
    use_launcher(monkeypatch, "jaxlib")
    return folder


def lower(f: Any, *specs: Any) -> Any:
    # A fresh function each time: JAX caches lowerings per traced function, and the tests change JT_ROCM_ARCH.
    return jax.jit(lambda *args: f(*args)).trace(*specs).lower(lowering_platforms=("rocm",))


def opaque_of(op: Any) -> dict[str, Any]:
    config = op.attributes["mhlo.backend_config"]
    return decode_jaxlib_call(bytes(config["opaque"].value_bytes))


def add(x: Any, y: Any, **kwargs: Any) -> Any:
    return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32, **kwargs)


def test_lowers_to_jaxlibs_ffi_custom_call() -> None:
    lowered = lower(add, F32_64, F32_64)
    (op,) = custom_calls(lowered)
    assert op.attributes["call_target_name"].value == "triton_kernel_call_ffi"
    # JAX spells XLA's typed FFI (api_version=4) as a dictionary in mhlo.backend_config.
    assert "mhlo.backend_config" in op.attributes
    assert len(op.operands) == 2 and len(op.results) == 1
    call = opaque_of(op)
    assert call["name"] == "sample_add_kernel"
    launch = call["kernel_call"]
    assert launch["kernel_name"] == "sample_add_kernel"
    assert launch["num_warps"] == 4  # 4 wavefronts of 64 threads: jaxlib counts 64 threads per warp on ROCm
    assert launch["num_ctas"] == 1
    assert launch["grid"] == (2, 1, 1)
    assert launch["parameters"] == [("array", 0, 16), ("array", 0, 16), ("array", 0, 16), ("i32", 64)]


def test_hsaco_travels_as_a_content_addressed_file(_hsaco_dir: Path, tmp_path: Path) -> None:
    # A kernel no cache has seen: a binary carries its source's file and lines, and a cache serves a kernel of the
    # same text compiled from another file (another install, an older layout) as well, so the reference below must
    # be compiled here, from this kernel.
    (kernel,) = distinct_kernels(tmp_path, "hsaco", 1)

    def scale(x: Any) -> Any:
        return jt.triton_call(x, 64, kernel=kernel, out_shape=x, grid=2, BLOCK=32)

    launch = opaque_of(custom_calls(lower(scale, F32_64))[0])["kernel_call"]
    path = Path(launch["module"])
    assert path.parent == _hsaco_dir
    backend = RocmBackend()
    call = bound_call(kernel, args=(F32_64, 64), meta={"BLOCK": 32}, backend_options={"arch": "gfx942"})
    expected = backend.compile(compile_request(backend, call))
    assert path.read_bytes() == expected.binary
    path.unlink()  # recent jaxlibs delete the file once loaded; the next lowering writes it again
    lower(scale, F32_64)
    assert path.read_bytes() == expected.binary


def test_wave32_architectures_count_threads_in_jaxlibs_units(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx1100")
    launch = opaque_of(custom_calls(lower(add, F32_64, F32_64))[0])["kernel_call"]
    assert launch["num_warps"] == 2  # 4 wavefronts of 32 threads = 128 threads = 2 x 64


def test_single_wave32_warp_cannot_be_launched_by_jaxlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx1100")
    with pytest.raises(KernelCallValueError, match=r"gfx1100 with 1 warps of 32 threads .* use an even num_warps"):
        lower(lambda x, y: add(x, y, num_warps=1), F32_64, F32_64)


def test_lowering_is_deterministic_across_processes(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import jax, jax.numpy as jnp
        import jt_core as jt
        from jt_core.testing import sample_add_kernel
        def f(x, y):
            return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32)
        s = jax.ShapeDtypeStruct((64,), jnp.float32)
        print(jax.jit(f).trace(s, s).lower(lowering_platforms=("rocm",)).as_text())
        """
    )
    env = {
        **os.environ,
        "JT_ROCM_ARCH": "gfx942",
        "JT_ROCM_HSACO_DIR": str(tmp_path / "h"),
        "JT_LAUNCHER_ROCM": "jaxlib",
    }
    texts = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True).stdout
        for _ in range(2)
    ]
    assert "triton_kernel_call_ffi" in texts[0]
    assert texts[0] == texts[1]


def test_output_declared_before_input_gets_its_own_buffer_in_parameter_order() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(kernel=out_first_kernel, x_ptr=x, scale=2.0, n=64, out_shape=x, grid=2, BLOCK=32)

    lowered = lower(f, F32_64)
    (op,) = custom_calls(lowered)
    # Buffers are handed out operands first, in parameter order: the output's buffer becomes operand 0 and the
    # result is written through it.
    assert len(op.operands) == 2
    assert op.operands[1].get_name() == "%arg0"
    assert op.operands[0].get_name() != "%arg0"
    aliases = str(op.attributes["output_operand_aliases"])
    assert "operand_index = 0" in aliases
    launch = opaque_of(op)["kernel_call"]
    assert launch["parameters"] == [("array", 0, 16), ("array", 0, 16), ("f32", 2.0), ("i32", 64)]
    # The CPU interpreter agrees on what the kernel computes with these bindings.
    x = jnp.asarray(np.random.default_rng(0).standard_normal(64), jnp.float32)
    np.testing.assert_allclose(np.asarray(jax.jit(f)(x)), np.asarray(x) * 2)


def test_zeroed_output_is_cleared_by_the_handler() -> None:
    op = custom_calls(lower(lambda x, y: add(x, y, zeroed_outputs=(0,)), F32_64, F32_64))[0]
    params = opaque_of(op)["kernel_call"]["parameters"]
    assert params[2] == ("array", 64 * 4, 16)
    assert params[0] == ("array", 0, 16)


def test_aliased_output_shares_the_operand_buffer() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=add_one_kernel, out_shape=x, grid=2, n=64, BLOCK=32, input_output_aliases={0: 0}
        )

    (op,) = custom_calls(lower(f, F32_64))
    assert len(op.operands) == 1
    assert "operand_index = 0" in str(op.attributes["output_operand_aliases"])
    assert opaque_of(op)["kernel_call"]["parameters"] == [("array", 0, 16), ("i32", 64)]


_autotuned_add = triton.autotune(
    configs=[triton.Config({"BLOCK": 32}, num_warps=2), triton.Config({"BLOCK": 64}, num_warps=4)], key=["n"]
)(sample_add_kernel)


def test_autotuned_kernel_lowers_every_candidate() -> None:
    def f(x: Any, y: Any) -> Any:
        return jt.triton_call(x, y, kernel=_autotuned_add, out_shape=x, grid=lambda m: (64 // m["BLOCK"],), n=64)

    call = opaque_of(custom_calls(lower(f, F32_64, F32_64))[0])
    configs = call["autotuned"]["configs"]
    assert [(c["grid"], c["num_warps"]) for c, _ in configs] == [((2, 1, 1), 2), ((1, 1, 1), 4)]
    assert "BLOCK" in configs[0][1] and "32" in configs[0][1]
    assert call["autotuned"]["aliases"] == []


@triton.jit
def _scalars_kernel(a, b, c, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, (a + b + c).to(tl.float32) + tl.zeros((BLOCK,), tl.float32))


def test_scalars_are_passed_with_their_triton_types() -> None:
    def f() -> Any:
        out = jax.ShapeDtypeStruct((16,), jnp.float32)
        return jt.triton_call(1.5, 2**40, np.float64(0.25), kernel=_scalars_kernel, out_shape=out, grid=1, BLOCK=16)

    params = opaque_of(custom_calls(lower(f))[0])["kernel_call"]["parameters"]
    assert params == [("f32", 1.5), ("i64", 2**40), ("f64", 0.25), ("array", 0, 16)]


def test_scalar_type_jaxlib_cannot_pass_is_refused() -> None:
    def f() -> Any:
        out = jax.ShapeDtypeStruct((16,), jnp.float32)
        return jt.triton_call(1.5, 3, np.float16(0.5), kernel=_scalars_kernel, out_shape=out, grid=1, BLOCK=16)

    with pytest.raises(KernelCallTypeError, match=r"scalar argument 'c' has Triton type fp16"):
        lower(f)
