"""What each NVIDIA architecture allows a kernel: shared memory per block, clusters, tensor memory.

The shared-memory figures are the opt-in maximum per thread block from the CUDA C++ Programming Guide's table of
technical specifications per compute capability (the most a kernel may request with
``cudaFuncAttributeMaxDynamicSharedMemorySize``).
"""

from __future__ import annotations

import dataclasses

KIB = 1024


@dataclasses.dataclass(frozen=True)
class ArchLimits:
    """Per-block resource limits of one compute capability.

    Attributes:
        compute_capability: ``major * 10 + minor`` (``90`` for Hopper).
        max_shared_mem: Opt-in maximum of shared memory per block, in bytes.
        supports_clusters: Whether thread-block clusters (``num_ctas`` > 1) exist.
        tensor_memory_columns: Tensor memory (TMEM) columns per SM; 0 where there is none.
    """

    compute_capability: int
    max_shared_mem: int
    supports_clusters: bool
    tensor_memory_columns: int

    @property
    def name(self) -> str:
        """``sm90`` style name."""
        return f"sm{self.compute_capability}"


# compute capability -> opt-in shared memory per block (bytes)
_SHARED_MEMORY = {
    70: 96 * KIB,
    72: 96 * KIB,
    75: 64 * KIB,
    80: 163 * KIB,
    86: 99 * KIB,
    87: 163 * KIB,
    89: 99 * KIB,
    90: 227 * KIB,
    100: 227 * KIB,
    101: 227 * KIB,
    103: 227 * KIB,
    110: 227 * KIB,
    120: 99 * KIB,
    121: 99 * KIB,
}

# Blackwell datacenter parts (sm100/sm103, and sm110) carry 512 columns of tensor memory per SM.
_TENSOR_MEMORY_COLUMNS = {100: 512, 101: 512, 103: 512, 110: 512}


def limits_for(compute_capability: int) -> ArchLimits:
    """The limits of a compute capability; unknown ones take the nearest lower known entry of the same major."""
    cc = int(compute_capability)
    if cc in _SHARED_MEMORY:
        shared = _SHARED_MEMORY[cc]
    else:
        same_major = [k for k in _SHARED_MEMORY if k // 10 == cc // 10 and k <= cc]
        lower = [k for k in _SHARED_MEMORY if k <= cc]
        pick = max(same_major) if same_major else (max(lower) if lower else min(_SHARED_MEMORY))
        shared = _SHARED_MEMORY[pick]
    return ArchLimits(
        compute_capability=cc,
        max_shared_mem=shared,
        supports_clusters=cc >= 90,
        tensor_memory_columns=_TENSOR_MEMORY_COLUMNS.get(cc, 0),
    )


def parse_compute_capability(value: object, what: str) -> int:
    """Turns ``90``, ``"9.0"``, ``"90"``, ``"sm_90"``, ``"sm90a"`` or ``(9, 0)`` into ``90``.

    Raises:
        ValueError: For anything else, naming ``what``.
    """
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a compute capability such as 90 or '9.0', got {value!r}")
    if isinstance(value, int):
        if value >= 10:
            return value
        raise ValueError(f"{what}={value!r} is not a compute capability; write 90 (or '9.0') for sm90")
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return value[0] * 10 + value[1]
    if isinstance(value, float):
        return round(value * 10)
    if isinstance(value, str):
        text = value.strip().lower().removeprefix("sm_").removeprefix("sm").rstrip("af")
        if "." in text:
            major, _, minor = text.partition(".")
            if major.isdigit() and minor.isdigit():
                return int(major) * 10 + int(minor)
        elif text.isdigit() and int(text) >= 10:
            return int(text)
    raise ValueError(f"{what}={value!r} is not a compute capability; expected e.g. 90, '9.0' or 'sm_90'")
