"""``jt.export``: ``jax.export.export`` with the custom calls of jt's launchers allowed in the artifact.

``jax.export`` refuses a custom call whose target JAX does not list as stable ("Cannot serialize code with custom
calls whose targets have no compatibility guarantees") unless ``disabled_checks`` names it. A computation exported
for a GPU holds the custom calls of jt's launchers (``triton_kernel_call_jt_cuda_preloaded`` ...), which depend
on the launcher, the platform and whether the call is autotuned. `export` finds them as jt lowers the calls and
exports with exactly those named; every other custom call keeps JAX's check.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax import export as jax_export

from jt_core.lowering.fallback import recording_custom_calls

__all__ = ["export"]


def export(
    fn: Callable[..., Any],
    *,
    platforms: Sequence[str] | None = None,
    disabled_checks: Sequence[jax_export.DisabledSafetyCheck] = (),
) -> Callable[..., jax_export.Exported]:
    """Like ``jax.export.export(jax.jit(fn), platforms=..., disabled_checks=...)``, with the custom calls jt's
    launchers emit for ``fn``'s ``triton_call`` s added to ``disabled_checks``.

    The export runs as ``jax.export.export`` runs it. Where JAX refuses a custom call of jt's, the computation is
    lowered again with jt's custom-call targets named (``jax.export.DisabledSafetyCheck.custom_call(target)``): the
    kernels are compiled once, kept in memory. A computation without them (one exported for the CPU, whose compiled
    path emits plain StableHLO) is exported once, with JAX's checks as given.

    Args:
        fn: The function to export, jitted or not (``jax.jit`` is applied to a plain function).
        platforms: The platforms to export for (``["cuda"]``, ``["cpu", "cuda"]``); ``None``: the default backend's.
        disabled_checks: Safety checks to disable besides jt's custom calls, as for ``jax.export.export``.

    Returns:
        A function that takes the arguments (arrays or ``jax.ShapeDtypeStruct`` s) and returns the
        ``jax.export.Exported``; its ``disabled_safety_checks`` list jt's targets that were added.

    Raises:
        ValueError: JAX's refusal of a custom call that is not jt's, or of anything else JAX checks.
    """
    jitted: Any = fn if hasattr(fn, "trace") else jax.jit(fn)
    given = list(disabled_checks)
    allowed = {check.is_custom_call() for check in given} - {None}

    def do_export(*args: Any, **kwargs: Any) -> jax_export.Exported:
        with recording_custom_calls() as targets:
            try:
                return jax_export.export(jitted, platforms=platforms, disabled_checks=given)(*args, **kwargs)
            except ValueError:
                if not targets - allowed:
                    raise
        checks = [*given, *(jax_export.DisabledSafetyCheck.custom_call(t) for t in sorted(targets - allowed))]
        return jax_export.export(jitted, platforms=platforms, disabled_checks=checks)(*args, **kwargs)

    return do_export
