"""Helpers shared by the jt-rocm tests: binding calls without tracing, decoding jaxlib's kernel-call bytes."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from jt_core.call import CallOptions, KernelCall
from jt_core.gpu import jaxlib_call
from jt_core.testing import bind, sample_add_kernel


def bound_call(
    kernel: Any = sample_add_kernel,
    args: tuple[Any, ...] | None = None,
    meta: Mapping[str, Any] | None = None,
    out: Any = None,
    grid: Any = 2,
    backend_options: Mapping[str, Any] | None = None,
    **options: Any,
) -> KernelCall:
    """A bound call (defaults: the sample add kernel on 64 float32 elements)."""
    spec = jax.ShapeDtypeStruct((64,), np.float32)
    call_options = CallOptions(
        out if out is not None else spec, grid=grid, compile_options=options, backend_options=backend_options
    )
    return bind(
        kernel,
        args if args is not None else (spec, spec),
        dict(meta) if meta is not None else {"n": 64, "BLOCK": 32},
        call_options,
    )


def decode_fields(data: bytes) -> dict[int, list[Any]]:
    """A protobuf message as ``{field number: [raw values]}``: ints for varints, bytes for the rest."""
    return jaxlib_call.fields_by_number(data)


def decode_kernel_call(launch: bytes) -> dict[str, Any]:
    """A ``TritonKernelCall`` message, with field names from jaxlib's ``triton.proto``."""
    f = decode_fields(launch)
    k = decode_fields(f[1][0])
    params = []
    for raw in f.get(5, []):
        p = decode_fields(raw)
        ((number, (value,)),) = p.items()
        if number == 1:
            a = decode_fields(value)
            params.append(("array", a.get(1, [0])[0], a.get(2, [0])[0]))
        elif number == 7:
            params.append(("f32", struct.unpack("<f", value)[0]))
        elif number == 8:
            params.append(("f64", struct.unpack("<d", value)[0]))
        else:
            names = {2: "bool", 3: "i32", 4: "u32", 5: "i64", 6: "u64"}
            if names[number] in ("i32", "i64") and value >= 1 << 63:
                value -= 1 << 64
            params.append((names[number], value))
    return {
        "kernel_name": k[1][0].decode(),
        "num_warps": k.get(2, [0])[0],
        "shared_mem_bytes": k.get(3, [0])[0],
        "module": k[4][0].decode(),
        "num_ctas": k.get(10, [None])[0],
        "grid": tuple(f.get(i, [0])[0] for i in (2, 3, 4)),
        "parameters": params,
    }


def decode_opaque(opaque: bytes) -> dict[str, Any]:
    """The zlib-compressed ``TritonAnyKernelCall`` a lowering carries."""
    f = decode_fields(zlib.decompress(opaque))
    out: dict[str, Any] = {"name": f[4][0].decode(), "metadata": f.get(3, [b""])[0]}
    if 1 in f:
        out["kernel_call"] = decode_kernel_call(f[1][0])
    else:
        a = decode_fields(f[2][0])
        configs = []
        for raw in a.get(2, []):
            c = decode_fields(raw)
            configs.append((decode_kernel_call(c[1][0]), c[2][0].decode()))
        aliases = []
        for raw in a.get(3, []):
            al = decode_fields(raw)
            aliases.append(tuple(al.get(i, [0])[0] for i in (1, 2, 3)))
        out["autotuned"] = {"name": a[1][0].decode(), "configs": configs, "aliases": aliases}
    return out


def use_launcher(monkeypatch: Any, name: str) -> None:
    """Makes ``name`` the ROCm launcher for the rest of the test: ``JT_LAUNCHER_ROCM`` and a fresh registry that
    reads it (``monkeypatch`` restores both)."""
    from jt_core import registry
    from jt_core.testing import make_registry

    monkeypatch.setenv("JT_LAUNCHER_ROCM", name)
    monkeypatch.setattr(registry, "_registry", make_registry())


def backend_config(operation: Any) -> dict[str, Any]:
    """A typed-FFI custom call's attributes as Python values: ``bytes`` (strings), ``int`` or ``list[int]``."""
    from jax._src.lib.mlir import ir

    converters: tuple[tuple[Any, Any], ...] = (
        (ir.StringAttr, lambda a: a.value_bytes),
        (ir.IntegerAttr, lambda a: a.value),
        (ir.DenseI64ArrayAttr, list),
    )
    attributes: Any = ir.DictAttr(operation.attributes["mhlo.backend_config"])
    out: dict[str, Any] = {}
    for named in attributes:
        out[named.name] = str(named.attr)
        for kind, convert in converters:
            try:
                typed = kind(named.attr)
            except (ValueError, TypeError):
                continue
            out[named.name] = convert(typed)
            break
    return out
