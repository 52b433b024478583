"""What a lowering says about its choices (a launcher set aside, a call tuned before lowering)."""

from __future__ import annotations

import logging
import sys

from jt_core import settings
from jt_core.call import KernelCall

__all__ = ["report"]

log = logging.getLogger("jt_core.lowering")


def report(call: KernelCall, message: str) -> None:
    """Says something about a call's lowering: on stderr under ``JT_TRACE_PLUGINS`` or for a ``debug=True`` call,
    and to the ``jt_core.lowering`` logger."""
    text = f"jt: triton_call {call.name!r}: {message}"
    log.info(text)
    if settings.flag("JT_TRACE_PLUGINS") or any(config.options.debug for config in call.configs):
        sys.stderr.write(text + "\n")
