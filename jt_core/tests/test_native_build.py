"""jt_core.native: building shared libraries at first use, cached per machine, safe under concurrency."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from jt_core.native import NativeBuildError, build_shared_library

pytestmark = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None, reason="no compiler")

SOURCE = 'extern "C" int jt_native_probe(int x) { return x * 3 + 1; }\n'


def test_builds_loads_and_caches(tmp_path: Path) -> None:
    source = tmp_path / "probe.cc"
    source.write_text(SOURCE)
    cache = tmp_path / "cache"
    first = build_shared_library("probe", [source], directory=cache)
    second = build_shared_library("probe", [source], directory=cache)
    assert first.built and not second.built and first.path == second.path
    assert ctypes.CDLL(str(first.path)).jt_native_probe(5) == 16
    # the library and its integrity record; no temporary files left behind (the lock file is hidden)
    visible = sorted(p.name for p in cache.iterdir() if not p.name.startswith("."))
    assert visible == [first.path.name, first.path.name + ".integrity.json"]
    assert not [p for p in cache.iterdir() if p.name.endswith(".tmp")]


def test_changed_source_gets_a_new_key(tmp_path: Path) -> None:
    source = tmp_path / "probe.cc"
    source.write_text(SOURCE)
    first = build_shared_library("probe", [source], directory=tmp_path / "cache")
    source.write_text(SOURCE.replace("* 3", "* 4"))
    second = build_shared_library("probe", [source], directory=tmp_path / "cache")
    assert first.key != second.key and second.built
    assert ctypes.CDLL(str(second.path)).jt_native_probe(5) == 21


def test_concurrent_processes_build_a_library_once_and_all_load_it(tmp_path: Path) -> None:
    """Three processes want the same library from an empty cache at once: one builds it, the others wait for it
    and load the result."""
    source = tmp_path / "probe.cc"
    source.write_text(SOURCE)
    cache = tmp_path / "cache"
    start = tmp_path / "start"
    script = textwrap.dedent(
        f"""
        import ctypes, os, time
        from jt_core.native import build_shared_library
        open({str(start)!r} + f".ready-{{os.getpid()}}", "w").close()
        while not os.path.exists({str(start)!r}):
            time.sleep(0.005)
        lib = build_shared_library("probe", [{str(source)!r}], directory={str(cache)!r})
        print(lib.path, lib.built, ctypes.CDLL(str(lib.path)).jt_native_probe(2))
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("start.ready-*"))) < len(procs):  # all stand at the start line
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a process did not start"
        time.sleep(0.01)
    start.touch()
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    outputs = [out.split() for out, _ in results]
    assert len({path for path, _, _ in outputs}) == 1 and {value for _, _, value in outputs} == {"7"}
    assert sorted(built for _, built, _ in outputs) == ["False", "False", "True"]
    assert sum(err.count("jt: building probe") for _, err in results) == 1
    assert len(list(cache.glob("*.so"))) == 1


def _rendezvous_compiler(tmp_path: Path, parties: int) -> Path:
    """A compiler that, before it compiles, notes its start and waits (at most 10 s) until ``parties`` compiles
    have started; it writes whether they all met into ``met`` files."""
    real = shutil.which("c++") or shutil.which("g++")
    compiler = tmp_path / "rendezvous-c++"
    compiler.write_text(
        f"""#!/bin/sh
if [ "$1" = "--version" ]; then exec {real} --version; fi
touch {tmp_path}/started.$$
i=0
while [ "$(ls {tmp_path} | grep -c '^started\\.')" -lt {parties} ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
ls {tmp_path} | grep -c '^started\\.' > {tmp_path}/met.$$
exec {real} "$@"
"""
    )
    compiler.chmod(0o755)
    return compiler


def _threads(*calls: Any) -> list[Any]:
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return [future.result() for future in [pool.submit(call) for call in calls]]


def test_threads_build_different_libraries_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two libraries wanted by two threads of one process compile side by side (``python -m jt_core build-native``
    builds every library that way), not one after the other."""
    monkeypatch.setenv("CXX", str(_rendezvous_compiler(tmp_path, 2)))
    sources = []
    for name, factor in (("probe_a", 3), ("probe_b", 5)):
        source = tmp_path / f"{name}.cc"
        source.write_text(SOURCE.replace("jt_native_probe", f"jt_{name}").replace("* 3", f"* {factor}"))
        sources.append((name, source))
    built = _threads(
        *[
            lambda n=name, s=source: build_shared_library(n, [s], directory=tmp_path / "cache")
            for name, source in sources
        ]
    )
    assert all(library.built for library in built)
    assert sorted(p.read_text().strip() for p in tmp_path.glob("met.*")) == ["2", "2"]
    assert ctypes.CDLL(str(built[1].path)).jt_probe_b(5) == 26


def test_threads_wanting_one_library_build_it_once(tmp_path: Path) -> None:
    source = tmp_path / "probe.cc"
    source.write_text(SOURCE)
    built = _threads(*[lambda: build_shared_library("probe", [source], directory=tmp_path / "cache")] * 4)
    assert sum(library.built for library in built) == 1 and len({library.path for library in built}) == 1


def test_compile_failure_shows_the_compiler_output(tmp_path: Path) -> None:
    source = tmp_path / "broken.cc"
    source.write_text("int broken( {\n")
    with pytest.raises(NativeBuildError, match=r"(?s)building native library .broken. failed.*broken\.cc:1:.*error"):
        build_shared_library("broken", [source], directory=tmp_path / "cache")


def test_missing_compiler_names_cxx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "probe.cc"
    source.write_text(SOURCE)
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(NativeBuildError, match=r"CXX='/nonexistent/c\+\+' does not name an executable compiler"):
        build_shared_library("probe", [source], directory=tmp_path / "cache")


def test_cache_dir_follows_jt_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from jt_core.native import cache_dir

    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path / "native"


def test_shared_headers_are_on_the_include_path_and_in_the_cache_key(tmp_path: Path) -> None:
    headers = tmp_path / "headers"
    headers.mkdir()
    header = headers / "jt_probe_common.h"
    header.write_text("inline int jt_probe_factor() { return 3; }\n")
    source = tmp_path / "probe.cc"
    source.write_text(
        '#include "jt_probe_common.h"\nextern "C" int jt_native_probe(int x) { return x * jt_probe_factor(); }\n'
    )

    def build() -> Any:
        return build_shared_library(
            "probe", [source], include_dirs=[str(headers)], headers=[header], directory=tmp_path / "cache"
        )

    first = build()
    assert ctypes.CDLL(str(first.path)).jt_native_probe(5) == 15
    header.write_text("inline int jt_probe_factor() { return 4; }\n")
    second = build()
    assert second.built and second.key != first.key
    assert ctypes.CDLL(str(second.path)).jt_native_probe(5) == 20


def test_jt_core_ships_the_launch_handler_headers() -> None:
    from jt_core.gpu.handler import headers, include_dir

    assert (include_dir() / "jt_launch_common.h").is_file()
    assert {path.name for path in headers()} == {
        "jt_launch_common.h",
        "jt_launch_record.h",
        "jt_launch_state.h",
        "jt_launch_tune.h",
    }


def test_launch_handler_registration_does_not_deadlock(monkeypatch: pytest.MonkeyPatch) -> None:
    """register() builds the handler capsules while holding its lock; the lock must allow that."""
    import threading

    import jax

    from jt_core.gpu.handler import LaunchHandlerLibrary

    calls: list[str] = []
    handler = LaunchHandlerLibrary("jt_fake_launch", Path("unused.cc"), "CUDA", "JT_FAKE_PRELOAD")

    class FakeLibrary:
        def __getattr__(self, name: str) -> object:
            return lambda *args: 0

    monkeypatch.setattr(handler, "_library", FakeLibrary())
    monkeypatch.setattr(jax.ffi, "pycapsule", lambda fn: fn)
    monkeypatch.setattr(jax.ffi, "register_ffi_type", lambda *a, **k: calls.append("type"))
    monkeypatch.setattr(jax.ffi, "register_ffi_target", lambda name, *a, **k: calls.append(name))
    done = threading.Event()
    thread = threading.Thread(target=lambda: (handler.register(), done.set()), daemon=True)
    thread.start()
    assert done.wait(10), "register() deadlocked"
    assert calls == ["type", "triton_kernel_call_jt_fake_launch", "triton_kernel_call_jt_fake_launch_preloaded"]


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    # The libraries the CLI builds and lists here are built on the machine, not those a platform wheel carries.
    full = {k: v for k, v in os.environ.items() if k != "JT_STRICT_PLUGINS"} | {"JT_PREBUILT_NATIVE": "0"} | env
    return subprocess.run([sys.executable, "-m", "jt_core", *args], capture_output=True, text=True, env=full)


def test_build_native_builds_every_library_and_plugins_says_so(tmp_path: Path) -> None:
    import json

    before = json.loads(_cli("plugins", "--json", JT_CACHE_DIR=str(tmp_path)).stdout)
    native = {
        label: details["native"]
        for entry in before
        for label, details in entry["provides"]["launcher_details"].items()
        if "native" in details
    }
    # jt-core's own (the CPU backend's call target), and those of the installed plugins' launchers
    assert "cpu:ffi" in native and native["cpu:ffi"]["library"] == "jt_cpu_interpreter_call"
    assert not any(status["built"] for status in native.values())
    built = _cli("build-native", JT_CACHE_DIR=str(tmp_path))
    assert built.returncode == 0, built.stderr
    for label, status in native.items():
        assert re.search(rf"^{re.escape(label)} +{status['library']} +built in [0-9.]+ s: ", built.stdout, re.M), built
    # the builds run side by side, so the command reports them itself rather than line by line on stderr
    assert "jt: building" not in built.stderr and "built side by side" in built.stdout
    after = json.loads(_cli("plugins", "--json", JT_CACHE_DIR=str(tmp_path)).stdout)
    built_now = [d["native"] for e in after for d in e["provides"]["launcher_details"].values() if "native" in d]
    assert len(built_now) == len(native) and all(str(status["path"]).startswith(str(tmp_path)) for status in built_now)
    listed = _cli("plugins", JT_CACHE_DIR=str(tmp_path)).stdout
    assert f"cpu:ffi          jt_cpu_interpreter_call  built: {tmp_path / 'native'}" in listed
    again = _cli("build-native", JT_CACHE_DIR=str(tmp_path))
    assert again.stdout.count("already built") == len(native) and "building" not in again.stderr


def test_without_a_compiler_plugins_says_what_happens(tmp_path: Path) -> None:
    listing = _cli("plugins", JT_CACHE_DIR=str(tmp_path), CXX="/nonexistent/c++").stdout
    assert "cpu:ffi" in listing and "cannot be built here: CXX='/nonexistent/c++' does not name" in listing
    assert "without it, the CPU backend runs kernels through JAX host callbacks" in listing
    failed = _cli("build-native", JT_CACHE_DIR=str(tmp_path), CXX="/nonexistent/c++")
    assert failed.returncode == 1 and "FAILED" in failed.stdout


_OVERLAP_SCRIPT = """
import json, sys, threading, time
sys.path.insert(0, sys.argv[1])
import jax, jax.numpy as jnp, numpy as np
import jt_core as jt
from jt_core import native
from jt_core.plugin import facade
from jt_core.lowering import compiling
import core_kernels as k

events = []
def timed(kind, function):
    def run(*args, **kwargs):
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            events.append([kind, threading.current_thread().name, started, time.perf_counter()])
    return run

native._compile = timed("build", native._compile)
facade.compile_kernel = timed("compile", facade.compile_kernel)
compiling.compile_all = timed("configurations", compiling.compile_all)
x = jnp.arange(100, dtype=jnp.float32)
out = jax.jit(lambda x: jt.triton_call(x, kernel=k.autotuned_scale_kernel, out_shape=x,
                                       grid=lambda m: ((100 + m["BLOCK"] - 1) // m["BLOCK"],), n=100))(x)
np.testing.assert_allclose(np.asarray(out), np.asarray(x) * 3)
print(json.dumps(events))
"""


def test_the_first_call_on_a_machine_compiles_while_the_native_library_builds(tmp_path: Path) -> None:
    import json
    import os

    environment = {k: v for k, v in os.environ.items() if k not in ("JT_STRICT_PLUGINS", "JT_LAUNCHER_CPU")}

    def first_call() -> list[tuple[str, str, float, float]]:
        result = subprocess.run(
            [sys.executable, "-c", _OVERLAP_SCRIPT, str(Path(__file__).parent)],
            capture_output=True,
            text=True,
            env={**environment, "JT_CACHE_DIR": str(tmp_path), "JT_PREBUILT_NATIVE": "0"},
            timeout=600,
        )
        assert result.returncode == 0, result.stderr
        return [tuple(event) for event in json.loads(result.stdout.splitlines()[-1])]

    events = first_call()
    builds = [event for event in events if event[0] == "build"]
    assert len(builds) == 1, events  # the CPU FFI handler, built by the launcher's selection
    _, _, build_start, build_end = builds[0]
    ahead = [event for event in events if event[0] == "configurations" and event[1].startswith("jt-compile-ahead")]
    assert len(ahead) == 1, events
    during = [event for event in events if event[0] == "compile" and event[2] < build_end and event[3] > build_start]
    assert len(during) >= 3, events  # every configuration compiled while the library was being built
    again = first_call()  # the library is built now: nothing is due, nothing compiles ahead
    assert not [event for event in again if event[0] == "build" or event[1].startswith("jt-compile-ahead")], again


def test_a_library_named_with_a_path_stays_in_its_folder(tmp_path: Path) -> None:
    """The name is a plugin's: ``../`` in it used to lead the library and its temporary file out of the folder."""
    source = tmp_path / "probe.cc"
    source.write_text(SOURCE)
    cache = tmp_path / "a" / "cache"
    built = build_shared_library("../../escaped probe", [source], directory=cache)
    assert built.path.parent == cache and built.path.name.startswith("lib______escaped_probe-")
    assert ctypes.CDLL(str(built.path)).jt_native_probe(2) == 7
    assert [p for p in tmp_path.rglob("*") if p.is_file() and cache not in p.parents] == [source]
