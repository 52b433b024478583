"""The functions ``tt.extern_elementwise`` calls: libdevice's (``__nv_expf``) and the ROCm device library's
(``__ocml_exp_f32``), by what each computes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from jt_core.cpu.compiled.lang import fma, mulhi, round_half_away

__all__ = ["EXTERN", "extern_function"]


#: The functions ``tt.extern_elementwise`` calls (libdevice, the ROCm device library), by name less their prefix
#: and type suffix: what each computes.
_EXTERN_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "exp": jnp.exp,
    "exp2": jnp.exp2,
    "exp10": lambda x: jnp.power(jnp.asarray(10, x.dtype), x),
    "expm1": jnp.expm1,
    "log": jnp.log,
    "log2": jnp.log2,
    "log10": jnp.log10,
    "log1p": jnp.log1p,
    "sqrt": lax.sqrt,
    "rsqrt": lax.rsqrt,
    "cbrt": jnp.cbrt,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "asin": jnp.arcsin,
    "acos": jnp.arccos,
    "atan": jnp.arctan,
    "atan2": jnp.arctan2,
    "sinh": jnp.sinh,
    "cosh": jnp.cosh,
    "tanh": jnp.tanh,
    "asinh": jnp.arcsinh,
    "acosh": jnp.arccosh,
    "atanh": jnp.arctanh,
    "erf": lax.erf,
    "erfc": lax.erfc,
    "erfinv": lax.erf_inv,
    "lgamma": lax.lgamma,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "trunc": jnp.trunc,
    "round": round_half_away,
    "rint": jnp.round,
    "nearbyint": jnp.round,
    "fabs": jnp.abs,
    "abs": jnp.abs,
    "llabs": jnp.abs,
    "pow": jnp.power,
    "powf": jnp.power,
    "fmod": lax.rem,
    "fmax": jnp.fmax,
    "fmin": jnp.fmin,
    "fma": fma,
    "copysign": jnp.copysign,
    "isnan": lambda x: jnp.isnan(x).astype(jnp.int32),
    "isinf": lambda x: jnp.isinf(x).astype(jnp.int32),
    "signbit": lambda x: jnp.signbit(x).astype(jnp.int32),
    "nextafter": jnp.nextafter,
    "hypot": jnp.hypot,
    "div_rn": lax.div,
    "fdiv_rn": lax.div,
    "ddiv_rn": lax.div,
    "sqrt_rn": lax.sqrt,
    "fsqrt_rn": lax.sqrt,
    "dsqrt_rn": lax.sqrt,
    "clz": lax.clz,
    "clzll": lax.clz,
    "popc": lax.population_count,
    "popcll": lax.population_count,
    "mulhi": mulhi,
    "umulhi": mulhi,
}
EXTERN: dict[str, Callable[..., jax.Array]] = dict(_EXTERN_FUNCTIONS)


def extern_function(symbol: str) -> Callable[..., jax.Array] | None:
    """The function a ``tt.extern_elementwise`` symbol names (``__nv_expf``, ``__ocml_exp_f32``), or ``None``."""
    name = symbol
    for prefix in ("__nv_fast_", "__nv_", "__ocml_native_", "__ocml_", "__triton_hip_"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    for suffix in ("_f64", "_f32", "_f16", ""):
        if suffix and not name.endswith(suffix):
            continue
        base = name[: len(name) - len(suffix)] if suffix else name
        for candidate in (base, base[:-1] if base.endswith("f") else None, base[:-2] if base.endswith("ll") else None):
            if candidate and candidate in EXTERN:
                return EXTERN[candidate]
    return None
