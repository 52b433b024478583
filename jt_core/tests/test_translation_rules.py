"""Every TTIR operation has exactly one rule (`jt_core.translation.rules`): the operations the installed Triton's
dialects register (the ``tt``, ``arith``, ``math``, ``scf``, ``cf`` and ``ub`` ones its front end makes kernels of)
are read off Triton itself, each checked by its MLIR parser, and each must have a rule that lowers it or refuses it
with words for the one line that says why."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest
import triton

from jt_core.translation import rules

_DIALECTS = rb"(?:tt|arith|math|scf|cf|ub)"


def _candidates() -> list[str]:
    """Names in Triton's library that look like operations of its front end's dialects."""
    library = pathlib.Path(triton.__file__).parent / "_C" / "libtriton.so"
    found = re.findall(_DIALECTS + rb"\.[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?", library.read_bytes())
    return sorted({name.decode() for name in found})


def _registered(names: list[str], folder: pathlib.Path, capfd: Any) -> list[str]:
    """The names Triton's MLIR context knows as operations: parsing one with no operands fails its verifier, an
    unknown one fails as unregistered."""
    from triton._C.libtriton import ir

    context = ir.context()
    ir.load_dialects(context)
    source = folder / "one.mlir"
    known = []
    for name in names:
        source.write_text(f'"{name}"() : () -> ()\n')
        try:
            ir.parse_mlir_module(str(source), context)
        except RuntimeError:
            pass
        _, err = capfd.readouterr()
        if "unregistered operation" not in err and "does not allow unknown operations" not in err:
            known.append(name)
    return known


def test_every_operation_tritons_dialects_register_has_a_rule(tmp_path: pathlib.Path, capfd: Any) -> None:
    registered = _registered(_candidates(), tmp_path, capfd)
    assert len(registered) > 120, registered  # the reading of Triton's library found its dialects
    assert {"tt.load", "tt.dot", "arith.addi", "math.exp", "scf.for", "cf.cond_br"} <= set(registered)
    table = rules.all_rules()
    missing = [name for name in registered if name not in table]
    assert not missing, f"operations of Triton {triton.__version__} with no rule: {missing}"


def test_every_rule_lowers_its_operation_or_says_why_it_is_refused() -> None:
    for name, found in rules.all_rules().items():
        assert (found.lower is None) == (found.refused is not None), name
        if found.refused is not None:
            assert found.refused.strip(), name


def test_a_second_rule_for_an_operation_is_refused() -> None:
    with pytest.raises(ValueError, match=r"'tt\.load' already has a rule"):
        rules.refuse("tt.load", "a load")
