"""A GPU plugin made of jt_core.gpu alone, for jt-core's tests of that layer (no GPU, no jt-cuda or jt-rocm).

The backend serves the ``cuda`` lowering platform (JAX lowers for it on any host) and compiles nothing: each kernel
is random bytes standing for a binary, with Triton IR whose function takes the call's parameters and does nothing
(what XLA's Triton call wraps). The launchers are the three bases of `jt_core.gpu` as a GPU plugin subclasses
them; the ``jt`` launcher runs jt's handler built over ``core_fake_launch.cc``, a driver that runs nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import jax

from jt_core.gpu import HandlerLauncher, JaxlibLauncher, LaunchHandlerLibrary, XlaTritonLauncher, jaxlib_call
from jt_core.plugin import Backend, CompiledKernel, CompileRequest, LaunchConfig, Launcher, Target, hookimpl
from jt_core.plugin.registry import Registry
from jt_core.testing import fake_entry_point

#: jt's launch handler over the fake driver.
FAKE_HANDLER = LaunchHandlerLibrary(
    "jt_fake_launch", Path(__file__).with_name("core_fake_launch.cc"), "CUDA", "JT_FAKE_PRELOAD", "JT_FAKE_RECORD"
)
TARGET = Target(platform="cuda", arch=90, warp_size=32)

_IR_TYPES = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "u32": "i32", "u64": "i64"}
_IR_TYPES |= {"fp16": "f16", "bf16": "bf16", "fp32": "f32", "fp64": "f64"}


def ir_type(type_str: str) -> str:
    """The Triton IR type of a parameter of Triton type ``type_str`` (``"*fp32"`` -> ``!tt.ptr<f32>``)."""
    if type_str.startswith("*"):
        return f"!tt.ptr<{_IR_TYPES[type_str[1:]]}>"
    return _IR_TYPES[type_str]


def empty_ttir(name: str, type_strs: Sequence[str]) -> str:
    """A Triton IR module whose public function ``name`` takes parameters of these types and returns at once."""
    params = ", ".join(f"%arg{i}: {ir_type(t)}" for i, t in enumerate(type_strs))
    return f"module {{\n  tt.func public @{name}({params}) {{\n    tt.return\n  }}\n}}\n"


def kernel_name(kernel: Any) -> str:
    return str(getattr(kernel, "__name__", None) or kernel.fn.__name__)


class FakeGpuBackend(Backend):
    """Compiles nothing: a kernel is random bytes, the Triton IR of an empty function and the options asked for."""

    platform = "cuda"

    #: Metadata every compiled kernel carries, and extra fields of `CompiledKernel` (set by a test).
    metadata: ClassVar[dict[str, Any]] = {}
    fields: ClassVar[dict[str, Any]] = {}

    def target(self) -> Target:
        return TARGET

    def cache_tag(self) -> str:
        return repr((sorted(self.metadata.items()), sorted(self.fields.items())))  # a test's settings, apart

    def compile(self, request: CompileRequest) -> CompiledKernel:
        name = kernel_name(request.kernel)
        asm = {"ptx": f"// the PTX of {name}\n"}
        types = [slot.type_str for slot in request.call.slots if slot.type_str != "constexpr"]
        if all(t.removeprefix("*") in _IR_TYPES for t in types):  # not for tensor descriptors
            asm["ttir"] = empty_ttir(name, types)
        return CompiledKernel(
            name=name,
            target=request.target,
            binary=os.urandom(48),
            asm=asm,
            metadata=dict(self.metadata),
            num_warps=request.options.num_warps,
            **self.fields,
        )


class FakeJtLauncher(HandlerLauncher):
    platform = "cuda"
    handler = FAKE_HANDLER


class FakeJaxlibLauncher(JaxlibLauncher):
    platform = "cuda"

    def kernel_spec(self, call: Any, config: LaunchConfig, kernel: CompiledKernel) -> jaxlib_call.KernelSpec:
        return jaxlib_call.KernelSpec(kernel.name, kernel.num_warps, kernel.shared_mem, str(kernel.asm["ptx"]))


class FakeXlaLauncher(XlaTritonLauncher):
    platform = "cuda"


class FakeGpuPlugin:
    """Registers the fake backend and its three launchers for ``cuda`` (written as a GPU plugin is, on
    ``jt_core.plugin`` and ``jt_core.gpu``)."""

    @hookimpl
    def jt_register_backends(self) -> list[Backend]:
        return [FakeGpuBackend()]

    @hookimpl
    def jt_register_launchers(self, platform: str | None) -> list[Launcher]:
        if platform not in (None, "cuda"):
            return []
        return [FakeJtLauncher(), FakeJaxlibLauncher(), FakeXlaLauncher()]


def use_fake_gpu(jt_fake_entry_points: Callable[..., Registry]) -> Registry:
    """Installs a registry with only the builtins and the fake GPU plugin (jt-cuda, installed or not, is left out);
    pass the ``jt_fake_entry_points`` fixture, which puts the previous one back after the test."""
    return jt_fake_entry_points([fake_entry_point("fakegpu", FakeGpuPlugin(), distribution="jt-fake-gpu")])


def bound_call(fn: Callable[..., Any], *specs: Any) -> Any:
    """The bound call of the only ``triton_call`` in ``fn`` (traced, not lowered)."""
    jaxpr = jax.make_jaxpr(fn)(*specs)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive.name == "triton_kernel_call"]
    return eqn.params["call"]


def compile_configs(call: Any) -> list[CompiledKernel]:
    """The fake backend's kernel for every configuration of ``call``."""
    backend = FakeGpuBackend()
    requests = [CompileRequest.for_config(call, config, TARGET, backend) for config in call.configs]
    return [backend.compile(request) for request in requests]


def lower_for_cuda(fn: Callable[..., Any], *specs: Any) -> Any:
    """``jax.jit(fn)`` lowered for ``cuda`` (no GPU needed)."""
    return jax.jit(fn).trace(*specs).lower(lowering_platforms=("cuda",))


def _fake_library() -> ctypes.CDLL:
    lib = FAKE_HANDLER.library()
    lib.jt_fake_launch_state.restype = ctypes.c_char_p
    lib.jt_fake_launch_set_runtime.argtypes = (ctypes.c_int,)
    return lib


def parsed_state() -> dict[str, Any]:
    """The state the fake driver was last asked to load modules for (what the handler parsed), as JSON data."""
    text = _fake_library().jt_fake_launch_state().decode()
    return json.loads(text) if text else {}


def fake_tuning(
    writes: Sequence[int], micros: Sequence[float], refused: Sequence[bool] = (), elements: int = 64, check: bool = True
) -> tuple[int, str, list[str]]:
    """Runs the handler's tuning over fake configurations (``jt_fake_launch_tune``): configuration ``c`` writes the
    first ``writes[c]`` of ``elements`` float32 elements of result 0, takes ``micros[c]`` and is ``refused[c]`` at
    launch. Returns the index chosen (-1 when none), the error's message and why each configuration was set aside."""
    count = len(writes)
    lib = _fake_library()
    message = ctypes.create_string_buffer(8192)
    skipped = ctypes.create_string_buffer(8192)
    chosen = lib.jt_fake_launch_tune(
        ctypes.c_int(count),
        ctypes.c_int64(elements),
        ctypes.c_int(4),
        ctypes.c_int(int(check)),
        (ctypes.c_int64 * count)(*writes),
        (ctypes.c_double * count)(*micros),
        (ctypes.c_int64 * count)(*(int(bool(r)) for r in (refused or [False] * count))),
        message,
        ctypes.c_int(len(message)),
        skipped,
        ctypes.c_int(len(skipped)),
    )
    return int(chosen), message.value.decode(), skipped.value.decode().split("\n")[:count]


@contextlib.contextmanager
def fake_runtime() -> Iterator[None]:
    """Makes the fake driver's runtime present (it starts out missing)."""
    lib = _fake_library()
    lib.jt_fake_launch_set_runtime(1)
    try:
        yield
    finally:
        lib.jt_fake_launch_set_runtime(0)
