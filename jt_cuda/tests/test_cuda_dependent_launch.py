"""Programmatic dependent launch without a GPU: kernels for sm90+ wait for their prerequisite grids at entry, and
only those are lowered as programmatic dependents."""

from __future__ import annotations

import re
from typing import Any

import jax
import pytest
import triton
from cuda_testlib import add_call, f32, lower_for_cuda
from test_cuda_compile import bind, compile_call, small_matmul_call
from triton.tools.disasm import get_sass

import jt_core as jt
from jt_core import cache
from jt_core.gpu.attributes import ENTRY_WAIT
from jt_core.testing import autotuned_scale_inplace_kernel, backend_config, custom_calls
from jt_core.testing._calls import compile_request
from jt_cuda.backend import CudaBackend
from jt_cuda.dependent_launch import insert_entry_wait
from jt_cuda.launchers import CudaJaxlibLauncher

N = 4096
#: Where a launch attribute says "programmatic dependent launch" (see jt_launch_state.h).
PDL_FIELD = 9
# SASS instructions that touch global memory, and the one griddepcontrol.wait becomes on sm90.
GLOBAL_ACCESS = re.compile(r"\b(?:LDG|STG|LD|ST|ATOMG|ATOM|RED|LDGSTS|UTMALDG|UTMASTG)\b")


def first_instruction(ptx: str) -> str:
    """The first instruction of the PTX kernel function's body (after its register declarations)."""
    body = ptx[ptx.index(".visible .entry") :]
    body = body[body.index("\n{\n") + 3 :]
    for line in body.split("\n"):
        text = line.strip()
        if text and not text.startswith((".reg", ".local", ".shared")):
            return text
    raise AssertionError("empty kernel body")


def waits_before_any_global_access(cubin: bytes) -> bool:
    """Whether the kernel's first instruction touching global memory comes after the wait (SASS ``ACQBULK``)."""
    sass = get_sass(cubin)
    wait = sass.find("ACQBULK")
    access = GLOBAL_ACCESS.search(sass)
    return wait >= 0 and access is not None and wait < access.start()


def launch_flags(lowered: Any) -> list[int]:
    """The programmatic-dependent flag of every configuration of every jt custom call in ``lowered``."""
    flags = []
    for op in custom_calls(lowered):
        config = backend_config(op)
        flags += [config[f"launch_{c}"][PDL_FIELD] for c in range(config["num_configs"])]
    return flags


@pytest.fixture
def fresh_compiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Compiles again instead of answering from a cache: an empty in-memory cache, and jt's and Triton's disk caches
    of the test's own."""
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "jt-cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    cache.clear_memory()


# -- the PTX step ------------------------------------------------------------------------------------------------


def test_the_wait_goes_before_the_first_instruction_after_the_declarations() -> None:
    ptx = (
        ".version 8.7\n.target sm_90a\n.address_size 64\n\n"
        ".visible .entry k(\n\t.param .u64 k_param_0\n)\n.reqntid 128\n.maxnreg 64\n{\n"
        "\t.reg .pred \t%p<2>;\n\t.reg .b64 \t%rd<4>;\n\t.shared .align 16 .b8 smem[16];\n"
        "$L__func_begin0:\n\tld.param.b64 \t%rd1, [k_param_0];\n\tret;\n}\n"
    )
    waited = insert_entry_wait(ptx)
    assert waited.replace("\tgriddepcontrol.wait;\n", "", 1) == ptx
    assert waited.index("griddepcontrol.wait;") > waited.index(".shared .align 16")
    assert waited.index("griddepcontrol.wait;") < waited.index("$L__func_begin0:")


def test_ptx_without_one_kernel_function_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"one kernel function \(.visible .entry\).*found 0"):
        insert_entry_wait(".version 8.7\n.target sm_90a\n.visible .func f()\n{\n\tret;\n}\n")


# -- compiling ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cc", [90, 100])
def test_kernels_for_sm90_and_later_wait_for_their_prerequisite_grids_at_entry(fresh_compiles: None, cc: int) -> None:
    kernel = compile_call(bind(compute_capability=cc))
    assert first_instruction(kernel.asm["ptx"]) == "griddepcontrol.wait;"
    assert kernel.asm["ptx"].count("griddepcontrol.wait") == 1
    assert kernel.metadata[ENTRY_WAIT] is True
    assert kernel.binary[:4] == b"\x7fELF" and kernel.asm["cubin"] == kernel.binary
    if cc == 90:
        assert waits_before_any_global_access(kernel.binary)


def test_a_pipelined_matmul_waits_before_its_first_load(fresh_compiles: None) -> None:
    kernel = compile_call(small_matmul_call(90, 64, 3))
    assert first_instruction(kernel.asm["ptx"]) == "griddepcontrol.wait;"
    assert waits_before_any_global_access(kernel.binary)


def test_kernels_for_sm80_do_not_wait(fresh_compiles: None) -> None:
    kernel = compile_call(bind(compute_capability=80))
    assert "griddepcontrol" not in kernel.asm["ptx"]
    assert ENTRY_WAIT not in kernel.metadata
    assert "ACQBULK" not in get_sass(kernel.binary)


def test_the_wait_changes_only_the_ptx_and_the_binary(fresh_compiles: None, monkeypatch: pytest.MonkeyPatch) -> None:
    waiting = compile_call(small_matmul_call(90, 64, 3))
    monkeypatch.setenv("JT_CUDA_PDL", "0")
    plain = compile_call(small_matmul_call(90, 64, 3))
    for stage in ("ttir", "ttgir", "llir"):
        assert waiting.asm[stage] == plain.asm[stage]
    assert insert_entry_wait(plain.asm["ptx"]) == waiting.asm["ptx"]
    changed = {
        key for key in {*waiting.metadata, *plain.metadata} if waiting.metadata.get(key) != plain.metadata.get(key)
    }
    assert changed == {ENTRY_WAIT, "hash"}
    assert (waiting.num_warps, waiting.shared_mem) == (plain.num_warps, plain.shared_mem)


def test_the_switch_turns_the_wait_off_and_keys_the_caches(
    fresh_compiles: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = CudaBackend()
    call = bind(compute_capability=90)
    waiting = compile_call(call, backend)
    key_on = cache.compile_key(compile_request(backend, call))
    monkeypatch.setenv("JT_CUDA_PDL", "0")
    plain = compile_call(call, backend)
    key_off = cache.compile_key(compile_request(backend, call))
    assert plain is not waiting and key_off != key_on
    assert "griddepcontrol" not in plain.asm["ptx"] and ENTRY_WAIT not in plain.metadata
    monkeypatch.delenv("JT_CUDA_PDL")
    assert compile_call(call, backend) is waiting


def test_a_kernel_that_asks_for_launch_pdl_is_left_as_its_author_wrote_it(fresh_compiles: None) -> None:
    kernel = compile_call(bind(compute_capability=90, backend_options={"launch_pdl": True}))
    assert "griddepcontrol" not in kernel.asm["ptx"]
    assert ENTRY_WAIT not in kernel.metadata and kernel.metadata["launch_pdl"] is True


def test_triton_ir_override_compiles_through_triton_without_the_wait(fresh_compiles: None, tmp_path: Any) -> None:
    plain = compile_call(bind(compute_capability=80))  # any valid PTX of the kernel, here sm80's, retargeted
    override = tmp_path / "sample_add_kernel.ptx"
    override.write_text(plain.asm["ptx"].replace(".target sm_80", ".target sm_90a"))
    kernel = compile_call(bind(compute_capability=90, backend_options={"ir_override": str(override)}))
    assert "griddepcontrol" not in kernel.asm["ptx"] and ENTRY_WAIT not in kernel.metadata


def test_compile_error_in_the_waiting_path_keeps_tritons_message(fresh_compiles: None) -> None:
    from cuda_testlib import big_shared_kernel

    def f(x: Any) -> Any:
        return jt.triton_call(
            x, kernel=big_shared_kernel, out_shape=x, grid=1, BLOCK=48, compute_capability=90, name="bad_block"
        )

    with pytest.raises(Exception, match=r"(?s)triton_call 'bad_block'.*power of 2"):
        jax.jit(f).trace(f32((48 * 48,))).lower(lowering_platforms=("cuda",))


# -- lowering ----------------------------------------------------------------------------------------------------


def test_sm90_calls_are_lowered_as_programmatic_dependents(fresh_compiles: None) -> None:
    lowered = lower_for_cuda(lambda x, y: add_call(x, y, compute_capability=90), f32((N,)), f32((N,)))
    assert launch_flags(lowered) == [1]


def test_sm80_calls_and_the_switched_off_path_are_launched_plainly(
    fresh_compiles: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    lowered = lower_for_cuda(lambda x, y: add_call(x, y, compute_capability=80), f32((N,)), f32((N,)))
    assert launch_flags(lowered) == [0]
    monkeypatch.setenv("JT_CUDA_PDL", "0")
    lowered = lower_for_cuda(lambda x, y: add_call(x, y, compute_capability=90), f32((N,)), f32((N,)))
    assert launch_flags(lowered) == [0]


def test_every_autotuning_config_waits_and_is_lowered_as_a_dependent(fresh_compiles: None) -> None:
    def f(x: Any) -> Any:
        return jt.triton_call(
            x, N, 1.5, kernel=autotuned_scale_inplace_kernel, out_shape=x, input_output_aliases={0: 0},
            grid=lambda meta: (triton.cdiv(N, meta["BLOCK"]),), compute_capability=90,
        )  # fmt: skip

    lowered = lower_for_cuda(f, f32((N,)))
    assert launch_flags(lowered) == [1, 1, 1]
    (op,) = custom_calls(lowered)
    config = backend_config(op)
    for c in range(3):
        assert waits_before_any_global_access(config[f"binary_{c}"])


def test_the_xla_launcher_gets_the_triton_ir_without_the_wait(fresh_compiles: None) -> None:
    lowered = lower_for_cuda(lambda x, y: add_call(x, y, compute_capability=90, launcher="xla"), f32((N,)), f32((N,)))
    text = lowered.as_text()
    assert "__gpu$xla.gpu.triton" in text and "triton_kernel_call_jt_cuda" not in text
    assert "griddepcontrol" not in text and "dependency" not in text


def test_the_jaxlib_launcher_still_takes_the_kernel(fresh_compiles: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CudaJaxlibLauncher, "unavailable_reason", lambda self: None)
    lowered = lower_for_cuda(
        lambda x, y: add_call(x, y, compute_capability=90, launcher="jaxlib"), f32((N,)), f32((N,))
    )
    assert custom_calls(lowered, "triton_kernel_call_ffi") or custom_calls(lowered, "triton_kernel_call")
