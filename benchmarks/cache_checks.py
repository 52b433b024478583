"""What the cache's integrity checks cost on a warm hit, on the CPU host (no GPU needed).

Each figure is the median of many repetitions, in microseconds:

* ``kernel, memory hit``: a kernel variant found in the process's memory (no file touched);
* ``kernel, disk hit``: a compiled sm90 kernel read back from ``kernels/`` (read, SHA-256 check, decode), and the
  SHA-256 check alone;
* ``autotune record``: a remembered winner read and checked;
* ``native library``: the check before ``dlopen`` (size, then SHA-256 of the whole file), once per process and
  library;
* ``rocm HSACO``: a lowering's look at the HSACO file already in place (read and compare);
* ``Triton file``: one file of Triton's own cache in jt's folder, checked before Triton reads it.

Usage: ``python benchmarks/cache_checks.py`` (prints a Markdown table).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable


def median_us(work: Callable[[], object], repeat: int = 200) -> float:
    work()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    os.environ["JT_CACHE_DIR"] = tempfile.mkdtemp(prefix="jt-bench-")
    os.environ.pop("JT_DISABLE_CACHE", None)
    import jax
    import jax.numpy as jnp

    from jt_core import cache, files, integrity, tuning
    from jt_core.call import CallOptions
    from jt_core.cpu import ffi_launcher
    from jt_core.testing import sample_add_kernel
    from jt_core.testing._calls import bind, compile_request
    from jt_core.triton_dialect import TritonDialect
    from jt_cuda.backend import CudaBackend

    rows = []
    spec = jax.ShapeDtypeStruct((4096,), jnp.float32)
    call = bind(sample_add_kernel, (spec, spec), {"n": 4096, "BLOCK": 256}, CallOptions(spec, grid=16,
                compute_capability=90))  # fmt: skip
    backend = CudaBackend()
    request = compile_request(backend, call, backend.target(call, None), TritonDialect())
    compiled = cache.compile_cached(request)
    key = cache.compile_key(request)
    (entry,) = files.cache_folder("kernels").glob("*.jtk")
    data = entry.read_bytes()
    memo_key = ("bench",)
    cache.memoized(sample_add_kernel, memo_key, lambda: compiled)
    rows.append(("kernel, memory hit", median_us(lambda: cache.memoized(sample_add_kernel, memo_key, lambda: None)),
                 ""))  # fmt: skip
    rows.append(("kernel, disk hit (read, check, decode)", median_us(lambda: cache.load(key)), f"{len(data)} B"))
    rows.append(("kernel, SHA-256 check alone", median_us(lambda: hashlib.sha256(data[36:]).digest()),
                 f"{len(data)} B"))  # fmt: skip

    tuning_key = "0" * 64
    tuning.save_choice(tuning_key, 1, "BLOCK=64", [1e-3, 5e-4, 7e-4])
    rows.append(("autotune record (read, check)", median_us(lambda: tuning.load_choice(tuning_key, 3)), ""))

    library = ffi_launcher.library_spec().build().path
    rows.append(("native library check before dlopen", median_us(lambda: integrity.integrity_problem(library), 50),
                 f"{library.stat().st_size} B, once per process"))  # fmt: skip

    try:
        from jt_rocm.launchers import store_hsaco
    except ImportError:
        store_hsaco = None
    if store_hsaco is not None:
        hsaco = os.urandom(16384)
        store_hsaco("bench", hsaco)
        rows.append(("rocm HSACO already in place (read, compare)", median_us(lambda: store_hsaco("bench", hsaco)),
                     f"{len(hsaco)} B"))  # fmt: skip

    triton_file = files.cache_folder("triton") / "KEY" / "kernel.cubin"
    triton_file.parent.mkdir()
    triton_file.write_bytes(compiled.binary)
    integrity.record_integrity(triton_file)
    rows.append(("Triton file in jt's folder (check)", median_us(lambda: integrity.integrity_problem(triton_file)),
                 f"{len(compiled.binary)} B"))  # fmt: skip

    print("| lookup | µs (median) | size |")
    print("|---|---|---|")
    for name, micros, size in rows:
        print(f"| {name} | {micros:.1f} | {size} |")


if __name__ == "__main__":
    main()
