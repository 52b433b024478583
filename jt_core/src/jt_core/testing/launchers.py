"""What `jt_core.testing` offers launcher plugins (re-exported there): `record_lowerings`, which records
every call a launcher class lowers, and the conformance class `LauncherConformance`, which checks that the
plugin's own launcher lowers a sample call and, where the platform runs here, that the call computes what it
should, under ``jax.vmap`` too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np
import pytest

from jt_core.api import triton_call
from jt_core.call import KernelCall
from jt_core.errors import short_repr
from jt_core.plugin.roles import Launcher
from jt_core.plugin.validation import contract_problems, retired_attributes
from jt_core.plugin.values import CompiledKernel
from jt_core.testing.kernels import sample_add_kernel
from jt_core.testing.markers import has_platform

__all__ = ["LauncherConformance", "Lowering", "record_lowerings"]


@dataclasses.dataclass(frozen=True)
class Lowering:
    """One call a launcher lowered (see `record_lowerings`).

    Attributes:
        launcher: The launcher object that lowered it (the one its plugin registered).
        call: The bound call it was given (under ``jax.vmap``, the batched call: ``call.batch`` is set).
        kernels: The compiled kernels it was given, one per ``call.configs`` entry.
    """

    launcher: Launcher
    call: KernelCall
    kernels: tuple[CompiledKernel, ...]


@contextlib.contextmanager
def record_lowerings(launcher: Launcher | type[Launcher]) -> Iterator[list[Lowering]]:
    """Records every call that a launcher of ``launcher``'s class lowers while the block runs (the object its
    plugin registered included), in the order they were lowered; a call whose ``lower()`` raised is not recorded.

    The class's ``lower`` is wrapped for the block (subclasses that do not define their own go through it too) and
    restored afterwards. What the launcher returns is left as it is: the recording proves that this launcher, and
    not another of the platform, emitted the call.

    Args:
        launcher: A launcher, or its class.

    Yields:
        The list the `Lowering` records are appended to.
    """
    cls = launcher if isinstance(launcher, type) else type(launcher)
    if not (isinstance(cls, type) and issubclass(cls, Launcher)):
        raise TypeError(f"record_lowerings() takes a Launcher or its class, got {short_repr(launcher)}")
    own = cls.__dict__.get("lower")
    original = cls.lower
    recorded: list[Lowering] = []

    @functools.wraps(original)
    def lower(self: Launcher, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        arguments = dict(zip(("ctx", "call", "kernels", "operands", "device"), args)) | kwargs
        recorded.append(Lowering(self, arguments["call"], tuple(arguments.get("kernels", ()))))
        return result

    cls.lower = lower  # type: ignore[method-assign]
    try:
        yield recorded
    finally:
        if own is None:
            del cls.lower
        else:
            cls.lower = own  # type: ignore[method-assign]


class LauncherConformance:
    """Subclass and provide a ``launcher`` fixture: the launcher under test, whose plugin is installed.

    The suite checks the contract (the checks jt makes when a plugin registers the launcher, and no retired
    attribute), that a sample call named for the launcher (``launcher=``) is lowered by this launcher's own
    ``lower()`` and not by another of its platform (`record_lowerings`), and, where JAX has a device of the
    launcher's platform (always for ``"cpu"``), that the call runs and computes what NumPy computes: plainly, and
    under ``jax.vmap``, where the launcher is given a generated wrapper kernel (``call.batch`` is set).

    Set ``compute_capability`` when lowering for the launcher's platform needs a target without a device, and
    ``expected_in_lowering`` to a string the lowered module must contain besides (the custom-call target, say).
    """

    compute_capability: int | None = None
    expected_in_lowering: str | None = None

    def test_is_a_launcher(self, launcher: Launcher) -> None:
        assert isinstance(launcher, Launcher)
        assert isinstance(launcher.name, str) and launcher.name
        assert isinstance(launcher.platform, str) and launcher.platform
        assert isinstance(launcher.priority, int)

    def test_sets_no_retired_attribute(self, launcher: Launcher) -> None:
        assert retired_attributes(launcher) == [], "jt-core asks these questions through methods now"

    def test_passes_the_registration_checks(self, launcher: Launcher) -> None:
        problems = contract_problems(launcher)
        assert problems == [], f"jt refuses the plugin that registers it: it {'; and '.join(problems)}"

    def test_availability_is_explained(self, launcher: Launcher) -> None:
        reason = launcher.unavailable_reason()
        assert reason is None or (isinstance(reason, str) and reason)

    def test_lowers_sample_call(self, launcher: Launcher) -> None:
        self._skip_unavailable(launcher)
        spec = jax.ShapeDtypeStruct((64,), np.float32)
        with record_lowerings(launcher) as lowered:
            text = jax.jit(self._add(launcher)).trace(spec, spec).lower(lowering_platforms=(launcher.platform,))
            text = text.as_text()
        self._check_lowered_by_it(launcher, lowered, batched=False)
        if self.expected_in_lowering is not None:
            assert self.expected_in_lowering in text

    def test_runs_sample_call(self, launcher: Launcher) -> None:
        self._skip_unless_it_runs(launcher)
        x, y = _random((64,)), _random((64,))
        with record_lowerings(launcher) as lowered:
            out = jax.jit(self._add(launcher))(*_on(launcher.platform, x, y))
        self._check_lowered_by_it(launcher, lowered, batched=False)
        np.testing.assert_array_equal(np.asarray(out), x + y)

    def test_runs_sample_call_under_vmap(self, launcher: Launcher) -> None:
        self._skip_unless_it_runs(launcher)
        x, y = _random((3, 64)), _random((64,))  # y is shared by the batch (its batch stride is 0)
        with record_lowerings(launcher) as lowered:
            out = jax.jit(jax.vmap(self._add(launcher), in_axes=(0, None)))(*_on(launcher.platform, x, y))
        (lowering,) = self._check_lowered_by_it(launcher, lowered, batched=True)
        assert lowering.call.batch is not None and lowering.call.batch.batch_shape == (3,), lowering.call.batch
        np.testing.assert_array_equal(np.asarray(out), x + y[None, :])

    def _add(self, launcher: Launcher) -> Any:
        """The sample call, ``x + y`` over 64 elements in two programs, named for ``launcher``."""

        def add(x: Any, y: Any) -> Any:
            return triton_call(
                x,
                y,
                kernel=sample_add_kernel,
                out_shape=x,
                grid=2,
                n=64,
                BLOCK=32,
                compute_capability=self.compute_capability,
                launcher=launcher.name,
            )

        return add

    @staticmethod
    def _check_lowered_by_it(launcher: Launcher, lowered: Sequence[Lowering], batched: bool) -> list[Lowering]:
        """The recorded lowerings of the sample call, checked: this launcher lowered it, once."""
        mine = [record for record in lowered if record.call.name == "sample_add_kernel"]
        kind = type(launcher).__name__
        assert mine, (
            f"launcher {launcher.name!r} was named for the sample call on {launcher.platform!r}, but no "
            f"{kind}.lower() lowered it: the launcher registered under that name is another class, or "
            f"fallback_reason() handed the call to the platform's next launcher"
        )
        assert len(mine) == 1, f"{kind}.lower() lowered the sample call {len(mine)} times"
        record = mine[0]
        assert record.launcher.name == launcher.name and record.launcher.platform == launcher.platform
        assert len(record.kernels) == len(record.call.configs)
        assert (record.call.batch is not None) == batched, record.call.batch
        if batched:
            assert record.call.fn is not sample_add_kernel, "under vmap the launcher gets the generated wrapper kernel"
        return mine

    @staticmethod
    def _skip_unavailable(launcher: Launcher) -> None:
        reason = launcher.unavailable_reason()
        if reason is not None:
            pytest.skip(f"launcher {launcher.name!r} is unavailable here: {reason}")

    def _skip_unless_it_runs(self, launcher: Launcher) -> None:
        self._skip_unavailable(launcher)
        if not has_platform(launcher.platform):
            pytest.skip(
                f"JAX has no {launcher.platform!r} device here: launcher {launcher.name!r} lowers the sample call "
                "(test_lowers_sample_call) but nothing can run it"
            )


def _random(shape: tuple[int, ...]) -> np.ndarray:
    """Fresh float32 data."""
    return np.random.default_rng().standard_normal(shape, np.float32)


def _on(platform: str, *arrays: np.ndarray) -> list[jax.Array]:
    """``arrays`` on the first device of ``platform``, where the computation taking them then runs."""
    device = jax.devices(platform)[0]
    return [jax.device_put(array, device) for array in arrays]
