"""Handing Triton IR to XLA: the ``"xla"`` launchers lower a call to XLA's own Triton custom call.

XLA's GPU backends take a custom call ``__gpu$xla.gpu.triton`` (API version 4) whose backend config carries a Triton
IR module (``ir``), the name of its entry function, ``num_warps``, ``num_stages``, the grid and ``debug``; XLA
compiles the module with the Triton it bundles and schedules the kernel as one of its own (inside CUDA graphs a
plain kernel node, not a traced handler). Pallas lowers its Triton kernels this way.

XLA passes the kernel the operand buffers, then the result buffers, and nothing else. So jt hands XLA the kernel's
Triton IR (``asm["ttir"]`` of the compiled configuration) wrapped in an *entry function* built with jaxlib's own
Triton dialect: it takes one pointer per operand and per result and calls the kernel with them in the kernel's own
parameter order, with the call's scalars as constants (scalars are static in ``triton_call``). An aliased output is
the operand's buffer; a zeroed output gets a zero-filled operand aliased to it. The IR is parsed and verified by the
Triton dialect XLA bundles (the jaxlib's), so IR that dialect rejects is known at lowering, before XLA compiles
anything; and where a device is present, each new kernel variant is compiled once by XLA on its own (a probe, about
the time XLA takes to compile the kernel inside the program) and the outcome is recorded per machine (the cache
root's ``xla`` folder), so that a kernel XLA cannot compile goes to the next launcher instead of failing the
program. ``JT_XLA_PROBE=0`` skips the probe.

What the call cannot express this way goes to the platform's next launcher, with the reason: host-side tensor
descriptors, clusters (``num_ctas > 1``), global scratch memory, cooperative or dependent launches, kernels of another
dialect than plain Triton (Gluon), and IR the bundled Triton rejects. Autotuned calls are tuned ahead of lowering
(`needs_tuning_ahead`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from jt_core import files, integrity, settings
from jt_core.call import INPUT, OUTPUT, KernelCall
from jt_core.errors import KernelCallValueError
from jt_core.gpu.launchers import OperandSource, source_avals, source_values
from jt_core.plugin.roles import Launcher
from jt_core.plugin.values import CompiledKernel

__all__ = ["TARGET_NAME", "XlaKernel", "XlaTritonLauncher", "build_xla_kernel", "probe_records"]

#: XLA's Triton custom-call target.
TARGET_NAME = "__gpu$xla.gpu.triton"

_PROBE_SWITCH = "JT_XLA_PROBE"

log = logging.getLogger("jt_core.gpu.xla")


@dataclasses.dataclass(frozen=True)
class XlaKernel:
    """A kernel as XLA's Triton custom call takes it.

    Attributes:
        name: The entry function's name.
        ir: The Triton IR module (MLIR bytecode written with jaxlib's Triton dialect).
        num_warps: Warps per program.
        num_stages: Pipelining stages.
        grid: The grid.
        debug: Whether XLA compiles it with Triton's debug checks.
        operands: Per custom-call operand, where it comes from (`jt_core.gpu.launchers.OperandSource`: one of
            the call's operands, or a zero-filled buffer for an output).
        aliases: ``(custom-call operand, output)`` pairs sharing a buffer.
    """

    name: str
    ir: bytes
    num_warps: int
    num_stages: int
    grid: tuple[int, int, int]
    debug: bool
    operands: tuple[OperandSource, ...]
    aliases: tuple[tuple[int, int], ...]

    def digest(self, extra: str = "") -> str:
        """Identifies the kernel as XLA compiles it (with ``extra``: the jaxlib version and the device kind)."""
        text = json.dumps([self.name, self.num_warps, self.num_stages, self.debug, extra])
        return hashlib.sha256(self.ir + text.encode()).hexdigest()


class IrRejected(Exception):
    """The Triton dialect bundled with jaxlib cannot take the kernel's IR."""


def _layout(call: KernelCall, zeroed: Sequence[int]) -> tuple[tuple[tuple[str, int], ...], tuple[tuple[int, int], ...]]:
    """The custom call's operands and aliases: the call's operands (a zeroed output's aliased operand replaced by
    zeros), then a zero-filled buffer for each other zeroed output."""
    aliased = dict(call.aliases)
    sources: list[tuple[str, int]] = []
    aliases: list[tuple[int, int]] = []
    for index in range(len(call.operand_avals)):
        out = aliased.get(index)
        sources.append(("output", out) if out is not None and out in zeroed else ("operand", index))
        if out is not None:
            aliases.append((index, out))
    covered = set(aliased.values())
    for out in zeroed:
        if out not in covered:
            aliases.append((len(sources), out))
            sources.append(("output", out))
    return tuple(sources), tuple(aliases)


def _scalar_attribute(ir: Any, kind: Any, value: Any) -> Any:
    plain = value.item() if isinstance(value, np.generic) else value
    try:
        width = ir.IntegerType(kind).width
    except ValueError:
        width = 0  # a float type
    if width:
        number = int(plain)
        if number >= 1 << (width - 1) and width > 1:
            number -= 1 << width  # unsigned values travel in the signless type's two's complement
        return ir.IntegerAttr.get(kind, number)
    return ir.FloatAttr.get(kind, float(plain))


def build_xla_kernel(call: KernelCall, kernel: CompiledKernel, config_index: int = 0) -> XlaKernel:
    """The entry module XLA's Triton call runs for one configuration of ``call``.

    Raises:
        IrRejected: When jaxlib's Triton dialect cannot parse or verify the IR, or the kernel's function does not
            take the parameters the call binds.
    """
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    from jax._src.lib.mlir.dialects import arith
    from jax._src.lib.triton import dialect as tt

    config = call.configs[config_index]
    sources, aliases = _layout(call, config.zeroed_outputs)
    alias_of = dict(aliases)
    context = mlir.JaxIrContext()
    tt.register_dialect(context)
    context.load_all_available_dialects()
    with context, ir.Location.unknown():
        try:
            module = ir.Module.parse(str(kernel.asm["ttir"]))
        except Exception as exc:
            raise IrRejected(f"jaxlib's Triton dialect cannot parse the kernel's IR: {_first_line(exc)}") from None
        functions = [op for op in module.body.operations if op.operation.name == "tt.func"]
        public = [f for f in functions if str(f.attributes["sym_name"]).strip('"') == kernel.name]
        if len(public) != 1:
            raise IrRejected(f"the IR has no single function named {kernel.name!r}")
        callee = public[0]
        callee_type = ir.FunctionType(ir.TypeAttr(callee.attributes["function_type"]).value)
        slots = [slot for slot in call.slots if slot.type_str != "constexpr"]
        if len(callee_type.inputs) != len(slots):
            raise IrRejected(
                f"the kernel's function takes {len(callee_type.inputs)} parameters, the call binds {len(slots)}"
            )
        callee.attributes["sym_visibility"] = ir.StringAttr.get("private")

        def pointer(aval: Any) -> Any:
            return tt.PointerType.get(mlir.dtype_to_ir_type(np.dtype(aval.dtype)), 1)

        entry_inputs = [pointer(aval) for aval in source_avals(call, sources)] + [
            pointer(aval) for aval in call.out_avals
        ]
        divisible = ir.DictAttr.get({"tt.divisibility": ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 16)})
        name = f"{kernel.name}_xla"
        with ir.InsertionPoint(module.body):
            entry = tt.FuncOp(
                name,
                ir.TypeAttr.get(ir.FunctionType.get(entry_inputs, [])),
                sym_visibility="public",
                arg_attrs=ir.ArrayAttr.get([divisible] * len(entry_inputs)),
            )
        block = entry.body.blocks.append(*entry_inputs)
        results = block.arguments[len(sources) :]
        with ir.InsertionPoint(block):
            arguments = []
            for slot, kind in zip(slots, callee_type.inputs):
                if slot.kind == OUTPUT:
                    arguments.append(results[slot.index])
                elif slot.kind == INPUT:
                    out = alias_of.get(slot.index)  # an aliased input is written through the result's buffer
                    arguments.append(results[out] if out is not None else block.arguments[slot.index])
                else:
                    arguments.append(arith.ConstantOp(kind, _scalar_attribute(ir, kind, slot.value)).result)  # type: ignore[call-arg]
            tt.CallOp([], ir.FlatSymbolRefAttr.get(kernel.name), arguments)
            tt.ReturnOp([])
        if not module.operation.verify():
            raise IrRejected("the entry module does not verify")
        # Printed without locations and read back: the IR XLA gets names no file of this machine, so it is the
        # same wherever the kernel's source lives (exported artifacts, the per-machine record of what compiled).
        module = ir.Module.parse(str(module))
        buffer = io.BytesIO()
        module.operation.write_bytecode(buffer)
    return XlaKernel(
        name=name,
        ir=buffer.getvalue(),
        num_warps=kernel.num_warps,
        num_stages=config.options.num_stages,
        grid=config.grid,
        debug=config.options.debug,
        operands=sources,
        aliases=aliases,
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def emit(ctx: Any, call: KernelCall, xla: XlaKernel, operands: Sequence[Any], has_side_effect: bool) -> list[Any]:
    """Emits XLA's Triton custom call for ``xla`` inside a lowering rule; returns the outputs."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    values = source_values(ctx, call, xla.operands, operands)
    avals = source_avals(call, xla.operands)
    backend_config = {
        "name": ir.StringAttr.get(xla.name),
        "ir": ir.StringAttr.get(xla.ir),
        "num_stages": mlir.i32_attr(xla.num_stages),
        "num_warps": mlir.i32_attr(xla.num_warps),
        "grid_x": mlir.i32_attr(xla.grid[0]),
        "grid_y": mlir.i32_attr(xla.grid[1]),
        "grid_z": mlir.i32_attr(xla.grid[2]),
        "debug": ir.BoolAttr.get(xla.debug),
    }
    op = mlir.custom_call(
        TARGET_NAME,
        result_types=[mlir.aval_to_ir_type(ctx.module_context, aval) for aval in call.out_avals],
        operands=values,
        backend_config=backend_config,
        has_side_effect=has_side_effect,
        api_version=4,
        operand_layouts=[Launcher.row_major(aval) for aval in avals],
        result_layouts=[Launcher.row_major(aval) for aval in call.out_avals],
        operand_output_aliases=dict(xla.aliases),
    )
    return list(op.results)


# -- the per-machine record of what XLA compiled -------------------------------------------------------------------

_records_lock = threading.Lock()


def probe_records() -> list[dict[str, Any]]:
    """Every probe outcome recorded on this machine (``accepted``, ``seconds``, ``error``, ``kernel``)."""
    try:
        paths = sorted(files.cache_folder("xla").glob("*.json"))
    except OSError:
        return []
    return [record for record in map(integrity.read_record, paths) if record is not None]


def _probe(call: KernelCall, xla: XlaKernel, device: Any) -> str | None:
    """Compiles ``xla`` alone with XLA on ``device`` (once per machine); returns why XLA rejected it, or ``None``."""
    import jax
    import jaxlib

    digest = xla.digest(f"jaxlib {jaxlib.__version__} {getattr(device, 'device_kind', '')}")
    path = files.entry_path("xla", f"{digest}.json")
    record = None if path is None else integrity.read_record(path)
    if record is None:
        started = time.perf_counter()
        error = None
        try:
            sharding = jax.sharding.SingleDeviceSharding(device)
            specs = [
                jax.ShapeDtypeStruct(tuple(aval.shape), aval.dtype, sharding=sharding) for aval in call.operand_avals
            ]
            jax.jit(lambda *ops: _probe_primitive().bind(*ops, call=call, xla=xla)).lower(*specs).compile()
        except Exception as exc:
            error = f"{type(exc).__name__}: {_first_line(exc)}"
        record = {
            "kernel": call.name,
            "entry": xla.name,
            "accepted": error is None,
            "error": error,
            "seconds": round(time.perf_counter() - started, 4),
        }
        if path is not None:
            with _records_lock:
                integrity.write_record(path, record)
    return None if record.get("accepted") else f"XLA could not compile the kernel's IR ({record.get('error')})"


@functools.cache
def _probe_primitive() -> Any:
    """The primitive a probe compiles, made at the first probe (not at import: a CPU call never needs it)."""
    from jax._src.core import Primitive  # jax.extend.core's, whose package imports Pallas
    from jax._src.interpreters import mlir

    primitive = Primitive("jt_xla_triton_probe")
    primitive.multiple_results = True
    primitive.def_abstract_eval(lambda *avals, call, xla: list(call.out_avals))
    mlir.register_lowering(
        primitive, lambda ctx, *ops, call, xla: emit(ctx, call, xla, ops, has_side_effect=False), platform="gpu"
    )
    return primitive


class XlaTritonLauncher(Launcher):
    """Base of the ``"xla"`` launchers: XLA's own Triton custom call, with the kernel's Triton IR.

    Subclasses set `platform` (and `priority`).
    """

    name = "xla"
    priority = 5
    #: What makes a call go to the next launcher, in the words `fallback_reason` uses.
    fallback_rules: ClassVar[tuple[str, ...]] = (
        "host-side tensor descriptors",
        "clusters (num_ctas > 1)",
        "global scratch memory",
        "cooperative or programmatic-dependent launches",
        "kernels of another dialect than plain Triton (Gluon)",
        "Triton IR the Triton bundled with jaxlib rejects (parsed at lowering; compiled once per machine)",
        "autotuned calls lowered without a device (no configuration can be chosen)",
    )

    def __init__(self) -> None:
        # The kernel built for the last call: lowering asks fallback_reason() and then lower() for the same one.
        self._last: tuple[KernelCall, CompiledKernel, XlaKernel | str] | None = None
        self._lock = threading.Lock()

    def _xla_kernel(self, call: KernelCall, kernel: CompiledKernel) -> XlaKernel | str:
        with self._lock:
            last = self._last
        if last is not None and last[0] is call and last[1] is kernel:
            return last[2]
        try:
            built: XlaKernel | str = build_xla_kernel(call, kernel)
        except IrRejected as exc:
            built = str(exc)
        with self._lock:
            self._last = (call, kernel, built)
        return built

    def needs_tuning_ahead(self, call: KernelCall) -> bool:
        """Always: XLA's Triton call runs one configuration."""
        return True

    def fallback_reason(self, call: KernelCall, kernels: Sequence[CompiledKernel], device: Any | None) -> str | None:
        if len(kernels) != 1:
            return "an autotuned call lowered without a device: no configuration can be chosen for XLA"
        if call.dialect.name != "triton":
            return f"it is a {call.dialect.name} kernel; XLA's Triton call takes plain Triton IR"
        described = [slot.name for slot in call.slots if slot.descriptor is not None]
        if described:
            return f"arguments {described} are host-side tensor descriptors, which XLA's Triton call cannot pass"
        kernel = kernels[0]
        if kernel.cluster_dims != (1, 1, 1):
            return f"it runs clusters of {kernel.cluster_dims[0]} programs (num_ctas > 1)"
        if kernel.global_scratch_size:
            return f"it needs {kernel.global_scratch_size} bytes of global scratch memory per program"
        if kernel.metadata.get("launch_cooperative_grid") or kernel.metadata.get("launch_pdl"):
            return "it needs a cooperative or programmatic-dependent launch"
        if int(kernel.metadata.get("profile_scratch_size", 0) or 0):
            return "it was compiled with Triton instrumentation (profile scratch memory)"
        if "ttir" not in kernel.asm:
            return "the backend kept no Triton IR (ttir) for it"
        built = self._xla_kernel(call, kernel)
        if isinstance(built, str):
            return built
        if device is not None and settings.flag(_PROBE_SWITCH, default=True):
            return _probe(call, built, device)
        return None

    def lower(
        self,
        ctx: Any,
        call: KernelCall,
        kernels: Sequence[CompiledKernel],
        operands: Sequence[Any],
        device: Any | None,
    ) -> Sequence[Any]:
        reason = self.fallback_reason(call, kernels, None)
        if reason is not None:
            raise KernelCallValueError(f"triton_call {call.name!r}: launcher 'xla' cannot lower it: {reason}")
        built = self._xla_kernel(call, kernels[0])
        assert not isinstance(built, str)
        log.info("triton_call %r: lowered to XLA's Triton call as %r", call.name, built.name)
        return emit(ctx, call, built, operands, call.launch.has_side_effect)
