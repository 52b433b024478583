"""Comparing how the processes of a ``jax.distributed`` job lower a call that they share."""

from __future__ import annotations

from typing import Any

from jt_core import distributed
from jt_core.call import KernelCall
from jt_core.plugin import facade
from jt_core.plugin.roles import Launcher

__all__ = ["agree_on_lowering"]


def agree_on_lowering(
    exchange: distributed.Exchange,
    call: KernelCall,
    platform: str,
    launcher: Launcher,
    refused: dict[str, str] | None = None,
) -> None:
    """Compares how the processes of a job lower a call: the launcher and the configurations.

    The record says, too, why this process passed over the launchers ahead of its own (unavailable here, such as
    one whose native library cannot be built without a C++ compiler, or unable to express the call), so that a
    difference names its cause.

    Raises:
        ProcessAgreementError: When another process lowers it with another launcher or configuration.
    """
    passed_over: dict[str, str] = {}
    if call.launch.launcher is None and facade.launcher_override(platform) is None:  # chosen by priority
        for other in facade.launchers_for(platform):
            if other is launcher or other.name in (refused or {}):
                break
            reason = facade.unavailable_reason(other)  # a plugin's that raises is set aside, as in selection
            if reason is not None:
                passed_over[other.name] = f"unavailable here: {reason}"
    passed_over.update({name: f"cannot express the call: {why}" for name, why in (refused or {}).items()})
    record = {
        "launcher": launcher.name,
        "configs": [config.label for config in call.configs],
        "passed_over": passed_over,
    }

    def describe(theirs: Any) -> str:
        text = f"launcher {theirs.get('launcher')!r}"
        for name, why in dict(theirs.get("passed_over") or {}).items():
            text += f" (not {name!r}: {why})"
        return text + f", configs {theirs.get('configs')}"

    exchange.compare(
        "lowering",
        record,
        ("launcher", "configs"),
        describe,
        hint=(
            "A launcher that builds a native library needs it on every host: install jt from its platform wheels, "
            "which carry the libraries prebuilt, or run `python -m jt_core build-native` on each host before the job "
            "starts (with JT_CACHE_DIR on a shared disk, once), with a C++ compiler there; or name one launcher for "
            f"every process (launcher= or JT_LAUNCHER_{platform.upper()}=...)"
        ),
    )
