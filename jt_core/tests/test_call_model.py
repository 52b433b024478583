"""The bound-call model: a kernel, its binding, its configurations and its launch, with what a backend owns
carried unopened and parsed by that backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np
import pytest

import jt_core as jt
from jt_core.call import CPU_CHECKS, CallOptions, KernelCall, LaunchOptions
from jt_core.checks import CpuChecks
from jt_core.cpu.backend import CpuBackend, CpuKernel, CpuOptions
from jt_core.plugin.roles import CompileRequest
from jt_core.testing import sample_add_kernel
from jt_core.testing._calls import bind, compile_request, target_of

F32_64 = jax.ShapeDtypeStruct((64,), np.float32)


def _bound(**options: Any) -> KernelCall:
    return bind(sample_add_kernel, (F32_64, F32_64), {"n": 64, "BLOCK": 32}, CallOptions(F32_64, grid=2, **options))


def test_the_bound_call_has_no_field_that_one_backend_reads() -> None:
    fields = {field.name for field in dataclasses.fields(KernelCall)}
    assert fields == {
        # the kernel
        "kernel", "fn", "dialect", "name", "params",
        # the binding
        "slots", "param_trees", "operand_avals", "out_avals", "num_user_outputs", "aliases", "convention",
        # the configurations
        "configs", "autotune_keys",
        # the launch, the backend's arguments (unopened), and the batch a vmapped call carries
        "launch", "backend_arguments", "batch",
    }  # fmt: skip


def test_a_plain_call_gives_the_backend_no_arguments() -> None:
    call = _bound()
    assert call.backend_arguments == ()
    assert call.arguments_for_backend() == {}


def test_backend_arguments_carry_what_the_caller_gave_for_backends_by_argument_name() -> None:
    call = _bound(
        backend_options={"waves_per_eu": 2, "arch": "gfx942"}, compute_capability=90, checks=CpuChecks(races=True)
    )
    assert call.backend_arguments == (
        ("backend_options", (("arch", "gfx942"), ("waves_per_eu", 2))),
        ("compute_capability", 90),
        (CPU_CHECKS, CpuChecks(races=True)),
    )
    assert call.arguments_for_backend() == {
        "backend_options": {"arch": "gfx942", "waves_per_eu": 2},
        "compute_capability": 90,
        CPU_CHECKS: CpuChecks(races=True),
    }


def test_the_cpu_checks_in_force_travel_with_a_call_made_inside_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("JT_CPU_BOUNDS_CHECK", "JT_CPU_RACE_CHECK", "JT_CPU_UNWRITTEN"):
        monkeypatch.delenv(variable, raising=False)  # outside the block: the defaults

    def add(x: Any, y: Any) -> Any:
        return jt.triton_call(x, y, kernel=sample_add_kernel, out_shape=x, grid=2, n=64, BLOCK=32)

    with jt.cpu_checks(races=True, unwritten="error"):
        inside = jax.make_jaxpr(add)(F32_64, F32_64).eqns[0].params["call"]
    outside = jax.make_jaxpr(add)(F32_64, F32_64).eqns[0].params["call"]
    assert inside.arguments_for_backend()[CPU_CHECKS] == CpuChecks(races=True, unwritten="error")
    assert CPU_CHECKS not in outside.arguments_for_backend()


def test_launch_options_hold_how_the_call_becomes_an_operation() -> None:
    call = _bound(
        has_side_effect=True,
        launcher="interpreter",
        serialized_metadata=b"meta",
        cost_estimate={"flops": 64, "bytes_accessed": 768},
        vmap="grid",
    )
    assert call.launch == LaunchOptions(
        launcher="interpreter",
        has_side_effect=True,
        serialized_metadata=b"meta",
        cost_estimate=(("bytes_accessed", 768), ("flops", 64)),
        vmap="grid",
    )


def test_the_cpu_backend_parses_its_options_with_the_checks_of_the_call() -> None:
    call = _bound(checks=CpuChecks(bounds=False), compile_options={"num_warps": 8})
    request = compile_request(CpuBackend(), call)
    assert request.options == CpuOptions(num_warps=8, checks=CpuChecks(bounds=False))
    assert request.kernel is call.fn and request.dialect is call.dialect
    kernel = CpuBackend().compile(request)
    assert kernel.payload == CpuKernel(call.fn.fn, CpuChecks(bounds=False))


def test_parsed_options_key_the_request() -> None:
    backend = CpuBackend()
    plain, racing = _bound(), _bound(checks=CpuChecks(races=True))
    first, second = compile_request(backend, plain), compile_request(backend, racing)
    assert first.specialization == second.specialization and first.target == second.target
    assert first.options != second.options


def test_a_request_takes_options_already_parsed() -> None:
    call = _bound()
    backend = CpuBackend()
    target = target_of(backend, call)
    chosen = CpuOptions(num_warps=2)
    request = CompileRequest.for_config(call, call.configs[0], target, backend, chosen)
    assert request.options is chosen
    assert CompileRequest.option_arguments(call, call.configs[0], target) == {
        "options": call.configs[0].options,
        "backend_arguments": {},
        "target": target,
        "name": "sample_add_kernel",
        "label": call.configs[0].label,
    }
