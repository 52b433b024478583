"""The names jax-triton's releases published beyond ``triton_call``, kept for existing code.

The kernel wrapper (`JTJITFunction`, with the attributes of both jax-triton's wrappers), ``get_type_id``
and ``normalize_grid`` (its ``triton_lib`` module), ``get_compute_capability`` and ``get_serialized_metadata``
(top level in the 0.3 line, where they came from a CUDA jaxlib), and ``CUSTOM_CALL_TARGET_NAME`` (0.4 line).
"""

from __future__ import annotations

import functools
import inspect
import zlib
from typing import Any

from jt_core import cache
from jt_core.call import kernel_name, kernel_params, kernel_signature_text
from jt_core.configs import normalize_grid, unwrap_kernel
from jt_core.dtypes import get_type_id
from jt_core.errors import KernelCallTypeError, KernelCallValueError, NoDeviceError

__all__ = [
    "CUSTOM_CALL_TARGET_NAME",
    "JTJITFunction",
    "get_compute_capability",
    "get_serialized_metadata",
    "get_type_id",
    "normalize_grid",
]

#: The custom-call target of jaxlib's Triton handler, which jax-triton 0.4 emits. jt emits it too with
#: ``launcher="jaxlib"``. jt's own handlers' targets start with ``triton_kernel_call`` as well
#: (``triton_kernel_call_jt_cuda`` and its ``_preloaded``/``_record`` variants, ``triton_kernel_call_jt_rocm``,
#: ``triton_kernel_call_jt_cpu``), so code that searches lowered programs for ``triton_kernel_call`` finds every
#: call of those launchers; code that compares with this exact name finds jt's calls only with
#: ``launcher="jaxlib"`` (or ``JT_LAUNCHER_CUDA=jaxlib``). Two launchers emit a target that is not jt's to name: the
#: ``xla`` launcher XLA's own Triton call (``__gpu$xla.gpu.triton``), and the CPU's ``interpreter`` launcher JAX's
#: host callback.
CUSTOM_CALL_TARGET_NAME = "triton_kernel_call_ffi"

#: The ``TritonAnyKernelCall`` field holding ``serialized_metadata`` (jaxlib's ``triton.proto``).
_METADATA_FIELD = 3


class JTJITFunction:
    """A read-only view of a kernel (``@triton.jit`` or ``@gluon.jit``, possibly autotuned or with heuristics).

    Attributes:
        kernel: The object given.
        fn: The innermost kernel function object.
        name: The kernel function's name.
        arg_names: Parameter names in signature order (also as ``param_names``).
        arg_name_to_index: Parameter name to its position.
        constexpr_names: Names of the ``constexpr`` parameters, in signature order.
        constexpr_param_names: The same, as a frozenset (jax-triton 0.4's wrapper).
        non_constexpr_param_names: Names of the other parameters, in signature order.
        param_defaults: Parameter name to its declared default, for parameters that have one.
    """

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.fn = unwrap_kernel(kernel).fn
        self._params = kernel_params(self.fn)
        self.name = kernel_name(self.fn)
        self.arg_names = [p.name for p in self._params]
        self.param_names = list(self.arg_names)
        self.arg_name_to_index = {p.name: p.index for p in self._params}
        self.constexpr_names = [p.name for p in self._params if p.is_constexpr]
        self.constexpr_param_names = frozenset(self.constexpr_names)
        self.non_constexpr_param_names = [p.name for p in self._params if not p.is_constexpr]
        self.param_defaults = {p.name: p.default for p in self._params if p.has_default}

    @functools.cached_property
    def signature(self) -> inspect.Signature:
        """The kernel function's ``inspect.Signature`` (annotations and defaults included)."""
        return inspect.signature(getattr(self.fn, "fn", self.fn))

    @property
    def signature_text(self) -> str:
        """The signature as jt's messages show it: ``add(x_ptr, y_ptr, n, BLOCK: tl.constexpr = 128)``."""
        return kernel_signature_text(self._params, self.name)

    @property
    def compiled_kernels_cache_size(self) -> int:
        """How many compiled variants of this kernel this process holds in memory (all backends)."""
        return cache.compiled_count(self.fn)

    def __repr__(self) -> str:
        return f"JTJITFunction({self.signature_text})"


def get_compute_capability(device_index: int = 0) -> int:
    """The compute capability of a CUDA device visible to JAX, as one number (``90`` for an H100/H200).

    Args:
        device_index: Which of this process's CUDA devices (``jax.local_devices(backend="cuda")``).

    Raises:
        NoDeviceError: When JAX sees no CUDA device (a CPU-only machine or jaxlib).
        KernelCallValueError: For an index past the last device.
    """
    import jax

    if isinstance(device_index, bool) or not isinstance(device_index, int):
        raise KernelCallTypeError(f"get_compute_capability(device_index) takes an int, got {device_index!r}")
    try:
        devices = list(jax.local_devices(backend="cuda"))
    except RuntimeError:
        devices = []
    if not devices:
        raise NoDeviceError(
            f"get_compute_capability({device_index}): JAX sees no CUDA device here (its devices: "
            f"{[str(d) for d in jax.local_devices()]}), so there is no compute capability to read. To compile or "
            "lower for CUDA without a GPU, pass compute_capability= to triton_call (e.g. 90) or set JT_CUDA_ARCH=90; "
            "on a GPU machine, install a CUDA jaxlib (pip install 'jax[cuda13]')"
        )
    if not 0 <= device_index < len(devices):
        raise KernelCallValueError(
            f"get_compute_capability({device_index}): this process has {len(devices)} CUDA device(s), "
            f"indices 0..{len(devices) - 1}"
        )
    major, _, minor = str(devices[device_index].compute_capability).partition(".")
    return int(major) * 10 + int(minor or 0)


def get_serialized_metadata(opaque: bytes) -> bytes:
    """The ``serialized_metadata=`` bytes carried by a lowered call to jaxlib's Triton handler.

    ``opaque`` is that call's backend config: the zlib-compressed kernel-call message jt's ``launcher="jaxlib"``
    (and jax-triton) emits. jt's own CUDA and ROCm launchers carry the bytes in the ``metadata`` attribute of their
    custom call instead, readable directly from the lowered program.

    Raises:
        KernelCallValueError: For bytes that are not such a message.
    """
    from jt_core.gpu.jaxlib_call import decode_fields  # the GPU launch layer, imported when a GPU call needs it

    if not isinstance(opaque, (bytes, bytearray, memoryview)):
        raise KernelCallTypeError(f"get_serialized_metadata takes the call's backend config bytes, got {opaque!r}")
    try:
        fields = decode_fields(zlib.decompress(bytes(opaque)))
    except (zlib.error, ValueError, IndexError) as exc:
        raise KernelCallValueError(
            f"get_serialized_metadata: the bytes are not a zlib-compressed Triton kernel-call message ({exc}); "
            "pass the backend config of a call lowered with launcher='jaxlib'"
        ) from None
    for field, _, value in fields:
        if field == _METADATA_FIELD and isinstance(value, bytes):
            return value
    return b""
