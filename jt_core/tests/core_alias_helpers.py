"""A ``@triton.jit`` helper in a module that reaches ``triton.language`` only through names it imported or bound
(``from triton.language import exp as e``, ``root = sqrt``): no ``tl`` in sight. Kept in its own module for
``test_python_constructs.py``."""

from __future__ import annotations

import triton
from triton.language import exp as e
from triton.language import sqrt

root = sqrt


@triton.jit
def soft_norm(x):
    """sqrt(exp(x) + 1), through the module's aliases."""
    return root(e(x) + 1.0)
