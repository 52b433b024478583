"""Host-side tensor descriptors: ``jt.TensorDescriptor(array, block_shape=[...])`` passed to a kernel parameter.

A kernel that reads or writes tiles through ``desc.load([...])`` / ``desc.store([...], tile)`` takes a *tensor
descriptor*: a base buffer with its shape, strides and the shape of one block. Triton's own launcher builds it from
a torch tensor; with jt the base is a JAX array, and the shape and (row-major) strides are the array's. The
parameter is specialised as ``tensordesc<fp16[64, 64]>`` (Gluon kernels add their shared layout), and each
launcher passes the descriptor the way the compiled kernel expects it: on NVIDIA GPUs from sm90 a TMA descriptor
built at launch from the buffer's real address, elsewhere the decomposed base pointer, shape and strides.

:class:`TensorDescriptor` is a JAX pytree whose only leaf is the array, so it crosses ``jax.jit`` boundaries like
the array does. :class:`TensorDescriptorSpec` is the static part a bound call keeps.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax import tree_util

from jt_core import _compat
from jt_core.dtypes import triton_scalar_type
from jt_core.errors import KernelCallTypeError, KernelCallValueError

__all__ = ["PADDINGS", "TensorDescriptor", "TensorDescriptorSpec"]

#: Values of ``padding=``: what loads read outside the tensor's bounds.
PADDINGS = ("zero", "nan")
#: Triton's limit on the number of elements of one block.
_MAX_BLOCK_NUMEL = 1 << 20
#: TMA copies need the base address and every stride but the last aligned to this many bytes.
_ALIGNMENT = 16


@dataclasses.dataclass(frozen=True)
class TensorDescriptorSpec:
    """The static description of a descriptor argument, kept in the bound call (hashable).

    Attributes:
        dtype: The element type (a NumPy dtype).
        element_type: Triton's element type string (``"fp16"``).
        shape: The tensor's shape.
        strides: The tensor's strides in elements (row-major, so the last is 1).
        block_shape: The shape of one block (the box a load or store moves).
        padding: ``"zero"`` or ``"nan"``: what loads read outside the tensor.
        layout: The shared-memory layout of Gluon kernels (opaque here), or ``None``.
    """

    dtype: np.dtype
    element_type: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block_shape: tuple[int, ...]
    padding: str
    layout: Any = None

    @property
    def rank(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return int(self.dtype.itemsize)

    @property
    def type_str(self) -> str:
        """The Triton signature entry: ``tensordesc<fp16[64, 64]>``, with ``,<layout>`` for Gluon kernels."""
        text = f"tensordesc<{self.element_type}[{', '.join(str(b) for b in self.block_shape)}]"
        if self.layout is not None:
            text += f",{self.layout!r}"
        return text + ">"


def _row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


@dataclasses.dataclass(frozen=True, eq=False)
class TensorDescriptor:
    """A host-side tensor descriptor over a JAX array, passed to a kernel parameter that takes one.

    The shape and strides are the array's (row-major, in elements); the block shape is the tile that one
    ``desc.load`` / ``desc.store`` moves. A kernel writes through a descriptor only into an output: wrap an input
    array (``jnp.empty(...)`` for a fresh result) and map it to an output with ``input_output_aliases``.

    Args:
        base: The array (a JAX array or tracer, or a NumPy array).
        block_shape: The block's shape, one power of two per dimension of ``base``; the last dimension must span
            at least 16 bytes.
        padding: What loads read outside the tensor's bounds: ``"zero"`` or ``"nan"`` (floating types only).
        layout: For Gluon kernels, the block's shared-memory layout (``gl.NVMMASharedLayout(...)``); ``None`` for
            ``@triton.jit`` kernels.

    Raises:
        KernelCallTypeError, KernelCallValueError: For a descriptor no kernel can take (rank, block shape,
            padding, dtype, alignment); :func:`jt_core.triton_call` checks again, naming the argument.
    """

    base: Any
    block_shape: tuple[int, ...]
    padding: str = "zero"
    layout: Any = None

    def __post_init__(self) -> None:
        block = self.block_shape
        if isinstance(block, (int, np.integer)) or not isinstance(block, Sequence):
            raise KernelCallTypeError(f"TensorDescriptor block_shape must be a list of ints, got {block!r}")
        object.__setattr__(self, "block_shape", tuple(block))
        self.spec()

    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's shape (the array's)."""
        return tuple(int(d) for d in self.base.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """The tensor's strides in elements (row-major)."""
        return _row_major_strides(self.shape)

    @property
    def dtype(self) -> np.dtype:
        """The element type."""
        return np.dtype(self.base.dtype)

    def spec(self, name: str | None = None) -> TensorDescriptorSpec:
        """Checks the descriptor and returns its static description.

        Args:
            name: The kernel argument it is passed to, named in errors.

        Raises:
            KernelCallTypeError: A base that is not an array, a block shape that is not ints, an unsupported dtype.
            KernelCallValueError: Rank, block shape, padding or alignment that TMA copies cannot handle.
        """
        what = "TensorDescriptor" if name is None else f"tensor descriptor argument {name!r}"
        base = self.base
        if _compat.is_ref(base):
            raise KernelCallTypeError(
                f"{what}: the base is a Ref; build the descriptor over an array and alias it to an output with "
                "input_output_aliases to write through it"
            )
        if not (hasattr(base, "shape") and hasattr(base, "dtype")) or isinstance(base, (bool, int, float, complex)):
            raise KernelCallTypeError(f"{what}: the base must be an array, got {type(base).__name__} ({base!r})")
        dtype = np.dtype(base.dtype)
        if dtype.kind in "bc":
            raise KernelCallTypeError(
                f"{what} has dtype {dtype}; tensor descriptors take integer and floating types (use uint8 for booleans)"
            )
        element_type = triton_scalar_type(dtype, what=what)
        shape = tuple(int(d) for d in base.shape)
        strides = _row_major_strides(shape)
        block = self.block_shape
        described = f"{what} over {dtype}{list(shape)} with block_shape={list(block)}"
        if not 1 <= len(shape) <= 5:
            raise KernelCallValueError(f"{described}: tensor descriptors have rank 1 to 5, the array has {len(shape)}")
        if len(block) != len(shape):
            raise KernelCallValueError(
                f"{described}: block_shape needs one entry per dimension of the array ({len(shape)}), got {len(block)}"
            )
        for axis, size in enumerate(block):
            if isinstance(size, bool) or not isinstance(size, (int, np.integer)):
                raise KernelCallTypeError(f"{described}: block_shape[{axis}] must be an int, got {size!r}")
            if size <= 0 or size & (size - 1):
                raise KernelCallValueError(f"{described}: block_shape[{axis}]={size} is not a power of two")
        block = tuple(int(b) for b in block)
        if math.prod(block) > _MAX_BLOCK_NUMEL:
            raise KernelCallValueError(
                f"{described}: a block of {math.prod(block)} elements exceeds Triton's limit of {_MAX_BLOCK_NUMEL}"
            )
        if block[-1] * dtype.itemsize < _ALIGNMENT:
            raise KernelCallValueError(
                f"{described}: the block's last dimension spans {block[-1] * dtype.itemsize} bytes; it must span at "
                f"least {_ALIGNMENT} (block_shape[-1] >= {-(-_ALIGNMENT // dtype.itemsize)} for {dtype})"
            )
        for axis, size in enumerate(shape):
            if size <= 0:
                raise KernelCallValueError(f"{described}: dimension {axis} is empty; descriptors need every size > 0")
            if size >= 2**31:
                raise KernelCallValueError(
                    f"{described}: dimension {axis} ({size}) does not fit the kernel's i32 shape"
                )
        if strides[-1] != 1:
            raise KernelCallValueError(f"{described}: the last dimension must be contiguous (stride 1)")
        for axis, stride in enumerate(strides[:-1]):
            if stride * dtype.itemsize % _ALIGNMENT:
                raise KernelCallValueError(
                    f"{described}: dimension {axis} has a stride of {stride * dtype.itemsize} bytes; TMA needs every "
                    f"stride but the last to be a multiple of {_ALIGNMENT} bytes, so the last dimension "
                    f"({shape[-1]}) must be a multiple of {_ALIGNMENT // math.gcd(_ALIGNMENT, dtype.itemsize)} "
                    f"elements of {dtype} (pad the array)"
                )
        if self.padding not in PADDINGS:
            raise KernelCallValueError(f"{described}: padding must be one of {list(PADDINGS)}, got {self.padding!r}")
        if self.padding == "nan" and dtype.kind != "f" and "float" not in dtype.name:
            raise KernelCallValueError(f"{described}: padding='nan' needs a floating dtype, the array is {dtype}")
        if self.layout is not None:
            try:
                hash(self.layout)
            except TypeError:
                raise KernelCallTypeError(f"{described}: layout={self.layout!r} must be hashable") from None
        return TensorDescriptorSpec(dtype, element_type, shape, strides, block, self.padding, self.layout)

    def __repr__(self) -> str:
        base = self.base
        text = f"{np.dtype(base.dtype)}{list(base.shape)}" if hasattr(base, "shape") else repr(base)
        extra = "" if self.padding == "zero" else f", padding={self.padding!r}"
        if self.layout is not None:
            extra += f", layout={self.layout!r}"
        return f"TensorDescriptor({text}, block_shape={list(self.block_shape)}{extra})"


def _flatten(desc: TensorDescriptor) -> tuple[tuple[Any], tuple[Any, ...]]:
    return (desc.base,), (desc.block_shape, desc.padding, desc.layout)


def _unflatten(aux: tuple[Any, ...], children: Sequence[Any]) -> TensorDescriptor:
    # JAX rebuilds pytrees with placeholders (tracers, None, sentinels) as leaves: no checks here; binding checks.
    desc = object.__new__(TensorDescriptor)
    object.__setattr__(desc, "base", children[0])
    object.__setattr__(desc, "block_shape", aux[0])
    object.__setattr__(desc, "padding", aux[1])
    object.__setattr__(desc, "layout", aux[2])
    return desc


tree_util.register_pytree_node(TensorDescriptor, _flatten, _unflatten)
