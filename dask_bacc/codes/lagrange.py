"""Lagrange coded computing: the exact baseline for polynomial f of known degree."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.polynomial import chebyshev
from numpy.typing import NDArray

from ..exceptions import InsufficientResults
from ._types import Blocks, CodeConfig, FloatArray, Returned
from .base import Code, _positive_int, as_returned, refuse_rounded_integers
from .berrut import barycentric_matrix
from .points import chebyshev_first, chebyshev_second

__all__ = ["LagrangeCode", "lagrange_matrix"]


def lagrange_matrix(targets: FloatArray, nodes: FloatArray) -> FloatArray:
    """Lagrange basis of ``nodes`` evaluated at ``targets`` (barycentric form, second kind).

    Returns the (len(targets), len(nodes)) matrix ``L[t, l] = ell_l(x_t)``; a target that
    coincides with a node gets that node's unit row.
    """
    gaps = nodes[:, None] - nodes[None, :]
    np.fill_diagonal(gaps, 1.0)
    # scale each factor by 2 (the length of [-1, 1] is 2) so the products neither under-
    # nor overflow for a few hundred nodes; the common factor cancels in the ratio
    weights = 1.0 / np.prod(2.0 * gaps, axis=1)
    return barycentric_matrix(targets, nodes, weights)


class LagrangeCode(Code):
    """Lagrange coded computing (LCC), exact for polynomial f of degree ``degree``.

    The encoder is the degree K-1 Lagrange interpolant u(z) through (alpha_j, X_j); f(u(z))
    then has degree ``degree * (K-1)``, so any ``degree * (K-1) + 1`` results determine it.
    Decoding fits that polynomial to every returned result by least squares in the
    Chebyshev basis (an interpolation at the threshold itself) and evaluates it at the data
    points. With a wide gap in the returned points (adjacent stragglers, large K, N well
    above 2K) the fit is ill-conditioned in floating point: :meth:`~Code.amplification`
    measures it, and above :data:`~dask_bacc.codes.base.AMPLIFICATION_LIMIT` the error
    estimate no longer vouches for an exact decode.

    Parameters
    ----------
    K, N : int
        Data and coded blocks; N must be at least the recovery threshold.
    degree : int
        Total degree of f as a polynomial in the entries of its input block.

    Raises
    ------
    InsufficientResults
        From :meth:`decoding_matrix` / :meth:`decode` with fewer results than the threshold.
    """

    name = "lagrange"
    exact = True
    check_spare = 1

    @property
    def assumption(self) -> str:
        return f"f is a polynomial of degree <= {self.degree}"

    def __init__(self, K: int, N: int, degree: int = 1):
        super().__init__(K, N)
        self.degree = _positive_int("degree", degree)
        if self.N < self.min_results:
            raise ValueError(
                f"Lagrange code with K={self.K}, degree={self.degree} needs N >= "
                f"{self.min_results} coded tasks (degree*(K-1)+1), got N={self.N}"
            )
        self._alpha = chebyshev_first(self.K)
        self._z = chebyshev_second(self.N)

    @property
    def min_results(self) -> int:
        return self.degree * (self.K - 1) + 1

    def encoding_matrix(self) -> FloatArray:
        return lagrange_matrix(self._z, self._alpha)

    def encode(self, blocks: Blocks) -> NDArray[Any]:
        """Encode K blocks into N coded blocks (:meth:`Code.encode`).

        Raises
        ------
        ValueError
            (:class:`~dask_bacc.exceptions.InvalidInput`) For 64-bit integer blocks
            beyond 2**53: every share mixes blocks in float64, which rounds them, and an
            exact decode would hide it.
        """
        stacked = self._stack(blocks, self.K, "blocks")
        refuse_rounded_integers(stacked, "Lagrange")
        return super().encode(stacked)

    def decoding_matrix(self, returned: Returned) -> FloatArray:
        idx = as_returned(returned, self.N)
        need = self.min_results
        if idx.size < need:
            raise InsufficientResults(
                f"Lagrange code (K={self.K}, degree={self.degree}) needs {need} results, "
                f"got {idx.size}"
            )
        # least squares over every result, not interpolation through a subset: where a gap
        # makes a subset interpolant blow up (errors of 6e22 at K=32, N=128) the extra
        # points keep it near 1; lstsq's SVD cut-off does too (a QR solve gave 1e14)
        fit = chebyshev.chebvander(self._z[idx], need - 1)
        coefficients = np.linalg.lstsq(fit, np.eye(idx.size), rcond=None)[0]
        return chebyshev.chebvander(self._alpha, need - 1) @ coefficients

    def check_matrix(self, returned: Returned) -> FloatArray | None:
        """``I - V V^+`` over the returned points (V: the Chebyshev basis up to the
        threshold's degree): zero on results of a polynomial f of this degree. None at the
        threshold itself, where any values fit."""
        idx = as_returned(returned, self.N)
        need = self.min_results
        if idx.size <= need:
            return None
        V = chebyshev.chebvander(self._z[idx], need - 1)
        return np.eye(idx.size) - V @ np.linalg.pinv(V)

    def get_config(self) -> CodeConfig:
        return {**super().get_config(), "degree": self.degree}
