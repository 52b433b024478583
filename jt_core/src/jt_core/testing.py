"""A pytest plugin for jt plugin authors (and jt's own suite).

Activate it in a ``conftest.py`` with ``pytest_plugins = ["jt_core.testing"]``. It provides:

* fixtures: ``jt_plugin_manager`` (a fresh :class:`~jt_core.plugin.registry.Registry` over the installed plugins,
  installed as the process-wide one for the test), ``jt_register_plugin`` (register a module or object as a plugin
  for one test), ``jt_fake_entry_points`` (build a registry from fake entry points, e.g. a broken plugin),
  ``jt_hook_recorder`` (records hook calls); outside pytest, :func:`using_plugins` (a ``with`` block in which jt
  uses the installed plugins plus fake entry points) and :func:`dialect_for` (the dialect chosen for a kernel);
* markers ``cuda``, ``rocm`` and ``gpu`` that skip a test where the hardware is absent, and the option
  ``--jt-require-gpu`` that turns those skips into failures (use it on GPU machines so that nothing is skipped by
  accident);
* the marker ``requires_plugin(name, ...)``, which skips a test unless the jt plugins it names are installed (a
  test of one plugin that also needs another, so that each plugin's suite passes with only that plugin and jt-core);
* kernels for tests (``sample_add_kernel``, ``scale_inplace_kernel``, ``autotuned_scale_inplace_kernel``,
  ``out_first_kernel``, ``accumulate_kernel``, ``half_write_kernel``, and the tensor-descriptor kernels
  ``add_tiles_kernel``, ``autotuned_add_tiles_kernel``, ``read_tile_kernel``, ``copy_tiles_kernel``, with
  :func:`load_tile`, a call of ``read_tile_kernel``);
* for GPU plugins: :func:`custom_calls`, :func:`backend_config` and :func:`output_operand_aliases` (what a lowering
  emits), :func:`decode_jaxlib_call` (jaxlib's kernel-call message), :func:`run_on_cpu_client` (jt's launch handler
  on XLA's CPU client) and the conformance class :class:`LaunchHandlerConformance`;
* :func:`run_job`, which runs a script as the processes of a ``jax.distributed`` job on one machine, and
  :func:`no_compiler_path`, a ``PATH`` without C or C++ compilers (a machine that has none);
* conformance classes :class:`BackendConformance`, :class:`LauncherConformance` and :class:`DialectConformance`
  that a plugin's test module subclasses, providing the object under test as a fixture (each also runs the checks
  jt makes when a plugin registers the object), and :func:`record_lowerings`, which records the calls a launcher
  lowers (the proof, in the launcher suite, that the plugin's own launcher lowered a call).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import importlib.util
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jax
import numpy as np
import pytest

from jt_core import frontend
from jt_core._testing_gpu import (
    HANDLER_HEADER,
    HANDLER_STAGES,
    LaunchHandlerConformance,
    backend_config,
    decode_jaxlib_call,
    exported_symbols,
    output_operand_aliases,
    run_on_cpu_client,
)
from jt_core._testing_kernels import (
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
from jt_core._testing_launchers import (
    LauncherConformance,
    Lowering,
    has_platform,
    record_lowerings,
)
from jt_core.binding import bind_call
from jt_core.call import CallOptions, KernelCall
from jt_core.configs import unwrap_kernel
from jt_core.plugin import registry as registries
from jt_core.plugin.loader import EntryPointInfo, PluginLoader, discover_entry_points
from jt_core.plugin.registry import Registry
from jt_core.plugin.roles import Backend, CompileRequest, Dialect, invoke
from jt_core.plugin.specs import PLUGIN_API_VERSION
from jt_core.plugin.validation import contract_problems, retired_attributes
from jt_core.plugin.values import CompiledKernel, Target

__all__ = [
    "CACHE_FAULTS",
    "HANDLER_HEADER",
    "HANDLER_STAGES",
    "HARDWARE_MARKERS",
    "PLUGIN_MARKER",
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
    "bind",
    "compile_request",
    "copy_tiles_kernel",
    "custom_calls",
    "damage",
    "decode_jaxlib_call",
    "dialect_for",
    "distinct_kernels",
    "exported_symbols",
    "failing_writes",
    "fake_entry_point",
    "half_write_kernel",
    "has_platform",
    "installed_plugins",
    "jt_fake_entry_points",
    "jt_hook_recorder",
    "jt_plugin_manager",
    "jt_register_plugin",
    "load_tile",
    "make_registry",
    "out_first_kernel",
    "output_operand_aliases",
    "read_tile_kernel",
    "record_lowerings",
    "run_job",
    "run_on_cpu_client",
    "run_threads",
    "sample_add_kernel",
    "sample_call",
    "scale_inplace_kernel",
    "target_of",
    "using_plugins",
]

HARDWARE_MARKERS = ("cuda", "rocm", "gpu")
#: The marker that names the jt plugins a test needs besides the one it tests.
PLUGIN_MARKER = "requires_plugin"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("jt")
    group.addoption(
        "--jt-require-gpu",
        action="store_true",
        default=False,
        help="fail, instead of skip, tests marked cuda/rocm/gpu when the hardware is absent",
    )


def installed_plugins() -> set[str]:
    """The names of the jt plugins installed here: the entry points of group ``jt`` (none is imported)."""
    return {entry_point.name for entry_point in discover_entry_points()}


def pytest_configure(config: pytest.Config) -> None:
    for name in HARDWARE_MARKERS:
        config.addinivalue_line(
            "markers", f"{name}: needs a {name} device (skipped without one unless --jt-require-gpu)"
        )
    config.addinivalue_line(
        "markers", f"{PLUGIN_MARKER}(name, ...): needs the jt plugins named (skipped where one is not installed)"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    wanted = [name for marker in item.iter_markers(PLUGIN_MARKER) for name in marker.args]
    if wanted:
        missing = sorted(set(wanted) - installed_plugins())
        if missing:
            pytest.skip(
                f"needs the jt plugins {missing}, which no installed distribution provides (entry-point group 'jt')"
            )
    for name in HARDWARE_MARKERS:
        if item.get_closest_marker(name) is None:
            continue
        if has_platform(name):
            continue
        message = f"needs a {name} device, and JAX sees none"
        if item.config.getoption("--jt-require-gpu"):
            pytest.fail(f"{message} (--jt-require-gpu is set)", pytrace=False)
        pytest.skip(message)


# -- fixtures ------------------------------------------------------------------------------------------------


def make_registry(
    entry_points: Sequence[EntryPointInfo] | None = None, environ: Mapping[str, str] | None = None
) -> Registry:
    """A registry over a fresh plugin loader (``entry_points=None``: the installed ones)."""
    return Registry(PluginLoader(entry_points=entry_points, environ=environ))


@contextlib.contextmanager
def using_plugins(
    *entry_points: EntryPointInfo, environ: Mapping[str, str] | None = None, installed: bool = True
) -> Iterator[Registry]:
    """Makes jt use a fresh set of plugins while the block runs: the installed ones (unless ``installed=False``)
    and ``entry_points`` (made with :func:`fake_entry_point`), loaded at the first call as jt loads its plugins,
    with ``environ`` in place of the process's ``JT_*PLUGINS`` and ``JT_LAUNCHER_*`` variables. The previous set is
    back when the block ends.

    Args:
        entry_points: The plugins to add, as entry points.
        environ: The variables the loader reads (none by default: every plugin loads).
        installed: Whether the installed plugins are loaded too (jt-core's built-ins always are).

    Yields:
        The registry in use (``registry.list_plugins()`` lists its plugins, as ``jt.list_plugins()`` does).
    """
    eps = [*discover_entry_points(), *entry_points] if installed else list(entry_points)
    registry = make_registry(eps, environ if environ is not None else {})
    previous = registries.set_registry(registry)
    try:
        yield registry
    finally:
        registries.set_registry(previous)


def dialect_for(kernel: Any) -> Dialect:
    """The dialect jt's plugins in use choose for ``kernel`` (the first that claims it), as a call of it is bound."""
    return registries.get_registry().dialect_for(unwrap_kernel(kernel).fn)


@pytest.fixture
def jt_plugin_manager() -> Iterator[Registry]:
    """A fresh registry over the installed entry points, installed as the process-wide one."""
    registry = make_registry()
    previous = registries.set_registry(registry)
    try:
        yield registry
    finally:
        registries.set_registry(previous)


def fake_entry_point(
    name: str,
    target: Any,
    distribution: str = "fake-dist",
    version: str = "0.0.0",
    first_load: BaseException | None = None,
    api_version: int | None = PLUGIN_API_VERSION,
) -> EntryPointInfo:
    """An entry point whose ``load()`` returns ``target``, or raises it when it is an exception instance.

    A ``target`` that declares no plugin API version (``JT_PLUGIN_API``) is given ``api_version``, the current one
    by default; ``None`` leaves it without.

    Args:
        name: The entry-point (plugin) name.
        target: The plugin module or object, or the exception its import raises.
        distribution: The distribution that declares it.
        version: That distribution's version.
        first_load: Raised by the first ``load()`` only, later ones go on as above: an import interrupted once
            (``KeyboardInterrupt()``), then retried.
    """
    pending = [first_load] if first_load is not None else []
    if api_version is not None and not isinstance(target, BaseException) and not hasattr(target, "JT_PLUGIN_API"):
        target.JT_PLUGIN_API = api_version

    def load() -> Any:
        if pending:
            raise pending.pop()
        if isinstance(target, BaseException):
            raise target
        return target

    return EntryPointInfo(name=name, value=f"{name}:fake", distribution=distribution, version=version, load=load)


@pytest.fixture
def jt_fake_entry_points() -> Iterator[Callable[..., Registry]]:
    """A factory: ``make(entry_points, environ=None, include_installed=False)`` -> an installed fresh registry.

    Each entry point is an :class:`~jt_core.plugin.loader.EntryPointInfo` (see :func:`fake_entry_point`).
    """
    previous = registries.set_registry(None)

    def make(
        entry_points: Sequence[EntryPointInfo],
        environ: Mapping[str, str] | None = None,
        include_installed: bool = False,
    ) -> Registry:
        eps = list(entry_points)
        if include_installed:
            eps = discover_entry_points() + eps
        registry = make_registry(eps, environ if environ is not None else {})
        registries.set_registry(registry)
        return registry

    try:
        yield make
    finally:
        registries.set_registry(previous)


@pytest.fixture
def jt_register_plugin(jt_fake_entry_points: Callable[..., Registry]) -> Callable[..., Registry]:
    """``register(plugin, name="test-plugin")``: a fresh registry with the installed plugins plus ``plugin``."""

    def register(plugin: Any, name: str = "test-plugin", environ: Mapping[str, str] | None = None) -> Registry:
        return jt_fake_entry_points(
            [fake_entry_point(name, plugin, distribution=f"{name}-dist")], environ=environ, include_installed=True
        )

    return register


class HookRecorder:
    """Records every hook call made through a registry's plugins: ``calls`` holds ``(hook name, kwargs)`` pairs."""

    def __init__(self, registry: Registry) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self._undo = registry.loader.pm.add_hookcall_monitoring(self._before, lambda *a: None)

    def _before(self, hook_name: str, hook_impls: Any, kwargs: Mapping[str, Any]) -> None:
        self.calls.append((hook_name, dict(kwargs)))

    def names(self) -> list[str]:
        """The hook names called, in order."""
        return [name for name, _ in self.calls]

    def close(self) -> None:
        """Stops recording."""
        self._undo()


@pytest.fixture
def jt_hook_recorder() -> Iterator[HookRecorder]:
    """Records the hook calls of a fresh process-wide registry for the duration of a test."""
    registry = make_registry()
    previous = registries.set_registry(registry)
    recorder = HookRecorder(registry)
    try:
        yield recorder
    finally:
        recorder.close()
        registries.set_registry(previous)


# -- sample kernels and calls --------------------------------------------------------------------------------


def distinct_kernels(folder: pathlib.Path, tag: str, count: int) -> list[Any]:
    """``count`` elementwise kernels ``(x_ptr, n, out_ptr, BLOCK)`` whose sources differ from each other's and from
    those of every earlier call, in this process or any other (kernel ``i`` computes ``x * (i + 2) + 1``; a random
    token in each body keeps Triton's own on-disk cache from serving a compile), so that every compile is a first
    one; written to a module in ``folder`` (Triton reads a kernel's source from its file) and imported. ``tag``
    keeps the module and kernel names apart."""
    token = uuid.uuid4().hex
    lines = ["import triton", "import triton.language as tl", ""]
    for i in range(count):
        lines += [
            "@triton.jit",
            f"def scale_{tag}_{i}(x_ptr, n, out_ptr, BLOCK: tl.constexpr):",
            f"    # variant {token}",
            "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
            "    mask = offsets < n",
            f"    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * {i + 2} + 1, mask=mask)",
            "",
        ]
    path = folder / f"jt_distinct_kernels_{tag}.py"
    path.write_text("\n".join(lines))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return [getattr(module, f"scale_{tag}_{i}") for i in range(count)]


def run_threads(work: Callable[[int], None], count: int) -> list[str]:
    """Runs ``work(i)`` for ``i`` in ``range(count)``, each on its own thread, all released at once; returns the
    failures as ``"thread i: Type: message"``."""
    barrier = threading.Barrier(count)
    failures: list[str] = []

    def target(i: int) -> None:
        barrier.wait()
        try:
            work(i)
        except Exception as exc:
            failures.append(f"thread {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


@dataclasses.dataclass(frozen=True)
class JobProcess:
    """How one process of a job started by :func:`run_job` ended.

    Attributes:
        index: The process's index in the job.
        returncode: Its exit status.
        output: What it wrote to stdout and stderr.
    """

    index: int
    returncode: int
    output: str


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_job(
    args: Sequence[str],
    processes: int = 2,
    platform: str = "cpu",
    devices: int = 2,
    env: Mapping[str, str] | None = None,
    per_process: Sequence[Mapping[str, str]] = (),
    timeout: float = 150,
    cwd: str | os.PathLike[str] | None = None,
) -> list[JobProcess]:
    """Runs ``python *args`` as the processes of one ``jax.distributed`` job on this machine and waits for them.

    Each process finds its part in ``COORDINATOR`` (``host:port`` of process 0), ``NUM_PROCESSES`` and ``PROCESS_ID``,
    to pass to ``jax.distributed.initialize``. On the CPU (``platform="cpu"``) each process gets ``devices`` CPU
    devices (``XLA_FLAGS``) and JAX on the CPU only; the program should use gloo collectives
    (``jax.config.update("jax_cpu_collectives_implementation", "gloo")``). On a GPU platform each process should
    take one device (``local_device_ids=[PROCESS_ID]``), and GPU memory is not preallocated.

    Args:
        args: The script and its arguments.
        processes: How many processes the job has.
        platform: ``"cpu"`` or a GPU platform.
        devices: CPU devices per process.
        env: Variables for every process (on top of this process's environment).
        per_process: Variables for each process, by index.
        timeout: Seconds the whole job may take: then every process is killed and the test fails, with each
            process's output, so a hang never blocks the run.
        cwd: The working folder.

    Returns:
        Each process's exit status and output.
    """
    port = _free_port()
    with contextlib.ExitStack() as stack:
        started = []
        for index in range(processes):
            process_env = {
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                **(env or {}),
                **(per_process[index] if index < len(per_process) else {}),
                "COORDINATOR": f"127.0.0.1:{port}",
                "NUM_PROCESSES": str(processes),
                "PROCESS_ID": str(index),
            }
            if platform == "cpu":
                process_env["JAX_PLATFORMS"] = "cpu"
                flags = process_env.get("XLA_FLAGS", "")
                process_env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices}".strip()
            else:
                process_env["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
            log = stack.enter_context(tempfile.TemporaryFile(mode="w+"))
            command = [sys.executable, *args]
            process = subprocess.Popen(
                command, cwd=cwd, env=process_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            started.append((process, log))
        deadline = time.monotonic() + timeout
        overran = False
        for process, _ in started:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                overran = True
        finished = []
        for index, (process, log) in enumerate(started):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            log.seek(0)
            finished.append(JobProcess(index, process.returncode, log.read()))
    if overran:
        outputs = "\n".join(f"--- process {p.index}:\n{p.output[-6000:]}" for p in finished)
        pytest.fail(f"the job did not finish in {timeout} s (a hang?); every process was killed\n{outputs}")
    return finished


#: The names of C and C++ compilers: plain, with a version (``g++-12``) or a target (``x86_64-linux-gnu-g++``).
_COMPILER = re.compile(
    r"^(?:[\w.]+(?:-[\w.]+)*-)?(?:cc|c\+\+|cpp|gcc|g\+\+|clang|clang\+\+|c89|c99|tcc|icx|icpx|nvcc|hipcc)(?:-[\d.]+)?$"
)


def no_compiler_path(folder: str | os.PathLike[str], path: str | None = None) -> str:
    """A ``PATH`` on which no C or C++ compiler is found, for tests and benchmarks of a machine that has none:
    ``folder`` (created, emptied) filled with links to every command on ``path`` (default: this process's
    ``PATH``) except the compilers (``cc``, ``c++``, ``gcc``, ``g++``, ``clang++``, ... also with a version or a
    target in their names). Leave ``CXX`` and ``CC`` unset beside it.

    Returns:
        ``folder``, as a ``PATH`` value.
    """
    target = pathlib.Path(folder)
    if target.exists():
        for entry in target.iterdir():
            entry.unlink()
    target.mkdir(parents=True, exist_ok=True)
    for directory in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        try:
            commands = sorted(pathlib.Path(directory).iterdir()) if directory else []
        except OSError:
            continue
        for command in commands:
            link = target / command.name
            if _COMPILER.match(command.name) or link.exists() or link.is_symlink():
                continue
            if command.is_file() and os.access(command, os.X_OK):
                link.symlink_to(command)
    return str(target)


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
    ``target``, by default the one :func:`target_of` gives without a device)."""
    chosen = target if target is not None else target_of(backend, call)
    return CompileRequest.for_config(call, call.configs[0], chosen, backend)


#: The lowerings :func:`custom_calls` walked last. An MLIR operation is freed with the lowering that owns it, and
#: reading a freed one crashes the process; tests read the operations right after the call, often with the lowering
#: as a temporary (``custom_calls(jax.jit(f).lower(...))``), so the most recent ones are kept alive here.
_recent_lowerings: collections.deque[Any] = collections.deque(maxlen=256)


def custom_calls(lowered: Any, target: str | None = None) -> list[Any]:
    """The ``stablehlo.custom_call`` operations of a lowered module (optionally only those calling ``target``).

    The operations stay valid while ``lowered`` lives; the last 256 lowerings passed here are kept alive, so a
    temporary lowering is safe to inspect in the test that made it.

    Args:
        lowered: What ``jax.jit(f).trace(...).lower(...)`` returns.
        target: A custom-call target name to keep, or ``None`` for all.
    """
    _recent_lowerings.append(lowered)
    module = lowered.compiler_ir("stablehlo")
    found: list[Any] = []

    def visit(operation: Any) -> None:
        if operation.name == "stablehlo.custom_call":
            name = str(operation.attributes["call_target_name"]).strip('"')
            if target is None or name == target:
                found.append(operation)
        for region in operation.regions:
            for block in region.blocks:
                for inner in block.operations:
                    visit(inner.operation)

    visit(module.operation)
    return found


# -- cache faults --------------------------------------------------------------------------------------------

#: The faults every file jt keeps must survive: its bytes changed (same size), cut short, a folder in its place, a
#: full disk and a read-only folder (the last two for files not written yet).
CACHE_FAULTS = ("corrupt", "truncate", "folder", "full-disk", "read-only")


def damage(path: pathlib.Path, fault: str) -> None:
    """Damages the existing file ``path``: ``"corrupt"`` flips bytes in its middle, ``"truncate"`` keeps its first
    half, ``"folder"`` replaces it by a folder that is not empty."""
    data = path.read_bytes()
    if fault == "corrupt":
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes(b ^ 0xA5 for b in data[middle : middle + 8]) + data[middle + 8 :])
    elif fault == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif fault == "folder":
        path.unlink()
        path.mkdir()
        (path / "left-here").write_bytes(b"not jt's")
    else:
        raise ValueError(f"unknown fault {fault!r}; damage() takes 'corrupt', 'truncate' or 'folder'")


@contextlib.contextmanager
def failing_writes(folder: pathlib.Path, error: int) -> Iterator[None]:
    """Makes every change of the file system under ``folder`` fail, in this process, with ``error`` (``errno.ENOSPC``:
    a full disk, where only creating files and folders fails; ``errno.EROFS``: a read-only folder, where every change
    fails), the way the kernel would. Reads are untouched.

    The operating system's calls are replaced in ``os`` and ``io`` (what ``open``, ``pathlib`` and ``tempfile`` use),
    so a test exercises the very path a real fault takes, even as root (whom permission bits do not stop).
    """
    import builtins
    import io
    import os

    root = os.path.realpath(folder)

    def inside(path: Any) -> bool:
        if isinstance(path, int):
            return False
        try:
            resolved = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return resolved == root or resolved.startswith(root + os.sep)

    def refuse(path: Any) -> OSError:
        return OSError(error, os.strerror(error), os.fsdecode(path))

    changes = ("open", "mkdir", "replace", "rename", "unlink", "rmdir", "utime", "chmod", "link", "symlink")
    real = {name: getattr(os, name) for name in changes}
    real_open = builtins.open
    creates = os.O_CREAT | os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND

    def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if inside(path) and flags & creates and (error != errno.ENOSPC or not os.path.exists(path)):
            raise refuse(path)
        return real["open"](path, flags, *args, **kwargs)

    def fake_mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        if inside(path) and not os.path.exists(path):
            raise refuse(path)
        real["mkdir"](path, *args, **kwargs)

    def changing(name: str) -> Callable[..., Any]:
        def call(path: Any, *args: Any, **kwargs: Any) -> Any:
            targets = [path, *args[:1]] if name in ("replace", "rename", "link", "symlink") else [path]
            if error != errno.ENOSPC and any(inside(p) for p in targets if not isinstance(p, (dict, tuple))):
                raise refuse(path)
            return real[name](path, *args, **kwargs)

        return call

    def fake_builtin_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if inside(file) and any(c in mode for c in "wax+") and (error != errno.ENOSPC or not os.path.exists(file)):
            raise refuse(file)
        return real_open(file, mode, *args, **kwargs)

    patches: dict[str, Callable[..., Any]] = {"open": fake_open, "mkdir": fake_mkdir}
    patches |= {name: changing(name) for name in real if name not in patches}
    try:
        for name, fake in patches.items():
            setattr(os, name, fake)
        builtins.open = io.open = fake_builtin_open  # type: ignore[assignment]
        yield
    finally:
        for name, original in real.items():
            setattr(os, name, original)
        builtins.open = io.open = real_open  # type: ignore[assignment]


# -- conformance suites --------------------------------------------------------------------------------------


class BackendConformance:
    """Subclass and provide a ``backend`` fixture (and set ``compute_capability`` where the target needs one).

    The suite checks the ABC contract (none of the class attributes the contract's questions replaced is set, and
    the checks jt makes when a plugin registers the backend pass:
    :func:`~jt_core.plugin.validation.contract_problems`), that a target can be made without a device when told the
    architecture, and that the sample kernel compiles to a :class:`~jt_core.plugin.CompiledKernel`.
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
        registry = registries.get_registry().ensure_loaded()
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
