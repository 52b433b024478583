"""The array library libdevice's functions compute with: NumPy in the interpreter, ``jax.numpy`` in the compiled path.

`jt_core.interpreter.libdevice` writes each function once, against `Arrays`, so that both CPU paths compute
the same thing the same way.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

__all__ = ["Arrays", "jax_arrays", "numpy_arrays"]

_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_SIGNED = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}


@dataclasses.dataclass(frozen=True)
class Arrays:
    """An array library and the few operations NumPy and ``jax.numpy`` spell differently.

    Attributes:
        np: ``numpy`` or ``jax.numpy``.
        special: ``scipy.special`` or ``jax.scipy.special`` (imported when first used).
        name: ``"numpy"`` or ``"jax"``.
    """

    np: Any
    name: str

    @property
    def special(self) -> Any:
        return _special(self.name)

    def view(self, x: Any, dtype: Any) -> Any:
        """``x``'s bits as ``dtype`` (of the same width)."""
        dtype = np.dtype(dtype)
        if self.name == "numpy":
            return np.asarray(x).view(dtype)
        from jax import lax

        x = self.np.asarray(x)
        return x if x.dtype == dtype else lax.bitcast_convert_type(x, dtype)

    def unsigned(self, x: Any) -> Any:
        """``x``'s bits as the unsigned integer of its width."""
        return self.view(x, _UNSIGNED[np.dtype(self.np.asarray(x).dtype).itemsize])

    def signed(self, x: Any) -> Any:
        """``x``'s bits as the signed integer of its width."""
        return self.view(x, _SIGNED[np.dtype(self.np.asarray(x).dtype).itemsize])

    def constant(self, value: Any, dtype: Any) -> Any:
        """``value`` as an array of ``dtype`` (integers given by their bits where they do not fit)."""
        dtype = np.dtype(dtype)
        if dtype.kind in "iu":
            bits = int(value) % (1 << (8 * dtype.itemsize))
            return self.view(self.np.asarray(np.asarray(bits, _UNSIGNED[dtype.itemsize])), dtype)
        return self.np.asarray(value, dtype)

    def settled(self, x: Any) -> Any:
        """``x`` computed on its own: XLA may not fuse a product into the sum that reads it (an error-free
        transformation relies on each operation's own rounding)."""
        if self.name == "numpy":
            return x
        from jax import lax

        return lax.optimization_barrier(x)


@functools.cache
def _special(name: str) -> Any:
    if name == "numpy":
        import scipy.special  # a dependency of jax

        return scipy.special
    import jax.scipy.special

    return jax.scipy.special


@functools.cache
def numpy_arrays() -> Arrays:
    """NumPy, for the interpreter."""
    return Arrays(np, "numpy")


@functools.cache
def jax_arrays() -> Arrays:
    """``jax.numpy``, for the compiled path."""
    import jax.numpy as jnp

    return Arrays(jnp, "jax")
