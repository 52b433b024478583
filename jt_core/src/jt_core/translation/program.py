"""A kernel's Triton IR as plain Python data: what the compiled CPU path reads, and keeps on disk.

Triton's front end turns a kernel into a module of the ``tt``, ``arith``, ``math`` and ``scf`` dialects (its TTIR),
in which every Python-level construct of the kernel is already resolved the way compiled Triton resolves it:
``a and b`` on tensors is an ``arith.andi``, a module-level alias of a builtin is the builtin's operation, a helper
``@triton.jit`` function is a ``tt.call``. `jt_core.translation.extract` copies that module into the frozen
dataclasses here (`Program`), so that nothing of Triton's native objects outlives the front end's lock, and
`jt_core.translation.kernel` runs it with JAX.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["Block", "Function", "Operation", "Program", "TensorType", "parse_type"]


@dataclasses.dataclass(frozen=True)
class TensorType:
    """A TTIR type, parsed: ``tensor<64x32xf16>``, ``!tt.ptr<f32>``, ``i32``, ``tensor<8x!tt.ptr<i8>>``.

    Attributes:
        shape: The block shape (``()`` for a scalar).
        element: The element type: ``"i32"``, ``"f16"``, ``"f8E4M3FN"``, ..., or ``"ptr"`` for pointers.
        pointee: For pointers, the pointee type (``"f32"``; ``"tensor<64x64xf16>"`` for a block pointer).
        text: The type as Triton prints it.
    """

    shape: tuple[int, ...]
    element: str
    pointee: str | None
    text: str

    @property
    def is_pointer(self) -> bool:
        return self.element == "ptr"


_POINTER = re.compile(r"^!tt\.ptr<(.*?)(?:,\s*\d+)?>$")
_TENSOR = re.compile(r"^tensor<(.*)>$")


@functools.lru_cache(maxsize=4096)  # a kernel has few types, each read by thousands of operations
def parse_type(text: str) -> TensorType:
    """Parses a type as Triton prints it."""
    text = text.strip()
    shape: tuple[int, ...] = ()
    inner = text
    tensor = _TENSOR.match(text)
    if tensor:
        body = tensor.group(1)
        dims = []
        while True:
            head = re.match(r"^(\d+)x", body)
            if not head:
                break
            dims.append(int(head.group(1)))
            body = body[head.end() :]
        shape, inner = tuple(dims), body
    pointer = _POINTER.match(inner)
    if pointer:
        return TensorType(shape, "ptr", pointer.group(1).strip(), text)
    return TensorType(shape, inner, None, text)


@dataclasses.dataclass(frozen=True)
class Operation:
    """One operation.

    Attributes:
        name: Its name (``"arith.addf"``).
        operands: The ids of the values it reads.
        results: The ids of the values it defines.
        attrs: Its attributes that matter to the CPU path, as ``(name, value)`` pairs.
        regions: Its regions, each a tuple of blocks.
        line: The kernel source line it comes from (``"kernel.py:12"``), when known.
    """

    name: str
    operands: tuple[int, ...]
    results: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    regions: tuple[tuple[Block, ...], ...] = ()
    line: str | None = None

    def attr(self, name: str, default: Any = None) -> Any:
        """The attribute ``name`` (``default`` when the operation has none of that name)."""
        for key, value in self.attrs:
            if key == name:
                return value
        return default


@dataclasses.dataclass(frozen=True)
class Block:
    """A block: its arguments (value ids) and operations, the last one its terminator."""

    arguments: tuple[int, ...]
    operations: tuple[Operation, ...]


@dataclasses.dataclass(frozen=True)
class Function:
    """A ``tt.func``: its name and body (the arguments of the body's first block are its parameters)."""

    name: str
    body: tuple[Block, ...]


@dataclasses.dataclass(frozen=True, eq=False)
class Program:
    """A kernel's TTIR module.

    A program is itself: two programs are equal only if they are one (the plans made for it are kept with it).

    Attributes:
        entry: The kernel's function name.
        functions: Every function of the module (the kernel and the helpers it calls), by name.
        types: The type of every value, by value id.
    """

    entry: str
    functions: Mapping[str, Function]
    types: Mapping[int, str]

    def type_of(self, value: int) -> TensorType:
        """The parsed type of a value."""
        return parse_type(self.types[value])

    def operations(self) -> list[Operation]:
        """Every operation of every function, nested ones included, in program order."""
        found: list[Operation] = []

        def visit(blocks: tuple[Block, ...]) -> None:
            for block in blocks:
                for op in block.operations:
                    found.append(op)
                    for region in op.regions:
                        visit(region)

        for function in self.functions.values():
            visit(function.body)
        return found

    @functools.cached_property
    def regions(self) -> Mapping[int, tuple[Block, ...]]:
        """The blocks of the region each block belongs to, by the block's identity: where a branch (``cf.br``, what
        an early ``return`` makes) finds its target."""
        found: dict[int, tuple[Block, ...]] = {}

        def visit(blocks: tuple[Block, ...]) -> None:
            for block in blocks:
                found[id(block)] = blocks
                for op in block.operations:
                    for region in op.regions:
                        visit(region)

        for function in self.functions.values():
            visit(function.body)
        return found

    @functools.cached_property
    def users(self) -> Mapping[int, list[Operation]]:
        """The operations that read each value, nested ones included, one entry per operand the value fills."""
        found: dict[int, list[Operation]] = {}
        for op in self.operations():
            for value in op.operands:
                found.setdefault(value, []).append(op)
        return found

    # -- keeping it on disk ------------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        """The program as JSON text (what jt's disk cache keeps of a CPU kernel)."""
        payload = {
            "entry": self.entry,
            "functions": [[f.name, _blocks_json(f.body)] for f in self.functions.values()],
            "types": [[k, v] for k, v in self.types.items()],
        }
        return json.dumps(payload, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Program:
        """The program `to_bytes` wrote.

        Raises:
            ValueError: For data that is not such a program.
        """
        try:
            payload = json.loads(data.decode())
            functions = {name: Function(name, _blocks_from(body)) for name, body in payload["functions"]}
            types = {int(k): str(v) for k, v in payload["types"]}
            return cls(str(payload["entry"]), functions, types)
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a compiled CPU program: {exc}") from exc


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return {"t": [_plain(v) for v in value]}
    if isinstance(value, float) and value != value:
        return {"f": "nan"}
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return {"f": "inf" if value > 0 else "-inf"}
    return value


def _unplain(value: Any) -> Any:
    if isinstance(value, dict):
        if "t" in value:
            return tuple(_unplain(v) for v in value["t"])
        return float(value["f"])
    return value


def _blocks_json(blocks: tuple[Block, ...]) -> list[Any]:
    return [[list(b.arguments), [_op_json(op) for op in b.operations]] for b in blocks]


def _op_json(op: Operation) -> list[Any]:
    return [
        op.name,
        list(op.operands),
        list(op.results),
        [[k, _plain(v)] for k, v in op.attrs],
        [_blocks_json(r) for r in op.regions],
        op.line,
    ]


def _blocks_from(data: list[Any]) -> tuple[Block, ...]:
    return tuple(Block(tuple(args), tuple(_op_from(op) for op in ops)) for args, ops in data)


def _op_from(data: list[Any]) -> Operation:
    name, operands, results, attrs, regions, line = data
    return Operation(
        name=str(name),
        operands=tuple(int(v) for v in operands),
        results=tuple(int(v) for v in results),
        attrs=tuple((str(k), _unplain(v)) for k, v in attrs),
        regions=tuple(_blocks_from(r) for r in regions),
        line=line,
    )
