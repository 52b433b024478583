"""Copying a kernel's TTIR module out of Triton's native objects into a `Program`.

Triton's Python bindings walk a module's operations (innermost first) and answer, for each, its name, operands,
results, regions and the attributes that are integers, booleans, strings or symbol references (Triton 3.6's bindings
read no integers, and no version's reads a float constant). What they cannot read (a float constant's value, a
transposition's order, a block pointer's boundary check, a branch's target blocks) and each operation's source line
are read from the module's printed text, whose operations appear in the same order as a walk that visits every
operation before its regions. The two are matched name by name; MLIR leaves out the empty ``scf.yield`` that ends
the regions of an ``scf.for`` or ``scf.if`` without results, so such a yield matches no line. When they do not match
otherwise, no text is used.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from jt_core.translation.program import Block, Function, Operation, Program

__all__ = ["extract"]

#: Per operation name, the attributes read through the bindings: (name, getter) pairs; getters are the bindings'
#: ``get_int_attr``, ``get_bool_attr``, ``get_str_attr`` and ``get_flat_symbol_ref_attr``.
_ATTRS: dict[str, tuple[tuple[str, str], ...]] = {
    "arith.cmpi": (("predicate", "int"),),
    "arith.cmpf": (("predicate", "int"),),
    "tt.make_range": (("start", "int"), ("end", "int")),
    "tt.get_program_id": (("axis", "int"),),
    "tt.get_num_programs": (("axis", "int"),),
    "tt.expand_dims": (("axis", "int"),),
    "tt.reduce": (("axis", "int"),),
    "tt.scan": (("axis", "int"), ("reverse", "bool")),
    "tt.gather": (("axis", "int"),),
    "tt.dot": (("inputPrecision", "int"), ("maxNumImpreciseAcc", "int")),
    "tt.atomic_rmw": (("atomic_rmw_op", "int"), ("sem", "int")),
    "tt.atomic_cas": (("sem", "int"),),
    "tt.fp_to_fp": (("rounding", "int"),),
    "arith.truncf": (("roundingmode", "int"),),
    "tt.call": (("callee", "symbol"),),
    "tt.func": (("sym_name", "str"),),
    "tt.extern_elementwise": (("symbol", "str"), ("libname", "str"), ("pure", "bool")),
    "tt.clampf": (("propagateNan", "int"),),
    "tt.reshape": (("allow_reorder", "bool"), ("efficient_layout", "bool")),
    "tt.load": (("padding", "int"), ("isVolatile", "bool")),
    "tt.make_tensor_descriptor": (("padding", "int"),),
    "tt.assert": (("message", "str"),),
    "tt.print": (("prefix", "str"), ("hex", "bool")),
    "tt.elementwise_inline_asm": (("asm_string", "str"),),
    "tt.map_elementwise": (("pack", "int"),),
}

#: Operations whose attributes are read from the printed text: name -> the attributes' patterns.
_TEXT_ATTRS: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {
    "tt.trans": (("order", re.compile(r"order = array<i32: ([-\d, ]+)>")),),
    "tt.make_tensor_ptr": (("order", re.compile(r"order = array<i32: ([-\d, ]*)>")),),
    "tt.load": (("boundaryCheck", re.compile(r"boundaryCheck = array<i32: ([-\d, ]*)>")),),
    "tt.store": (("boundaryCheck", re.compile(r"boundaryCheck = array<i32: ([-\d, ]*)>")),),
}

_GETTERS = {"int": "get_int_attr", "bool": "get_bool_attr", "str": "get_str_attr", "symbol": "get_flat_symbol_ref_attr"}

_OP_LINE = re.compile(r'^(?:%[^=]*=\s*)?"?([a-z_][\w]*\.[\w.]+)"?')
_LOC_USE = re.compile(r"loc\((#loc\d*)\)\s*$")
_LOC_DEF = re.compile(r"^(#loc\d*)\s*=\s*(loc\(.*\))\s*$")
_FILE_LINE = re.compile(r'"([^"]+)":(\d+):(\d+)')
_ALIAS = re.compile(r"#loc\d*")


def extract(module: Any, enums: dict[str, dict[int, str]] | None = None) -> Program:
    """Copies ``module`` (what ``ASTSource.make_ir`` returns) into a `Program`.

    Args:
        module: The TTIR module.
        enums: Per attribute name, the names of its enumeration's values (``{"inputPrecision": {2: "IEEE"}}``);
            such attributes are kept by name.
    """
    walked: list[Any] = []
    module.walk(walked.append)
    ids: dict[int, int] = {}
    types: dict[int, str] = {}

    def value_id(value: Any) -> int:
        native = value.id()
        if native not in ids:
            ids[native] = len(ids)
            types[ids[native]] = str(value.get_type())
        return ids[native]

    # Group the operations by block and the blocks by region, in the walk's order (a region's blocks are walked in
    # order, each block's operations in order, an operation after its regions).
    block_ops: dict[int, list[int]] = {}
    block_of: dict[int, Any] = {}
    region_blocks: dict[int, list[int]] = {}
    records: list[dict[str, Any]] = []
    for index, op in enumerate(walked):
        block = op.get_block()
        record: dict[str, Any] = {"op": op, "name": op.get_name(), "block": None}
        records.append(record)
        if block is None:
            continue
        block_id = block.id()
        record["block"] = block_id
        if block_id not in block_ops:
            block_ops[block_id] = []
            block_of[block_id] = block
            region_blocks.setdefault(block.get_parent().id(), []).append(block_id)
        block_ops[block_id].append(index)

    built: dict[int, Operation] = {}

    def region(region_id: int) -> tuple[Block, ...]:
        blocks = []
        for block_id in region_blocks.get(region_id, []):
            native = block_of[block_id]
            arguments = tuple(value_id(native.get_argument(i)) for i in range(native.get_num_arguments()))
            blocks.append(Block(arguments, tuple(built[i] for i in block_ops[block_id])))
        return tuple(blocks)

    for index, record in enumerate(records):
        op = record["op"]
        name = record["name"]
        if name == "builtin.module":
            continue
        built[index] = Operation(
            name=name,
            operands=tuple(value_id(op.get_operand(i)) for i in range(op.get_num_operands())),
            results=tuple(value_id(op.get_result(i)) for i in range(op.get_num_results())),
            attrs=_attributes(op, name, enums or {}),
            regions=tuple(region(op.get_region(i).id()) for i in range(op.get_num_regions())),
        )

    functions = [built[i] for i, r in enumerate(records) if r["name"] == "tt.func"]
    program = Program(
        entry="",
        functions={str(f.attr("sym_name")): Function(str(f.attr("sym_name")), f.regions[0]) for f in functions},
        types=types,
    )
    program = _with_text(program, functions, module.str())
    entry = next((f.name for f in program.functions.values() if f.name == _entry_name(module)), None)
    return Program(entry=entry or next(iter(program.functions)), functions=program.functions, types=program.types)


def _entry_name(module: Any) -> str | None:
    try:
        return str(module.get_entry_func_name())
    except Exception:
        return None


def _attributes(op: Any, name: str, enums: dict[str, dict[int, str]]) -> tuple[tuple[str, Any], ...]:
    found: list[tuple[str, Any]] = []
    if name == "arith.constant":
        try:
            found.append(("value", op.get_constant_value()))
        except Exception:
            pass
    for attr, kind in _ATTRS.get(name, ()):
        try:
            value = getattr(op, _GETTERS[kind])(attr)
        except Exception:
            value = None
        if value is None:
            continue
        if attr in enums and isinstance(value, int):
            value = enums[attr].get(value, value)
        found.append((attr, value))
    return tuple(found)


def _preorder(functions: list[Operation]) -> list[Operation]:
    ordered: list[Operation] = []

    def visit(op: Operation) -> None:
        ordered.append(op)
        for region in op.regions:
            for block in region:
                for inner in block.operations:
                    visit(inner)

    for function in functions:
        visit(function)
    return ordered


def _with_text(program: Program, functions: list[Operation], text: str) -> Program:
    """Adds each operation's source line and its text-only attributes, matching the printed operations to the
    operations in the order the text lists them."""
    lines = text.splitlines()
    aliases = {m.group(1): m.group(2) for m in (_LOC_DEF.match(line.strip()) for line in lines) if m}
    printed: list[tuple[str, str]] = []
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped[0] in "}^#)" or stripped.startswith("module"):
            continue
        match = _OP_LINE.match(stripped)
        if match:
            printed.append((match.group(1), stripped))
    matched = _matched(_preorder(functions), printed)
    if matched is None:
        return program  # the printer and the walk disagree: no text, rather than the wrong text
    replaced: dict[int, Operation] = {}
    for op, line in matched:
        extra: list[tuple[str, Any]] = [
            (attr, _numbers(m.group(1)))
            for attr, pattern in _TEXT_ATTRS.get(op.name, ())
            if (m := pattern.search(line))
        ]
        if op.name == "arith.constant":
            value = _constant(line)
            if value is not None:
                extra.append(("text", value))
        if op.name in _BRANCHES:
            extra.append(("successors", tuple(int(n) for n in _SUCCESSOR.findall(line))))
        known = {name for name, _ in op.attrs}
        extra += [(name, value) for name, value in _printed_attributes(op.name, line) if name not in known]
        source = _source_line(line, aliases)
        if extra or source:
            replaced[id(op)] = Operation(op.name, op.operands, op.results, op.attrs + tuple(extra), op.regions, source)
    if not replaced:
        return program
    return Program(
        entry=program.entry,
        functions={name: Function(name, _replace(f.body, replaced)) for name, f in program.functions.items()},
        types=program.types,
    )


_BRANCHES = ("cf.br", "cf.cond_br")
_SUCCESSOR = re.compile(r"\^bb(\d+)")


def _matched(ordered: list[Operation], printed: list[tuple[str, str]]) -> list[tuple[Operation, str]] | None:
    """Each walked operation with its printed line; an empty ``scf.yield`` the printer left out has none. ``None``
    when the two disagree otherwise."""
    matched: list[tuple[Operation, str]] = []
    position = 0
    for op in ordered:
        if position < len(printed):
            name, line = printed[position]
            if name == op.name and (name != "scf.yield" or _yields_values(line) == bool(op.operands)):
                matched.append((op, line))
                position += 1
                continue
        if op.name != "scf.yield" or op.operands:
            return None
    return matched if position == len(printed) else None


def _yields_values(line: str) -> bool:
    return "%" in line.split("scf.yield", 1)[-1]


def _replace(blocks: tuple[Block, ...], replaced: dict[int, Operation]) -> tuple[Block, ...]:
    def rebuilt(op: Operation) -> Operation:
        new = replaced.get(id(op), op)
        if not op.regions:
            return new
        regions = tuple(_replace(region, replaced) for region in op.regions)
        return Operation(new.name, new.operands, new.results, new.attrs, regions, new.line)

    return tuple(Block(b.arguments, tuple(rebuilt(op) for op in b.operations)) for b in blocks)


_CMPI = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")
_CMPF = (
    "false",
    "oeq",
    "ogt",
    "oge",
    "olt",
    "ole",
    "one",
    "ord",
    "ueq",
    "ugt",
    "uge",
    "ult",
    "ule",
    "une",
    "uno",
    "true",
)
_ATOMIC = {"exch": "XCHG"}
_MEMORY_ORDER = {"relaxed": "RELAXED", "acquire": "ACQUIRE", "release": "RELEASE", "acq_rel": "ACQUIRE_RELEASE"}
_INTEGER_ATTR = re.compile(r"\b(axis|start|end|padding|maxNumImpreciseAcc|pack) = (-?\d+) : i\d+")
_KEYWORD_ATTR = re.compile(r"\b(inputPrecision|rounding|propagateNan) = (\w+)")


def _printed_attributes(name: str, line: str) -> list[tuple[str, Any]]:
    """The attributes an operation's printed line shows: where Triton's bindings cannot read them (their integer
    getter is missing from some Triton versions), they are read from there."""
    found: list[tuple[str, Any]] = [(m.group(1), int(m.group(2))) for m in _INTEGER_ATTR.finditer(line)]
    for m in _KEYWORD_ATTR.finditer(line):
        value = m.group(2)
        found.append((m.group(1), "TF32x3" if value == "tf32x3" else value.upper()))
    words = re.findall(r"[\w.]+", line.split(name, 1)[-1].split("%", 1)[0]) if name in line else []
    if name in ("arith.cmpi", "arith.cmpf") and words:
        table = _CMPI if name == "arith.cmpi" else _CMPF
        if words[0] in table:
            found.append(("predicate", table.index(words[0])))
    elif name in ("tt.get_program_id", "tt.get_num_programs") and words and words[0] in "xyz":
        found.append(("axis", "xyz".index(words[0])))
    elif name == "tt.atomic_rmw" and len(words) >= 2:
        found += [("atomic_rmw_op", _ATOMIC.get(words[0], words[0].upper())), ("sem", _MEMORY_ORDER.get(words[1]))]
    elif name == "tt.atomic_cas" and words:
        found.append(("sem", _MEMORY_ORDER.get(words[0])))
    elif name == "tt.descriptor_reduce" and words:
        found.append(("reduce_kind", words[0]))
    if name == "tt.dot" and not any(key == "inputPrecision" for key, _ in found):
        found.append(("inputPrecision", "IEEE"))  # the attribute's default, which the printer leaves out
    return found


_CONSTANT = re.compile(r"arith\.constant\s+(.*?)\s*:\s*[^:]*?(?:\s+loc\(.*)?$")
#: A boolean constant, which MLIR prints without its type (``%false = arith.constant false``).
_BOOLEAN = re.compile(r"arith\.constant\s+(true|false)\b")


def _constant(line: str) -> str | None:
    """The value text of an ``arith.constant`` line: ``2.000000e+00``, ``0x7FC00000``, ``dense<[1, 2]>``, ``true``."""
    match = _CONSTANT.search(line) or _BOOLEAN.search(line)
    return match.group(1).strip() if match else None


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.replace(" ", "").split(",") if part)


def _source_line(line: str, aliases: dict[str, str]) -> str | None:
    use = _LOC_USE.search(line)
    if not use:
        inline = _FILE_LINE.search(line.rsplit("loc(", 1)[-1]) if "loc(" in line else None
        return f"{inline.group(1)}:{inline.group(2)}" if inline else None
    seen: set[str] = set()
    pending = [use.group(1)]
    while pending:
        alias = pending.pop(0)
        if alias in seen or alias not in aliases:
            continue
        seen.add(alias)
        body = aliases[alias]
        found = _FILE_LINE.search(body)
        if found:
            return f"{found.group(1)}:{found.group(2)}"
        pending += _ALIAS.findall(body)
    return None


def enum_names() -> dict[str, dict[int, str]]:
    """The names of the values of the enumerations the CPU path reads, from Triton's bindings."""
    from triton._C.libtriton import ir

    def names(enum: Any) -> dict[int, str]:
        return {int(getattr(v, "value", v)): n for n, v in enum.__members__.items()}

    return {
        "inputPrecision": names(ir.INPUT_PRECISION),
        "atomic_rmw_op": names(ir.ATOMIC_OP),
        "rounding": names(ir.ROUNDING_MODE),
        "roundingmode": {},
        "propagateNan": names(ir.PROPAGATE_NAN),
        "sem": names(ir.MEM_SEMANTIC),
    }


Visitor = Callable[[Any], Program]
