"""Every difference between supported Triton versions that jt-gluon depends on, named once.

* Triton 3.9 exports ``GluonJITFunction`` and ``GluonASTSource`` from ``triton.experimental.gluon``; Triton 3.6 keeps
  them in the private ``triton.experimental.gluon._runtime`` module.
* The first IR of a Gluon compile is ``glir`` in 3.9 (``GluonASTSource.ext``), followed by ``ttgir``; in 3.6 the
  Gluon source lowers straight to ``ttgir``. Either way the backend's ``add_stages`` picks the stages from the
  source's ``language`` (``Language.GLUON``), which ``GluonASTSource`` sets.
"""

from __future__ import annotations

from typing import Any

#: The module every Gluon kernel's definition imports (``from triton.experimental import gluon``), in both versions.
GLUON_MODULE = "triton.experimental.gluon"


def gluon_jit_function_class() -> type:
    """The class of ``@gluon.jit`` kernels."""
    from triton.experimental import gluon

    cls = getattr(gluon, "GluonJITFunction", None)
    if cls is None:  # Triton 3.6
        from triton.experimental.gluon import _runtime

        cls = _runtime.GluonJITFunction
    return cls


def gluon_ast_source_class() -> type:
    """The ``ASTSource`` subclass that makes ``triton.compile`` run the Gluon stages."""
    from triton.experimental import gluon

    cls = getattr(gluon, "GluonASTSource", None)
    if cls is None:  # Triton 3.6
        from triton.experimental.gluon import _runtime

        cls = _runtime.GluonASTSource
    return cls


def first_gluon_stage() -> str:
    """The IR stage a Gluon compile starts from: ``"glir"`` (Triton 3.9) or ``"ttgir"`` (Triton 3.6)."""
    return str(getattr(gluon_ast_source_class()(_Probe(), {}, {}, {}), "ext", "ttgir"))


class _Probe:
    """A stand-in kernel for constructing a source object just to read its attributes."""

    arg_names: tuple[str, ...] = ()
    params: tuple[Any, ...] = ()
    __name__ = "probe"


def hopper_tma_copies() -> tuple[Any, Any]:
    """Gluon's Hopper TMA copy builtins ``(global -> shared, shared -> global)``.

    Triton 3.9 names them ``tma.async_load`` / ``tma.async_store`` (the old names raise); Triton 3.6 names them
    ``tma.async_copy_global_to_shared`` / ``tma.async_copy_shared_to_global``. Both take the same leading arguments
    (descriptor, coordinates, barrier, shared buffer / descriptor, coordinates, shared buffer).
    """
    from triton.experimental.gluon.language.nvidia.hopper import tma

    if hasattr(tma, "async_load"):
        return tma.async_load, tma.async_store
    return tma.async_copy_global_to_shared, tma.async_copy_shared_to_global
