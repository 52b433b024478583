"""The sample call the conformance suites lower and compile, bound, targeted and compiled as jt does it:
`sample_call`, `bind`, `target_of`, `compile_request`. jt's own suites use them too; they are
not part of the kit `jt_core.testing` offers plugin authors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jt_core.binding import bind_call
from jt_core.call import CallOptions, KernelCall
from jt_core.configs import unwrap_kernel
from jt_core.plugin import registry as registries
from jt_core.plugin.roles import Backend, CompileRequest, invoke
from jt_core.plugin.values import Target
from jt_core.testing.kernels import sample_add_kernel

__all__ = ["bind", "compile_request", "sample_call", "target_of"]


def sample_call(
    kernel: Any = None,
    size: int = 64,
    dtype: Any = np.float32,
    compute_capability: int | None = None,
    **metaparams: Any,
) -> KernelCall:
    """A bound call of ``sample_add_kernel`` (or a kernel of the same signature) on abstract arrays."""
    spec = jax.ShapeDtypeStruct((size,), dtype)
    meta = {"BLOCK": 32, **metaparams}
    options = CallOptions(
        out_spec=spec, grid=(size + meta["BLOCK"] - 1) // meta["BLOCK"], compute_capability=compute_capability
    )
    return bind(kernel if kernel is not None else sample_add_kernel, (spec, spec), {**meta, "n": size}, options)


def bind(kernel: Any, args: Sequence[Any], kwargs: Mapping[str, Any], options: CallOptions) -> KernelCall:
    """Binds a call as ``triton_call`` does (with the process-wide registry's dialect) and returns it."""
    wrappers = unwrap_kernel(kernel)
    dialect = registries.get_registry().dialect_for(wrappers.fn)
    return bind_call(kernel, wrappers, dialect, args, kwargs, options).call


def target_of(backend: Backend, call: KernelCall, device: Any | None = None) -> Target:
    """The target ``backend`` chooses for ``call`` (as lowering asks it, with the arguments its method names)."""
    arguments = call.arguments_for_backend()
    return invoke(backend, "target", backend_arguments=arguments, device=device, name=call.name, call=call)


def compile_request(backend: Backend, call: KernelCall, target: Target | None = None) -> CompileRequest:
    """The request for the first configuration of ``call``, with the options ``backend`` parses from it (for
    ``target``, by default the one `target_of` gives without a device)."""
    chosen = target if target is not None else target_of(backend, call)
    return CompileRequest.for_config(call, call.configs[0], chosen, backend)
