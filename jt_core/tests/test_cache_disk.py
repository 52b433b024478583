"""The disk cache of compiled kernels: keys, hits and misses, safety, eviction, the CLI."""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import stat
import struct
import subprocess
import sys
import textwrap
from typing import Any

import jax
import numpy as np
import pytest
import triton
import triton.language as tl

from jt_core import cache, tuning
from jt_core.call import CallOptions
from jt_core.plugin import facade
from jt_core.plugin.roles import Backend, CompileRequest
from jt_core.plugin.values import CompiledKernel, Target
from jt_core.testing import sample_add_kernel
from jt_core.testing._calls import bind, compile_request, sample_call

COMPILES: list[str] = []


class CountingBackend(Backend):
    """Compiles nothing real but records each compile, and lets the disk cache keep its kernels."""

    platform = "counting"
    tag = "tool-1"

    def may_keep_on_disk(self, request: CompileRequest) -> bool:
        return True

    def target(self, backend_arguments: Any) -> Target:
        return Target("counting", int(backend_arguments.get("compute_capability") or 90), 32)

    def cache_tag(self) -> str:
        return self.tag

    def compile(self, request: CompileRequest) -> CompiledKernel:
        COMPILES.append(request.call.name)
        return CompiledKernel(
            name=request.call.name,
            target=request.target,
            binary=os.urandom(64),
            asm={"ttir": "module {}", "cubin": b"\x7fELF"},
            metadata={"shared": 0, "tuple": [1, 2]},
            num_warps=request.options.num_warps,
            shared_mem=128,
            cluster_dims=(1, 1, 1),
        )


class SelectiveBackend(CountingBackend):
    """Lets the disk cache keep the kernels it compiles for sm90, not those for sm80."""

    def may_keep_on_disk(self, request: CompileRequest) -> bool:
        return request.target.arch == 90


class ForgetfulBackend(CountingBackend):
    """Leaves `Backend.may_keep_on_disk` at its default."""

    may_keep_on_disk = Backend.may_keep_on_disk


@pytest.fixture(autouse=True)
def private_cache(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    monkeypatch.setenv("JT_CACHE_DIR", str(tmp_path / "jtcache"))
    monkeypatch.delenv("JT_DISABLE_CACHE", raising=False)
    monkeypatch.delenv("JT_CACHE_MAX_BYTES", raising=False)
    cache.clear_memory()
    COMPILES.clear()
    return tmp_path / "jtcache"


def _compile(kernel: Any = None, backend: Backend | None = None, **meta: Any) -> CompiledKernel:
    backend = backend or CountingBackend()
    call = sample_call(kernel, compute_capability=meta.pop("cc", 90), **meta)
    request = compile_request(backend, call)
    return cache.compile_cached(request)


def test_a_backend_that_does_not_answer_keeps_nothing_on_disk(private_cache: pathlib.Path) -> None:
    _compile(backend=ForgetfulBackend())
    _compile(backend=ForgetfulBackend())
    assert COMPILES == ["sample_add_kernel", "sample_add_kernel"]
    assert cache.info()["kernels"] == 0


def test_a_backend_answers_for_each_request_whether_its_kernel_is_kept() -> None:
    for _ in range(2):
        _compile(backend=SelectiveBackend(), cc=90)
        _compile(backend=SelectiveBackend(), cc=80)
    assert COMPILES == ["sample_add_kernel"] * 3  # sm90 once, sm80 twice
    assert cache.info()["kernels"] == 1


def test_second_compile_is_a_disk_hit_with_identical_contents() -> None:
    first = _compile()
    second = _compile()
    assert COMPILES == ["sample_add_kernel"]
    assert second.binary == first.binary and second.asm == first.asm
    assert second.metadata == {"shared": 0, "tuple": [1, 2]} and second.cluster_dims == (1, 1, 1)
    assert second.target == first.target and second.shared_mem == 128


def test_change_of_constant_target_options_or_tool_misses() -> None:
    _compile()
    _compile(BLOCK=64)
    _compile(cc=80)
    tagged = CountingBackend()
    tagged.tag = "tool-2"
    _compile(backend=tagged)
    assert len(COMPILES) == 4
    _compile(BLOCK=64)
    assert len(COMPILES) == 4


def _float(bits: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", bits))[0])


def _float32(bits: int) -> np.float32:
    return np.frombuffer(struct.pack("<I", bits), np.float32)[0]


#: Pairs of values that Python or repr takes for one (``nan == nan`` is false, but every NaN prints ``nan``;
#: ``-0.0 == 0.0``; ``1 == 1.0 == True``), each of which compiles and runs otherwise.
OTHER_BITS = [
    (_float(0x7FF8000000000000), _float(0x7FF8000000000001)),
    (_float32(0x7FC00000), _float32(0x7FC00001)),
    (-0.0, 0.0),
    (1, True),
    (1, 1.0),
]
OTHER_BITS_IDS = ["nan-payloads", "float32-nan-payloads", "signed-zeros", "int-bool", "int-float"]


@triton.jit
def _scaled_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, FACTOR: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * FACTOR + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["scale"])
@triton.jit
def _tuned_scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale, mask=mask)


@pytest.mark.parametrize(("first", "second"), OTHER_BITS, ids=OTHER_BITS_IDS)
def test_constants_of_other_bits_are_other_entries(first: Any, second: Any) -> None:
    _compile(_scaled_add_kernel, FACTOR=first)
    _compile(_scaled_add_kernel, FACTOR=first)  # the same bits again: a hit
    assert len(COMPILES) == 1
    _compile(_scaled_add_kernel, FACTOR=second)
    assert len(COMPILES) == 2


@pytest.mark.parametrize(("first", "second"), OTHER_BITS, ids=OTHER_BITS_IDS)
def test_autotuning_keys_of_other_bits_are_other_problems(first: Any, second: Any) -> None:
    spec = jax.ShapeDtypeStruct((64,), np.float32)

    def key(scale: Any) -> str:
        grid = lambda meta: (triton.cdiv(64, meta["BLOCK"]),)  # noqa: E731
        call = bind(_tuned_scale_kernel, (spec,), {"n": 64, "scale": scale}, CallOptions(spec, grid=grid))
        return tuning.tuning_key(call, "test-device")

    assert key(first) == key(first) and key(first) != key(second)


HELPER_MODULE = """
import triton
import triton.language as tl


@triton.jit
def helper(x):
    return x * {factor}


@triton.jit
def kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, helper(tl.load(x_ptr + offsets, mask=mask)), mask=mask)
"""


def _load_module(path: pathlib.Path, name: str, factor: int) -> Any:
    import importlib.util

    path.write_text(HELPER_MODULE.format(factor=factor))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_change_in_a_called_helper_misses(tmp_path: pathlib.Path) -> None:
    a = _load_module(tmp_path / "mod_a.py", "mod_a", 2)
    again = _load_module(tmp_path / "mod_a.py", "mod_a_again", 2)
    elsewhere = _load_module(tmp_path / "mod_b.py", "mod_b", 2)
    _compile(a.kernel)
    _compile(again.kernel)
    assert len(COMPILES) == 1, "same source (kernel and helper) in the same file is the same entry"
    _compile(elsewhere.kernel)
    assert len(COMPILES) == 2, "the same source in another file is another entry: what is kept names the file"
    changed = _load_module(tmp_path / "mod_a.py", "mod_a_changed", 3)
    _compile(changed.kernel)
    assert len(COMPILES) == 3, "a different helper body is a different entry"


def test_change_of_kernel_source_misses() -> None:
    @triton.jit
    def other_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        tl.store(out_ptr + offsets, tl.load(y_ptr + offsets, mask=offsets < n), mask=offsets < n)

    _compile(sample_add_kernel)
    _compile(other_kernel)
    assert len(COMPILES) == 2


def test_disabled_cache_neither_reads_nor_writes(monkeypatch: pytest.MonkeyPatch, private_cache: pathlib.Path) -> None:
    monkeypatch.setenv("JT_DISABLE_CACHE", "1")
    _compile()
    _compile()
    assert len(COMPILES) == 2
    assert not list(private_cache.glob("kernels/*.jtk"))


def test_truncated_entry_is_detected_and_rebuilt(private_cache: pathlib.Path) -> None:
    _compile()
    (entry,) = list(private_cache.glob("kernels/*.jtk"))
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2])
    with pytest.warns(RuntimeWarning, match=r"unusable \(checksum mismatch"):
        rebuilt = _compile()
    assert len(COMPILES) == 2 and rebuilt.binary
    assert cache._decode(entry.read_bytes()).binary == rebuilt.binary


def test_flipped_byte_is_detected(private_cache: pathlib.Path) -> None:
    _compile()
    (entry,) = list(private_cache.glob("kernels/*.jtk"))
    data = bytearray(entry.read_bytes())
    data[-1] ^= 0xFF
    entry.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="checksum mismatch"):
        _compile()
    assert len(COMPILES) == 2


def test_entries_are_plain_data_not_pickles(private_cache: pathlib.Path) -> None:
    _compile()
    (entry,) = list(private_cache.glob("kernels/*.jtk"))
    data = entry.read_bytes()
    assert data[:4] == b"JTK1"
    head_len = int.from_bytes(data[36:44], "little")
    header = json.loads(data[44 : 44 + head_len])
    assert header["name"] == "sample_add_kernel"


def test_cache_directory_is_private(private_cache: pathlib.Path) -> None:
    _compile()
    assert stat.S_IMODE(private_cache.stat().st_mode) == 0o700


def test_least_recently_used_entries_are_evicted(monkeypatch: pytest.MonkeyPatch, private_cache: pathlib.Path) -> None:
    for block in (16, 32, 64):
        _compile(BLOCK=block)
    files = cache.entries()
    assert len(files) == 3
    size = files[0].stat().st_size
    for age, path in enumerate(files):
        os.utime(path, (1000 + age, 1000 + age))
    _compile(BLOCK=16)  # a hit refreshes the oldest entry
    monkeypatch.setenv("JT_CACHE_MAX_BYTES", str(2 * size + size // 2))
    assert cache.evict() == 1
    survivors = cache.entries()
    assert len(survivors) == 2
    assert not any(p.name == files[1].name for p in survivors), "the least recently used entry went first"


WRITER = textwrap.dedent(
    """
    import sys
    from jt_core import cache
    from jt_core.plugin.values import CompiledKernel, Target
    kernel = CompiledKernel(name="k", target=Target("counting", 90, 32), binary=bytes(range(256)) * 4096)
    for _ in range(int(sys.argv[1])):
        cache.store("5a" * 32, kernel)
        loaded = cache.load("5a" * 32)
        assert loaded is not None and loaded.binary == kernel.binary, "torn or corrupt entry observed"
    print("ok")
    """
)


def test_concurrent_writers_never_leave_a_torn_entry(private_cache: pathlib.Path) -> None:
    env = {**os.environ, "JT_CACHE_DIR": str(private_cache)}
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, "40"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()
        assert out.decode().strip() == "ok"
    assert not list((private_cache / "kernels").glob(".tmp-*")), "temporary files were left behind"


def test_builtin_compile_hook_uses_the_disk_cache() -> None:
    call = sample_call(compute_capability=90)
    backend = CountingBackend()
    request = compile_request(backend, call)
    facade.compile_kernel(request)
    cache.clear_memory()
    facade.compile_kernel(request)
    assert COMPILES == ["sample_add_kernel"]
    assert cache.stats()["disk_hits"] >= 1


def test_cli_info_and_clear(private_cache: pathlib.Path) -> None:
    _compile()
    env = {**os.environ, "JT_CACHE_DIR": str(private_cache)}
    info = json.loads(
        subprocess.run(
            [sys.executable, "-m", "jt_core", "cache", "info", "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert info["kernels"] == 1 and info["bytes"] > 0 and info["directory"] == str(private_cache)
    out = subprocess.run(
        [sys.executable, "-m", "jt_core", "cache", "clear"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert "removed 1 entries" in out
    assert cache.entries() == []


def test_threads_storing_and_listing_at_once_never_fail(private_cache: pathlib.Path) -> None:
    import concurrent.futures

    kernel = CompiledKernel(name="k", target=Target("counting", 90, 32), binary=os.urandom(1 << 16))

    def work(i: int) -> None:
        for j in range(20):
            cache.store(f"{i:032x}{j:032x}", kernel)  # keys are SHA-256 digests in hex
            cache.info()

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(work, range(4)))
    assert len(cache.entries()) == 80


def test_a_kernel_of_five_megabytes_of_source_compiles_quickly_into_a_small_entry(
    tmp_path: pathlib.Path, private_cache: pathlib.Path
) -> None:
    """Comments make a kernel's source long, not its program: neither the time to compile it for the CPU nor what
    the cache keeps grows with them (the entry holds the program, not the source)."""
    import importlib.util
    import time

    from jt_core.cpu.backend import CpuBackend

    padding = "".join(f"    # {'a comment line of the kernel ' * 35}{i}\n" for i in range(5000))
    path = tmp_path / "long_source.py"
    path.write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def long_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):\n"
        + padding
        + "    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    mask = offsets < n\n"
        "    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 3, mask=mask)\n"
    )
    assert path.stat().st_size > 5_000_000
    spec = importlib.util.spec_from_file_location("long_source", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    request = compile_request(CpuBackend(), sample_call(module.long_kernel))
    started = time.monotonic()
    compiled = cache.compile_cached(request)
    assert time.monotonic() - started < 20
    assert compiled.payload.program is not None  # the compiled path runs it
    (entry,) = cache.entries()
    assert entry.stat().st_size < 1_000_000 and b"a comment line" not in entry.read_bytes()
    assert cache.compile_cached(request).payload.program is not None  # read back


PRINTING_MODULE = """
import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets)
    tl.device_print("x", x)
    tl.store(out_ptr + offsets, x)
"""


def test_a_kernel_moved_to_another_file_is_told_where_it_now_is(tmp_path: pathlib.Path) -> None:
    """What the CPU backend keeps names source lines (why a call runs in the interpreter, where each operation
    is): the same source at another path is compiled afresh, never told the path it had in an earlier run."""
    from jax import export

    import jt_core as jt

    messages = []
    for folder in ("before", "after"):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "printing.py"
        path.write_text(PRINTING_MODULE)
        spec = importlib.util.spec_from_file_location(f"printing_{folder}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        cache.clear_memory()
        f = jax.jit(lambda x, k=module.kernel: jt.triton_call(x, kernel=k, out_shape=x, grid=1, BLOCK=16))
        with pytest.raises(jt.UnsupportedKernelError) as refused:
            export.export(f, platforms=["cpu"])(jax.ShapeDtypeStruct((16,), np.float32))
        messages.append(str(refused.value))
        assert f"{path}:10" in messages[-1], messages[-1]
    assert str(tmp_path / "before") not in messages[1]
