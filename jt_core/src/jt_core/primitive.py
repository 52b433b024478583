"""The ``triton_kernel_call`` primitive: abstract evaluation, effects, the JVP rule's refusal.

Lowering lives in `jt_core.lowering` (which registers the lowering rule), batching in `jt_core.batching`.
"""

from __future__ import annotations

from typing import Any

from jax._src import dispatch
from jax._src import effects as effects_lib
from jax._src.core import Primitive  # jax.extend.core's, whose package imports Pallas (about 17 ms)
from jax.interpreters import ad

from jt_core.call import KernelCall

triton_kernel_call_p = Primitive("triton_kernel_call")
triton_kernel_call_p.multiple_results = True


class KernelSideEffect(effects_lib.Effect):
    """The effect of a call made with ``has_side_effect=True``: it is never removed as dead code."""

    def __repr__(self) -> str:
        return "TritonKernelSideEffect"


kernel_side_effect = KernelSideEffect()
for _allowed in (
    effects_lib.lowerable_effects,
    effects_lib.control_flow_allowed_effects,
    effects_lib.custom_derivatives_allowed_effects,
    effects_lib.remat_allowed_effects,
):
    _allowed.add_type(KernelSideEffect)


def _abstract_eval(*avals: Any, call: KernelCall) -> tuple[list[Any], set[Any]]:
    for i, (aval, expected) in enumerate(zip(avals, call.operand_avals)):
        if tuple(aval.shape) != tuple(expected.shape) or aval.dtype != expected.dtype:
            raise TypeError(f"triton_kernel_call operand {i} is {aval.str_short()}, expected {expected.str_short()}")
    effects = {kernel_side_effect} if call.launch.has_side_effect else set()
    return list(call.out_avals), effects


triton_kernel_call_p.def_effectful_abstract_eval(_abstract_eval)


def _impl(*args: Any, call: KernelCall) -> Any:
    return dispatch.apply_primitive(triton_kernel_call_p, *args, call=call)


triton_kernel_call_p.def_impl(_impl)


def _jvp(primals: Any, tangents: Any, *, call: KernelCall) -> Any:
    del primals, tangents
    raise NotImplementedError(
        f"triton_call {call.name!r} cannot be differentiated automatically: JAX cannot see inside a Triton "
        "kernel. Write the backward pass as a second kernel and pair the two with jax.custom_vjp; "
        "jt_core.kernel_vjp(forward, backward) does the pairing (residuals, static arguments, zero cotangents). "
        "See the 'Gradients' page of the documentation (docs/pages/gradients.md). jax.grad and jax.vjp then work "
        "through the pair; forward mode (jax.jvp, jax.jacfwd) needs jax.custom_jvp instead."
    )


ad.primitive_jvps[triton_kernel_call_p] = _jvp
