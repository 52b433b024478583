"""Lowering for ``rocm`` through jt's own FFI handler (launcher ``"jt"``, the default) on a machine without an AMD
GPU: the HSACO travels as bytes in the call, parameters by index, threads per program by the compiled wave size."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import triton
from rocm_testlib import add_one_kernel, bound_call

import jt_core as jt
from jt_core.gpu.attributes import PARAM_OPERAND, PARAM_RESULT, PARAM_SCALAR
from jt_core.plugin import registry
from jt_core.testing import LauncherConformance, backend_config, custom_calls, out_first_kernel, sample_add_kernel
from jt_core.testing._calls import compile_request
from jt_core.testing.fixtures import make_registry
from jt_rocm.backend import RocmBackend
from jt_rocm.launchers import HANDLER as handler
from jt_rocm.launchers import RocmJtLauncher

F32_64 = jax.ShapeDtypeStruct((64,), jnp.float32)
ELF_MAGIC = b"\x7fELF"


@pytest.fixture(autouse=True)
def _environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "hsaco"
    monkeypatch.setenv("JT_ROCM_HSACO_DIR", str(folder))  # jaxlib's launcher would write here; jt's must not
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx942")
    for name in ("JT_LAUNCHER_ROCM", "JT_ROCM_PRELOAD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(registry, "_registry", make_registry())
    return folder


def lower(f: Any, *specs: Any) -> Any:
    # A fresh function each time: JAX caches lowerings per traced function, and the tests change the environment.
    return jax.jit(lambda *args: f(*args)).trace(*specs).lower(lowering_platforms=("rocm",))


def jt_call(lowered: Any) -> Any:
    (op,) = custom_calls(lowered, handler.target_name) + custom_calls(lowered, handler.preloaded_target_name)
    return op


def add(x: Any, y: Any, **kwargs: Any) -> Any:
    return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32, **kwargs)


def compiled_add(arch: str, **options: Any) -> Any:
    backend = RocmBackend()
    call = bound_call(backend_options={"arch": arch}, **options)
    return backend.compile(compile_request(backend, call))


def test_jt_handler_is_the_default_rocm_launcher() -> None:
    lowered = lower(add, F32_64, F32_64)
    (op,) = custom_calls(lowered)
    assert str(op.attributes["call_target_name"]).strip('"') == handler.preloaded_target_name
    assert len(op.operands) == 2 and len(op.results) == 1
    assert custom_calls(lowered, "triton_kernel_call_ffi") == []


def test_hsaco_bytes_travel_in_the_call_and_no_file_is_written(_environment: Path) -> None:
    lowered = lower(add, F32_64, F32_64)
    config = backend_config(jt_call(lowered))
    expected = compiled_add("gfx942")
    assert config["binary_0"] == expected.binary
    assert config["binary_0"][:4] == ELF_MAGIC
    assert config["symbol_0"] == b"sample_add_kernel"
    text = lowered.as_text()
    assert ".hsaco" not in text and str(_environment) not in text
    assert not _environment.exists()


@pytest.mark.parametrize(
    ("arch", "num_warps", "threads"), [("gfx942", 4, 256), ("gfx90a", 2, 128), ("gfx1100", 4, 128), ("gfx1100", 1, 32)]
)
def test_threads_per_program_follow_the_compiled_wave_size(
    monkeypatch: pytest.MonkeyPatch, arch: str, num_warps: int, threads: int
) -> None:
    monkeypatch.setenv("JT_ROCM_ARCH", arch)
    config = backend_config(jt_call(lower(lambda x, y: add(x, y, num_warps=num_warps), F32_64, F32_64)))
    grid_x, grid_y, grid_z, block, shared, ctas, *_ = config["launch_0"]
    assert (grid_x, grid_y, grid_z) == (2, 1, 1)
    assert block == threads
    assert ctas == 1
    assert shared == compiled_add(arch, num_warps=num_warps).shared_mem


def test_parameters_are_described_by_index() -> None:
    config = backend_config(jt_call(lower(add, F32_64, F32_64)))
    assert config["param_kinds"] == [PARAM_OPERAND, PARAM_OPERAND, PARAM_RESULT, PARAM_SCALAR]
    assert config["param_indices"] == [0, 1, 0, 0]
    assert config["scalars"] == (64).to_bytes(8, "little")
    assert config["num_configs"] == 1 and config["restore"] == [] and config["scratch_result"] == -1


def test_output_declared_before_input_keeps_its_own_result_buffer() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(kernel=out_first_kernel, x_ptr=x, scale=2.5, n=64, out_shape=x, grid=2, BLOCK=32)

    op = jt_call(lower(f, F32_64))
    # Unlike jaxlib's handler, no zero-filled operand is needed: the output is a result, addressed by index.
    assert len(op.operands) == 1
    assert "operand_index" not in str(op.attributes["output_operand_aliases"])
    config = backend_config(op)
    assert config["param_kinds"] == [PARAM_RESULT, PARAM_OPERAND, PARAM_SCALAR, PARAM_SCALAR]
    assert config["param_indices"] == [0, 0, 0, 8]
    assert config["scalars"][:4] == jnp.float32(2.5).tobytes() and config["scalars"][8:12] == (64).to_bytes(4, "little")


_autotuned_add_one = triton.autotune(
    configs=[triton.Config({"BLOCK": 32}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=2)], key=["n"]
)(add_one_kernel)


def test_autotuned_call_lists_every_candidate_and_restores_the_aliased_buffer() -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x,
            kernel=_autotuned_add_one,
            out_shape=x,
            grid=lambda m: (64 // m["BLOCK"],),
            n=64,
            input_output_aliases={0: 0},
        )

    op = jt_call(lower(f, F32_64))
    assert str(op.attributes["call_target_name"]).strip('"') == handler.target_name  # has an initialize stage
    assert "operand_index = 0" in str(op.attributes["output_operand_aliases"])
    config = backend_config(op)
    assert config["num_configs"] == 2
    assert config["restore"] == [0]
    assert config["param_kinds"][0] == PARAM_RESULT  # the input written in place is the aliased result
    assert [config[f"launch_{c}"][:4] for c in range(2)] == [[2, 1, 1, 64], [1, 1, 1, 128]]
    assert config["label_0"].startswith(b"BLOCK=32") and config["label_1"].startswith(b"BLOCK=64")
    assert config["binary_0"] != config["binary_1"]
    assert "tuning_file" not in config  # no device at hand: nothing to key the winner on


def test_zeroed_outputs_are_listed_per_config() -> None:
    config = backend_config(jt_call(lower(lambda x, y: add(x, y, zeroed_outputs=(0,)), F32_64, F32_64)))
    assert config["zeroed_0"] == [0]


def test_preloading_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_ROCM_PRELOAD", "0")
    lowered = lower(add, F32_64, F32_64)
    assert len(custom_calls(lowered, handler.target_name)) == 1
    assert custom_calls(lowered, handler.preloaded_target_name) == []


def test_serialized_metadata_travels_in_the_call() -> None:
    config = backend_config(jt_call(lower(lambda x, y: add(x, y, serialized_metadata=b"tag\x00"), F32_64, F32_64)))
    assert config["metadata"] == b"tag\x00"


def test_without_a_rocm_device_lowering_needs_no_handler() -> None:
    assert RocmJtLauncher().unavailable_reason() is None


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
    env = {key: value for key, value in os.environ.items() if key != "JT_LAUNCHER_ROCM"}
    env.update({"JT_ROCM_ARCH": "gfx942", "JT_ROCM_HSACO_DIR": str(tmp_path / "h"), "JT_CACHE_DIR": str(tmp_path)})
    texts = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
        assert run.returncode == 0, run.stderr[-3000:]
        texts.append(run.stdout)
    assert f"@{handler.preloaded_target_name}(" in texts[0]
    assert 'binary_0 = "\\7FELF' in texts[0]
    assert texts[0] == texts[1]
    assert not (tmp_path / "h").exists()


class TestRocmJtLauncherConformance(LauncherConformance):
    expected_in_lowering = handler.preloaded_target_name

    @pytest.fixture
    def launcher(self) -> RocmJtLauncher:
        return RocmJtLauncher()
