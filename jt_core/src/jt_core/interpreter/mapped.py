"""``tl.map_elementwise`` in Triton's interpreter, which has none (its builtin needs the code generator to build the
function's region): the scalar function is called on each group of ``pack`` elements of the broadcast operands.

The groups and the order of the function's arguments and results are compiled Triton's (`jt_core.translation.mapped`
says the same of the compiled path): ``pack`` consecutive elements of each row-major block, operand after operand;
results, each ``pack`` of them, result after result.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["map_elementwise"]


def _value(x: Any) -> Any:
    return getattr(x, "value", x)


def map_elementwise(scalar_fn: Any, *args: Any, pack: Any = 1, **_: Any) -> Any:
    """``tl.map_elementwise(scalar_fn, *args, pack=1)``: a block per result of ``scalar_fn`` (one tensor where it
    returns one tensor, else a tuple).

    Raises:
        ValueError: For a ``pack`` that does not divide the blocks' number of elements (a GPU compile refuses one
            that does not divide the elements a thread holds).
    """
    import triton.language as tl
    from triton.runtime import interpreter as interp

    semantic = interp.interpreter_semantic
    pack = int(_value(pack))
    tensors = [a if isinstance(a, tl.tensor) else semantic.to_tensor(_value(a)) for a in args]
    if len(tensors) > 1:
        tensors = list(semantic.broadcast_tensors(*tensors))
    block = tensors[0].type
    shape = list(block.shape) if block.is_block() else []
    flat = [np.asarray(t.handle.data).reshape(-1) for t in tensors]
    size = flat[0].size
    if pack < 1 or size % pack:
        raise ValueError(f"tl.map_elementwise: pack={pack} must divide the {size} elements of its operands")
    single = False
    columns: list[list[np.ndarray]] = []
    dtypes: list[Any] = []
    for start in range(0, size, pack):
        scalars = [
            tl.tensor(interp.TensorHandle(data[start + j : start + j + 1].copy(), t.dtype), t.dtype)
            for data, t in zip(flat, tensors, strict=True)
            for j in range(pack)
        ]
        returned = scalar_fn(*scalars)
        single = isinstance(returned, tl.tensor) or not hasattr(returned, "__iter__")
        results = [returned] if single else list(returned)
        results = [r if isinstance(r, tl.tensor) else semantic.to_tensor(_value(r)) for r in results]
        if not columns:
            columns = [[] for _ in results]
            dtypes = [r.dtype for r in results]
        for column, result in zip(columns, results, strict=True):
            column.append(np.asarray(result.handle.data).reshape(-1)[:1])
    outputs = []
    for index in range(len(columns) // pack):
        per_position = [np.concatenate(columns[index * pack + j]) for j in range(pack)]
        dtype = dtypes[index * pack]
        data = np.stack(per_position, axis=1).reshape(shape if shape else (1,)).astype(interp._get_np_dtype(dtype))
        ty = tl.block_type(dtype, shape) if shape else dtype
        outputs.append(tl.tensor(interp.TensorHandle(data, dtype), ty))
    return outputs[0] if single else tuple(outputs)
