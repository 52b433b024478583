"""The CPU backend: a compile runs Triton's front end on the kernel, which checks it and gives its TTIR, kept as a
`Program` for the compiled path; the kernel's Python function is rewritten for
the interpreter too, which runs what the compiled path cannot."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from jt_core import settings
from jt_core.call import CPU_CHECKS, CompileOptions
from jt_core.checks import CpuChecks
from jt_core.interpreter import runner
from jt_core.interpreter.execute import INTERPRETED_DIALECTS
from jt_core.plugin import facade
from jt_core.plugin.roles import CompileRequest, Dialect
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.translation.backend import TranslatingBackend, translate
from jt_core.translation.program import Program

__all__ = ["CPU_TARGET", "CpuBackend", "CpuKernel", "CpuOptions", "compile_check_enabled"]

#: The target of every CPU kernel.
CPU_TARGET = Target(platform="cpu", arch="interpreter", warp_size=1)

#: The launchers that run a call in Triton's interpreter.
INTERPRETER_LAUNCHERS = ("interpreter", "ffi")


def compile_check_enabled() -> bool:
    """Whether lowering for the CPU checks kernels with Triton's front end (``JT_CPU_COMPILE_CHECK``, default on)."""
    return settings.flag("JT_CPU_COMPILE_CHECK", default=True)


@dataclasses.dataclass(frozen=True)
class CpuOptions:
    """The options a kernel runs with on the CPU backend.

    Attributes:
        num_warps: Warps per program, as configured (a program runs as one thread).
        checks: The checks the run makes (the call's `jt_core.cpu_checks` when it was made, else the
            defaults).
    """

    num_warps: int = CompileOptions.num_warps
    checks: CpuChecks = dataclasses.field(default_factory=CpuChecks)


@dataclasses.dataclass(frozen=True)
class CpuKernel:
    """What a CPU kernel is once compiled.

    Attributes:
        fn: The kernel's Python function, which the interpreter runs.
        checks: The checks a run makes.
        program: The kernel's TTIR, which the compiled path runs (``None`` when the front end did not give it).
        why_not: Why there is no program, when there is none.
        why_not_at: The kernel source line (``FILE:LINE``) of what ``why_not`` names, where it has one.
    """

    fn: Any
    checks: CpuChecks
    program: Program | None = dataclasses.field(default=None, compare=False)
    why_not: str | None = None
    why_not_at: str | None = None


def _interpreter_chosen(request: CompileRequest) -> bool:
    """Whether the call names one of the interpreter's launchers (``launcher=`` or ``JT_LAUNCHER_CPU``)."""
    named = request.call.launch.launcher or facade.launcher_override("cpu")
    return named in INTERPRETER_LAUNCHERS


class CpuBackend(TranslatingBackend):
    """Runs kernels on the host: compiled by XLA from their TTIR (the translation's compile, `TranslatingBackend`),
    or with Triton's interpreter."""

    platform = "cpu"

    def target(self, *, backend_arguments: Mapping[str, Any], device: Any | None, name: str) -> Target:
        return CPU_TARGET

    def target_label(self, target: Target) -> str:
        # One target, whichever launcher runs the kernel: a compile is Triton's front end, for either path.
        return "cpu"

    def parse_options(
        self, *, options: CompileOptions, backend_arguments: Mapping[str, Any], target: Target, name: str, label: str
    ) -> CpuOptions:
        return CpuOptions(num_warps=options.num_warps, checks=backend_arguments.get(CPU_CHECKS, CpuChecks()))

    def unsupported_dialect_reason(self, dialect: Dialect) -> str | None:
        if dialect.name in INTERPRETED_DIALECTS:
            return None
        return (
            "neither the compiled CPU path nor Triton's interpreter can execute them (they name GPU layouts); run it "
            "on a GPU platform such as 'cuda' (jt-cuda) or 'rocm' (jt-rocm)"
        )

    def cache_tag(self) -> str:
        checked = "checked" if compile_check_enabled() else "unchecked"
        return f"{checked}-{super().cache_tag()}"

    def compile(self, request: CompileRequest) -> CompiledKernel:
        """Runs Triton's front end on the kernel (`TranslatingBackend.compile`). Unless ``JT_CPU_COMPILE_CHECK=0``,
        what the front end refuses (a block size that is not a power of two, a pointer used as a number, an
        unknown name) fails the call when it is lowered, with Triton's message, rather than in the middle of a
        run."""
        if _interpreter_chosen(request):
            # Rewritten now, so that a kernel without source fails at lowering, not at run. A call on the compiled
            # path has it rewritten only if it ends in the interpreter: the front end reads the same source, and the
            # rewrite takes as long as the front end does (seconds for a kernel with thousands of stores).
            runner.interpreted(request.kernel.fn)
            if not compile_check_enabled():
                skipped = "a kernel compiled without Triton's front end (JT_CPU_COMPILE_CHECK=0, for the interpreter)"
                return self.compiled(request, None, skipped)
        program, why_not, at = translate(request, refuse=compile_check_enabled())
        if program is None:
            runner.interpreted(request.kernel.fn)  # it runs in the interpreter: fails now where it cannot
        return self.compiled(request, program, why_not, at)

    def payload(self, request: CompileRequest, program: Program | None, why_not: str | None, at: str | None) -> Any:
        options = request.options
        assert isinstance(options, CpuOptions), options
        return CpuKernel(request.kernel.fn, options.checks, program, why_not, at)
