"""The Gluon dialect: ``@gluon.jit`` kernels, compiled through the stages Triton picks for the Gluon language."""

from __future__ import annotations

import sys
from typing import Any

from jt_core.plugin import Dialect, Specialization, Target
from jt_gluon import _compat, _shutdown

_shutdown.release_at_exit()


class GluonDialect(Dialect):
    """Kernels written with ``triton.experimental.gluon.jit``.

    Gluon kernels name their layouts explicitly, so they only run on GPU backends (the CPU interpreter refuses
    them). Layouts are ordinary constexpr arguments: ``triton_call(..., layout=gl.BlockedLayout(...))``; host-side
    tensor descriptors carry the block's shared layout (``jt.TensorDescriptor(x, block_shape, layout=...)``). Any
    backend compiles them: the source built here carries ``Language.GLUON``, and ``triton.compile`` asks the
    backend's ``add_stages`` for that language's stage list.
    """

    name = "gluon"

    def claims(self, kernel: Any) -> bool:
        # Only @gluon.jit makes a Gluon kernel, so none exists before the user has imported Gluon. Importing it here
        # would make every plain Triton call pay for the whole Gluon language (170 of a first call's 260 ms, H200).
        if _compat.GLUON_MODULE not in sys.modules:
            return False
        return isinstance(kernel, _compat.gluon_jit_function_class())

    def requires_descriptor_layout(self, kernel: Any) -> bool:
        """Always: a Gluon kernel takes its descriptors' shared layout from the caller."""
        return True

    def make_source(self, kernel: Any, specialization: Specialization, target: Target) -> Any:
        source_cls = _compat.gluon_ast_source_class()
        return source_cls(
            kernel,
            dict(specialization.signature),
            dict(specialization.constexprs),
            {path: [list(attr) for attr in attrs] for path, attrs in specialization.attrs.items()},
        )
