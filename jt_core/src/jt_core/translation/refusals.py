"""The operations the translation refuses, each with what to call it in the one line that says why a kernel runs
elsewhere (the interpreter, on the CPU) or is refused (on a TPU); and the operations Triton's dialects register that
its front end never makes for a kernel (their rule says so, should one appear).

A barrier has no effect where the programs run as one computation: its rule lowers it to nothing.
"""

from __future__ import annotations

from typing import Any

from jt_core.translation.memory import State
from jt_core.translation.rules import RuleContext, refuse, rule

__all__ = ["NOT_FROM_THE_FRONT_END"]

for _name, _what in (
    ("tt.elementwise_inline_asm", "inline asm (tl.inline_asm_elementwise)"),
    ("tt.print", "device printing (tl.device_print / print)"),
    ("tt.assert", "a device assertion (tl.device_assert)"),
    ("tt.int_to_ptr", "an integer turned into a pointer"),
    ("tt.dot_scaled", "a scaled dot product (tl.dot_scaled)"),
    ("tt.atomic_load", "an atomic load (tl.atomic_load)"),
    ("tt.atomic_store", "an atomic store (tl.atomic_store)"),
    ("tt.atomic_poll", "an atomic poll"),
    ("tt.warp_specialize", "warp specialization"),
    ("tt.grid_dependency_launch_dependents", "programmatic dependent launch (gdc_launch_dependents)"),
    ("tt.grid_dependency_wait", "programmatic dependent launch (gdc_wait)"),
    ("tt.approx_divf", "an approximate division"),
):
    refuse(_name, _what)


def _no_effect(ctx: RuleContext, state: State) -> State:
    return state


def _nothing(walk: Any, op: Any) -> None:
    return None


for _name in ("gpu.barrier", "ttg.barrier", "tt.debug_barrier"):
    rule(_name, analyse=_nothing, effect=True)(_no_effect)

#: The words for an operation Triton's dialects register that its front end never makes of a kernel.
NOT_FROM_THE_FRONT_END = "{name}, an operation Triton's front end does not make of a kernel"

#: The operations the dialects Triton's front end uses register, for which it has no construct: a module that holds
#: one came from elsewhere.
_NOT_MADE = (
    "arith.addui_extended",
    "arith.ceildivui",
    "arith.convertf",
    "arith.flush_denormals",
    "arith.mulsi_extended",
    "arith.mului_extended",
    "arith.scaling_extf",
    "arith.scaling_truncf",
    "arith.subui_extended",
    "cf.assert",
    "cf.switch",
    "math.clampf",
    "math.erfc",
    "math.fpowi",
    "math.ipowi",
    "math.isfinite",
    "math.isinf",
    "math.isnan",
    "math.isnormal",
    "math.sincos",
    "scf.execute_region",
    "scf.forall",
    "scf.forall.in_parallel",
    "scf.index_switch",
    "scf.parallel",
    "scf.reduce",
    "scf.reduce.return",
    "tt.func",
    "ub.unreachable",
)
for _name in _NOT_MADE:
    refuse(_name, NOT_FROM_THE_FRONT_END.format(name=_name))
