"""Host-side tensor descriptors: ``jt.TensorDescriptor`` passed to a kernel parameter that takes one.

A kernel that reads or writes tiles through ``desc.load([...])`` / ``desc.store([...], tile)`` takes a *tensor
descriptor*: a base buffer, the shape and strides of the tensor it describes, and the shape of one block. Triton's
own launcher builds it from a torch tensor; with jt the base is a JAX array. Three spellings build one:

* ``TensorDescriptor(x, block_shape=[...])`` and ``TensorDescriptor.from_array(x, block_shape=[...])``: the
  tensor is the whole array (its shape, row-major strides);
* ``TensorDescriptor(base, shape, strides, block_shape)``: a view of the base buffer, starting at its first
  element, with explicit shape and strides (in elements), e.g. the left half of a wider matrix.

The parameter is specialised as ``tensordesc<fp16[64, 64]>`` (Gluon kernels add their shared layout), and each
launcher passes the descriptor the way the compiled kernel expects it: on NVIDIA GPUs from sm90 a TMA descriptor
built at launch from the buffer's real address, elsewhere the decomposed base pointer, shape and strides.

`TensorDescriptor` is a JAX pytree whose only leaf is the base array, so it crosses ``jax.jit`` boundaries
like the array does. `TensorDescriptorSpec` is the static part a bound call keeps.
"""

from __future__ import annotations

import dataclasses
import inspect
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
#: TMA strides must stay below this many bytes.
_MAX_STRIDE_BYTES = 1 << 40

_UNSET: Any = object()

# The two argument orders: jax-triton's dataclass (shape and strides before the block), and jt's original form
# (the block right after the array). Keywords work in both.
_VIEW_ORDER = inspect.Signature(
    [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)
        for name, default in (
            ("shape", _UNSET),
            ("strides", _UNSET),
            ("block_shape", _UNSET),
            ("layout", None),
            ("padding", "zero"),
            ("round_f32_to_tf32", False),
        )
    ]
)
_ARRAY_ORDER = inspect.Signature(
    [
        inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)
        for name, default in (("block_shape", _UNSET), ("padding", "zero"), ("layout", None))
    ]
    + [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
        for name, default in (("shape", _UNSET), ("strides", _UNSET), ("round_f32_to_tf32", False))
    ]
)


@dataclasses.dataclass(frozen=True)
class TensorDescriptorSpec:
    """The static description of a descriptor argument, kept in the bound call (hashable).

    Attributes:
        dtype: The element type (a NumPy dtype).
        element_type: Triton's element type string (``"fp16"``).
        shape: The tensor's shape.
        strides: The tensor's strides in elements (the last is 1).
        block_shape: The shape of one block (the box a load or store moves).
        padding: ``"zero"`` or ``"nan"``: what loads read outside the tensor.
        layout: The shared-memory layout of Gluon kernels (opaque here), or ``None``.
        round_f32_to_tf32: Whether loads round float32 values to TF32 (10 mantissa bits).
    """

    dtype: np.dtype
    element_type: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block_shape: tuple[int, ...]
    padding: str
    layout: Any = None
    round_f32_to_tf32: bool = False

    @property
    def rank(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return int(self.dtype.itemsize)

    def with_block_shape(self, block_shape: Sequence[int], name: str) -> TensorDescriptorSpec:
        """The same descriptor with another block shape (one an autotuning config's hook set).

        Raises:
            KernelCallValueError: For a block shape the descriptor cannot take, naming argument ``name``.
        """
        block = tuple(int(b) for b in block_shape)
        described = f"tensor descriptor argument {name!r} with the block_shape={list(block)} a hook set"
        if len(block) != self.rank:
            raise KernelCallValueError(
                f"{described}: block_shape needs one entry per dimension of the tensor ({self.rank})"
            )
        _check_block(described, block, self.dtype)
        return dataclasses.replace(self, block_shape=block)

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


def _int_tuple(value: Any, what: str) -> tuple[Any, ...]:
    if isinstance(value, (int, np.integer, str, bytes)) or not isinstance(value, Sequence):
        raise KernelCallTypeError(f"{what} must be a list of ints, got {value!r}")
    return tuple(value)


@dataclasses.dataclass(frozen=True, eq=False, init=False, repr=False)
class TensorDescriptor:
    """A host-side tensor descriptor over a JAX array, passed to a kernel parameter that takes one.

    ``TensorDescriptor(array, block_shape=[...])`` (or `from_array`) describes the whole array: its shape
    and row-major strides. ``TensorDescriptor(base, shape, strides, block_shape)`` describes a view of ``base``
    that starts at its first element, with the given shape and strides in elements (the last stride 1, the
    others multiples of 16 bytes); the view must lie inside ``base``. The block shape is the tile one
    ``desc.load`` / ``desc.store`` moves. A kernel writes through a descriptor only into an output: wrap an input
    array (``jnp.empty(...)`` for a fresh result) and map it to an output with ``input_output_aliases``.

    The constructor takes the attributes below, positionally or by keyword. Positional arguments follow
    jax-triton's order ``(base, shape, strides, block_shape, layout, padding, round_f32_to_tf32)`` when the third
    one is not a string, and jt's original order ``(base, block_shape, padding, layout)`` otherwise.

    Attributes:
        base: The array (a JAX array or tracer, or a NumPy array).
        shape: The tensor's shape; default: the array's.
        strides: The tensor's strides in elements; default: the array's (row-major). Give both or neither.
        block_shape: The block's shape, one power of two per dimension of the tensor; the last dimension must
            span at least 16 bytes.
        layout: For Gluon kernels, the block's shared-memory layout (``gl.NVMMASharedLayout(...)``); ``None`` for
            ``@triton.jit`` kernels.
        padding: What loads read outside the tensor's bounds: ``"zero"`` or ``"nan"`` (floating types of 16 bits
            or more).
        round_f32_to_tf32: Round float32 values to TF32 as they are loaded (what a TF32 ``tl.dot`` would do
            anyway; the TMA unit does it for free). float32 only.

    Raises:
        KernelCallTypeError, KernelCallValueError: For a descriptor no kernel can take (rank, block shape, view,
            padding, dtype, alignment); `jt_core.triton_call` checks again, naming the argument.
    """

    base: Any
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block_shape: tuple[int, ...]
    layout: Any = None
    padding: str = "zero"
    round_f32_to_tf32: bool = False
    _follows_base: bool = dataclasses.field(default=True, init=False, repr=False)

    def __init__(self, base: Any, *args: Any, **kwargs: Any) -> None:
        view_order = (len(args) >= 2 and not isinstance(args[1], str)) or (len(args) == 1 and "block_shape" in kwargs)
        order = _VIEW_ORDER if view_order else _ARRAY_ORDER
        try:
            bound = order.bind(*args, **kwargs)
        except TypeError as exc:
            raise KernelCallTypeError(
                f"TensorDescriptor() {exc}; write TensorDescriptor(array, block_shape=[...]) for the whole array or "
                "TensorDescriptor(base, shape, strides, block_shape) for a view"
            ) from None
        bound.apply_defaults()
        values = dict(bound.arguments)
        if values["block_shape"] is _UNSET:
            raise KernelCallTypeError("TensorDescriptor() needs block_shape=[...]: the shape of one block")
        shape, strides = values["shape"], values["strides"]
        if (shape is _UNSET) != (strides is _UNSET):
            given, missing = ("shape", "strides") if strides is _UNSET else ("strides", "shape")
            raise KernelCallTypeError(
                f"TensorDescriptor() got {given}= without {missing}=; give both for a view of the base, or neither "
                "for the whole array"
            )
        follows_base = shape is _UNSET
        if follows_base:
            shape = tuple(int(d) for d in base.shape) if hasattr(base, "shape") else ()
            strides = _row_major_strides(shape)
        _init(
            self,
            base,
            _int_tuple(shape, "TensorDescriptor shape"),
            _int_tuple(strides, "TensorDescriptor strides"),
            _int_tuple(values["block_shape"], "TensorDescriptor block_shape"),
            values["layout"],
            values["padding"],
            values["round_f32_to_tf32"],
            follows_base,
        )
        self.spec()

    @classmethod
    def from_array(
        cls,
        array: Any,
        block_shape: Sequence[int],
        layout: Any = None,
        padding: str = "zero",
        round_f32_to_tf32: bool = False,
    ) -> TensorDescriptor:
        """A descriptor over the whole ``array`` (its shape, row-major strides); the arguments are the class's."""
        return cls(array, block_shape=block_shape, layout=layout, padding=padding, round_f32_to_tf32=round_f32_to_tf32)

    @property
    def dtype(self) -> np.dtype:
        """The element type."""
        return np.dtype(self.base.dtype)

    @property
    def is_view(self) -> bool:
        """Whether the shape and strides were given (a view of the base) rather than taken from the array."""
        return not self._follows_base

    def spec(self, name: str | None = None) -> TensorDescriptorSpec:
        """Checks the descriptor and returns its static description.

        Args:
            name: The kernel argument it is passed to, named in errors.

        Raises:
            KernelCallTypeError: A base that is not an array, shapes that are not ints, an unsupported dtype.
            KernelCallValueError: Rank, block shape, view, padding or alignment that TMA copies cannot handle.
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
        base_shape = tuple(int(d) for d in base.shape)
        shape = _ints(self.shape, f"{what}: shape")
        strides = _ints(self.strides, f"{what}: strides")
        block = _ints(self.block_shape, f"{what}: block_shape")
        if self._follows_base:
            described = f"{what} over {dtype}{list(base_shape)} with block_shape={list(block)}"
        else:
            described = (
                f"{what} over {dtype}{list(base_shape)} with shape={list(shape)}, strides={list(strides)}, "
                f"block_shape={list(block)}"
            )
        if not 1 <= len(shape) <= 5:
            raise KernelCallValueError(f"{described}: tensor descriptors have rank 1 to 5, the tensor has {len(shape)}")
        if len(strides) != len(shape):
            raise KernelCallValueError(f"{described}: strides needs one entry per dimension of shape ({len(shape)})")
        if len(block) != len(shape):
            raise KernelCallValueError(
                f"{described}: block_shape needs one entry per dimension of the "
                f"{'array' if self._follows_base else 'shape'} ({len(shape)}), got {len(block)}"
            )
        _check_block(described, block, dtype)
        for axis, size in enumerate(shape):
            if size <= 0:
                raise KernelCallValueError(f"{described}: dimension {axis} is empty; descriptors need every size > 0")
            if size >= 2**31:
                raise KernelCallValueError(
                    f"{described}: dimension {axis} ({size}) does not fit the kernel's i32 shape"
                )
        if strides[-1] != 1:
            raise KernelCallValueError(f"{described}: the last dimension must be contiguous (stride 1)")
        _check_strides(described, shape, strides, dtype, self._follows_base)
        if not self._follows_base:
            reach = sum((size - 1) * stride for size, stride in zip(shape, strides))
            held = math.prod(base_shape)
            if reach >= held:
                raise KernelCallValueError(
                    f"{described}: the view reaches element {reach} of the base, which holds {held} elements; "
                    "shrink the shape or strides, or pass a larger base"
                )
        padding = self.padding
        if padding not in PADDINGS:
            raise KernelCallValueError(f"{described}: padding must be one of {list(PADDINGS)}, got {padding!r}")
        is_float = dtype.kind == "f" or "float" in dtype.name
        if padding == "nan" and not (is_float and dtype.itemsize >= 2):
            raise KernelCallValueError(
                f"{described}: padding='nan' needs a floating dtype of 16 bits or more (TMA fills NaN only for "
                f"those), the base is {dtype}; use padding='zero'"
            )
        rounding = self.round_f32_to_tf32
        if not isinstance(rounding, (bool, np.bool_)):
            raise KernelCallTypeError(f"{described}: round_f32_to_tf32 must be True or False, got {rounding!r}")
        if rounding and dtype != np.dtype(np.float32):
            raise KernelCallValueError(
                f"{described}: round_f32_to_tf32=True rounds float32 values to TF32 and needs a float32 base, the "
                f"base is {dtype}; drop round_f32_to_tf32"
            )
        if self.layout is not None:
            try:
                hash(self.layout)
            except TypeError:
                raise KernelCallTypeError(f"{described}: layout={self.layout!r} must be hashable") from None
        return TensorDescriptorSpec(dtype, element_type, shape, strides, block, padding, self.layout, bool(rounding))

    def __repr__(self) -> str:
        base = self.base
        text = f"{np.dtype(base.dtype)}{list(base.shape)}" if hasattr(base, "shape") else repr(base)
        if not self._follows_base:
            text += f", shape={list(self.shape)}, strides={list(self.strides)}"
        extra = "" if self.padding == "zero" else f", padding={self.padding!r}"
        if self.layout is not None:
            extra += f", layout={self.layout!r}"
        if self.round_f32_to_tf32:
            extra += ", round_f32_to_tf32=True"
        return f"TensorDescriptor({text}, block_shape={list(self.block_shape)}{extra})"


def _init(desc: TensorDescriptor, base: Any, *fields: Any) -> None:
    shape, strides, block_shape, layout, padding, rounding, follows_base = fields
    for attribute, value in (
        ("base", base),
        ("shape", shape),
        ("strides", strides),
        ("block_shape", block_shape),
        ("layout", layout),
        ("padding", padding),
        ("round_f32_to_tf32", rounding),
        ("_follows_base", follows_base),
    ):
        object.__setattr__(desc, attribute, value)


def _ints(values: Sequence[Any], what: str) -> tuple[int, ...]:
    for axis, value in enumerate(values):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise KernelCallTypeError(f"{what}[{axis}] must be an int, got {value!r}")
    return tuple(int(v) for v in values)


def _check_block(described: str, block: tuple[int, ...], dtype: np.dtype) -> None:
    for axis, size in enumerate(block):
        if size <= 0 or size & (size - 1):
            raise KernelCallValueError(f"{described}: block_shape[{axis}]={size} is not a power of two")
    if math.prod(block) > _MAX_BLOCK_NUMEL:
        raise KernelCallValueError(
            f"{described}: a block of {math.prod(block)} elements exceeds Triton's limit of {_MAX_BLOCK_NUMEL}"
        )
    if block[-1] * dtype.itemsize < _ALIGNMENT:
        raise KernelCallValueError(
            f"{described}: the block's last dimension spans {block[-1] * dtype.itemsize} bytes; it must span at "
            f"least {_ALIGNMENT} (block_shape[-1] >= {-(-_ALIGNMENT // dtype.itemsize)} for {dtype})"
        )


def _check_strides(
    described: str, shape: tuple[int, ...], strides: tuple[int, ...], dtype: np.dtype, follows_base: bool
) -> None:
    for axis, stride in enumerate(strides[:-1]):
        nbytes = stride * dtype.itemsize
        if stride <= 0 or nbytes >= _MAX_STRIDE_BYTES:
            raise KernelCallValueError(
                f"{described}: strides[{axis}]={stride} must be positive and below {_MAX_STRIDE_BYTES} bytes"
            )
        if nbytes % _ALIGNMENT == 0:
            continue
        if follows_base:
            raise KernelCallValueError(
                f"{described}: dimension {axis} has a stride of {nbytes} bytes; TMA needs every stride but the "
                f"last to be a multiple of {_ALIGNMENT} bytes, so the last dimension ({shape[-1]}) must be a "
                f"multiple of {_ALIGNMENT // math.gcd(_ALIGNMENT, dtype.itemsize)} elements of {dtype} (pad the array)"
            )
        raise KernelCallValueError(
            f"{described}: strides[{axis}]={stride} is {nbytes} bytes; TMA needs every stride but the last to be a "
            f"multiple of {_ALIGNMENT} bytes ({_ALIGNMENT // math.gcd(_ALIGNMENT, dtype.itemsize)} elements of "
            f"{dtype})"
        )


def _flatten(desc: TensorDescriptor) -> tuple[tuple[Any], tuple[Any, ...]]:
    aux = (desc.shape, desc.strides, desc.block_shape, desc.layout, desc.padding, desc.round_f32_to_tf32)
    return (desc.base,), (*aux, desc._follows_base)


def _unflatten(aux: tuple[Any, ...], children: Sequence[Any]) -> TensorDescriptor:
    # JAX rebuilds pytrees with placeholders (tracers, None, sentinels) as leaves: no checks here; binding checks.
    # A descriptor over the whole array follows its new base's shape.
    shape, strides, block_shape, layout, padding, rounding, follows_base = aux
    base = children[0]
    if follows_base and hasattr(base, "shape"):
        shape = tuple(int(d) for d in base.shape)
        strides = _row_major_strides(shape)
    desc = object.__new__(TensorDescriptor)
    _init(desc, base, shape, strides, block_shape, layout, padding, rounding, follows_base)
    return desc


tree_util.register_pytree_node(TensorDescriptor, _flatten, _unflatten)
