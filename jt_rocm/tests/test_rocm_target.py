"""Choosing the AMD GPU architecture, its wavefront size and its limits."""

from __future__ import annotations

import types

import numpy as np
import pytest
from rocm_testlib import bound_call

from jt_core.call import CompileOptions
from jt_core.errors import KernelCallTypeError, KernelCallValueError
from jt_core.testing._calls import compile_request, sample_call, target_of
from jt_rocm.backend import RocmBackend
from jt_rocm.target import parse_arch


@pytest.fixture(autouse=True)
def _no_arch_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JT_ROCM_ARCH", raising=False)


@pytest.mark.parametrize(
    ("name", "warp_size", "lds"),
    [
        ("gfx90a", 64, 64 * 1024),
        ("gfx942", 64, 64 * 1024),
        ("gfx950", 64, 160 * 1024),
        ("gfx1030", 32, 64 * 1024),
        ("gfx1100", 32, 64 * 1024),
        ("gfx1201", 32, 64 * 1024),
    ],
)
def test_warp_size_and_lds_follow_the_architecture(name: str, warp_size: int, lds: int) -> None:
    arch = parse_arch(name, "test")
    assert (arch.name, arch.warp_size, arch.lds_bytes) == (name, warp_size, lds)


def test_target_features_are_dropped() -> None:
    assert parse_arch("gfx942:sramecc+:xnack-", "test").name == "gfx942"


@pytest.mark.parametrize("bad", ["sm_90", "gfx", "gfx94", "942", "GFX942x"])
def test_malformed_architecture_is_refused_naming_its_source(bad: str) -> None:
    with pytest.raises(KernelCallValueError, match=r"backend_options\['arch'\] is .*expected a name like 'gfx90a'"):
        parse_arch(bad, "backend_options['arch']")


def test_call_option_wins_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx90a")
    call = sample_call()
    assert target_of(RocmBackend(), call).arch == "gfx90a"
    with_option = bound_call(backend_options={"arch": "gfx1100"})
    target = target_of(RocmBackend(), with_option)
    assert (target.arch, target.warp_size) == ("gfx1100", 32)


def test_environment_wins_over_device(monkeypatch: pytest.MonkeyPatch) -> None:
    device = types.SimpleNamespace(compute_capability="gfx942:sramecc+:xnack-", platform="rocm")
    assert target_of(RocmBackend(), sample_call(), device).arch == "gfx942"
    monkeypatch.setenv("JT_ROCM_ARCH", "gfx1100")
    assert target_of(RocmBackend(), sample_call(), device).arch == "gfx1100"


def test_no_device_and_no_override_says_what_to_set() -> None:
    with pytest.raises(KernelCallValueError, match=r"backend_options=\{'arch': 'gfx942'\}.*JT_ROCM_ARCH=gfx942"):
        target_of(RocmBackend(), sample_call())


def test_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JT_ROCM_ARCH", "mi300")
    with pytest.raises(KernelCallValueError, match="environment variable JT_ROCM_ARCH is 'mi300'"):
        target_of(RocmBackend(), sample_call())


def test_gfx_string_in_compute_capability_points_to_backend_options() -> None:
    call = sample_call(compute_capability="gfx942")  # type: ignore[arg-type]
    with pytest.raises(KernelCallTypeError, match=r"backend_options=\{'arch': 'gfx942'\}"):
        target_of(RocmBackend(), call)


def test_arch_must_be_a_string() -> None:
    with pytest.raises(KernelCallTypeError, match=r"backend_options\['arch'\] must be .* got int 942"):
        target_of(RocmBackend(), bound_call(backend_options={"arch": 942}))


def _validate(arch: str, **options: object) -> None:
    call = bound_call(backend_options={"arch": arch})
    backend = RocmBackend()
    backend.parse_options(
        options=CompileOptions(**options),  # type: ignore[arg-type]
        backend_arguments=call.arguments_for_backend(),
        target=target_of(backend, call),
        name=call.name,
        label=call.configs[0].label,
    )


def test_too_many_threads_per_program_is_refused_per_wavefront_size() -> None:
    _validate("gfx1100", num_warps=32)  # 32 x 32 = 1024 threads: allowed on RDNA
    with pytest.raises(KernelCallValueError, match=r"num_warps=32 gives 2048 threads .* use num_warps <= 16"):
        _validate("gfx942", num_warps=32)


def test_non_power_of_two_warps_are_refused() -> None:
    with pytest.raises(KernelCallValueError, match="num_warps must be a positive power of two, got 3"):
        _validate("gfx942", num_warps=3)


def test_clusters_are_refused() -> None:
    with pytest.raises(KernelCallValueError, match=r"num_ctas=2 .* use num_ctas=1"):
        _validate("gfx942", num_ctas=2)


def test_unknown_backend_option_is_refused_listing_valid_ones() -> None:
    call = bound_call(backend_options={"arch": "gfx942", "waves_per_euu": 2})
    with pytest.raises(KernelCallValueError, match=r"'waves_per_euu'.*valid options are .*'waves_per_eu'"):
        compile_request(RocmBackend(), call)


def test_known_backend_option_is_accepted() -> None:
    call = bound_call(backend_options={"arch": "gfx942", "waves_per_eu": 2})
    request = compile_request(RocmBackend(), call)
    assert dict(request.options.triton)["waves_per_eu"] == 2  # type: ignore[attr-defined]
    assert request.target.arch == "gfx942" and "arch" not in dict(request.options.triton)  # type: ignore[attr-defined]
    assert np.dtype(call.operand_avals[0].dtype) == np.float32
