"""No fault in jt's cache fails a call: every kind of file jt keeps, corrupt, truncated, replaced by a folder, on a
full disk or in a read-only folder. A bad file is made again; a folder that cannot take a file leaves the work
uncached, with one warning naming the folder."""

from __future__ import annotations

import ctypes
import errno
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jt_core as jt
from jt_core import batching, cache, files, native, tuning
from jt_core.call import CallOptions
from jt_core.gpu import xla
from jt_core.plugin.roles import Backend, CompileRequest
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.testing import CACHE_FAULTS, damage, failing_writes
from jt_core.testing._calls import bind, compile_request, sample_call

sys.path.insert(0, str(Path(__file__).parent))
import core_kernels as k

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "jt-cache"
    monkeypatch.setenv("JT_CACHE_DIR", str(root))
    monkeypatch.delenv("JT_DISABLE_CACHE", raising=False)
    monkeypatch.setattr(files, "_faults", set(), raising=False)  # each test starts with no fault reported yet
    cache.clear_memory()
    return root


# -- the kinds of files ----------------------------------------------------------------------------------------


class Kind:
    """One kind of file jt keeps: ``prepare`` writes it, ``run`` does the work it saves through jt's own path and
    checks the result against an independent reference, ``builds`` counts the work done (not found in the cache)."""

    purpose: str

    def __init__(self, rng: np.random.Generator, tmp_path: Path) -> None:
        self.rng = rng
        self.tmp_path = tmp_path
        self.builds = 0

    def prepare(self) -> None:
        self.run()

    def run(self) -> None:
        raise NotImplementedError

    def entry(self) -> Path:
        """The file the first run wrote."""
        found = [p for p in files.cache_folder(self.purpose).iterdir() if self.is_entry(p)]
        assert len(found) == 1, found
        return found[0]

    def is_entry(self, path: Path) -> bool:
        return not path.name.startswith(".")

    def reuses(self) -> bool:
        """Whether a run now finds its work in the cache."""
        before = self.builds
        self.run()
        return self.builds == before


class FakeGpuBackend(Backend):
    """A backend whose kernels the disk cache keeps; its compile makes a binary of random bytes (the reference) and
    counts itself."""

    platform = "fake-gpu"

    def may_keep_on_disk(self, request: CompileRequest) -> bool:
        return True

    def __init__(self, kind: KernelKind) -> None:
        self.kind = kind

    def target(self) -> Target:
        return Target("fake-gpu", 90, 32)

    def compile(self, request: CompileRequest) -> CompiledKernel:
        self.kind.builds += 1
        return CompiledKernel(
            name=request.call.name,
            target=request.target,
            binary=self.kind.binary,
            asm={"ttir": "module {}"},
            metadata={"shared": 0},
            num_warps=request.options.num_warps,
            shared_mem=0,
            cluster_dims=(1, 1, 1),
        )


class KernelKind(Kind):
    purpose = "kernels"

    def __init__(self, rng: np.random.Generator, tmp_path: Path) -> None:
        super().__init__(rng, tmp_path)
        self.binary = rng.bytes(4096)
        backend = FakeGpuBackend(self)
        call = sample_call(BLOCK=int(rng.choice([16, 32, 64])))
        self.request = compile_request(backend, call)

    def run(self) -> None:
        assert cache.compile_cached(self.request).binary == self.binary

    def is_entry(self, path: Path) -> bool:
        return path.suffix == ".jtk"


class AutotuneKind(Kind):
    """The winner of an autotuned call's trials: each run tunes (real kernel runs on the CPU) or recalls it."""

    purpose = "autotune"

    def __init__(self, rng: np.random.Generator, tmp_path: Path) -> None:
        super().__init__(rng, tmp_path)
        self.x = rng.standard_normal(100).astype(np.float32)
        spec = jax.ShapeDtypeStruct((100,), jnp.float32)
        options = CallOptions(out_spec=spec, grid=lambda meta: (jt.cdiv(100, meta["BLOCK"]),))
        self.call = bind(k.autotuned_scale_kernel, (spec,), {"n": 100}, options)

    def scaled(self, index: int) -> np.ndarray:
        block = self.call.configs[index].constexpr_dict["BLOCK"]
        out = jt.triton_call(jnp.asarray(self.x), kernel=k.autotuned_scale_kernel.fn, out_shape=self.x,
                             grid=jt.cdiv(100, block), n=100, BLOCK=block)  # fmt: skip
        return np.asarray(out)

    def run(self) -> None:
        before = tuning.tuning_stats["tunings"]

        def trial(index: int) -> float:
            started = time.perf_counter()
            np.testing.assert_allclose(self.scaled(index), self.x * 3, rtol=1e-6)
            return time.perf_counter() - started

        chosen = tuning.choose_config(self.call, "cpu-fault-test", trial)
        np.testing.assert_allclose(self.scaled(chosen), self.x * 3, rtol=1e-6)
        self.builds += tuning.tuning_stats["tunings"] - before


class VmapKind(Kind):
    """The generated batching wrapper: run from memory, its file written for reading; ``builds`` counts writes."""

    purpose = "vmap"

    def __init__(self, rng: np.random.Generator, tmp_path: Path) -> None:
        super().__init__(rng, tmp_path)
        self.x = rng.standard_normal((3, 32)).astype(np.float32)
        self.y = rng.standard_normal((3, 32)).astype(np.float32)

    def run(self) -> None:
        batching._wrappers.cache_clear()  # as in a new process: the wrapper is generated again

        def add(x: jax.Array, y: jax.Array) -> jax.Array:
            return jt.triton_call(x, y, 32, kernel=k.add_kernel, out_shape=x, grid=2, BLOCK=16)

        out = jax.vmap(add)(jnp.asarray(self.x), jnp.asarray(self.y))
        np.testing.assert_array_equal(np.asarray(out), self.x + self.y)


class NativeKind(Kind):
    """A small library built like jt's handlers; each run loads it and calls it."""

    purpose = "native"

    def __init__(self, rng: np.random.Generator, tmp_path: Path) -> None:
        super().__init__(rng, tmp_path)
        try:
            native.find_compiler()
        except native.NativeBuildError as exc:
            pytest.skip(f"builds a library, which takes a C++ compiler ({exc})")
        self.factor = int(rng.integers(2, 1000))
        source = tmp_path / "fault_probe.cc"
        source.write_text(f'extern "C" int jt_fault_probe(int x) {{ return x * {self.factor} + 1; }}\n')
        self.spec = native.LibrarySpec("jt_fault_probe", (source,))

    def prepare(self) -> None:
        # Built, not loaded: a library loaded into this process must not be changed on disk under it.
        assert self.spec.build().built

    def run(self) -> None:
        value = int(self.rng.integers(0, 1000))
        library = ctypes.CDLL(str(self.spec.build().path))  # as jt's launchers load their libraries
        assert library.jt_fault_probe(value) == value * self.factor + 1

    def is_entry(self, path: Path) -> bool:
        return path.name.startswith("libjt_fault_probe-") and path.suffix == ".so"


class XlaKind(Kind):
    """The record of whether XLA compiled a kernel's IR (here rejected: the CPU has no Triton call)."""

    purpose = "xla"

    def __init__(self, rng: np.random.Generator, tmp_path: Path) -> None:
        super().__init__(rng, tmp_path)
        self.call = sample_call()
        self.kernel = xla.XlaKernel("fault_probe", rng.bytes(64), 4, 3, (2, 1, 1), False, (), ())

    def run(self) -> None:
        reason = xla._probe(self.call, self.kernel, jax.devices("cpu")[0])
        assert reason is not None and reason.startswith("XLA could not compile the kernel's IR")


KINDS: dict[str, type[Kind]] = {
    "kernels": KernelKind,
    "autotune": AutotuneKind,
    "vmap": VmapKind,
    "native": NativeKind,
    "xla": XlaKind,
}


@pytest.fixture
def make_kind(cache_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Kind]]:
    made: list[Kind] = []

    def make(name: str) -> Kind:
        kind = KINDS[name](np.random.default_rng(), tmp_path)
        made.append(kind)
        return kind

    def counter(cls: type[Kind], real: Callable[..., Any], counts: Callable[..., bool]) -> Callable[..., Any]:
        def counting(*args: Any, **kwargs: Any) -> Any:
            if counts(*args, **kwargs):
                for kind in made:
                    if isinstance(kind, cls):
                        kind.builds += 1
            return real(*args, **kwargs)

        return counting

    # The work each kind saves, counted where it happens: writes of the vmap file, runs of the compiler, XLA
    # compiles of the probe.
    monkeypatch.setattr(
        files, "atomic_write", counter(VmapKind, files.atomic_write, lambda path, data: path.parent.name == "vmap")
    )
    monkeypatch.setattr(
        subprocess, "run", counter(NativeKind, subprocess.run, lambda command, **_: "-shared" in command)
    )
    probe = xla._probe_primitive()
    monkeypatch.setattr(probe, "bind", counter(XlaKind, probe.bind, lambda *a, **k: True))
    yield make


def _messages(caught: list[warnings.WarningMessage], text: str) -> list[str]:
    return [str(w.message) for w in caught if text in str(w.message)]


# -- the faults ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["corrupt", "truncate"])
@pytest.mark.parametrize("name", KINDS)
def test_a_damaged_file_is_made_again_and_the_call_is_right(make_kind: Callable[[str], Kind], name: str,
                                                            fault: str) -> None:  # fmt: skip
    kind = make_kind(name)
    kind.prepare()
    damage(kind.entry(), fault)
    before = kind.builds
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kind.run()
    assert kind.builds == before + 1
    assert kind.reuses(), "the file made again is found by the next run"
    if name != "vmap":  # the vmap file is only for reading: replacing it changes nothing, so nothing to report
        assert len(_messages(caught, "is unusable")) == 1, [str(w.message) for w in caught]


@pytest.mark.parametrize("name", KINDS)
def test_a_folder_where_a_file_should_be_leaves_the_work_uncached(make_kind: Callable[[str], Kind],
                                                                  name: str) -> None:  # fmt: skip
    kind = make_kind(name)
    kind.prepare()
    entry = kind.entry()
    damage(entry, "folder")
    before = kind.builds
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kind.run()
        kind.run()
    assert kind.builds == before + 2
    reported = _messages(caught, "cannot write to the folder")
    assert len(reported) == 1 and str(entry.parent) in reported[0], [str(w.message) for w in caught]
    assert "a folder is where a file should be" in reported[0]
    assert (entry / "left-here").read_bytes() == b"not jt's"  # what jt did not write is left alone


def test_an_empty_folder_where_a_file_should_be_is_replaced(make_kind: Callable[[str], Kind]) -> None:
    kind = make_kind("kernels")
    kind.prepare()
    entry = kind.entry()
    entry.unlink()
    entry.mkdir()
    kind.run()
    assert entry.is_file() and kind.reuses()


@pytest.mark.parametrize("fault", ["full-disk", "read-only"])
@pytest.mark.parametrize("name", KINDS)
def test_a_folder_that_takes_no_file_leaves_the_work_uncached_with_one_warning(
    make_kind: Callable[[str], Kind], cache_root: Path, name: str, fault: str
) -> None:
    kind = make_kind(name)
    folder = files.cache_folder(kind.purpose)
    where, error = (cache_root, errno.ENOSPC) if fault == "full-disk" else (folder, errno.EROFS)
    before = kind.builds
    with warnings.catch_warnings(record=True) as caught, failing_writes(where, error):
        warnings.simplefilter("always")
        kind.run()
        kind.run()
    assert kind.builds == before + 2
    reported = _messages(caught, "cannot write to the folder")
    assert len(reported) == 1 and str(folder) in reported[0], [str(w.message) for w in caught]
    assert not [p for p in folder.iterdir() if kind.is_entry(p)]


def test_the_fault_matrix_covers_every_kind_of_file_jt_keeps() -> None:
    """Triton's own folder holds Triton's files (tested with Triton's compiles, in jt-cuda); rocm-hsaco files are
    tested in jt-rocm; the plugins folder's fault records (which save no work) in test_plugin_faults; the cpu
    folder's record of the kernels handed to the interpreter (which saves no work either) in test_cpu_compiled."""
    assert set(KINDS) | {"triton", "rocm-hsaco", "plugins", "cpu"} == set(files.PURPOSES)
    assert set(CACHE_FAULTS) == {"corrupt", "truncate", "folder", "full-disk", "read-only"}
