"""Local-support spline codes: each coded share mixes at most ``support`` neighbouring blocks.

Berrut and the cubic-spline codes mix every data block into every share, so each of the N
coded tasks reads all K partitions (N * K transfers per answer). This code's encoder is a
*local* spline through the points ``(alpha_j, X_j)``:

- ``support=4`` (default): the cubic cardinal spline (Catmull-Rom: a C1 piecewise cubic,
  each piece a combination of the 4 blocks around it, the cubic B-splines' support),
- ``support=2``: the linear B-spline (piecewise-linear interpolation, 2 blocks per share).

Both interpolate the blocks (``u(alpha_j) = X_j``), so ``g(alpha_j) = f(X_j)`` for
``g(z) = f(u(z))``, and a share at ``z_i`` reads only the blocks whose basis functions are
nonzero at ``z_i``.

The decoder is local too: block j is the natural cubic spline through the ``WINDOW``
returned points nearest ``alpha_j`` on each side, so a decoded block reads at most
``2 * WINDOW`` results. It was chosen by measurement (``benchmarks/local_support.py``,
docs/codes.md): the least-squares fit in the encoder's own basis, and local Lagrange
decoders, had 90th-percentile errors 2-3x Berrut's where a straggler left a block with
few returned points nearby; the windowed spline matched the full natural spline.

A block with no returned share within one block spacing is decoded from nothing that read
it with a positive weight: such a set is not decodable (:meth:`BSplineCode.can_decode` is
False, so a job waits for a covering share, and :meth:`BSplineCode.decoding_matrix`
raises :class:`~dask_bacc.exceptions.InsufficientResults` naming the blocks), never a
silent gap.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import InsufficientResults
from ._types import CodeConfig, FloatArray, Returned
from .base import InterpolatingCode, as_returned
from .berrut import floater_hormann_matrix
from .points import place_systematic
from .spline import spline_matrix

__all__ = ["BSplineCode", "local_basis", "windowed_spline"]

#: Returned points on each side of a data point that its decode reads (docs/codes.md)
WINDOW = 3


def _catmull_rom(s: FloatArray) -> FloatArray:
    """Weights of blocks k-1, k, k+1, k+2 at ``s`` in [0, 1] of cell [alpha_k, alpha_k+1]."""
    s2, s3 = s * s, s * s * s
    return 0.5 * np.stack(
        [-s3 + 2 * s2 - s, 3 * s3 - 5 * s2 + 2, -3 * s3 + 4 * s2 + s, s3 - s2], axis=-1
    )


def local_basis(targets: FloatArray, K: int, support: int) -> FloatArray:
    """The local interpolating spline through K blocks at equispaced points, evaluated at
    ``targets``: the (len(targets), K) matrix ``B`` with ``u(t) = B @ X``.

    The data points are ``linspace(1, -1, K)`` (decreasing, like the other codes');
    targets outside ``[-1, 1]`` take the end cell's piece. ``support=4``: Catmull-Rom,
    with the ends extended linearly (ghost blocks ``2 X_0 - X_1``), so a row has at most
    4 nonzeros; ``support=2``: piecewise linear, at most 2.
    """
    t = np.atleast_1d(np.asarray(targets, dtype=float))
    out = np.zeros((t.size, K))
    if K == 1:
        out[:, 0] = 1.0
        return out
    pos = (1.0 - t) * (K - 1) / 2.0  # 0 at alpha_0 = 1, K-1 at alpha_{K-1} = -1
    # a target on a data point (a systematic share) lands exactly on it: its row is then
    # an exact unit row (data_rows), not 1 - 1e-16 plus crumbs on the neighbours
    near = np.round(pos)
    pos = np.where(np.abs(pos - near) < 1e-9, near, pos)
    k = np.clip(np.floor(pos), 0, K - 2).astype(int)
    s = pos - k
    rows = np.arange(t.size)
    if support == 2:
        np.add.at(out, (rows, k), 1.0 - s)
        np.add.at(out, (rows, k + 1), s)
    else:
        w = _catmull_rom(s)
        for col in range(4):
            j = k - 1 + col
            # ghosts beyond the ends: X_-1 = 2 X_0 - X_1, X_K = 2 X_{K-1} - X_{K-2}
            lo, hi = j < 0, j > K - 1
            mid = ~(lo | hi)
            np.add.at(out, (rows[mid], j[mid]), w[mid, col])
            for side, (end, inner) in ((lo, (0, 1)), (hi, (K - 1, K - 2))):
                r = rows[side]
                np.add.at(out, (r, np.full(r.size, end)), 2.0 * w[side, col])
                np.add.at(out, (r, np.full(r.size, inner)), -w[side, col])
        out[np.abs(out) < 1e-15] = 0.0  # exact zeros: a share reads only its support
    return out


def windowed_spline(targets: FloatArray, nodes: FloatArray, window: int = WINDOW) -> FloatArray:
    """The natural cubic spline through the ``window`` nodes nearest each target on
    either side, evaluated at the targets: a (len(targets), len(nodes)) matrix with at
    most ``2 * window`` nonzeros per row. ``nodes`` are distinct, in any order; a target
    on a node gets its unit row."""
    t = np.atleast_1d(np.asarray(targets, dtype=float))
    x = np.asarray(nodes, dtype=float)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    out = np.zeros((t.size, x.size))
    for r, tr in enumerate(t):
        pos = int(np.searchsorted(xs, tr))
        lo, hi = max(pos - window, 0), min(pos + window, xs.size)
        out[r, order[lo:hi]] = spline_matrix(np.array([tr]), xs[lo:hi])[0]
    return out


class BSplineCode(InterpolatingCode):
    """Local-support spline code: each share reads at most ``support`` neighbouring blocks.

    Parameters
    ----------
    K : int
        Number of data blocks, at the equispaced points ``linspace(1, -1, K)``.
    N : int
        Number of coded blocks, at ``linspace(1, -1, N)`` (``systematic=False``; the two
        end shares are the end blocks themselves), or those with the K nearest moved onto
        the data points.
    support : {4, 2}, default 4
        Blocks per share: 4 for the cubic cardinal (Catmull-Rom) spline, 2 for the linear
        B-spline.
    systematic : bool, default False
        Worker ``systematic_workers[j]`` receives X_j itself (reading one partition) and
        returns f(X_j) exactly; a block is decoded exactly when its systematic worker
        returned.

    Notes
    -----
    Decodable when every block has a returned share within one block spacing
    (:meth:`uncovered`). docs/codes.md compares it with Berrut and the spline code.
    """

    name = "bspline"
    exact = False
    # the companion (Floater-Hormann of degree 1) overestimates on smooth data: the
    # calibration may scale it down as well as up
    calibration_range = (0.25, 4.0)
    estimate_method = "embedded-fh1"
    companion_degree = 1

    def __init__(self, K: int, N: int, support: int = 4, systematic: bool = False):
        super().__init__(K, N)
        if isinstance(support, bool) or support not in (2, 4):
            raise ValueError(f"support must be 2 or 4 blocks, got {support!r}")
        if not isinstance(systematic, (bool, np.bool_)):
            raise TypeError(f"systematic must be a bool, got {type(systematic).__name__}")
        if systematic and self.N < self.K:
            raise ValueError(f"systematic bspline needs N >= K, got K={self.K}, N={self.N}")
        self.support = int(support)
        self.systematic = bool(systematic)
        self._alpha = np.linspace(1.0, -1.0, self.K) if self.K > 1 else np.zeros(1)
        z = np.linspace(1.0, -1.0, self.N) if self.N > 1 else np.zeros(1)
        if self.systematic:
            self._z, self.systematic_workers = place_systematic(self._alpha, z)
        else:
            self._z, self.systematic_workers = z, None
        self._spacing = 2.0 / max(self.K - 1, 1)

    @property
    def min_results(self) -> int:
        # a returned point lies within one spacing of at most the two blocks around it
        return max(1, (self.K + 1) // 2)

    def uncovered(self, returned: Returned) -> list[int]:
        """Blocks with no returned share within one block spacing (no returned share read
        them with a positive weight): the decode knows nothing near them."""
        idx = as_returned(returned, self.N) if len(returned) else np.zeros(0, dtype=np.intp)
        if self.K == 1:
            return [] if idx.size else [0]
        near = np.abs(self._alpha[:, None] - self._z[idx][None, :]) < self._spacing * (1 - 1e-9)
        gaps: list[int] = np.flatnonzero(~near.any(axis=1)).tolist()
        return gaps

    def can_decode(self, returned: Returned) -> bool:
        return len(returned) > 0 and not self.uncovered(returned)

    def interpolant(self, targets: FloatArray, nodes: FloatArray) -> FloatArray:
        return windowed_spline(targets, nodes)

    def companion(self, targets: FloatArray, nodes: FloatArray) -> FloatArray:
        # Floater-Hormann of degree 1 through the same points. Not of the decoder's order
        # (the spline code pairs its decoder with degree 3): g = f(u) has a jump in its
        # second derivative at every data point, where the two smooth interpolants of
        # order 4 agree while both miss it; with degree 3 the estimate was below half the
        # true error in every decode of some small-K cells, with degree 1 in at most 7%
        # of a cell's decodes (K in 3..16, i.i.d. and smooth rows; docs/codes.md)
        return floater_hormann_matrix(targets, nodes, 1)

    def decoding_matrix(self, returned: Returned) -> FloatArray:
        idx = as_returned(returned, self.N)
        gaps = self.uncovered(idx)
        if gaps:
            raise InsufficientResults(
                f"{self!r} cannot decode blocks {gaps}: no returned share lies within one "
                f"block spacing of them (returned: {sorted(idx.tolist())})"
            )
        return super().decoding_matrix(idx)

    def encoding_matrix(self) -> FloatArray:
        return local_basis(self._z, self.K, self.support)

    def get_config(self) -> CodeConfig:
        return {**super().get_config(), "support": self.support, "systematic": self.systematic}
