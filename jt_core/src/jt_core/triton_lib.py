"""The kernel wrapper and helpers known from jax-triton's ``triton_lib`` module, kept for existing code."""

from __future__ import annotations

from typing import Any

from jt_core import cache
from jt_core.call import kernel_name, kernel_params, kernel_signature_text
from jt_core.configs import normalize_grid, unwrap_kernel
from jt_core.dtypes import get_type_id

__all__ = ["JTJITFunction", "get_type_id", "normalize_grid"]


class JTJITFunction:
    """A read-only view of a kernel (``@triton.jit``, possibly autotuned or with heuristics).

    Attributes:
        kernel: The object given.
        fn: The innermost kernel function object.
        arg_names: Parameter names in signature order.
        arg_name_to_index: Parameter name to its position.
        constexpr_names: Names of the ``tl.constexpr`` parameters.
    """

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.fn = unwrap_kernel(kernel).fn
        self._params = kernel_params(self.fn)
        self.arg_names = [p.name for p in self._params]
        self.arg_name_to_index = {p.name: p.index for p in self._params}
        self.constexpr_names = [p.name for p in self._params if p.is_constexpr]

    @property
    def signature(self) -> str:
        """The kernel's signature as text, e.g. ``add(x_ptr, y_ptr, n, BLOCK: tl.constexpr = 128)``."""
        return kernel_signature_text(self._params, kernel_name(self.fn))

    @property
    def compiled_kernels_cache_size(self) -> int:
        """How many compiled variants of this kernel this process holds in memory (all backends)."""
        return cache.compiled_count(self.fn)

    def __repr__(self) -> str:
        return f"JTJITFunction({self.signature})"
