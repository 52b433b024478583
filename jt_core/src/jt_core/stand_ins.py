"""Stand-ins for a call's arguments, as Triton's autotuner hands them to the functions a kernel's decorators name.

Triton calls ``prune_configs_by["early_config_prune"](configs, named_args, **kwargs)``, the ``perf_model``,
``@triton.heuristics`` functions and config ``pre_hook``s with the kernel's arguments: torch tensors, whose shape,
dtype and strides those functions read. jt binds a call while JAX traces it, before any buffer exists, so it hands
them stand-ins instead:

* `ArrayStandIn` for an array (and a ``jax.new_ref``): ``shape``, ``dtype`` (a NumPy dtype), ``ndim``/``dim()``,
  ``size`` (an int that can also be called as torch's ``size(dim)``), ``numel()``, ``stride(dim)`` (row-major, in
  elements), ``element_size()``/``itemsize``, ``nbytes``, ``is_contiguous()``;
* `DescriptorStandIn` for a `jt_core.TensorDescriptor`: the descriptor's ``base`` (an `ArrayStandIn`), ``shape``,
  ``strides``, ``block_shape``, ``padding``; it passes ``isinstance`` for jt's and Triton's descriptor classes, and
  setting its ``block_shape`` is recorded (`jt_core.pruning` runs hooks on it);
* scalars and constexprs as their values.

A stand-in has no device memory: asking for one (``data_ptr()``) or for anything else a tensor has raises an
``AttributeError`` that names what a stand-in answers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from jt_core.errors import KernelCallValueError
from jt_core.tensordesc import TensorDescriptor, TensorDescriptorSpec

__all__ = ["ANSWERS", "ArrayStandIn", "DescriptorStandIn", "HookEffectError", "StandInSize", "stand_in_for"]

#: What an array stand-in answers, for messages.
ANSWERS = (
    "shape, dtype (a NumPy dtype), ndim, dim(), size / size(dim), numel(), stride() / stride(dim), element_size(), "
    "itemsize, nbytes, is_contiguous()"
)


class HookEffectError(Exception):
    """A hook run on stand-ins did something other than set ``block_shape`` on a tensor descriptor."""


class StandInSize(int):
    """The number of elements of an array stand-in (``x.size``, as NumPy and JAX have it), which can also be called
    as torch's ``x.size()`` (the shape) or ``x.size(dim)`` (one extent)."""

    _shape: tuple[int, ...]

    def __new__(cls, shape: tuple[int, ...]) -> StandInSize:
        size = super().__new__(cls, math.prod(shape))
        size._shape = shape
        return size

    def __call__(self, dim: int | None = None) -> Any:
        return self._shape if dim is None else self._shape[dim]


def _row_major(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides))


class ArrayStandIn:
    """An array argument as prune functions, perf models, heuristics and hooks see it.

    Args:
        name: The kernel parameter it is given to (for messages).
        shape: Its shape.
        dtype: Its element type.
        strides: Its strides in elements (row-major when not given, as jt passes arrays).
    """

    __slots__ = ("_name", "_strides", "dtype", "shape")

    def __init__(self, name: str, shape: Sequence[int], dtype: Any, strides: Sequence[int] | None = None) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        object.__setattr__(self, "dtype", np.dtype(dtype))
        object.__setattr__(self, "_strides", tuple(strides) if strides is not None else _row_major(self.shape))

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    def dim(self) -> int:
        """The number of dimensions (torch's spelling)."""
        return len(self.shape)

    @property
    def size(self) -> StandInSize:
        """The number of elements; called, the shape or one extent (torch's ``size()``)."""
        return StandInSize(self.shape)

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self.shape)

    def stride(self, dim: int | None = None) -> Any:
        """The strides in elements, or the stride of one dimension."""
        return self._strides if dim is None else self._strides[dim]

    def element_size(self) -> int:
        """Bytes per element."""
        return int(self.dtype.itemsize)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return int(self.dtype.itemsize)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole array."""
        return self.numel() * self.element_size()

    def is_contiguous(self) -> bool:
        """Whether the strides are row-major."""
        return self._strides == _row_major(self.shape)

    def __setattr__(self, name: str, value: Any) -> None:
        raise HookEffectError(f"sets {name!r} of array argument {self._name!r}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(
            f"{name!r}: argument {self._name!r} is a stand-in for an array while jt binds the call (no buffer exists "
            f"yet); it answers {ANSWERS}"
        )

    def __repr__(self) -> str:
        return f"ArrayStandIn({self._name}: {self.dtype}{list(self.shape)})"


def _triton_descriptor_class() -> type:
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor as TritonTensorDescriptor
    except ImportError:  # a Triton without host-side descriptors: jt's class alone
        return object
    return TritonTensorDescriptor


class DescriptorStandIn(TensorDescriptor):
    """A `jt_core.TensorDescriptor` argument as hooks see it: its fields, with ``block_shape`` the only one a hook
    may set. It is an instance of jt's descriptor class and of Triton's (so that a hook testing
    ``isinstance(nargs["desc"], TensorDescriptor)`` goes on as it does with Triton).

    Args:
        name: The kernel parameter it is given to.
        spec: The descriptor's static description.
    """

    _name: str
    _spec: TensorDescriptorSpec
    _block_written: bool

    def __init__(self, name: str, spec: TensorDescriptorSpec) -> None:
        for attribute, value in (
            ("_name", name),
            ("_spec", spec),
            ("_block_written", False),
            ("base", ArrayStandIn(f"{name}.base", spec.shape, spec.dtype, spec.strides)),
            ("shape", list(spec.shape)),
            ("strides", list(spec.strides)),
            ("block_shape", list(spec.block_shape)),
            ("layout", spec.layout),
            ("padding", spec.padding),
            ("round_f32_to_tf32", spec.round_f32_to_tf32),
            ("_follows_base", False),
        ):
            object.__setattr__(self, attribute, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name != "block_shape":
            raise HookEffectError(f"sets {name!r} of tensor descriptor argument {self._name!r}")
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise KernelCallValueError(
                f"a hook sets block_shape of tensor descriptor argument {self._name!r} to {value!r}; a block shape "
                "is a list of ints, one per dimension"
            )
        blocks = []
        for extent in value:
            extent = getattr(extent, "value", extent)  # a tl.constexpr read from the metaparameters
            if isinstance(extent, (bool, np.bool_)) or not isinstance(extent, (int, np.integer)):
                raise KernelCallValueError(
                    f"a hook sets block_shape of tensor descriptor argument {self._name!r} to {list(value)!r}; "
                    "every extent must be an int"
                )
            blocks.append(int(extent))
        object.__setattr__(self, "block_shape", blocks)
        object.__setattr__(self, "_block_written", True)

    def __delattr__(self, name: str) -> None:
        raise HookEffectError(f"deletes {name!r} of tensor descriptor argument {self._name!r}")

    @property
    def argument(self) -> str:
        """The kernel argument it stands for (``desc_q``, or ``pair[0]`` inside a tuple)."""
        return self._name

    def written_block_shape(self) -> tuple[int, ...] | None:
        """The block shape a hook set, or ``None`` when none did."""
        return tuple(self.block_shape) if self._block_written else None

    def __repr__(self) -> str:
        spec = self._spec
        return f"DescriptorStandIn({self._name}: {spec.dtype}{list(spec.shape)}, block_shape={self.block_shape})"


_descriptor_classes: dict[str, type] = {}


def _descriptor_class() -> type:
    """`DescriptorStandIn`, made an instance of Triton's descriptor class too where Triton has one."""
    made = _descriptor_classes.get("class")
    if made is None:
        triton_class = _triton_descriptor_class()
        if triton_class is object:
            made = DescriptorStandIn
        else:
            # Both are plain dataclasses: the stand-in's own __init__, __setattr__ and __repr__ come first.
            made = type("DescriptorStandIn", (DescriptorStandIn, triton_class), {"__module__": __name__})
        _descriptor_classes["class"] = made
    return made


def stand_in_for(name: str, value: Any, descriptor: TensorDescriptorSpec | None = None) -> Any:
    """The stand-in of one argument leaf: a `DescriptorStandIn` for a descriptor, an `ArrayStandIn` for an array
    value (anything with ``shape`` and ``dtype``), else the value itself."""
    if descriptor is not None:
        return _descriptor_class()(name, descriptor)
    if hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, np.generic):
        return ArrayStandIn(name, value.shape, value.dtype)
    return value
