"""Programmatic dependent launch (sm90+): kernels that wait for their prerequisite grids at entry.

XLA launches its own kernels inside a jitted program so that each one starts while the previous one drains
(programmatic dependent launch, PDL), and its kernels wait for their inputs with ``griddepcontrol.wait``. A Triton
kernel has no such wait unless its author wrote ``gdc_wait()``, so jt cannot launch it that way as it stands: it
could read its inputs before the previous kernel has written them.

For targets of compute capability 90 and above, jt-cuda therefore compiles every kernel through Triton's own stage
list with one more step between ``ptx`` and ``cubin``: `insert_entry_wait` puts ``griddepcontrol.wait`` at the
entry of the kernel function, before any of its instructions. The wait returns at once when the kernel was not
launched as a dependent, and otherwise when every prerequisite grid has completed and its memory is visible. Such
a kernel carries `jt_core.gpu.attributes.ENTRY_WAIT` in its metadata, and jt's launch handler launches it as a
programmatic dependent (`jt_core.gpu.attributes.programmatic_launch`).

Left as Triton compiles them, and launched as Triton would: kernels for older targets, ``JT_CUDA_PDL=0``, kernels
that ask for ``launch_pdl`` themselves (their author placed the ``gdc_wait``), cooperative kernels, and compiles
that use Triton's own IR override or dump (``ir_override``, ``TRITON_KERNEL_OVERRIDE``, ``TRITON_KERNEL_DUMP``) or
compilation listener, which only ``triton.compile`` serves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from jt_core.gpu import ENTRY_WAIT
from jt_core.plugin import settings

__all__ = ["MIN_COMPUTE_CAPABILITY", "VARIABLE", "Compiled", "cache_tag", "compile_waiting", "insert_entry_wait"]

#: The environment variable that turns the entry wait (and so the dependent launch) off when set to ``0``.
VARIABLE = "JT_CUDA_PDL"

#: The first compute capability with programmatic dependent launch (Hopper).
MIN_COMPUTE_CAPABILITY = 90

#: The instruction inserted at the kernel's entry.
WAIT = "griddepcontrol.wait;"

# The kernel function's header, up to the brace that opens its body (parameters and performance directives such
# as .reqntid / .maxnreg between them).
_ENTRY = re.compile(r"^\.visible \.entry [A-Za-z_$][\w$]*\((?:.|\n)*?^\{[ \t]*$", re.MULTILINE)
# Declarations that may open the body before its first instruction.
_DECLARATION = re.compile(r"^\s*(?:\.reg|\.local|\.shared)\b")


def enabled() -> bool:
    """Whether kernels for sm90+ are compiled with the entry wait (``JT_CUDA_PDL`` unset or true)."""
    return settings.flag(VARIABLE, default=True)


def cache_tag() -> str:
    """The part of the compile-cache key that says whether kernels for sm90+ wait at entry."""
    return f"entry-wait-sm{MIN_COMPUTE_CAPABILITY}+" if enabled() else ""


def applies(arch: int, options: Mapping[str, Any]) -> bool:
    """Whether a compile for compute capability ``arch`` with Triton options ``options`` gets the entry wait."""
    if arch < MIN_COMPUTE_CAPABILITY or not enabled():
        return False
    if options.get("launch_pdl") or options.get("launch_cooperative_grid") or options.get("ir_override"):
        return False
    from triton import knobs

    compilation = knobs.compilation
    return not (compilation.override or compilation.dump_ir or compilation.listener)


def insert_entry_wait(ptx: str) -> str:
    """``ptx`` with ``griddepcontrol.wait`` as the first instruction of its kernel function.

    Raises:
        ValueError: When the PTX holds no kernel function (``.visible .entry``), or more than one.
    """
    entries = list(_ENTRY.finditer(ptx))
    if len(entries) != 1:
        raise ValueError(f"expected one kernel function (.visible .entry) in the PTX, found {len(entries)}")
    body = entries[0].end() + 1
    lines = ptx[body:].split("\n")
    skipped = 0
    while skipped < len(lines) and _DECLARATION.match(lines[skipped]):
        skipped += 1
    at = body + sum(len(line) + 1 for line in lines[:skipped])
    return f"{ptx[:at]}\t{WAIT}\n{ptx[at:]}"


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What `compile_waiting` returns: the parts of Triton's ``CompiledKernel`` that jt reads."""

    name: str
    asm: Mapping[str, Any]
    metadata: Mapping[str, Any]


def compile_waiting(
    source: Any,
    target: Any,
    options: Mapping[str, Any],
    before_ptx: Callable[[Mapping[str, Any]], None] | None = None,
) -> Compiled:
    """Compiles ``source`` for ``target`` through the stages Triton's backend lists for the source's language, with
    the entry wait inserted into the PTX before ``ptxas`` runs.

    The steps are those of ``triton.compile`` (options parsed by the backend, the IR made by the source, every
    stage from the source's own), without Triton's cache: jt's caches keep the result. ``before_ptx`` is given the
    metadata once the LLVM IR is made (its shared memory is known then), and may raise to stop the compile before
    the costlier stages.
    """
    import triton
    from triton.compiler.compiler import get_cache_invalidating_env_vars, ir, make_backend
    from triton.runtime.cache import get_cache_key

    backend = make_backend(target)
    parsed = backend.parse_options(dict(options, **source.parse_options()))
    env_vars = get_cache_invalidating_env_vars()
    key = get_cache_key(source, backend, parsed, env_vars=env_vars) + "-" + cache_tag()
    metadata: dict[str, Any] = {
        "hash": hashlib.sha256(key.encode()).hexdigest(),
        "target": target,
        **parsed.__dict__,
        **env_vars,
        "triton_version": triton.__version__,
    }
    stages: dict[str, Any] = {}
    backend.add_stages(stages, parsed, source.language)
    make_ptx = stages["ptx"]

    def ptx_waiting_at_entry(module: Any, meta: dict[str, Any]) -> str:
        if before_ptx is not None:
            before_ptx(meta)
        meta[ENTRY_WAIT] = True
        return insert_entry_wait(make_ptx(module, meta))

    stages["ptx"] = ptx_waiting_at_entry
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = source.make_ir(
        target, parsed, backend.get_codegen_implementation(parsed), backend.get_module_map(), context
    )
    names = list(stages)
    asm: dict[str, Any] = {}
    for stage in names[names.index(source.ext) :]:
        module = stages[stage](module, metadata)
        # MLIR modules are changed in place by the next stage: keep each stage's text as it comes out.
        asm[stage] = module if isinstance(module, (str, bytes)) else str(module)
    return Compiled(name=str(metadata["name"]), asm=asm, metadata=metadata)
