"""Gradients through Triton kernels: pairing a forward and a backward computation with ``jax.custom_vjp``.

JAX cannot differentiate a kernel it cannot see, so ``jax.grad`` through a bare ``triton_call`` raises. The
author writes the backward pass (usually a second kernel) and pairs the two:

```python
def forward(x, w, *, eps):            # returns (outputs, residuals)
    y, mean, rstd = jt.triton_call(x, w, kernel=ln_fwd, ..., eps=eps)
    return y, (x, w, mean, rstd)

def backward(residuals, dy, *, eps):  # returns one cotangent per differentiable argument
    x, w, mean, rstd = residuals
    dx, dw = jt.triton_call(...)
    return dx, dw

layer_norm = jt.kernel_vjp(forward, backward)
jax.grad(lambda x, w: layer_norm(x, w, eps=1e-5).sum(), argnums=(0, 1))(x, w)
```

Keyword arguments are static (Python values such as block sizes and epsilons, given to both functions); so are
the positional arguments listed in ``static_argnums``, which ``backward`` receives first, in order, like
``jax.custom_vjp``'s ``nondiff_argnums``. The other positional arguments (arrays or pytrees of arrays) are
differentiable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import tree_util

from jt_core.errors import KernelCallTypeError, KernelCallValueError


def _iterable(value: Any) -> tuple[Any, ...]:
    """``value``'s items, or one item (which the caller refuses) where it is not iterable."""
    try:
        return tuple(value)
    except TypeError:
        return (value,)


def kernel_vjp(
    forward: Callable[..., tuple[Any, Any]],
    backward: Callable[..., Any],
    *,
    static_argnums: Sequence[int] = (),
) -> Callable[..., Any]:
    """Pairs a forward and a backward computation into one function JAX can differentiate in reverse mode.

    Args:
        forward: ``forward(*args, **kwargs) -> (outputs, residuals)``: the primal computation (typically
            ``triton_call``s) and what the backward pass needs from it (a pytree of arrays; may be ``None``).
        backward: ``backward(*static_args, residuals, cotangents, **kwargs) -> cotangents of the
            differentiable arguments``: a tuple with one entry per differentiable positional argument, each with
            that argument's structure, shapes and dtypes. ``None`` stands for a zero cotangent (also inside
            pytrees), e.g. for integer arguments or arguments the output does not depend on.
        static_argnums: Positional arguments that are not differentiated (Python values or arrays used as
            constants). ``backward`` receives them first, in order.

    Returns:
        A function with ``forward``'s arguments returning ``forward``'s outputs, with a ``jax.custom_vjp`` rule.
        ``jax.grad``, ``jax.vjp``, ``jax.jit`` and ``jax.vmap`` work through it; forward-mode differentiation
        (``jax.jvp``) does not (JAX's rule for ``custom_vjp``).

    Raises:
        KernelCallTypeError: At differentiation time, when ``backward`` returns the wrong number of cotangents or
            a cotangent whose structure, shape or dtype differs from its argument's (the message names it).
    """
    if not callable(forward) or not callable(backward):
        raise KernelCallTypeError(f"kernel_vjp(forward, backward) takes two callables, got {forward!r}, {backward!r}")
    items = (static_argnums,) if isinstance(static_argnums, int) else _iterable(static_argnums)
    if isinstance(static_argnums, (str, bytes)) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in items
    ):
        raise KernelCallTypeError(
            f"static_argnums must be an int or a sequence of ints (positions of arguments), got {static_argnums!r}"
        )
    static = tuple(sorted(set(items)))
    name = getattr(forward, "__name__", "forward")

    @functools.wraps(forward)
    def call(*args: Any, **kwargs: Any) -> Any:
        for i in static:
            if not -len(args) <= i < len(args):
                raise KernelCallValueError(
                    f"kernel_vjp({name}): static_argnums contains {i} but only {len(args)} positional arguments "
                    "were given"
                )
        static_pos = sorted({i % len(args) for i in static}) if args else []
        static_args = tuple(args[i] for i in static_pos)
        diff_pos = [i for i in range(len(args)) if i not in static_pos]
        diff_args = tuple(args[i] for i in diff_pos)

        def full(diff: Sequence[Any]) -> list[Any]:
            values = list(args)
            for i, v in zip(diff_pos, diff):
                values[i] = v
            return values

        @jax.custom_vjp
        def primal(*diff: Any) -> Any:
            outputs, _ = _split_forward(name, forward(*full(diff), **kwargs))
            return outputs

        def fwd(*diff: Any) -> tuple[Any, Any]:
            outputs, residuals = _split_forward(name, forward(*full(diff), **kwargs))
            return outputs, residuals

        def bwd(residuals: Any, cotangents: Any) -> tuple[Any, ...]:
            result = backward(*static_args, residuals, cotangents, **kwargs)
            return _check_cotangents(name, result, diff_args, diff_pos)

        primal.defvjp(fwd, bwd)
        return primal(*diff_args)

    return call


def _split_forward(name: str, result: Any) -> tuple[Any, Any]:
    if not isinstance(result, tuple) or len(result) != 2:
        raise KernelCallTypeError(
            f"kernel_vjp: forward {name!r} must return (outputs, residuals), got {type(result).__name__}"
            + (f" of length {len(result)}" if isinstance(result, tuple) else "")
        )
    return result


def _zero_cotangent(primal: Any) -> Any:
    dtype = np.dtype(jnp.result_type(primal))
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.zeros(jnp.shape(primal), dtype)
    return np.zeros(jnp.shape(primal), jax.dtypes.float0)


def _check_cotangents(name: str, result: Any, primals: Sequence[Any], positions: Sequence[int]) -> tuple[Any, ...]:
    if len(primals) == 1 and not isinstance(result, (tuple, list)):
        result = (result,)
    if not isinstance(result, (tuple, list)) or len(result) != len(primals):
        got = f"{len(result)} values" if isinstance(result, (tuple, list)) else type(result).__name__
        raise KernelCallTypeError(
            f"kernel_vjp: backward of {name!r} must return a tuple of {len(primals)} cotangents, one per "
            f"differentiable argument (positions {list(positions)}), got {got}"
        )
    out = []
    for pos, primal, cot in zip(positions, primals, result):
        if cot is None:
            out.append(tree_util.tree_map(_zero_cotangent, primal))
            continue
        p_leaves, p_tree = tree_util.tree_flatten(primal)
        c_leaves, c_tree = tree_util.tree_flatten(cot, is_leaf=lambda x: x is None)
        if len(c_leaves) != len(p_leaves):
            raise KernelCallTypeError(
                f"kernel_vjp: backward of {name!r} returned a cotangent for argument {pos} with structure "
                f"{c_tree}, but the argument has structure {p_tree}"
            )
        fixed = []
        for p, c in zip(p_leaves, c_leaves):
            if c is None:
                fixed.append(_zero_cotangent(p))
                continue
            if tuple(jnp.shape(c)) != tuple(jnp.shape(p)):
                raise KernelCallTypeError(
                    f"kernel_vjp: backward of {name!r} returned a cotangent of shape {tuple(jnp.shape(c))} for "
                    f"argument {pos}, whose shape is {tuple(jnp.shape(p))}"
                )
            p_dtype = np.dtype(jnp.result_type(p))
            if jnp.issubdtype(p_dtype, jnp.inexact):
                c_dtype = np.dtype(jnp.result_type(c))
                if c_dtype != p_dtype:
                    raise KernelCallTypeError(
                        f"kernel_vjp: backward of {name!r} returned a {c_dtype} cotangent for argument {pos}, "
                        f"which is {p_dtype}; cast it (cotangents have their primal's dtype)"
                    )
                fixed.append(c)
            else:
                fixed.append(_zero_cotangent(p))
        out.append(tree_util.tree_unflatten(p_tree, fixed))
    return tuple(out)
