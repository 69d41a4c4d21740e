"""Berrut approximated coded computing (BACC, arXiv 2009.08327), DESIGN.md §2."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import Code, as_returned
from .points import chebyshev_first, chebyshev_second, systematic_points

__all__ = ["BerrutCode", "barycentric_matrix", "berrut_matrix"]

# Points closer than this (absolute, on [-1, 1]) are the same point: the coincidence rule.
COINCIDENCE_TOL = 1e-12


def barycentric_matrix(targets: np.ndarray, nodes: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Barycentric interpolant ``sum_l w_l y_l/(x-n_l) / sum_l w_l/(x-n_l)`` as a matrix.

    Returns the (len(targets), len(nodes)) matrix; a target that coincides with a node
    (within ``COINCIDENCE_TOL``) gets that node's unit row (never 0/0). Berrut's, Lagrange's
    and Floater-Hormann's interpolants differ only in their ``weights``.
    """
    targets = np.atleast_1d(np.asarray(targets, dtype=float))
    diff = targets[:, None] - nodes[None, :]
    hit = np.abs(diff) <= COINCIDENCE_TOL
    rows_hit = hit.any(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.asarray(weights)[None, :] / np.where(hit, 1.0, diff)
    terms[rows_hit] = 0.0
    out = terms / np.where(rows_hit, 1.0, terms.sum(axis=1))[:, None]
    if rows_hit.any():
        out[rows_hit] = 0.0
        out[np.flatnonzero(rows_hit), np.argmax(hit, axis=1)[rows_hit]] = 1.0
    return out


def berrut_matrix(targets: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Berrut's first rational interpolant through monotone ``nodes``, evaluated at ``targets``.

    Returns the (len(targets), len(nodes)) matrix M with
    ``M[t, l] = ((-1)^l / (x_t - n_l)) / sum_q ((-1)^q / (x_t - n_q))``; signs alternate by
    the position of a node in ``nodes``, which must be strictly monotone. A target that
    coincides with a node gets the unit row of that node (never 0/0).
    """
    return barycentric_matrix(targets, nodes, np.where(np.arange(nodes.size) % 2 == 0, 1.0, -1.0))


class BerrutCode(Code):
    """Berrut rational-interpolation code: any f, decodable from any non-empty result set.

    Parameters
    ----------
    K : int
        Number of data blocks; data points are Chebyshev points of the first kind.
    N : int
        Number of coded blocks; worker points are Chebyshev points of the second kind
        (``systematic=False``) or the data points plus N-K points between them.
    systematic : bool, default False
        Systematic variant: worker ``systematic_workers[j]`` receives X_j itself and returns
        f(X_j) exactly; the other workers fill in the blocks whose systematic worker straggled.

    Notes
    -----
    The estimate is an approximation: its error falls about as 1/N at a fixed number of
    stragglers. The decoder's signs alternate by rank among the returned points, not by
    worker index, which keeps the interpolant free of real poles.
    """

    name = "berrut"
    exact = False

    def __init__(self, K: int, N: int, systematic: bool = False):
        super().__init__(K, N)
        if not isinstance(systematic, (bool, np.bool_)):
            raise TypeError(f"systematic must be a bool, got {type(systematic).__name__}")
        if systematic and N < K:
            raise ValueError(f"systematic Berrut needs N >= K, got K={K}, N={N}")
        self.systematic = bool(systematic)
        self._alpha = chebyshev_first(self.K)
        if self.systematic:
            self._z, self.systematic_workers = systematic_points(self.K, self.N)
        else:
            self._z = chebyshev_second(self.N)
            self.systematic_workers = None

    @property
    def min_results(self) -> int:
        return 1

    def is_exact(self, returned: Sequence[int]) -> bool:
        """Systematic only: every block's own (systematic) worker is in ``returned``."""
        if not self.systematic or len(returned) == 0:
            return False
        have = set(as_returned(returned, self.N).tolist())
        return all(int(i) in have for i in self.systematic_workers)

    def encoding_matrix(self) -> np.ndarray:
        return berrut_matrix(self._z, self._alpha)

    def decoding_matrix(self, returned: Sequence[int]) -> np.ndarray:
        idx = as_returned(returned, self.N)
        order = np.argsort(idx, kind="stable")  # ascending worker index == descending point
        sorted_matrix = berrut_matrix(self._alpha, self._z[idx[order]])
        out = np.empty_like(sorted_matrix)
        out[:, order] = sorted_matrix
        return out

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "systematic": self.systematic}
