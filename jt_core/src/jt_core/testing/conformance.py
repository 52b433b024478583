"""The conformance classes of backends and dialects: `BackendConformance` and `DialectConformance`,
which a plugin's test module subclasses, providing the object under test as a fixture. (Launchers have theirs in
`jt_core.testing.launchers`, the launch handlers of GPU plugins in `jt_core.testing.gpu`.)"""

from __future__ import annotations

import types
from typing import Any

from jt_core import frontend
from jt_core.plugin import registry as registries
from jt_core.plugin.roles import Backend, Dialect
from jt_core.plugin.validation import contract_problems, retired_attributes
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.testing._calls import compile_request, sample_call, target_of
from jt_core.testing.fixtures import dialect_for

__all__ = ["BackendConformance", "DialectConformance"]


class BackendConformance:
    """Subclass and provide a ``backend`` fixture (and set ``compute_capability`` where the target needs one).

    The suite checks the ABC contract (none of the class attributes the contract's questions replaced is set, and
    the checks jt makes when a plugin registers the backend pass:
    `contract_problems`), that a target can be made without a device when told the
    architecture, and that the sample kernel compiles to a `CompiledKernel`.
    """

    #: Passed as ``compute_capability=`` to the sample call (CUDA backends need it without a device).
    compute_capability: int | None = None

    def test_is_a_backend(self, backend: Backend) -> None:
        assert isinstance(backend, Backend)
        assert isinstance(backend.platform, str) and backend.platform

    def test_sets_no_retired_attribute(self, backend: Backend) -> None:
        assert retired_attributes(backend) == [], "jt-core asks these questions through methods now"

    def test_passes_the_registration_checks(self, backend: Backend) -> None:
        problems = contract_problems(backend)
        assert problems == [], f"jt refuses the plugin that registers it: it {'; and '.join(problems)}"

    def test_target_without_device(self, backend: Backend) -> None:
        target = target_of(backend, sample_call(compute_capability=self.compute_capability))
        assert isinstance(target, Target)
        assert target.platform == backend.platform
        assert target.warp_size >= 1

    def test_compiles_sample_kernel(self, backend: Backend) -> None:
        call = sample_call(compute_capability=self.compute_capability)
        target = target_of(backend, call)
        with frontend.compiling():  # as every compile: never beside an interpreter run on another thread
            compiled = backend.compile(compile_request(backend, call, target))
        assert isinstance(compiled, CompiledKernel)
        assert compiled.target == target
        assert compiled.name

    def test_registered_by_its_plugin(self, backend: Backend) -> None:
        # Backends are collected per platform when a call first needs one: collect the backend's here.
        registry = registries.get_registry().collect(backend.platform)
        registered = {type(b) for _, b in registry.backends.values()}
        assert type(backend) in registered, f"{type(backend).__name__} is not registered by any loaded plugin"


class DialectConformance:
    """Subclass and provide ``dialect``, ``sample_kernel`` (a kernel of the dialect) and ``foreign_kernel``."""

    def test_is_a_dialect(self, dialect: Dialect) -> None:
        assert isinstance(dialect, Dialect)
        assert isinstance(dialect.name, str) and dialect.name

    def test_sets_no_retired_attribute(self, dialect: Dialect) -> None:
        assert retired_attributes(dialect) == [], "jt-core asks these questions through methods now"

    def test_passes_the_registration_checks(self, dialect: Dialect) -> None:
        problems = contract_problems(dialect)
        assert problems == [], f"jt refuses the plugin that registers it: it {'; and '.join(problems)}"

    def test_claims_its_kernels(self, dialect: Dialect, sample_kernel: Any) -> None:
        assert dialect.claims(sample_kernel)

    def test_leaves_other_kernels(self, dialect: Dialect, foreign_kernel: Any) -> None:
        assert not dialect.claims(foreign_kernel)
        assert not dialect.claims(types.SimpleNamespace())

    def test_selected_for_its_kernels(self, dialect: Dialect, sample_kernel: Any) -> None:
        chosen = dialect_for(sample_kernel)
        assert chosen.name == dialect.name
