"""What jt-tpu's tests share: the TPU lowering of a case, its operations counted; and the TPU's strategy run on the
CPU, as a launcher of the ``cpu`` platform registered for a test (`tpu_strategy_on_cpu`)."""

from __future__ import annotations

import collections
import contextlib
import re
import types
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from jt_core.plugin import hookimpl
from jt_core.testing import fake_entry_point, using_plugins
from jt_tpu.launcher import TpuLauncher

__all__ = ["TpuStrategyOnCpu", "exported_for_tpu", "operations", "tpu_strategy_on_cpu"]


def exported_for_tpu(fn: Any, *arrays: np.ndarray) -> jax.export.Exported:
    """``fn`` exported for a TPU, on this host."""
    avals = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype) for a in arrays]
    return jax.export.export(fn, platforms=("tpu",))(*avals)


def operations(exported: jax.export.Exported) -> collections.Counter[str]:
    """How many of each StableHLO operation the exported module holds."""
    # Attributes spell their kind as operations do (``#stablehlo.gather<...>``): only operations are counted.
    return collections.Counter(re.findall(r"(?<![#\w])stablehlo\.(\w+)", exported.mlir_module()))


class TpuStrategyOnCpu(TpuLauncher):
    """The TPU launcher, lowering for the CPU: what a TPU runs, computed here."""

    platform = "cpu"
    name = "tpu-strategy"
    priority = 0


@contextlib.contextmanager
def tpu_strategy_on_cpu() -> Iterator[str]:
    """A ``with`` block in which the CPU's calls are lowered by the launcher ``"tpu-strategy"``, as jt-tpu lowers
    them for a TPU; yields the launcher's name."""
    plugin = types.ModuleType("jt_tpu_strategy_on_cpu")
    plugin.jt_register_launchers = hookimpl(  # type: ignore[attr-defined]
        lambda platform: [TpuStrategyOnCpu()] if platform in (None, "cpu") else []
    )
    entry_point = fake_entry_point("tpu-strategy", plugin, distribution="jt-tpu-tests")
    with using_plugins(entry_point, environ={"JT_LAUNCHER_CPU": TpuStrategyOnCpu.name}):
        yield TpuStrategyOnCpu.name
