"""Reductions through tensor descriptors (``desc.atomic_add``, ``atomic_max``, ...) in Triton's interpreter, which
has loads and stores through descriptors but no reduction: each becomes the atomic of its kind on the block's
elements inside the tensor, as the compiled path and a TMA reduction compute it."""

from __future__ import annotations

from typing import Any

import numpy as np

from jt_core.errors import UnsupportedKernelError

__all__ = ["patches"]


def _reduce(interp: Any) -> Any:
    from triton._C.libtriton import ir

    kinds = ir.DESCRIPTOR_REDUCE_KIND
    builder = interp.interpreter_builder

    def create_descriptor_reduce(kind: Any, desc: Any, value: Any, indices: Any) -> Any:
        pointers, mask = desc.materialize_pointers(indices)
        element = np.dtype(interp._get_np_dtype(value.dtype))
        unsigned = element.kind == "u"
        floating = element.kind == "f" or "float" in element.name
        ops = {
            kinds.ADD: ir.ATOMIC_OP.FADD if floating else ir.ATOMIC_OP.ADD,
            kinds.MAX: ir.ATOMIC_OP.UMAX if unsigned else ir.ATOMIC_OP.MAX,
            kinds.MIN: ir.ATOMIC_OP.UMIN if unsigned else ir.ATOMIC_OP.MIN,
            kinds.AND: ir.ATOMIC_OP.AND,
            kinds.OR: ir.ATOMIC_OP.OR,
            kinds.XOR: ir.ATOMIC_OP.XOR,
        }
        if kind not in ops:
            raise UnsupportedKernelError(f"a {kind.name.lower()} reduction through a tensor descriptor")
        builder.create_atomic_rmw(ops[kind], pointers, value, mask, ir.MEM_SEMANTIC.RELAXED, ir.MEM_SYNC_SCOPE.GPU)
        return None

    return create_descriptor_reduce


def patches(interp: Any) -> list[tuple[Any, str, Any]]:
    """``(object, name, value)``: the interpreter builder's reduction through a descriptor."""
    return [(interp.interpreter_builder, "create_descriptor_reduce", _reduce(interp))]
