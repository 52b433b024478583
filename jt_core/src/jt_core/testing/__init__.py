"""A pytest plugin for jt plugin authors (and jt's own suite).

Activate it in a ``conftest.py`` with ``pytest_plugins = ["jt_core.testing"]``. It provides:

* fixtures: ``jt_plugin_manager`` (a fresh `Registry` over the installed plugins,
  installed as the process-wide one for the test), ``jt_register_plugin`` (register a module or object as a plugin
  for one test), ``jt_fake_entry_points`` (build a registry from fake entry points, e.g. a broken plugin),
  ``jt_hook_recorder`` (records hook calls), ``jt_cpu_paths_by_name`` (the CPU path a call names is the one it
  takes, whatever ``JT_CPU_RACE_CHECK`` or ``JT_CPU_DIFFERENTIAL`` say); outside pytest, `using_plugins` (a
  ``with`` block in which jt uses the installed plugins plus fake entry points) and `dialect_for` (the dialect
  chosen for a kernel);
* caches of the session's own: ``JT_CACHE_DIR`` and ``TRITON_CACHE_DIR`` point at a fresh folder while the session
  runs (or at the folder ``JT_TEST_CACHE_DIR`` names, kept between sessions), so that tests, their xdist workers and
  the processes they start leave the user's caches as they found them (`folders`);
* markers ``cuda``, ``rocm``, ``gpu`` and ``tpu`` that skip a test where the hardware is absent, and the option
  ``--jt-require-gpu`` that turns those skips into failures (use it on GPU and TPU machines so that nothing is
  skipped by accident);
* the marker ``requires_plugin(name, ...)``, which skips a test unless the jt plugins it names are installed (a
  test of one plugin that also needs another, so that each plugin's suite passes with only that plugin and jt-core);
* kernels for tests (``sample_add_kernel``, ``scale_inplace_kernel``, ``autotuned_scale_inplace_kernel``,
  ``out_first_kernel``, ``accumulate_kernel``, ``half_write_kernel``, and the tensor-descriptor kernels
  ``add_tiles_kernel``, ``autotuned_add_tiles_kernel``, ``read_tile_kernel``, ``copy_tiles_kernel``, with
  `load_tile`, a call of ``read_tile_kernel``);
* for GPU plugins: `custom_calls`, `backend_config` and `output_operand_aliases` (what a lowering
  emits), `decode_jaxlib_call` (jaxlib's kernel-call message), `run_on_cpu_client` (jt's launch handler
  on XLA's CPU client) and the conformance class `LaunchHandlerConformance`;
* `run_job`, which runs a script as the processes of a ``jax.distributed`` job on one machine, `run_cases`, which
  runs a module of test cases in a fresh interpreter (with several CPU devices, say, which JAX fixes when it starts),
  and `no_compiler_path`, a ``PATH`` without C or C++ compilers (a machine that has none);
* conformance classes `BackendConformance`, `LauncherConformance` and `DialectConformance`
  that a plugin's test module subclasses, providing the object under test as a fixture (each also runs the checks
  jt makes when a plugin registers the object), and `record_lowerings`, which records the calls a launcher
  lowers (the proof, in the launcher suite, that the plugin's own launcher lowered a call);
* for plugins that keep files in jt's cache: `CACHE_FAULTS`, `damage` and `failing_writes`.

The kit is this module's ``__all__``, gathered from the package's modules, one role each:
`folders` (the session's caches), `markers` (the markers and the option), `fixtures`,
`kernels`, `conformance` (backends and dialects),
`launchers`, `gpu`, `faults` and
`jobs`. The private modules hold what the kit is built on and jt's own suites use besides
(the sample call bound and compiled as jt does it; loads from many threads): they are not part of it.
"""

from __future__ import annotations

import pytest

from jt_core.testing.conformance import BackendConformance, DialectConformance
from jt_core.testing.faults import CACHE_FAULTS, damage, failing_writes, no_compiler_path
from jt_core.testing.fixtures import (
    HookRecorder,
    dialect_for,
    fake_entry_point,
    jt_cpu_paths_by_name,
    jt_fake_entry_points,
    jt_hook_recorder,
    jt_plugin_manager,
    jt_register_plugin,
    using_plugins,
)
from jt_core.testing.folders import TEST_CACHE_VARIABLE, isolate_caches, restore_caches
from jt_core.testing.gpu import (
    LaunchHandlerConformance,
    backend_config,
    custom_calls,
    decode_jaxlib_call,
    output_operand_aliases,
    run_on_cpu_client,
)
from jt_core.testing.jobs import JobProcess, run_cases, run_job
from jt_core.testing.kernels import (
    accumulate_kernel,
    add_tiles_kernel,
    autotuned_add_tiles_kernel,
    autotuned_scale_inplace_kernel,
    copy_tiles_kernel,
    half_write_kernel,
    load_tile,
    out_first_kernel,
    read_tile_kernel,
    sample_add_kernel,
    scale_inplace_kernel,
)
from jt_core.testing.launchers import LauncherConformance, Lowering, record_lowerings
from jt_core.testing.markers import HARDWARE_MARKERS, PLUGIN_MARKER, declare_markers

# The pytest hooks of the plugin, which pytest looks up on this module.
from jt_core.testing.markers import pytest_addoption as pytest_addoption
from jt_core.testing.markers import pytest_runtest_setup as pytest_runtest_setup


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # First, so that nothing a session configures reaches the user's caches.
    isolate_caches(config)
    declare_markers(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    restore_caches(config)


__all__ = [
    "CACHE_FAULTS",
    "HARDWARE_MARKERS",
    "PLUGIN_MARKER",
    "TEST_CACHE_VARIABLE",
    "BackendConformance",
    "DialectConformance",
    "HookRecorder",
    "JobProcess",
    "LaunchHandlerConformance",
    "LauncherConformance",
    "Lowering",
    "accumulate_kernel",
    "add_tiles_kernel",
    "autotuned_add_tiles_kernel",
    "autotuned_scale_inplace_kernel",
    "backend_config",
    "copy_tiles_kernel",
    "custom_calls",
    "damage",
    "decode_jaxlib_call",
    "dialect_for",
    "failing_writes",
    "fake_entry_point",
    "half_write_kernel",
    "jt_cpu_paths_by_name",
    "jt_fake_entry_points",
    "jt_hook_recorder",
    "jt_plugin_manager",
    "jt_register_plugin",
    "load_tile",
    "no_compiler_path",
    "out_first_kernel",
    "output_operand_aliases",
    "read_tile_kernel",
    "record_lowerings",
    "run_cases",
    "run_job",
    "run_on_cpu_client",
    "sample_add_kernel",
    "scale_inplace_kernel",
    "using_plugins",
]
