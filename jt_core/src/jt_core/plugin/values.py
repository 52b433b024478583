"""The values a plugin's roles pass that name no role: `Target` (what a kernel is compiled for) and
`CompiledKernel` (what a backend returns and a launcher lowers), with `plain_metadata`.

`CompileRequest`, which names the backend that compiles it, is in
`jt_core.plugin.roles`, beside the roles.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = ["CompiledKernel", "Target", "plain_metadata"]


@dataclasses.dataclass(frozen=True)
class Target:
    """What a kernel is compiled for.

    Attributes:
        platform: The JAX lowering platform (``"cpu"``, ``"cuda"``, ``"rocm"``, ...).
        arch: Backend-specific architecture: a compute capability such as ``90`` for CUDA, ``"gfx942"`` for ROCm,
            ``"interpreter"`` for the CPU backend.
        warp_size: Threads per warp (wavefront) on this architecture.
    """

    platform: str
    arch: int | str
    warp_size: int


@dataclasses.dataclass(frozen=True, eq=False)
class CompiledKernel:
    """A compiled kernel configuration, as a launcher needs it.

    Attributes:
        name: The kernel's symbol name in the binary.
        target: The target it was compiled for.
        binary: The loadable code (cubin, HSACO); empty for the CPU backend.
        asm: Every intermediate representation kept, by stage name (``"ttir"``, ``"ptx"``, ...).
        metadata: The compiler's metadata as plain values.
        num_warps: Warps per program, as compiled (warp-specialised kernels may differ from the request).
        shared_mem: Dynamic shared memory in bytes.
        cluster_dims: Cluster shape (1, 1, 1) unless ``num_ctas`` > 1.
        global_scratch_size: Bytes of global scratch per program (device-side tensor descriptors).
        global_scratch_align: Alignment of that scratch.
        payload: Backend-specific extra (the CPU backend keeps the kernel function here).
    """

    name: str
    target: Target
    binary: bytes = b""
    asm: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    num_warps: int = 4
    shared_mem: int = 0
    cluster_dims: tuple[int, int, int] = (1, 1, 1)
    global_scratch_size: int = 0
    global_scratch_align: int = 1
    payload: Any = None


def plain_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """A compiler's metadata as plain JSON values (what `CompiledKernel.metadata` holds): numbers, strings,
    booleans, ``None``, lists and string-keyed dicts; anything else becomes its ``str``."""
    return {str(key): _plain(value) for key, value in metadata.items()}


def _plain(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return plain_metadata(value)
    return str(value)
