"""A backend whose kernels are translated into XLA operations: `TranslatingBackend`, and what it compiles a kernel
to, `TranslatedKernel`.

A compile runs Triton's front end on the kernel, which checks it as Triton would and gives its TTIR, kept as a
`jt_core.translation.program.Program` (and on disk, so that a warm first call skips the front end). A kernel whose
TTIR cannot be read, or that stops at ``breakpoint()``, compiles to no program, with the reason: the platform's
launcher then says why it cannot run it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from jt_core import frontend
from jt_core.plugin.roles import Backend, CompileRequest
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.translation.extract import enum_names, extract
from jt_core.translation.program import Program

__all__ = ["PROGRAM_FORMAT", "TranslatedKernel", "TranslatingBackend", "translate"]

#: The version of what the disk cache keeps of a translated kernel (its TTIR as `Program.to_bytes` writes it, from
#: the front end as `jt_core.frontend.build` runs it, where ``tl.dot``'s default input precision is ``"ieee"``).
PROGRAM_FORMAT = 8


@dataclasses.dataclass(frozen=True)
class TranslatedKernel:
    """What a kernel is once compiled for a translating backend.

    Attributes:
        program: The kernel's TTIR (``None`` when the front end did not give it).
        why_not: Why there is no program, when there is none.
        why_not_at: The kernel source line (``FILE:LINE``) of what ``why_not`` names, where it has one.
    """

    program: Program | None = dataclasses.field(default=None, compare=False)
    why_not: str | None = None
    why_not_at: str | None = None


def translate(request: CompileRequest, refuse: bool = True) -> tuple[Program | None, str | None, str | None]:
    """Runs Triton's front end on the kernel of ``request``: its TTIR as a `Program`, or ``None`` with why (and
    the kernel source line where known).

    Args:
        request: What to compile.
        refuse: Whether a kernel the front end refuses fails the compile with Triton's message (else it compiles to
            no program, with the message's last line as the reason).

    Raises:
        Exception: Triton's own (``CompilationError`` with the source line), for a kernel the front end refuses,
            where ``refuse`` is set.
    """
    source = request.dialect.make_source(request.kernel, request.specialization, request.target)
    names = enum_names()

    def read(module: Any) -> tuple[Program | None, str | None]:
        try:
            return extract(module, names), None
        except Exception as exc:  # a module this jt cannot read: the launcher says so
            return None, f"a kernel whose Triton IR jt could not read ({type(exc).__name__}: {exc})"

    stops: list[str] = []
    try:
        program, why_not = frontend.build(source, read, stops)
    except Exception as exc:
        if refuse:
            raise
        lines = str(exc).strip().splitlines() or [""]
        return None, f"a kernel Triton's front end refused ({type(exc).__name__}: {lines[-1]})", None
    if stops:  # Python's debugger stops only where the kernel runs as Python
        return None, "breakpoint() (Python's debugger)", stops[0]
    return program, why_not, None


class TranslatingBackend(Backend):
    """Compiles kernels to their TTIR, for a launcher that translates it into XLA operations
    (`jt_core.translation.launcher.TranslatingLauncher`).

    Subclasses set `platform`; the target is the platform's one, ``arch`` ``"xla"``.
    """

    def target(self, *, backend_arguments: Mapping[str, Any], device: Any | None, name: str) -> Target:
        return Target(platform=self.platform, arch="xla", warp_size=1)

    def target_label(self, target: Target) -> str:
        return self.platform

    def may_keep_on_disk(self, request: CompileRequest) -> bool:
        # The TTIR is kept, so that a warm first call skips Triton's front end (whose import alone, which brings in
        # the Gluon language, is 25-50 ms on a 2-core host).
        return True

    def cache_tag(self) -> str:
        # TRITON_F32_DEFAULT, where set, is tl.dot's default input precision (the front end writes it in the TTIR).
        dot = os.environ.get("TRITON_F32_DEFAULT", "")
        return f"program{PROGRAM_FORMAT}" + (f"-{dot}" if dot else "")

    def restore(self, cached: CompiledKernel, request: CompileRequest) -> CompiledKernel:
        program, why_not = None, str(cached.metadata.get("why_not") or "") or None
        at = str(cached.metadata.get("why_not_at") or "") or None
        if cached.binary:
            try:
                program = Program.from_bytes(cached.binary)
            except ValueError as exc:
                program, why_not, at = None, str(exc), None
        return self.compiled(request, program, why_not, at)

    def compile(self, request: CompileRequest) -> CompiledKernel:
        """Runs Triton's front end on the kernel (about 6 ms per configuration for a vector add, 15 to 35 ms for a
        matrix product) and keeps the TTIR it gives. What the front end refuses (a block size that is not a power
        of two, a pointer used as a number, an unknown name) fails the call when it is lowered, with Triton's
        message."""
        return self.compiled(request, *translate(request))

    def compiled(
        self, request: CompileRequest, program: Program | None, why_not: str | None, at: str | None = None
    ) -> CompiledKernel:
        """The compiled kernel of ``request``: its program, or why there is none."""
        options = request.options
        return CompiledKernel(
            name=request.call.name,
            target=request.target,
            binary=program.to_bytes() if program is not None else b"",
            metadata=({"why_not": why_not} if why_not else {}) | ({"why_not_at": at} if at else {}),
            num_warps=getattr(options, "num_warps", request.config.options.num_warps),
            payload=self.payload(request, program, why_not, at),
        )

    def payload(self, request: CompileRequest, program: Program | None, why_not: str | None, at: str | None) -> Any:
        """What the launcher reads of the compiled kernel (`TranslatedKernel`)."""
        return TranslatedKernel(program, why_not, at)
