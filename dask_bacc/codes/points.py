"""Interpolation point families (docs/design.md, "The formulas"; docs/codes.md)."""

from __future__ import annotations

import numpy as np

from ._types import FloatArray, IndexArray

__all__ = [
    "chebyshev_first",
    "chebyshev_second",
    "equispaced",
    "place_systematic",
    "systematic_points",
]


def chebyshev_first(n: int) -> FloatArray:
    """Chebyshev points of the first kind, ``cos((2j+1) pi / (2n))``, strictly decreasing.

    These are the data points ``alpha_j`` of every code.
    """
    if n < 1:
        raise ValueError(f"need at least one point, got n={n}")
    j = np.arange(n)
    return np.cos((2 * j + 1) * np.pi / (2 * n))


def chebyshev_second(n: int) -> FloatArray:
    """Chebyshev points of the second kind, ``cos(i pi / (n-1))``, strictly decreasing.

    For ``n == 1`` the single point is 0. These are the default worker points ``z_i``.
    """
    if n < 1:
        raise ValueError(f"need at least one point, got n={n}")
    if n == 1:
        return np.zeros(1)
    i = np.arange(n)
    return np.cos(i * np.pi / (n - 1))


def systematic_points(k: int, n: int) -> tuple[FloatArray, IndexArray]:
    """Worker points of systematic Berrut: the K data points plus N-K further points.

    Start from the N Chebyshev points of the second kind (the plain Berrut worker points)
    and move, for each data point ``alpha_j`` in turn, the nearest not-yet-moved worker
    point onto ``alpha_j``. The N-K points left in place keep the Chebyshev spacing that
    plain Berrut relies on. ``benchmarks/systematic_points.py`` compares this with filling
    the gaps between data points evenly (interior gaps first, or outer gaps first): over
    K in {4, 8, 16}, N/K in {1.5, 2} and random straggler sets it gives the lowest mean
    relative error (0.32-0.33 against 0.33-0.37; docs/codes.md has the table).

    Returns
    -------
    points : ndarray, shape (n,)
        Strictly decreasing worker points.
    systematic : ndarray of int, shape (k,)
        ``systematic[j]`` is the worker index whose point equals ``alpha_j``.
    """
    if n < k:
        raise ValueError(f"systematic points need n >= k, got k={k}, n={n}")
    return place_systematic(chebyshev_first(k), chebyshev_second(n))


def place_systematic(alpha: FloatArray, z: FloatArray) -> tuple[FloatArray, IndexArray]:
    """Move, for each data point in turn, the nearest not-yet-moved worker point onto it.

    ``alpha`` (k,) and ``z`` (n >= k,) are strictly decreasing; returns the strictly
    decreasing worker points and ``systematic[j]``, the worker index whose point is
    ``alpha[j]`` (see :func:`systematic_points`).
    """
    n = z.size
    z = np.asarray(z, dtype=float).copy()
    moved = np.zeros(n, dtype=bool)
    for a in alpha:
        dist = np.where(moved, np.inf, np.abs(z - a))
        i = int(np.argmin(dist))
        z[i], moved[i] = a, True
    order = np.argsort(-z, kind="stable")
    z = z[order]
    systematic = np.array([int(np.flatnonzero(z == a)[0]) for a in alpha])
    if not np.all(np.diff(z) < 0):  # pragma: no cover - guarded by the property tests
        raise AssertionError(f"systematic points are not strictly decreasing: {z}")
    return z, systematic


def equispaced(k: int, n: int) -> tuple[FloatArray, FloatArray]:
    """The spline codes' points, both strictly decreasing: data points at the midpoints of
    k equal cells of ``[-1, 1]``, ``1 - (2j+1)/k``, and n worker points spanning it,
    ``1 - 2i/(n-1)`` (0 for n == 1)."""
    if k < 1 or n < 1:
        raise ValueError(f"need at least one point, got k={k}, n={n}")
    alpha = 1.0 - (2.0 * np.arange(k) + 1.0) / k
    z = np.zeros(1) if n == 1 else np.linspace(1.0, -1.0, n)
    return alpha, z
