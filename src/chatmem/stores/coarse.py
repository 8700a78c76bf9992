"""A big user's vectors in fewer dimensions, to pick what a search scores exactly (issue 14).

A search scores every vector of its user: one matrix product, which costs what reading the
matrix from memory costs. At 10,000 memories of 384 dimensions that is 15 MB a search, read
after the model's own weights pushed it out of the caches: 1.1-2.2 ms on a 2-core AMD EPYC
without AVX-512, 4.5 ms at 40,000 memories (docs/benchmarks.md, "A big user's vectors
shortlisted").

For a user of ``ROWS`` memories or more, the user's vectors are also kept projected on
their ``DIMENSIONS`` principal axes (the user's own, fitted on about ``SAMPLE`` of its
vectors): a third of the bytes. A search estimates every memory's cosine from that copy,
takes the best ``shortlist(candidates, rows)`` of them (an answer's estimate lifted with its
question's, as the exact scores are) and scores those exactly, with the full vectors, with
the turns they answer or are answered by; only exact cosines reach the ranking. On 10,000
LoCoMo turns under one user, 300 questions searched with k = 10 and k = 50 returned the
same memories with the same scores as the exact search (the candidates of every question,
50 and 100, were the exact ones but for one tie; with 96 dimensions, 5 of 30,000 were
missed). On 40,000 (LoCoMo's turns four times over, three of them with one text: ties),
the candidates differed from the exact ones only among memories of equal cosine. A user
below ``ROWS`` (every LoCoMo conversation) is scored as before, exactly.

The projection is kept as the user's vectors move: appended and edited rows are projected
on the same axes, removed ones dropped; the axes are fitted again when the user has twice
the memories they were fitted on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from chatmem.records import Vector

#: Users with at least this many vectors are shortlisted; smaller ones are scored whole.
ROWS = 4096
#: The principal axes kept (of 384): 87 % of the variance of 10,000 LoCoMo turns.
DIMENSIONS = 128
#: Vectors the axes are fitted on at least, spread evenly over the user's rows (a fit of
#: 10,000 rows took 40 ms, most of it the 384 x 384 eigenvectors).
SAMPLE = 2048
#: Rows scored exactly: at least ``SHORTLIST``, ``PER_CANDIDATE`` times the candidates, and
#: one in ``ONE_IN`` of the rows (more rows lie near the cut in a bigger user).
SHORTLIST = 1000
PER_CANDIDATE = 10
ONE_IN = 20


def shortlist(candidates: int, rows: int) -> int:
    """How many of a big user's ``rows`` a search asking for ``candidates`` scores
    exactly."""
    return max(SHORTLIST, PER_CANDIDATE * candidates, rows // ONE_IN)


@dataclass(frozen=True)
class Coarse:
    """A matrix's rows projected on ``basis`` (columns: principal axes) after ``mean`` is
    taken off; the basis was fitted on a matrix of ``fitted`` rows."""

    mean: Vector
    basis: Vector
    rows: Vector
    fitted: int

    @classmethod
    def fit(cls, matrix: Vector) -> Coarse:
        """The projection of ``matrix`` on its own ``DIMENSIONS`` principal axes."""
        sample = matrix[:: max(1, len(matrix) // SAMPLE)]
        mean = sample.mean(axis=0, dtype=np.float32)
        centred = sample - mean
        _, axes = np.linalg.eigh(centred.T @ centred)  # ascending order of variance
        basis = np.ascontiguousarray(axes[:, ::-1][:, :DIMENSIONS], dtype=np.float32)
        return cls(mean, basis, _projected(matrix, mean, basis), len(matrix))

    @property
    def nbytes(self) -> int:
        return int(self.rows.nbytes + self.basis.nbytes + self.mean.nbytes)

    def project(self, matrix: Vector) -> Vector:
        """``matrix``'s rows on these axes."""
        return _projected(matrix, self.mean, self.basis)

    def estimate(self, vector: Vector) -> Vector:
        """Every row's estimated cosine with ``vector`` (unit length, as the rows)."""
        result: Vector = self.rows @ (self.basis.T @ vector)
        result += self.mean @ vector
        return result

    def at(self, positions: npt.NDArray[np.intp]) -> Coarse:
        """These rows at ``positions`` (the rows kept after removals)."""
        return Coarse(self.mean, self.basis, self.rows[positions], self.fitted)

    def replaced(self, positions: npt.NDArray[np.intp], vectors: Vector) -> Coarse:
        """These rows with those at ``positions`` now ``vectors``."""
        rows = self.rows.copy()
        rows[positions] = self.project(vectors)
        return Coarse(self.mean, self.basis, rows, self.fitted)

    def appended(self, vectors: Vector) -> Coarse:
        """These rows, then ``vectors``'."""
        rows = np.concatenate([self.rows, self.project(vectors)])
        return Coarse(self.mean, self.basis, rows, self.fitted)


def kept(coarse: Coarse | None, matrix: Vector) -> Coarse | None:
    """The coarse copy ``matrix`` is searched with: None below ``ROWS`` rows; ``coarse``
    (which holds ``matrix``'s rows) while fitted on at least half as many; else fitted
    anew."""
    if len(matrix) < ROWS:
        return None
    if coarse is not None and len(coarse.rows) == len(matrix) and 2 * coarse.fitted > len(matrix):
        return coarse
    return Coarse.fit(matrix)


def best(estimate: Vector, pool: npt.NDArray[np.intp], candidates: int) -> npt.NDArray[np.bool_]:
    """Which rows are the ``shortlist`` best of ``pool`` by ``estimate``."""
    size = shortlist(candidates, len(estimate))
    picked = pool
    if len(pool) > size:
        picked = pool[np.argpartition(-estimate[pool], size - 1)[:size]]
    chosen = np.zeros(len(estimate), dtype=np.bool_)
    chosen[picked] = True
    return chosen


def rescore(
    scores: Vector, exact: npt.NDArray[np.bool_], matrix: Vector, vector: Vector
) -> npt.NDArray[np.intp]:
    """``scores`` made exact where ``exact`` says (in place); the positions, ascending."""
    positions = np.flatnonzero(exact)
    scores[positions] = matrix[positions] @ vector
    return positions


def _projected(matrix: Vector, mean: Vector, basis: Vector) -> Vector:
    """``matrix``'s rows, less ``mean``, on ``basis``."""
    projected: Vector = np.ascontiguousarray(matrix @ basis - mean @ basis)
    return projected
