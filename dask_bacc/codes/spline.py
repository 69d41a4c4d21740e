"""Spline codes: cubic-spline encoder and decoder (after LeTCC, arXiv 2406.00300).

The encoder is the natural cubic spline u through the points ``(alpha_j, X_j)``; worker i
computes ``f(u(z_i))``. The decoder is the cubic spline through the returned points
``(z_i, f(u(z_i)))``, evaluated at the data points. With ``smoothing = 0`` it interpolates
(the natural spline); with ``smoothing = lam > 0`` it is the smoothing spline minimising
``sum_i (y_i - g(z_i))^2 + lam * int g''(z)^2 dz`` over the worker interval ``[-1, 1]``.
Outside the returned points the decoder follows the spline's linear extension (a natural
spline has ``g'' = 0`` there).

Both maps are linear in the values, so they are matrices in the :class:`~.base.Code` API.
The matrices come from the second-derivative (Reinsch) form of the spline: a tridiagonal
system, solved densely (the systems have at most N - 2 unknowns), in pure NumPy, so the
codes stay free of SciPy as well as of dask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .base import InterpolatingCode
from .berrut import barycentric_matrix, floater_hormann_weights
from .points import equispaced, place_systematic

__all__ = ["SplineCode", "spline_matrix"]


def _second_derivatives(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(R, QT)`` of the natural spline through increasing ``x``: the interior second
    derivatives are ``R^-1 QT y`` (Green & Silverman's ``gamma = R^-1 Q^T g``)."""
    m = x.size
    h = np.diff(x)
    R = np.zeros((m - 2, m - 2))
    QT = np.zeros((m - 2, m))
    r = np.arange(m - 2)
    R[r, r] = (h[:-1] + h[1:]) / 3.0
    R[r[:-1], r[:-1] + 1] = R[r[:-1] + 1, r[:-1]] = h[1:-1] / 6.0
    QT[r, r] = 1.0 / h[:-1]
    QT[r, r + 1] = -1.0 / h[:-1] - 1.0 / h[1:]
    QT[r, r + 2] = 1.0 / h[1:]
    return R, QT


def spline_matrix(targets: np.ndarray, nodes: np.ndarray, smoothing: float = 0.0) -> np.ndarray:
    """The cubic spline through strictly increasing ``nodes``, evaluated at ``targets``.

    Returns the (len(targets), len(nodes)) matrix S with ``g(targets) = S @ y`` for values
    ``y`` at the nodes: the natural cubic interpolating spline for ``smoothing == 0``, the
    smoothing spline with penalty ``smoothing`` otherwise, extended linearly beyond the
    outermost nodes. One node gives the constant, two the straight line through them.
    """
    t = np.atleast_1d(np.asarray(targets, dtype=float))
    x = np.asarray(nodes, dtype=float)
    m = x.size
    if m == 0:
        raise ValueError("a spline needs at least one node")
    if m > 1 and not np.all(np.diff(x) > 0):
        raise ValueError("spline nodes must be strictly increasing")
    if m == 1:
        return np.ones((t.size, 1))
    # values at the nodes (identity, or the smoother) and second derivatives, both as
    # matrices over y; the natural end conditions set g'' = 0 at the outermost nodes
    G = np.eye(m)
    M = np.zeros((m, m))
    if m > 2:
        R, QT = _second_derivatives(x)
        if smoothing > 0:
            G = np.linalg.solve(np.eye(m) + smoothing * QT.T @ np.linalg.solve(R, QT), G)
        M[1:-1] = np.linalg.solve(R, QT @ G)
    elif smoothing > 0:
        pass  # two points: the least-squares line is the line through them
    h = np.diff(x)
    i = np.clip(np.searchsorted(x, t, side="right") - 1, 0, m - 2)
    hi = h[i][:, None]
    A = ((x[i + 1] - t) / h[i])[:, None]
    B = 1.0 - A
    out = A * G[i] + B * G[i + 1] + ((A**3 - A) * M[i] + (B**3 - B) * M[i + 1]) * hi**2 / 6.0
    # beyond the ends: the tangent line at the outermost node
    lo, up = t < x[0], t > x[-1]
    if lo.any():
        slope = (G[1] - G[0]) / h[0] - h[0] * (2 * M[0] + M[1]) / 6.0
        out[lo] = G[0] + (t[lo] - x[0])[:, None] * slope
    if up.any():
        slope = (G[-1] - G[-2]) / h[-1] + h[-1] * (M[-2] + 2 * M[-1]) / 6.0
        out[up] = G[-1] + (t[up] - x[-1])[:, None] * slope
    return out


def _increasing(targets: np.ndarray, nodes: np.ndarray, smoothing: float) -> np.ndarray:
    """:func:`spline_matrix` for nodes in either monotone order (columns kept in order)."""
    order = np.argsort(nodes, kind="stable")
    out = np.empty((np.atleast_1d(targets).size, nodes.size))
    out[:, order] = spline_matrix(targets, nodes[order], smoothing)
    return out


class SplineCode(InterpolatingCode):
    """Cubic-spline code: any f, decodable from any non-empty result set.

    Parameters
    ----------
    K : int
        Number of data blocks; data points are the midpoints of K equal cells of
        ``[-1, 1]``.
    N : int
        Number of coded blocks; worker points are N equispaced points spanning ``[-1, 1]``
        (``systematic=False``), or those with the K nearest moved onto the data points.
    smoothing : float, default 0.0
        Penalty of the decoder's smoothing spline (0: interpolate the returned results).
    systematic : bool, default False
        Worker ``systematic_workers[j]`` receives X_j itself and returns f(X_j) exactly;
        with ``smoothing == 0`` a block is decoded exactly when its systematic worker
        returned.

    Notes
    -----
    The points were chosen by measurement (``benchmarks/spline_points.py``, docs/codes.md):
    over K = 8, N in (16, 32, 64), s in (1, 2, 4, 7) and random or smooth rows, equispaced
    worker points with the data points at the cell midpoints had the lowest mean error in
    16 of 24 cells and were never more than 1.5x the best, against Chebyshev points (best
    in 6, up to 2x the best) and equispaced data points spanning [-1, 1] (best in 5, up to
    9.7x: an outermost straggler leaves an end data point to extrapolation). At a fixed
    number of stragglers the error falls about as N^-4 on smooth rows and N^-3 on i.i.d.
    rows, against N^-1.3 to N^-1.7 for Berrut (docs/accuracy.md).
    """

    name = "spline"
    exact = False
    # the companion's difference overestimates on smooth data at large N (both order 4,
    # the pair's constant differs): the calibration may scale it down as well as up
    calibration_range = (0.25, 4.0)

    def __init__(self, K: int, N: int, smoothing: float = 0.0, systematic: bool = False):
        super().__init__(K, N)
        if isinstance(smoothing, bool) or not isinstance(smoothing, (int, float, np.floating)):
            raise TypeError(f"smoothing must be a number, got {type(smoothing).__name__}")
        if not np.isfinite(smoothing) or smoothing < 0:
            raise ValueError(f"smoothing must be finite and >= 0, got {smoothing}")
        self.smoothing = float(smoothing)
        self._set_points(*equispaced(self.K, self.N), systematic)

    def _set_points(self, alpha: np.ndarray, z: np.ndarray, systematic: bool) -> None:
        if not isinstance(systematic, (bool, np.bool_)):
            raise TypeError(f"systematic must be a bool, got {type(systematic).__name__}")
        if systematic and self.N < self.K:
            raise ValueError(
                f"systematic {type(self).__name__} needs N >= K, got K={self.K}, N={self.N}"
            )
        self.systematic = bool(systematic)
        self._alpha = alpha
        if self.systematic:
            self._z, self.systematic_workers = place_systematic(alpha, z)
        else:
            self._z, self.systematic_workers = z, None

    @property
    def interpolates(self) -> bool:
        return self.smoothing == 0.0

    def interpolant(self, targets: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        return _increasing(targets, nodes, self.smoothing)

    def companion(self, targets: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        # the embedded pair's other member: Floater-Hormann of degree 3, of the spline's
        # order, so that their difference scales like the spline's error and the
        # leave-one-out calibration carries over from the wider gaps; measured against
        # piecewise-linear and degrees 2 and 4 in benchmarks/spline_estimate.py
        order = np.argsort(nodes, kind="stable")
        x = nodes[order]
        out = np.empty((np.atleast_1d(targets).size, nodes.size))
        out[:, order] = barycentric_matrix(targets, x, floater_hormann_weights(x, 3))
        return out

    def encoding_matrix(self) -> np.ndarray:
        return _increasing(self._z, self._alpha, 0.0)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "smoothing": self.smoothing,
            "systematic": self.systematic,
        }

