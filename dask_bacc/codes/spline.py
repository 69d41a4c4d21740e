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

import numpy as np

from ._types import CodeConfig, FloatArray, IntArray
from .base import InterpolatingCode
from .berrut import floater_hormann_matrix
from .points import equispaced, place_systematic

__all__ = ["SplineCode", "spline_matrix"]


def _second_derivatives(x: FloatArray) -> tuple[FloatArray, FloatArray]:
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


def spline_matrix(targets: FloatArray, nodes: FloatArray, smoothing: float = 0.0) -> FloatArray:
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
    out: FloatArray = (
        A * G[i] + B * G[i + 1] + ((A**3 - A) * M[i] + (B**3 - B) * M[i + 1]) * hi**2 / 6.0
    )
    # beyond the ends: the tangent line at the outermost node
    lo, up = t < x[0], t > x[-1]
    if lo.any():
        slope = (G[1] - G[0]) / h[0] - h[0] * (2 * M[0] + M[1]) / 6.0
        out[lo] = G[0] + (t[lo] - x[0])[:, None] * slope
    if up.any():
        slope = (G[-1] - G[-2]) / h[-1] + h[-1] * (M[-2] + 2 * M[-1]) / 6.0
        out[up] = G[-1] + (t[up] - x[-1])[:, None] * slope
    return out


def natural_rows(t: FloatArray, x: FloatArray) -> FloatArray:
    """Batched single rows of the natural interpolating spline: row r evaluates the spline
    through the increasing nodes ``x[r]`` (shape (T, n), n >= 3) at ``t[r]``.

    Equal to ``spline_matrix(t[r:r+1], x[r])[0]`` for every r, at O(T n) cost: the row is
    ``a + QT^T w`` with ``R w = c`` (R symmetric tridiagonal, solved by one batched Thomas
    sweep), ``a`` and ``c`` the weights of the node values and second derivatives in the
    evaluation formula. Used for the leave-one-out rows of the error estimate and the
    robust decoder, N rows of N nodes each.
    """
    T, n = x.shape
    rows = np.arange(T)
    h = np.diff(x, axis=1)  # (T, n-1)
    i = np.clip((x <= t[:, None]).sum(axis=1) - 1, 0, n - 2)
    hi = h[rows, i]
    A = (x[rows, i + 1] - t) / hi
    B = 1.0 - A
    a = np.zeros((T, n))
    c = np.zeros((T, n))  # weights of the second derivatives M (M[0] = M[n-1] = 0)
    lo, up = t < x[:, 0], t > x[:, -1]
    inside = ~(lo | up)
    a[rows, i] = np.where(inside, A, 0.0)
    a[rows, i + 1] = np.where(inside, B, 0.0)
    c[rows, i] = np.where(inside, (A**3 - A) * hi**2 / 6.0, 0.0)
    c[rows, i + 1] = np.where(inside, (B**3 - B) * hi**2 / 6.0, 0.0)
    d0, d1 = t - x[:, 0], t - x[:, -1]  # beyond the ends: the tangent lines
    a[lo, 0] += 1.0 - d0[lo] / h[lo, 0]
    a[lo, 1] += d0[lo] / h[lo, 0]
    c[lo, 1] += -d0[lo] * h[lo, 0] / 6.0
    a[up, -1] += 1.0 + d1[up] / h[up, -1]
    a[up, -2] += -d1[up] / h[up, -1]
    c[up, -2] += d1[up] * h[up, -1] / 6.0
    # R w = c[:, 1:-1], R = tridiag(h_k/6, (h_k + h_{k+1})/3, h_{k+1}/6)
    diag = (h[:, :-1] + h[:, 1:]) / 3.0
    off = h[:, 1:-1] / 6.0
    rhs = c[:, 1:-1].copy()
    dp = diag.copy()
    for k in range(1, n - 2):
        m = off[:, k - 1] / dp[:, k - 1]
        dp[:, k] -= m * off[:, k - 1]
        rhs[:, k] -= m * rhs[:, k - 1]
    w = np.empty_like(rhs)
    w[:, -1] = rhs[:, -1] / dp[:, -1]
    for k in range(n - 4, -1, -1):
        w[:, k] = (rhs[:, k] - off[:, k] * w[:, k + 1]) / dp[:, k]
    # + QT^T w: interior node k+1 couples nodes k, k+1, k+2
    inv = 1.0 / h
    a[:, :-2] += w * inv[:, :-1]
    a[:, 1:-1] -= w * (inv[:, :-1] + inv[:, 1:])
    a[:, 2:] += w * inv[:, 1:]
    return a


def _increasing(targets: FloatArray, nodes: FloatArray, smoothing: float) -> FloatArray:
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

    def _set_points(self, alpha: FloatArray, z: FloatArray, systematic: bool) -> None:
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

    def interpolant(self, targets: FloatArray, nodes: FloatArray) -> FloatArray:
        return _increasing(targets, nodes, self.smoothing)

    def companion(self, targets: FloatArray, nodes: FloatArray) -> FloatArray:
        # the embedded pair's other member: Floater-Hormann of degree 3, of the spline's
        # order, so that their difference scales like the spline's error and the
        # leave-one-out calibration carries over from the wider gaps; measured against
        # piecewise-linear and degrees 2 and 4 in benchmarks/spline_estimate.py
        return floater_hormann_matrix(targets, nodes, 3)

    def loo_matrices(
        self, z: FloatArray, base: IntArray, targets: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        base = np.asarray(base, dtype=int)
        targets = np.asarray(targets, dtype=int)
        if self.smoothing > 0 or base.size < 4:
            return super().loo_matrices(z, base, targets)
        # the interpolating spline: all rows of a group (targets in base, each predicted
        # from the others; targets outside it, from all of base) in one batched sweep
        P0 = np.zeros((targets.size, z.size))
        P1 = np.zeros_like(P0)
        in_base = np.isin(targets, base)
        for group in (in_base, ~in_base):
            if not group.any():
                continue
            tg = targets[group]
            if group is in_base:
                rest = np.stack([base[base != k] for k in tg])
            else:
                rest = np.broadcast_to(base, (tg.size, base.size))
            nodes = np.take_along_axis(rest, np.argsort(z[rest], axis=1, kind="stable"), 1)
            p0 = np.zeros((tg.size, z.size))
            np.put_along_axis(p0, nodes, natural_rows(z[tg], z[nodes]), axis=1)
            P0[group] = p0
            P1[group] = self._loo_rows(self.companion, z, base, tg)
        return P0, P1

    def encoding_matrix(self) -> FloatArray:
        return _increasing(self._z, self._alpha, 0.0)

    def get_config(self) -> CodeConfig:
        return {
            **super().get_config(),
            "smoothing": self.smoothing,
            "systematic": self.systematic,
        }
