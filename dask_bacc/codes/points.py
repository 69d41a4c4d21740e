"""Interpolation point families (DESIGN.md §2)."""

from __future__ import annotations

import numpy as np

__all__ = ["chebyshev_first", "chebyshev_second", "systematic_points"]


def chebyshev_first(n: int) -> np.ndarray:
    """Chebyshev points of the first kind, ``cos((2j+1) pi / (2n))``, strictly decreasing.

    These are the data points ``alpha_j`` of every code.
    """
    if n < 1:
        raise ValueError(f"need at least one point, got n={n}")
    j = np.arange(n)
    return np.cos((2 * j + 1) * np.pi / (2 * n))


def chebyshev_second(n: int) -> np.ndarray:
    """Chebyshev points of the second kind, ``cos(i pi / (n-1))``, strictly decreasing.

    For ``n == 1`` the single point is 0. These are the default worker points ``z_i``.
    """
    if n < 1:
        raise ValueError(f"need at least one point, got n={n}")
    if n == 1:
        return np.zeros(1)
    i = np.arange(n)
    return np.cos(i * np.pi / (n - 1))


def systematic_points(k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Worker points of systematic Berrut: the K data points plus N-K points between them.

    The N-K further points are spread over the K+1 gaps of ``[-1, 1]`` cut by the data
    points (``1 > alpha_0 > ... > alpha_{K-1} > -1``): the K-1 interior gaps are filled
    first, round-robin from the middle outwards, then the two outer gaps, so every data
    point has new neighbours before any gap gets a second one. Inside a gap with ``m``
    points they sit at its ``m + 1`` equal subdivisions. The outer gaps run to the interval
    ends (``+-1``), which is where Chebyshev points of the second kind start.

    Returns
    -------
    points : ndarray, shape (n,)
        Strictly decreasing worker points.
    systematic : ndarray of int, shape (k,)
        ``systematic[j]`` is the worker index whose point equals ``alpha_j``.
    """
    if n < k:
        raise ValueError(f"systematic points need n >= k, got k={k}, n={n}")
    alpha = chebyshev_first(k)
    edges = np.concatenate([[1.0], alpha, [-1.0]])  # gap g lies between edges[g], edges[g+1]
    counts = np.zeros(k + 1, dtype=int)
    interior = sorted(range(1, k), key=lambda g: (abs(g - k / 2), g))
    order = [*interior, 0, k] if k > 1 else [0, k]
    for extra in range(n - k):
        counts[order[extra % len(order)]] += 1
    points: list[float] = []
    systematic = np.empty(k, dtype=int)
    for g in range(k + 1):
        hi, lo = edges[g], edges[g + 1]
        m = counts[g]
        if g == 0:  # from +1 (included) down towards alpha_0
            pts = np.linspace(hi, lo, m, endpoint=False)
        elif g == k:  # from alpha_{K-1} (excluded) down to -1 (included)
            pts = np.linspace(hi, lo, m + 1)[1:]
        else:
            pts = np.linspace(hi, lo, m + 2)[1:-1]
        points.extend(pts.tolist())
        if g < k:
            systematic[g] = len(points)
            points.append(alpha[g])
    z = np.asarray(points)
    assert z.shape == (n,) and np.all(np.diff(z) < 0)
    return z, systematic
