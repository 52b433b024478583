"""Which AMD GPU a call compiles for: the ``gfx`` architecture, its wavefront size and its LDS capacity.

The architecture comes, in this order of precedence, from the call (``backend_options={"arch": "gfx942"}``), from
the environment variable ``JT_ROCM_ARCH``, and from the device the computation is lowered for.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from jt_core.plugin import KernelCallTypeError, KernelCallValueError, settings

#: The environment variable that overrides the architecture read from the device.
ARCH_ENV = "JT_ROCM_ARCH"
#: The ``backend_options`` key that names the architecture for one call.
ARCH_OPTION = "arch"

# gfx + major (1-2 digits) + minor (one hex digit) + stepping (one hex digit): gfx90a, gfx942, gfx1100, gfx1201.
_ARCH_RE = re.compile(r"^gfx(?P<major>\d{1,2})(?P<minor>[0-9a-f])(?P<stepping>[0-9a-f])$")

_KIB = 1024
# LDS bytes a workgroup may use, per architecture where it differs from 64 KiB (Triton's AMD target info agrees).
_LDS_BYTES = {"gfx950": 160 * _KIB, "gfx1250": 320 * _KIB}
_DEFAULT_LDS_BYTES = 64 * _KIB
#: Hardware limit on threads per workgroup for every supported architecture.
MAX_THREADS_PER_BLOCK = 1024


@dataclasses.dataclass(frozen=True)
class GfxArch:
    """One AMD GPU architecture.

    Attributes:
        name: The LLVM processor name without target features (``"gfx942"``).
        major: The GFX major version (9 for CDNA, 10-12 for RDNA).
    """

    name: str
    major: int

    @property
    def warp_size(self) -> int:
        """Threads per wavefront: 64 on GFX9 (GCN/CDNA), 32 on GFX10 and later (RDNA)."""
        return 64 if self.major < 10 else 32

    @property
    def lds_bytes(self) -> int:
        """Local data share (shared memory) a workgroup may allocate."""
        return _LDS_BYTES.get(self.name, _DEFAULT_LDS_BYTES)

    @property
    def family(self) -> str:
        """``"CDNA/GCN"`` or ``"RDNA"``, for messages."""
        return "CDNA/GCN" if self.major < 10 else "RDNA"


def parse_arch(value: Any, source: str) -> GfxArch:
    """Parses an architecture name such as ``"gfx942"`` or ``"gfx942:sramecc+:xnack-"``.

    Target features after ``:`` are dropped: Triton compiles for the bare processor.

    Args:
        value: The name to parse.
        source: Where it came from, for the error message (``"backend_options['arch']"``, ``"JT_ROCM_ARCH"``).

    Raises:
        KernelCallTypeError: When ``value`` is not a string.
        KernelCallValueError: When it is not a ``gfx`` processor name.
    """
    if not isinstance(value, str):
        raise KernelCallTypeError(
            f"{source} must be an AMD GPU architecture name such as 'gfx942', got {type(value).__name__} {value!r}"
        )
    name = value.strip().lower().split(":", 1)[0]
    match = _ARCH_RE.match(name)
    if match is None:
        raise KernelCallValueError(
            f"{source} is {value!r}, which is not an AMD GPU architecture; expected a name like 'gfx90a', "
            "'gfx942' (CDNA) or 'gfx1100' (RDNA), as printed by `rocminfo` or `amdgpu-arch`"
        )
    return GfxArch(name=name, major=int(match.group("major")))


def requested_arch(backend_options: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> GfxArch | None:
    """The architecture the call or the environment (``os.environ`` by default) asks for, or ``None``."""
    if ARCH_OPTION in backend_options:
        return parse_arch(backend_options[ARCH_OPTION], f"backend_options[{ARCH_OPTION!r}]")
    env = settings.text(ARCH_ENV, environ)
    if env:
        return parse_arch(env, f"environment variable {ARCH_ENV}")
    return None


def no_arch_error(call_name: str) -> KernelCallValueError:
    """The error raised when no architecture can be determined (lowering without an AMD device)."""
    return KernelCallValueError(
        f"triton_call {call_name!r}: cannot tell which AMD GPU to compile for: no ROCm device is attached to this "
        f"lowering. Pass backend_options={{{ARCH_OPTION!r}: 'gfx942'}} to triton_call, or set {ARCH_ENV}=gfx942 "
        "(use your GPU's architecture; `rocminfo` prints it)"
    )
