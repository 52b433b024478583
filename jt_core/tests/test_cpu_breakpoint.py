"""``breakpoint()`` inside a kernel stops Python's debugger there, on the CPU: the compiled path hands such a kernel to
Triton's interpreter, saying why in one line, and Triton's front end checks the rest of the kernel as usual."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import jax
import numpy as np
import pytest
import triton
import triton.language as tl

import jt_core as jt
from jt_core.testing.fixtures import CPU_PATH_SWITCHES

#: A kernel module with a breakpoint in program 1, and a script that calls it on random data and checks the result.
KERNEL = """\
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    if pid == 1:
        breakpoint()
    tl.store(out_ptr + offsets, x * 3)
"""
BREAKPOINT_LINE = KERNEL.splitlines().index("        breakpoint()") + 1
SCRIPT = """\
import sys

import jax
import numpy as np

import jt_core as jt
from kernels import scale_kernel

x = np.random.default_rng().standard_normal(16).astype(np.float32)
print("program 1 loads", x[8:].tolist(), flush=True)
launcher = {"launcher": sys.argv[1]} if sys.argv[1:] else {}
call = jax.jit(lambda x: jt.triton_call(x, kernel=scale_kernel, out_shape=x, grid=2, BLOCK=8, **launcher))
np.testing.assert_array_equal(np.asarray(call(x)), x * 3)
print("the call finished with the right result")
"""

#: The switches that send every call to the interpreter (CI's second run sets them): each test here says which
#: path it takes.


@pytest.mark.parametrize("launcher", [None, "interpreter"], ids=["default", "interpreter"])
def test_breakpoint_in_a_kernel_stops_the_debugger_inside_it(tmp_path: Path, launcher: str | None) -> None:
    (tmp_path / "kernels.py").write_text(KERNEL)
    (tmp_path / "script.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k not in CPU_PATH_SWITCHES}
    env.update(JT_TRACE_PLUGINS="1", PYTHONBREAKPOINT="pdb.set_trace")
    ran = subprocess.run(
        [sys.executable, "script.py", *([launcher] if launcher else [])],
        input="p pid\np x\nc\n",
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    out = ran.stdout
    # The debugger stopped once, in the kernel's own source, on the line after the breakpoint.
    assert out.count(f"kernels.py({BREAKPOINT_LINE + 1})scale_kernel()") == 1, out
    assert "-> tl.store(out_ptr + offsets, x * 3)" in out, out
    # `p pid` and `p x` printed program 1's id and the values it loaded.
    prompts = out.split("(Pdb) ")
    assert re.match(r"array\(\[1\], dtype=int32\)", prompts[1]), out
    loaded = [float(v) for v in re.findall(r"-?\d+\.\d*(?:e[-+]\d+)?", prompts[2].split(")")[0])]
    expected = json.loads(re.search(r"program 1 loads (\[.*\])", out)[1])
    np.testing.assert_allclose(loaded, expected, rtol=1e-6, atol=1e-8)  # pdb prints 8 decimals
    assert "the call finished with the right result" in out, out
    handed = [line for line in ran.stderr.splitlines() if "launcher 'compiled' on cpu cannot express it" in line]
    if launcher is None:  # the compiled path says in one line why the kernel runs in the interpreter
        # (The folder is the one of the first process that compiled this source: the disk cache keeps the reason.)
        said = (
            r"jt: triton_call 'scale_kernel': launcher 'compiled' on cpu cannot express it \(the compiled path cannot "
            rf"express breakpoint\(\) \(Python's debugger\) at /\S*/kernels\.py:{BREAKPOINT_LINE}: +breakpoint\(\)\); "
            "using 'ffi'"
        )
        assert len(handed) == 1 and re.fullmatch(said, handed[0]), ran.stderr
    else:
        assert handed == [], ran.stderr


@triton.jit
def debug_switch_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, DEBUG: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if DEBUG:
        breakpoint()
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) - 1)


@pytest.mark.usefixtures("jt_cpu_paths_by_name")
def test_a_breakpoint_behind_a_false_constexpr_keeps_the_compiled_path(caplog: pytest.LogCaptureFixture) -> None:
    """The front end never reaches it, so nothing of the kernel needs the interpreter."""
    x = np.random.default_rng(3).standard_normal(32).astype(np.float32)
    with caplog.at_level(logging.INFO, logger="jt_core"):
        out = jax.jit(
            lambda x: jt.triton_call(x, kernel=debug_switch_kernel, out_shape=x, grid=4, BLOCK=8, DEBUG=False)
        )(x)
        np.testing.assert_array_equal(np.asarray(out), x - 1)
    assert not [r for r in caplog.records if "cannot express" in r.getMessage()], caplog.text


@triton.jit
def wrong_block_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    breakpoint()
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))


def test_the_front_end_still_checks_the_rest_of_a_kernel_with_a_breakpoint() -> None:
    x = np.ones(24, np.float32)
    lowering = jax.jit(lambda x: jt.triton_call(x, kernel=wrong_block_kernel, out_shape=x, grid=1, BLOCK=24)).trace(x)
    with pytest.raises(jt.KernelCompileError, match="arange's range must be a power of 2"):
        lowering.lower()


def test_a_gpu_compile_still_refuses_breakpoint() -> None:
    """Only the CPU's interpreter can stop there: lowered for CUDA (without a GPU), Triton refuses the name."""
    if not any(ep.name == "cuda" for ep in metadata.entry_points(group="jt")):
        pytest.skip("jt-cuda is not installed")
    x = jax.ShapeDtypeStruct((8,), np.float32)
    traced = jax.jit(
        lambda x: jt.triton_call(
            x, kernel=debug_switch_kernel, out_shape=x, grid=1, BLOCK=8, DEBUG=True, compute_capability=90
        )
    ).trace(x)
    with pytest.raises(jt.KernelCompileError, match="breakpoint is not defined"):
        traced.lower(lowering_platforms=("cuda",))


@triton.jit
def plus_one_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + 1)


@pytest.mark.usefixtures("jt_cpu_paths_by_name")
def test_the_reason_for_a_kernel_compiled_without_the_front_end_reads_as_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With ``JT_CPU_COMPILE_CHECK=0`` a call to the interpreter skips the front end, and the compiled path, asked
    later for the same kernel, says why it hands it over in words that follow "the compiled path cannot express"."""
    monkeypatch.setenv("JT_CPU_COMPILE_CHECK", "0")
    x = np.random.default_rng(5).standard_normal(16).astype(np.float32)
    with caplog.at_level(logging.INFO, logger="jt_core"):
        for launcher in ("interpreter", None):
            out = jt.triton_call(x, kernel=plus_one_kernel, out_shape=x, grid=2, BLOCK=8, launcher=launcher)
            np.testing.assert_array_equal(np.asarray(out), x + 1)
    (line,) = [r.getMessage() for r in caplog.records if "cannot express" in r.getMessage()]
    assert (
        "the compiled path cannot express a kernel compiled without Triton's front end (JT_CPU_COMPILE_CHECK=0" in line
    )
