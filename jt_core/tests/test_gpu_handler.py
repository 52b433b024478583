"""jt's GPU launch handler (jt_core.gpu.handler and its shared headers) over a driver that runs nothing
(core_fake_launch.cc): it builds as a GPU plugin's does, and the state the handler parses from the attributes
jt_core.gpu.attributes writes, on XLA's CPU client, is the call's."""

from __future__ import annotations

import json
import shutil
import struct
import types
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import triton
import triton.language as tl
from core_gpu_testlib import (
    FAKE_HANDLER,
    FakeJtLauncher,
    bound_call,
    compile_configs,
    fake_runtime,
    fake_tuning,
    parsed_state,
)

import jt_core as jt
from jt_core.call import KernelCall
from jt_core.plugin.values import CompiledKernel
from jt_core.testing import (
    LaunchHandlerConformance,
    autotuned_scale_inplace_kernel,
    out_first_kernel,
    run_on_cpu_client,
    sample_add_kernel,
)

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="no compiler")

F32 = jnp.float32


class TestFakeDriverHandlerConformance(LaunchHandlerConformance):
    runtime_library = "libjt_fake_runtime"

    @pytest.fixture
    def launcher(self) -> FakeJtLauncher:
        return FakeJtLauncher()

    @pytest.fixture
    def handler_call(self) -> tuple[KernelCall, list[CompiledKernel]]:
        x = jax.ShapeDtypeStruct((64,), F32)
        call = bound_call(
            lambda a, b: jt.triton_call(a, b, kernel=sample_add_kernel, out_shape=a, grid=2, n=64, BLOCK=32), x, x
        )
        return call, compile_configs(call)


def _parse(call: KernelCall, kernels: list[CompiledKernel], device: Any | None = None) -> dict[str, Any]:
    """Runs the call's preloaded instantiate stage with the fake runtime present; returns the state it parsed."""
    with fake_runtime():
        message = run_on_cpu_client(FakeJtLauncher(), call, kernels, preloaded=True, device=device)
    assert "platform stream" in message or "GPU context" in message, message
    return parsed_state()


def test_instantiate_parses_the_parameter_layout_scalars_and_launch_shape() -> None:
    rng = np.random.default_rng()
    n = int(rng.integers(40, 200))
    scale = float(rng.uniform(0.5, 4.0))
    warps = int(rng.choice([1, 2, 4, 8]))
    x = jax.ShapeDtypeStruct((n,), F32)
    call = bound_call(
        lambda a: jt.triton_call(
            x_ptr=a, scale=scale, kernel=out_first_kernel, out_shape=a, grid=triton.cdiv(n, 32), n=n, BLOCK=32,
            num_warps=warps, zeroed_outputs=(0,), name="scaled_copy",
        ),
        x,
    )  # fmt: skip
    kernels = compile_configs(call)
    state = _parse(call, kernels)
    assert state["name"] == "scaled_copy"
    # out_ptr is result 0, x_ptr operand 0; scale and n are scalars in the first two 8-byte slots.
    assert state["param_kinds"] == [1, 0, 2, 2]
    assert state["param_indices"] == [0, 0, 0, 8]
    assert bytes.fromhex(state["scalars"]) == struct.pack("<f", scale) + bytes(4) + struct.pack("<i", n) + bytes(4)
    assert (state["chosen"], state["restore"], state["scratch_result"], state["tuning_file"]) == (0, [], -1, "")
    (config,) = state["configs"]
    assert config["symbol"] == "out_first_kernel" and bytes.fromhex(config["binary"]) == kernels[0].binary
    assert config["label"] == call.configs[0].label
    assert config["grid"] == [triton.cdiv(n, 32), 1, 1]
    assert config["block_x"] == warps * 32  # threads per program: warps times the target's warp size
    assert config["zeroed"] == [0] and config["tensor_maps"] == []
    assert (config["shared_mem"], config["num_ctas"], config["cooperative"], config["pdl"]) == (0, 1, False, False)


def test_an_aliased_input_is_passed_the_result_buffer_and_restored_after_tuning() -> None:
    n = int(np.random.default_rng().integers(100, 3000))
    x = jax.ShapeDtypeStruct((n,), F32)
    call = bound_call(
        lambda a: jt.triton_call(
            a, kernel=autotuned_scale_inplace_kernel, out_shape=a, input_output_aliases={0: 0},
            grid=lambda meta: (triton.cdiv(n, meta["BLOCK"]),), n=n, factor=2.0,
        ),
        x,
    )  # fmt: skip
    state = _parse(call, compile_configs(call))
    assert state["param_kinds"] == [1, 2, 2] and state["param_indices"] == [0, 0, 8]
    assert bytes.fromhex(state["scalars"]) == struct.pack("<iif", n, 0, 2.0) + bytes(4)
    assert state["restore"] == [0] and state["chosen"] == -1  # three configs, none chosen yet
    blocks = [64, 256, 1024]  # autotuned_scale_inplace_kernel's configs, with 1, 4 and 8 warps
    assert [c["grid"] for c in state["configs"]] == [[triton.cdiv(n, b), 1, 1] for b in blocks]
    assert [c["block_x"] for c in state["configs"]] == [32, 128, 256]


def test_an_autotuned_call_starts_with_the_winner_remembered_on_this_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path))
    x = jax.ShapeDtypeStruct((4096,), F32)
    call = bound_call(
        lambda a: jt.triton_call(
            a, kernel=autotuned_scale_inplace_kernel, out_shape=a, input_output_aliases={0: 0},
            grid=lambda meta: (triton.cdiv(4096, meta["BLOCK"]),), n=4096, factor=0.5,
        ),
        x,
    )  # fmt: skip
    device = types.SimpleNamespace(device_kind="Fake GPU 80GB")
    first = _parse(call, compile_configs(call), device)
    assert first["chosen"] == -1
    record = Path(first["tuning_file"])
    assert record.is_relative_to(tmp_path) and not record.exists()
    winner = int(np.random.default_rng().integers(0, 3))
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(json.dumps({"index": winner, "seconds": [1e-5, 2e-5, 3e-5], "tuned_by": "jt_fake"}))
    assert _parse(call, compile_configs(call), device)["chosen"] == winner  # new binaries: loaded again
    record.write_text(json.dumps({"index": 7}))  # no such config: tuned again
    assert _parse(call, compile_configs(call), device)["chosen"] == -1


@triton.jit
def _scalars_kernel(out_ptr, a, b, c, d, e, f, g, h, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    total = a.to(tl.float32) + b.to(tl.float32) + c.to(tl.float32) + d.to(tl.float32) + e.to(tl.float32)
    total += f.to(tl.float32) + g.to(tl.float32) + h.to(tl.float32)
    tl.store(out_ptr + offsets, tl.zeros((BLOCK,), tl.float32) + total)


def test_each_scalar_type_arrives_little_endian_in_its_own_slot() -> None:
    rng = np.random.default_rng()
    values = {
        "a": (np.int8(rng.integers(-128, 127)), np.int8, "i8"),
        "b": (np.int16(rng.integers(-30000, 30000)), np.int16, "i16"),
        "c": (int(rng.integers(2**40, 2**62)), np.int64, "i64"),
        "d": (np.float16(rng.standard_normal()), np.float16, "fp16"),
        "e": (ml_dtypes.bfloat16(rng.standard_normal()), ml_dtypes.bfloat16, "bf16"),
        "f": (np.float64(rng.standard_normal()), np.float64, "fp64"),
        "g": (np.uint32(rng.integers(2**31, 2**32)), np.uint32, "u32"),
        "h": (True, np.bool_, "i1"),
    }
    out = jax.ShapeDtypeStruct((16,), F32)
    call = bound_call(
        lambda: jt.triton_call(
            kernel=_scalars_kernel, out_shape=out, grid=1, BLOCK=16, **{k: v for k, (v, _, _) in values.items()}
        )
    )
    assert [slot.type_str for slot in call.slots[1:]] == [t for _, _, t in values.values()]
    state = _parse(call, compile_configs(call))
    assert state["param_kinds"] == [1] + [2] * len(values)
    assert state["param_indices"] == [0] + [8 * i for i in range(len(values))]
    expected = b"".join(np.asarray(v, dtype=d).tobytes().ljust(8, b"\0") for v, d, _ in values.values())
    assert bytes.fromhex(state["scalars"]) == expected


def test_a_binary_is_loaded_once_per_context_whatever_calls_launch_it() -> None:
    x = jax.ShapeDtypeStruct((256,), F32)

    def add(a: Any, b: Any) -> Any:
        return jt.triton_call(a, b, kernel=sample_add_kernel, out_shape=a, grid=4, n=256, BLOCK=64)

    call = bound_call(add, x, x)
    kernels = compile_configs(call)
    before = FAKE_HANDLER.modules_loaded()
    _parse(call, kernels)
    assert FAKE_HANDLER.modules_loaded() == before + 1
    _parse(bound_call(add, x, x), kernels)  # another call of the same binary
    assert FAKE_HANDLER.modules_loaded() == before + 1
    _parse(call, compile_configs(call))  # another binary
    assert FAKE_HANDLER.modules_loaded() == before + 2


def test_without_the_runtime_preloading_loads_nothing() -> None:
    x = jax.ShapeDtypeStruct((64,), F32)
    call = bound_call(
        lambda a, b: jt.triton_call(a, b, kernel=sample_add_kernel, out_shape=a, grid=1, n=64, BLOCK=64), x, x
    )
    before = FAKE_HANDLER.modules_loaded(), parsed_state()
    message = run_on_cpu_client(FakeJtLauncher(), call, compile_configs(call), preloaded=True)
    assert "platform stream" in message or "GPU context" in message, message
    assert (FAKE_HANDLER.modules_loaded(), parsed_state()) == before
    assert "libjt_fake_runtime" in FAKE_HANDLER.driver_error()
    with fake_runtime():
        assert FAKE_HANDLER.driver_error() == ""


# -- tuning: configurations that cannot launch or leave part of an output unwritten --------------------------------


def test_tuning_chooses_the_fastest_config_that_writes_every_element() -> None:
    # Config 0 is the fastest but writes 8 of 64 elements; config 2 cannot launch.
    chosen, message, skipped = fake_tuning(writes=[8, 64, 64, 64], micros=[1, 5, 2, 4], refused=[0, 0, 1, 0])
    assert (chosen, message) == (3, "")
    assert skipped == [
        "it left 56 of 64 elements of output 0 unwritten",
        "",
        "it cannot launch: fakeLaunchKernel: too many resources requested",
        "",
    ]


def test_without_the_coverage_check_the_fastest_config_that_launches_wins() -> None:
    chosen, _, skipped = fake_tuning(writes=[8, 64, 64], micros=[1, 5, 2], refused=[0, 0, 1], check=False)
    assert chosen == 0 and skipped == ["", "", "it cannot launch: fakeLaunchKernel: too many resources requested"]


def test_a_written_value_equal_to_one_sentinel_is_not_taken_for_unwritten() -> None:
    """The fake kernel writes 0x11 bytes; an element is unwritten only when it holds each run's own sentinel."""
    chosen, _, skipped = fake_tuning(writes=[63, 64], micros=[1, 2], elements=64)
    assert chosen == 1 and skipped[0] == "it left 1 of 64 elements of output 0 unwritten"


def test_when_every_config_leaves_elements_unwritten_the_error_names_grid_and_the_fix() -> None:
    chosen, message, _ = fake_tuning(writes=[8, 32], micros=[1, 2])
    assert chosen == -1
    assert message.startswith("jt_fake: triton_call 'fake_tuned': no @triton.autotune config can run (")
    assert "[config 0]: it left 56 of 64 elements of output 0 unwritten; [config 1]: it left 32 of 64" in message
    assert "grid=(8,) launches the same programs whichever config runs" in message
    assert "grid=lambda meta: (triton.cdiv(n, meta['BLOCK']),)" in message and "zeroed_outputs=" in message


def test_when_no_config_can_launch_the_error_lists_each() -> None:
    chosen, message, _ = fake_tuning(writes=[64, 64], micros=[1, 2], refused=[1, 1])
    assert chosen == -1 and message.count("it cannot launch: fakeLaunchKernel") == 2 and "grid=" not in message


@triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def _autotuned_copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n), mask=offsets < n)


@pytest.mark.parametrize(
    ("grid", "zeroed", "coverage"),
    [((4,), (), [0]), ((4,), (0,), [0]), (lambda meta: (triton.cdiv(128, meta["BLOCK"]),), (), [])],
    ids=["fixed grid", "zeroed output", "grid sized by the config"],
)
def test_the_handler_is_told_which_results_a_config_must_cover(grid: Any, zeroed: Any, coverage: list[int]) -> None:
    x = jax.ShapeDtypeStruct((128,), F32)

    def copy(a: Any) -> Any:
        return jt.triton_call(a, kernel=_autotuned_copy_kernel, out_shape=a, grid=grid, n=128, zeroed_outputs=zeroed)

    call = bound_call(copy, x)
    state = _parse(call, compile_configs(call))
    assert state["coverage"] == coverage  # a zeroed result is left out per config, by the handler
    assert [c["zeroed"] for c in state["configs"]] == [list(zeroed)] * 2


def test_tuning_ahead_the_handler_leaves_reporting_skipped_configs_to_jt_core() -> None:
    from jt_core import tuning

    def parsed(n: int) -> dict[str, Any]:
        x = jax.ShapeDtypeStruct((n,), F32)
        call = bound_call(lambda a: jt.triton_call(a, kernel=_autotuned_copy_kernel, out_shape=a, grid=(4,), n=n), x)
        return _parse(call, compile_configs(call))

    assert parsed(128)["report_skipped"] is True  # tuning as the call runs: the handler says it
    with tuning.skips_reported_by_caller():  # tuning on scratch buffers before lowering: jt-core warns
        assert parsed(96)["report_skipped"] is False
