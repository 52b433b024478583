"""Rows of consecutive elements whose starts are known only when a kernel runs: what makes a paged load a gather of
rows rather than of elements.

An offset such as ``slot[:, None] * stride + dims[None, :]``, ``slot`` a page's slot loaded from memory, has no
affine form (`jt_core.translation.analysis.affine`): its rows start where memory says. Along the block's last axis,
though, its lanes are consecutive, and every row's start is a multiple of ``stride``. `Rows` holds that much: the
step between neighbouring lanes of a row, and what every row's first lane is congruent to. Where the rows are
consecutive elements that each lie within one row of their buffer, a load gathers whole rows: one index per row
where it had one per element.
"""

from __future__ import annotations

import dataclasses
import math

from jt_core.translation.analysis.affine import Affine

__all__ = ["ANY", "EQUAL", "Rows"]


@dataclasses.dataclass(frozen=True)
class Rows:
    """Lane ``j`` of each row (along the block's last axis) is ``first + step * j``, and every row's ``first`` is
    ``residue`` modulo ``modulus`` (``modulus`` 0: every ``first`` is ``residue`` itself). With ``step`` ``None``
    the lanes of a row are not known to move alike, and every lane is ``residue`` modulo ``modulus``.

    Attributes:
        step: The step between neighbouring lanes of a row, where known.
        modulus: What every row's first lane (every lane, without a step) is known modulo (0: known exactly).
        residue: Its remainder (in ``[0, modulus)`` where ``modulus`` is not 0).
    """

    step: int | None
    modulus: int
    residue: int

    @staticmethod
    def make(step: int | None, modulus: int, residue: int) -> Rows:
        modulus = abs(modulus)
        return Rows(step, modulus, residue % modulus if modulus else residue)

    @staticmethod
    def of_form(form: Affine) -> Rows:
        """The rows of an affine form: every coefficient but the last lane's moves a row's start."""
        moving = [*form.pids, *form.lanes[:-1], *(c for _, c in form.terms)]
        modulus = math.gcd(*moving) if moving else 0
        if not form.base_known:
            modulus = 1  # a bound form's base is known only when it runs
        return Rows.make(form.lanes[-1] if form.lanes else 0, modulus, form.const)

    def _lanes(self) -> tuple[int, int]:
        """What every lane (not only a row's first) is congruent to: ``(modulus, residue)``."""
        modulus = self.modulus if self.step is None else math.gcd(self.modulus, self.step)
        return modulus, self.residue % modulus if modulus else self.residue

    def plus(self, other: Rows, sign: int = 1) -> Rows:
        if self.step is None or other.step is None:
            (m1, r1), (m2, r2) = self._lanes(), other._lanes()
            return Rows.make(None, math.gcd(m1, m2), r1 + sign * r2)
        return Rows.make(
            self.step + sign * other.step, math.gcd(self.modulus, other.modulus), self.residue + sign * other.residue
        )

    def times(self, factor: int) -> Rows:
        step = None if self.step is None else self.step * factor
        return Rows.make(step, self.modulus * factor, self.residue * factor)

    def split_last(self) -> Rows:
        """The rows after a new last axis of one lane: each lane of an old row starts a row of its own."""
        return Rows.make(0, *self._lanes())

    def repeated(self) -> Rows:
        """The rows after a broadcast of a last axis of one lane: each row repeats its one lane."""
        return Rows.make(0, self.modulus, self.residue)

    def within_rows_of(self, extent: int, length: int) -> int | None:
        """Where in a buffer row of ``extent`` elements every row of ``length`` consecutive lanes starts, where all
        start at that one column and end within the row; else ``None``."""
        if self.step != 1 or not self.modulus or self.modulus % extent:
            return None
        column = self.residue % extent
        return column if column + length <= extent else None


#: Nothing known: lanes anywhere.
ANY = Rows(None, 1, 0)
#: Rows of equal lanes, starting anywhere.
EQUAL = Rows(0, 1, 0)
