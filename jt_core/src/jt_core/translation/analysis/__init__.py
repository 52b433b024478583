"""The analyses of a kernel's TTIR, run before it is traced: each a pass of its own that produces facts, each
stating its assumptions at its top.

* `walk` -- the address walk: integers as affine forms (`affine`), masks as boxes (`masks`), pointers' buffers,
  loops' trips and inductions (`loops`), every memory access (`facts`);
* `relabeling` -- a grid whose kernel maps its program id to tiles by division, run over the tiles;
* `products` -- which products the sums fuse into one rounding, as Triton's GPU compilers fuse them;
* `independence` -- whether the programs may run side by side, and how each written buffer is then written.

`analyse` runs the first and third for one call; `jt_core.translation.plan` weighs the results.
"""

from __future__ import annotations

from collections.abc import Sequence

from jt_core.translation.analysis.facts import Fact, Facts
from jt_core.translation.analysis.products import fusions
from jt_core.translation.analysis.relabeling import Relabeling
from jt_core.translation.analysis.walk import Walk
from jt_core.translation.program import Program

__all__ = ["analyse"]


def analyse(
    program: Program,
    parameters: Sequence[Fact],
    grid: tuple[int, int, int],
    launch: tuple[int, int, int],
    relabel: Relabeling | None,
    strategy: object,
    writable: frozenset[int],
) -> Facts:
    """What the address walk and the products analysis find of ``program`` for one call.

    Args:
        program: The kernel's TTIR.
        parameters: What is known of the entry function's parameters.
        grid: The grid the program ids range over.
        launch: The grid launched.
        relabel: The relabeling to assume, or ``None``.
        strategy: The platform's choices (`jt_core.translation.strategy.Strategy`): products are analysed only
            where its numerics round as a GPU does.
        writable: The buffers the kernel may write.
    """
    exact = bool(getattr(getattr(strategy, "numerics", None), "exact", False))
    walk = Walk(program, parameters, grid, launch, relabel, writable)
    return walk.run(fusions(program) if exact else None)
