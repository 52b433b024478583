"""What `jt_core.testing` offers GPU plugins (re-exported there): reading the custom calls a lowering emits
(`custom_calls`), decoding jaxlib's kernel-call message, and running jt's launch handler on XLA's CPU client.

jt's launch handler (`jt_core.gpu.handler`) is shared C++ that each GPU plugin builds over its runtime's driver.
Much of it can be checked without a GPU: the library builds, exports its stages and takes its handler from jt_core's
headers; XLA's CPU client runs its instantiate stage, which parses every attribute of a call (execute then stops
where it needs the GPU stream). `LaunchHandlerConformance` holds those checks for any driver.
"""

from __future__ import annotations

import collections
import itertools
import os
import re
import subprocess
import threading
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from jt_core.call import KernelCall
from jt_core.gpu import jaxlib_call
from jt_core.gpu.handler import LaunchHandlerLibrary, headers, include_dir
from jt_core.gpu.launchers import HandlerLauncher
from jt_core.native import NativeBuildError, build_shared_library, find_compiler
from jt_core.plugin.values import CompiledKernel

__all__ = [
    "HANDLER_HEADER",
    "HANDLER_STAGES",
    "LaunchHandlerConformance",
    "backend_config",
    "custom_calls",
    "decode_jaxlib_call",
    "exported_symbols",
    "output_operand_aliases",
    "run_on_cpu_client",
]

#: The shared header every driver file includes.
HANDLER_HEADER = "jt_launch_common.h"
#: The symbols (after the library's prefix) every handler library exports.
HANDLER_STAGES = (
    "instantiate",
    "instantiate_preloaded",
    "initialize",
    "execute",
    "state_type_id",
    "state_type_info",
    "driver_error",
    "modules_loaded",
)
# What only the shared headers define: a driver file that defines one of these copied the handler.
_SHARED_ONLY = ("ReadRememberedConfig", "Autotune(", "TimeConfig(", "GetAttr<", '"param_kinds"')


# -- reading lowerings ------------------------------------------------------------------------------------------


#: The lowerings `custom_calls` walked last. An MLIR operation is freed with the lowering that owns it, and
#: reading a freed one crashes the process; tests read the operations right after the call, often with the lowering
#: as a temporary (``custom_calls(jax.jit(f).lower(...))``), so the most recent ones are kept alive here.
_recent_lowerings: collections.deque[Any] = collections.deque(maxlen=256)


def custom_calls(lowered: Any, target: str | None = None) -> list[Any]:
    """The ``stablehlo.custom_call`` operations of a lowered module (optionally only those calling ``target``).

    The operations stay valid while ``lowered`` lives; the last 256 lowerings passed here are kept alive, so a
    temporary lowering is safe to inspect in the test that made it.

    Args:
        lowered: What ``jax.jit(f).trace(...).lower(...)`` returns.
        target: A custom-call target name to keep, or ``None`` for all.
    """
    _recent_lowerings.append(lowered)
    module = lowered.compiler_ir("stablehlo")
    found: list[Any] = []

    def visit(operation: Any) -> None:
        if operation.name == "stablehlo.custom_call":
            name = str(operation.attributes["call_target_name"]).strip('"')
            if target is None or name == target:
                found.append(operation)
        for region in operation.regions:
            for block in region.blocks:
                for inner in block.operations:
                    visit(inner.operation)

    visit(module.operation)
    return found


def _attribute_value(attr: Any) -> Any:
    from jax._src.lib.mlir import ir

    converters: tuple[tuple[Any, Any], ...] = (
        (ir.StringAttr, lambda a: a.value_bytes),
        (ir.IntegerAttr, lambda a: a.value),
        (ir.DenseI64ArrayAttr, list),
    )
    for kind, convert in converters:
        try:
            typed = kind(attr)
        except (ValueError, TypeError):
            continue
        return convert(typed)
    return str(attr)


def backend_config(operation: Any) -> dict[str, Any]:
    """A typed-FFI custom call's attributes (``mhlo.backend_config``) as Python values: ``bytes`` (strings),
    ``int`` or ``list[int]`` (other attributes as their text)."""
    from jax._src.lib.mlir import ir

    attributes: Any = ir.DictAttr(operation.attributes["mhlo.backend_config"])
    return {named.name: _attribute_value(named.attr) for named in attributes}


def output_operand_aliases(operation: Any) -> list[tuple[int, int]]:
    """``(operand index, output index)`` pairs of a custom call's ``output_operand_aliases``, sorted."""
    text = (
        str(operation.attributes["output_operand_aliases"]) if "output_operand_aliases" in operation.attributes else ""
    )
    pairs = []
    for match in re.finditer(r"output_tuple_indices = \[([0-9, ]*)\], operand_index = (\d+)", text):
        outs = [int(v) for v in match.group(1).split(",") if v.strip()]
        pairs.append((int(match.group(2)), outs[0] if outs else 0))
    return sorted(pairs)


def _fields(data: Any) -> dict[int, list[Any]]:
    return jaxlib_call.fields_by_number(bytes(data))  # type: ignore[return-value]


def _decode_kernel_call(launch: bytes) -> dict[str, Any]:
    import struct

    f = _fields(launch)
    k = _fields(f[1][0])
    names = {2: "bool", 3: "i32", 4: "u32", 5: "i64", 6: "u64"}
    params: list[tuple[Any, ...]] = []
    for raw in f.get(5, []):
        ((number, (value,)),) = _fields(raw).items()
        if number == 1:
            a = _fields(value)
            params.append(("array", a.get(1, [0])[0], a.get(2, [0])[0]))
        elif number == 7:
            params.append(("f32", struct.unpack("<f", value)[0]))
        elif number == 8:
            params.append(("f64", struct.unpack("<d", value)[0]))
        else:
            signed = names[number] in ("i32", "i64") and value >= 1 << 63
            params.append((names[number], value - (1 << 64) if signed else value))
    return {
        "kernel_name": k[1][0].decode(),
        "num_warps": k.get(2, [0])[0],
        "shared_mem_bytes": k.get(3, [0])[0],
        "module": k[4][0].decode(),
        "compute_capability": k.get(6, [0])[0],
        "num_ctas": k.get(10, [None])[0],
        "grid": tuple(f.get(i, [0])[0] for i in (2, 3, 4)),
        "parameters": params,
    }


def decode_jaxlib_call(opaque: bytes) -> dict[str, Any]:
    """The zlib-compressed ``TritonAnyKernelCall`` that jaxlib's Triton handler reads, as Python values.

    Returns:
        ``name`` and ``metadata``, and either ``kernel_call`` (one launch: ``kernel_name``, ``num_warps``,
        ``shared_mem_bytes``, ``module``, ``compute_capability``, ``num_ctas``, ``grid`` and ``parameters``, each
        ``("array", bytes_to_zero, ptr_divisibility)`` or ``(type, value)``) or ``autotuned`` (``name``,
        ``configs`` as ``(launch, description)`` pairs, ``aliases`` as ``(input, output, bytes)`` triples).
    """
    f = _fields(zlib.decompress(opaque))
    out: dict[str, Any] = {"name": f[4][0].decode(), "metadata": f.get(3, [b""])[0]}
    if 1 in f:
        out["kernel_call"] = _decode_kernel_call(f[1][0])
        return out
    a = _fields(f[2][0])
    configs = [(_decode_kernel_call(c[1][0]), c[2][0].decode()) for c in map(_fields, a.get(2, []))]
    aliases = [tuple(alias.get(i, [0])[0] for i in (1, 2, 3)) for alias in map(_fields, a.get(3, []))]
    out["autotuned"] = {"name": a[1][0].decode(), "configs": configs, "aliases": aliases}
    return out


def exported_symbols(path: str | os.PathLike[str]) -> set[str]:
    """The functions a shared library defines and exports (``nm -D --defined-only``)."""
    listing = subprocess.run(
        ["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return {fields[2] for fields in map(str.split, listing.splitlines()) if len(fields) == 3 and fields[1] == "T"}


# -- jt's launch handler on XLA's CPU client ---------------------------------------------------------------------

_probe_lock = threading.Lock()
_probe_types: set[str] = set()
_probe_targets: set[str] = set()
_probe_count = itertools.count()


def _cpu_probe_target(handler: LaunchHandlerLibrary, preloaded: bool) -> str:
    """Registers the handler's stages for the CPU platform under a probe name (once per process)."""
    import jax

    lib = handler.library()
    name = f"{handler.prefix}_cpu_probe" + ("_preloaded" if preloaded else "")
    with _probe_lock:
        if handler.prefix not in _probe_types:
            jax.devices("cpu")  # the CPU client must exist before the type and the target are registered
            jax.ffi.register_ffi_type(
                f"{handler.state_type_name}.cpu_probe",
                {
                    "type_id": handler.capsule(getattr(lib, f"{handler.prefix}_state_type_id")()),
                    "type_info": handler.capsule(getattr(lib, f"{handler.prefix}_state_type_info")()),
                },
                platform="cpu",
            )
            _probe_types.add(handler.prefix)
        if name not in _probe_targets:
            jax.ffi.register_ffi_target(name, handler.handler_capsules(preloaded), platform="cpu", api_version=1)
            _probe_targets.add(name)
    return name


def run_on_cpu_client(
    launcher: HandlerLauncher,
    call: KernelCall,
    kernels: Sequence[CompiledKernel],
    *,
    drop: Sequence[str] = (),
    preloaded: bool = False,
    device: Any | None = None,
) -> str:
    """Runs a call through ``launcher``'s handler library on XLA's CPU client and returns what XLA raised.

    The library's stages are registered for the CPU platform under probe names, and the call's custom call (the
    attributes ``launcher`` writes for ``kernels``, less those named in ``drop``) is compiled and run on random
    inputs. XLA runs the instantiate stage, which parses every attribute (and, with ``preloaded``, loads the
    modules into the driver's contexts); the execute stage then fails where it asks for the GPU stream. ``device``
    is what the attributes are written for (it names an autotuned call's tuning record).

    Returns:
        The message of the error XLA raised, or ``""`` when it raised none.
    """
    import jax
    from jax._src.interpreters import mlir
    from jax.extend.core import Primitive

    handler = launcher.handler
    target = _cpu_probe_target(handler, preloaded)

    def lowering(ctx: Any, *operands: Any) -> Any:
        attributes, scratch_bytes = launcher.attributes(call, kernels, device)
        for name in drop:
            del attributes[name]
        avals = list(ctx.avals_out)
        if scratch_bytes:
            avals.append(jax.core.ShapedArray((scratch_bytes,), np.uint8))
        result_types = [mlir.aval_to_ir_type(ctx.module_context, aval) for aval in avals]
        op = mlir.custom_call(
            target, result_types=result_types, operands=list(operands), backend_config=attributes, api_version=4
        )
        return list(op.results)[: len(ctx.avals_out)]

    primitive = Primitive(f"{handler.prefix}_cpu_probe_{next(_probe_count)}")
    primitive.multiple_results = True
    primitive.def_abstract_eval(lambda *avals: list(call.out_avals))
    mlir.register_lowering(primitive, lowering, platform="cpu")
    rng = np.random.default_rng()
    inputs = [rng.standard_normal(aval.shape).astype(aval.dtype) for aval in call.operand_avals]
    try:
        jax.block_until_ready(jax.jit(lambda *xs: primitive.bind(*xs))(*inputs))
    except Exception as exc:
        return str(exc)
    return ""


class LaunchHandlerConformance:
    """Checks a GPU plugin's build of jt's launch handler without a GPU. Subclass it and provide:

    * a ``launcher`` fixture: the plugin's `HandlerLauncher` (its ``handler`` is the
      library under test);
    * a ``handler_call`` fixture: ``(call, kernels)``, a bound call of ``sample_add_kernel`` and its compiled
      kernels, one per configuration;
    * `runtime_library` and `device_nodes`.
    """

    #: The runtime library the driver loads, as its error names it when it is missing (``"libcuda"``).
    runtime_library: ClassVar[str]
    #: Device files whose presence means the runtime is usable here (``("/dev/nvidiactl",)``).
    device_nodes: ClassVar[tuple[str, ...]] = ()

    @staticmethod
    def _build(handler: LaunchHandlerLibrary, directory: Path, include_first: Sequence[str] = ()) -> Any:
        try:
            find_compiler()
        except NativeBuildError as exc:
            pytest.skip(f"builds the handler from its sources, which takes a C++ compiler ({exc})")
        spec = handler.spec()
        return build_shared_library(
            f"{handler.prefix}_probe",
            spec.sources,
            include_dirs=[*include_first, *spec.include_dirs],
            headers=spec.headers,
            flags=spec.flags,
            libraries=spec.libraries,
            directory=directory,
        )

    def test_library_builds_exports_its_stages_and_is_cached(self, launcher: HandlerLauncher, tmp_path: Path) -> None:
        first = self._build(launcher.handler, tmp_path)
        second = self._build(launcher.handler, tmp_path)
        assert first.built and not second.built and first.path == second.path
        assert first.path.read_bytes()[:4] == b"\x7fELF"
        missing = {f"{launcher.handler.prefix}_{stage}" for stage in HANDLER_STAGES} - exported_symbols(first.path)
        assert not missing, f"the handler library does not export {sorted(missing)}"

    def test_the_driver_includes_the_shared_header_and_copies_none_of_it(self, launcher: HandlerLauncher) -> None:
        text = launcher.handler.source.read_text()
        assert f'#include "{HANDLER_HEADER}"' in text
        assert launcher.handler.spec().headers == tuple(headers())
        for shared in _SHARED_ONLY:
            assert shared not in text, f"{launcher.handler.source.name} defines {shared!r} itself"

    def test_the_handler_comes_from_the_header_on_the_include_path(
        self, launcher: HandlerLauncher, tmp_path: Path
    ) -> None:
        # A header of the same name earlier on the include path replaces jt_core's: the library then carries what
        # it defines, which shows that it takes its handler from it.
        override = tmp_path / "include"
        override.mkdir()
        original = (include_dir() / HANDLER_HEADER).read_text()
        marker = 'extern "C" int jt_launch_common_marker() { return 7; }\n'
        (override / HANDLER_HEADER).write_text(original.replace("#endif  // JT_LAUNCH_COMMON_H_", marker + "#endif"))
        built = self._build(launcher.handler, tmp_path / "cache", include_first=[str(override)])
        symbols = exported_symbols(built.path)
        assert "jt_launch_common_marker" in symbols
        assert f"{launcher.handler.prefix}_execute" in symbols

    def test_a_missing_runtime_is_reported_not_fatal(self, launcher: HandlerLauncher) -> None:
        error = launcher.handler.driver_error()
        if any(Path(node).exists() for node in self.device_nodes):
            assert error == ""
        else:
            assert self.runtime_library in error

    @pytest.mark.parametrize("preloaded", [False, True], ids=["initialize", "preloaded"])
    def test_xla_parses_the_launch_attributes(
        self, launcher: HandlerLauncher, handler_call: tuple[KernelCall, Sequence[CompiledKernel]], preloaded: bool
    ) -> None:
        # On a CPU client the instantiate stage runs (parsing every attribute; preloading without the runtime does
        # nothing); execute then stops at the GPU stream.
        message = run_on_cpu_client(launcher, *handler_call, preloaded=preloaded)
        assert "platform stream" in message or "GPU context" in message, message
        assert "attribute" not in message, message

    @pytest.mark.parametrize("attribute", ["scalars", "binary_0", "launch_0"])
    def test_a_missing_attribute_fails_instantiate_with_its_name(
        self, launcher: HandlerLauncher, handler_call: tuple[KernelCall, Sequence[CompiledKernel]], attribute: str
    ) -> None:
        message = run_on_cpu_client(launcher, *handler_call, drop=[attribute])
        library = launcher.handler.prefix.split("_launch")[0]
        assert f"{library}: attribute '{attribute}' is missing" in message, message

    def test_record_targets_register_through_the_api_xla_passed(
        self, launcher: HandlerLauncher, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """XLA passes its FFI API to the library when it registers a target (a metadata call); the targets with a
        record stage are then registered through that API, and lowering picks them (not for export, nor when
        turned off)."""
        handler = launcher.handler
        lib = handler.library()
        if getattr(lib, f"{handler.prefix}_register_record", None) is None:
            pytest.skip(f"this handler library exports no record stage ({handler.prefix}_register_record)")
        _cpu_probe_target(handler, preloaded=False)  # XLA has now called the library
        probe = LaunchHandlerLibrary(handler.prefix, handler.source, "cpu", "JT_PROBE_PRELOAD", "JT_PROBE_RECORD")
        probe.record_target_name = f"{handler.prefix}_cpu_probe_record"
        probe.record_preloaded_target_name = f"{handler.prefix}_cpu_probe_record_preloaded"
        assert probe.custom_call_target(True) == probe.preloaded_target_name  # nothing registered yet
        probe._register_record(lib)
        assert probe.record_unavailable is None
        assert probe.custom_call_target(True) == probe.record_preloaded_target_name
        assert probe.custom_call_target(False) == probe.record_target_name
        assert probe.custom_call_target(True, for_export=True) == probe.preloaded_target_name
        monkeypatch.setenv("JT_PROBE_RECORD", "0")
        assert probe.custom_call_target(True) == probe.preloaded_target_name
        assert probe.record_counts() == handler.record_counts()  # one library, one set of counters

    def test_a_handler_without_record_stage_keeps_the_plain_targets(self, launcher: HandlerLauncher) -> None:
        handler = launcher.handler
        probe = LaunchHandlerLibrary(handler.prefix, handler.source, "cpu", "JT_PROBE_PRELOAD")
        probe._register_record(handler.library())
        assert probe.record_unavailable == "this runtime's handler has no record stage"
        assert probe.custom_call_target(False) == probe.target_name
        assert probe.custom_call_target(True) == probe.preloaded_target_name
