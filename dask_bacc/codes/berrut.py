"""Berrut approximated coded computing (BACC, arXiv 2009.08327); docs/design.md, "The formulas"."""

from __future__ import annotations

import numpy as np

from ._types import CodeConfig, FloatArray
from .base import InterpolatingCode
from .points import chebyshev_first, chebyshev_second, systematic_points

__all__ = [
    "BerrutCode",
    "barycentric_matrix",
    "berrut_matrix",
    "floater_hormann_matrix",
    "floater_hormann_weights",
]

# Points closer than this (absolute, on [-1, 1]) are the same point: the coincidence rule.
COINCIDENCE_TOL = 1e-12


def barycentric_matrix(targets: FloatArray, nodes: FloatArray, weights: FloatArray) -> FloatArray:
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


def berrut_matrix(targets: FloatArray, nodes: FloatArray) -> FloatArray:
    """Berrut's first rational interpolant through monotone ``nodes``, evaluated at ``targets``.

    Returns the (len(targets), len(nodes)) matrix M with
    ``M[t, l] = ((-1)^l / (x_t - n_l)) / sum_q ((-1)^q / (x_t - n_q))``; signs alternate by
    the position of a node in ``nodes``, which must be strictly monotone. A target that
    coincides with a node gets the unit row of that node (never 0/0).
    """
    return barycentric_matrix(targets, nodes, np.where(np.arange(nodes.size) % 2 == 0, 1.0, -1.0))


def floater_hormann_weights(nodes: FloatArray, d: int) -> FloatArray:
    """Barycentric weights of the Floater-Hormann interpolant of degree ``d``.

    ``nodes`` must be strictly monotone. ``d = 0`` gives Berrut's ``(-1)^k``; ``d`` is
    lowered to ``len(nodes) - 1`` when there are too few nodes. The interpolant reproduces
    polynomials of degree ``d`` and converges as ``h^(d+1)`` for smooth functions.
    """
    x = np.asarray(nodes, dtype=float)
    n = x.size - 1
    d = max(0, min(int(d), n))
    w = np.zeros(x.size)
    if d == 0:
        return np.where(np.arange(x.size) % 2 == 0, 1.0, -1.0)
    windows = n - d + 1  # window i covers nodes i .. i+d
    for a in range(d + 1):  # position of node k inside the window
        prod = np.ones(windows)
        for b in range(d + 1):
            if b != a:
                prod /= np.abs(x[a : a + windows] - x[b : b + windows])
        np.add.at(w, np.arange(windows) + a, prod)
    return w * np.where((np.arange(x.size) - d) % 2 == 0, 1.0, -1.0)


def floater_hormann_matrix(targets: FloatArray, nodes: FloatArray, d: int) -> FloatArray:
    """The Floater-Hormann interpolant of degree ``d`` through distinct ``nodes`` in any
    order, evaluated at ``targets`` (columns in the order of ``nodes``)."""
    order = np.argsort(nodes, kind="stable")
    x = nodes[order]
    out = np.empty((np.atleast_1d(targets).size, nodes.size))
    out[:, order] = barycentric_matrix(targets, x, floater_hormann_weights(x, d))
    return out


class BerrutCode(InterpolatingCode):
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
    estimate_method = "embedded-fh1"
    companion_degree = 1

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

    def interpolant(self, targets: FloatArray, nodes: FloatArray) -> FloatArray:
        return berrut_matrix(targets, nodes)

    def companion(self, targets: FloatArray, nodes: FloatArray) -> FloatArray:
        # Floater-Hormann of degree 1, one order more accurate (codes/estimate.py)
        return barycentric_matrix(targets, nodes, floater_hormann_weights(nodes, 1))

    def encoding_matrix(self) -> FloatArray:
        return berrut_matrix(self._z, self._alpha)

    def get_config(self) -> CodeConfig:
        return {**super().get_config(), "systematic": self.systematic}
