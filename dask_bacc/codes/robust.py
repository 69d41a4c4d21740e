"""Locating corrupted (Byzantine) results among those returned (pure NumPy).

Two tests find candidates, and one confirms them (see docs/accuracy.md for the
measurements behind the choice):

* **ApproxIFER's rational error locator** (Soleymani et al., AAAI 2022). With a linear f
  the Berrut-coded results lie on ``g(z) = P(z)/q(z)``, ``deg P, deg q <= K - 1``, with
  ``q`` the encoder's denominator, common to every output coordinate. If A results are
  corrupted, ``y_i Q(z_i) = P(z_i)`` still holds at every returned point for
  ``Q = q * prod_{corrupted}(z - z_e)`` and a suitable P, both of degree ``K + A - 1``:
  2(K + A) unknowns up to scale, so at least ``2K + 2A - 1`` results are needed (with S
  stragglers: ``N >= 2K + S + 2A - 1``). Per output coordinate the least-squares
  solution (smallest right singular vector, in the Chebyshev basis) gives Q, and the A
  points with the smallest ``|Q(z_i)|`` get a vote; the most voted points are candidates.
  For a nonlinear f the model only holds approximately, so this test alone misfires.
* **Leave-one-out consistency.** Each returned point is predicted from the others with
  Berrut's interpolant; its residual is divided by the error expected there (the
  self-calibrating embedded estimate of :mod:`dask_bacc.codes.estimate` at that point,
  from the same others), giving a ratio ``t`` that is about 1 for consistent results.
  Repeatedly taking the point with the largest ``t`` gives more candidates.
* **Confirmation.** ``t`` is recomputed with every candidate removed from the predicting
  set (a corrupted neighbour can no longer mask or smear another), and a candidate is
  excluded only if its ``t`` exceeds ``tau`` (default 4): without corruption nothing is
  excluded and the decode is unchanged.

A corruption is detectable only when it is large against the interpolation error at its
point (several times the leave-one-out residual); smaller ones pass, but then they move
the decoded blocks by no more than a few times the decoding error that is there anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import numpy as np
from numpy.polynomial import chebyshev
from numpy.typing import NDArray

from ._types import Blocks, FloatArray, Returned
from .base import Code, InterpolatingCode
from .berrut import BerrutCode
from .estimate import MAX_CALIBRATION, _sorted, loo_matrices, loo_pair, unit_scale

__all__ = [
    "DEFAULT_TAU",
    "Screening",
    "approxifer_votes",
    "detect_inconsistent",
    "locate_corrupted",
    "loo_consistency",
    "required_results",
    "robust_decode",
]

#: A result is excluded (or flagged) when its leave-one-out residual exceeds this many
#: times the error expected at its point.
DEFAULT_TAU = 4.0
#: The ratio of an outermost returned point (predicted by extrapolation) is divided by this.
END_FACTOR = 2.0


def required_results(K: int, adversaries: int) -> int:
    """Results the rational error locator needs for ``adversaries`` corrupted ones: 2K + 2A - 1."""
    return 2 * int(K) + 2 * int(adversaries) - 1


@dataclass
class Screening:
    """What a consistency screening of the returned results found.

    Attributes
    ----------
    flagged : list of int
        Worker indices judged corrupted (excluded by :func:`locate_corrupted`, reported
        only by :func:`detect_inconsistent`).
    scores : dict of int to float
        Leave-one-out ratio ``t`` of every candidate (about 1 for consistent results).
    candidates : list of int
        Worker indices the locators proposed.
    """

    flagged: list[int] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)
    candidates: list[int] = field(default_factory=list)


def _check_interpolating(code: Code, what: str) -> InterpolatingCode:
    if not isinstance(code, InterpolatingCode):
        raise TypeError(
            f"{what} is implemented for the interpolating codes (Berrut, spline), "
            f"not {type(code).__name__}"
        )
    return code


def approxifer_votes(
    z: FloatArray, Y: FloatArray, K: int, adversaries: int, max_coords: int = 64
) -> FloatArray:
    """Share of output coordinates in which each point is among the A smallest ``|Q(z_i)|``.

    ``z`` (M,) are the returned worker points, ``Y`` (M, C) their results (or sketches).
    Uses at most ``max_coords`` coordinates (those with the largest spread).
    """
    M = z.size
    d = K + adversaries  # coefficients of P and of Q
    V = chebyshev.chebvander(z, d - 1)
    spread = Y.std(axis=0)
    cols = np.argsort(-spread)[: min(max_coords, Y.shape[1])]
    cols = cols[spread[cols] > 0]
    votes = np.zeros(M)
    if cols.size == 0:
        return votes
    ys = Y[:, cols] / np.abs(Y[:, cols]).max(axis=0)  # scale: conditioning only
    systems = np.concatenate(
        [np.broadcast_to(V, (cols.size, M, d)), -ys.T[:, :, None] * V[None]], axis=2
    )
    _, _, vt = np.linalg.svd(systems)  # batched over coordinates
    q = np.abs(np.einsum("md,cd->cm", V, vt[:, -1, d:]))
    smallest = np.argsort(q, axis=1)[:, :adversaries]
    np.add.at(votes, smallest.ravel(), 1.0)
    share: FloatArray = votes / cols.size
    return share


@overload
def loo_consistency(
    z: FloatArray,
    Y: FloatArray,
    exclude: Sequence[int] = ...,
    residuals: Literal[False] = ...,
    code: InterpolatingCode | None = ...,
) -> FloatArray: ...
@overload
def loo_consistency(
    z: FloatArray,
    Y: FloatArray,
    exclude: Sequence[int] = ...,
    *,
    residuals: Literal[True],
    code: InterpolatingCode | None = ...,
) -> tuple[FloatArray, FloatArray]: ...
@overload
def loo_consistency(
    z: FloatArray,
    Y: FloatArray,
    exclude: Sequence[int] = ...,
    residuals: bool = ...,
    code: InterpolatingCode | None = ...,
) -> FloatArray | tuple[FloatArray, FloatArray]: ...
def loo_consistency(
    z: FloatArray,
    Y: FloatArray,
    exclude: Sequence[int] = (),
    residuals: bool = False,
    code: InterpolatingCode | None = None,
) -> FloatArray | tuple[FloatArray, FloatArray]:
    """Leave-one-out ratio ``t_l`` of every point, predicting only from points not excluded.

    ``t_l = ||r0(z_l) - y_l|| / s_l`` where r0 is Berrut's interpolant through the
    predicting points other than l and ``s_l`` is the capped embedded estimate of its error
    at ``z_l`` (at least ``1e-9`` times the results' root mean square, so exactly
    consistent results give 0 and a single outlier among them an enormous ratio). As in
    the error estimate, the ratios are then calibrated on this very function: divided by
    their median over the predicted interior points (clipped to ``[1, 4]``; a median, so
    one corrupted point does not move it). The two outermost points are extrapolated from
    the others: their ratio is divided by :data:`END_FACTOR` as well. With ``residuals``
    also return the residuals ``||r1(z_l) - y_l||`` of the degree-1 Floater-Hormann
    prediction (Berrut's own residuals jump with the parity of the number of points: its
    first-order error term is proportional to ``sum_l (-1)^l``). With ``code``, its
    interpolant and companion take the places of Berrut's and Floater-Hormann's.
    """
    M = z.size
    k = np.arange(M)
    base = np.setdiff1d(k, np.asarray(exclude, dtype=int))
    floor = 1e-9 * float(np.sqrt(np.mean(Y**2))) + 1e-300
    in_base = np.isin(k, base)
    count = base.size - in_base  # predicting points of each k
    valid = count >= 2
    P0, P1 = loo_matrices(z, base, k) if code is None else loo_pair(code, z, base, k)
    p0, p1 = P0 @ Y, P1 @ Y
    # root mean square distance of each k's predicting points from its prediction
    sq = np.einsum("ij,ij->i", Y, Y)
    sum_sq = sq[base].sum() - np.where(in_base, sq, 0.0)
    sum_y = Y[base].sum(axis=0)[None, :] - np.where(in_base[:, None], Y, 0.0)
    n = np.maximum(count, 1)
    cap = np.sqrt(
        np.maximum(sum_sq / n - 2 * np.einsum("ij,ij->i", p0, sum_y) / n + _sqnorm(p0), 0.0)
    )
    scale = np.minimum(np.sqrt(_sqnorm(p1 - p0)), cap)
    if code is not None and valid.any():
        # two interpolants of the same order (spline, Floater-Hormann 3) can agree by
        # chance at one point: no expected error below half the typical one (measured:
        # false flags on clean smooth data 1.5% -> 0% at K=8, N=20, S=3; tests/test_robust)
        scale = np.maximum(scale, 0.5 * float(np.median(scale[valid])))
    rho = np.where(valid, np.sqrt(_sqnorm(p1 - Y)), 0.0)
    t = np.where(valid, np.sqrt(_sqnorm(p0 - Y)) / np.maximum(scale, floor), 0.0)
    if base.size >= 2:
        first = np.where(base[0] == k, base[1], base[0])
        last = np.where(base[-1] == k, base[-2], base[-1])
        interior = valid & (first < k) & (k < last)
    else:
        interior = np.zeros(M, dtype=bool)
    if interior.any():
        t /= float(np.clip(np.median(t[interior]), 1.0, MAX_CALIBRATION))
    # an outermost point is extrapolated, where the embedded estimate is least reliable
    # (clean end points were falsely flagged without this): demand twice as much
    t[~interior] /= END_FACTOR
    return (t, rho) if residuals else t


def _sqnorm(M: FloatArray) -> FloatArray:
    sq: FloatArray = np.einsum("ij,ij->i", M, M)
    return sq


def _greedy(
    z: FloatArray, Y: FloatArray, rounds: int, tau: float, code: InterpolatingCode | None
) -> list[int]:
    """Remove the least consistent point while its ratio exceeds ``tau``, ``rounds`` times."""
    out: list[int] = []
    for _ in range(rounds):
        t = loo_consistency(z, Y, out, code=code)
        t[out] = -1.0
        i = int(np.argmax(t))
        if t[i] <= tau:
            break
        out.append(i)
    return out


def _confirm(
    z: FloatArray,
    Y: FloatArray,
    candidates: Iterable[int],
    limit: int,
    tau: float,
    code: InterpolatingCode | None,
) -> tuple[list[int], dict[int, float]]:
    """The candidates to exclude (at most ``limit``), and every candidate's ratio.

    A candidate is excluded when it is inconsistent with the rest (ratio above ``tau``)
    predicted without any candidate that still looks inconsistent (so a corrupted
    neighbour can neither mask it nor smear into it), and when leaving the excluded set
    out makes the other points' leave-one-out residuals smaller in total: leaving out a
    clean point only widens the gaps, which makes the others' predictions worse.
    """
    candidates = sorted(set(int(c) for c in candidates))
    if not candidates:
        return [], {}
    _, rho0 = loo_consistency(z, Y, residuals=True, code=code)
    excluded = candidates
    for _ in range(3):  # without every candidate, then without those still inconsistent
        t = loo_consistency(z, Y, excluded, code=code)
        strong = [c for c in candidates if t[c] > tau]
        if strong == excluded:
            break
        excluded = strong
    scores = {c: float(t[c]) for c in candidates}
    chosen = sorted((c for c in candidates if t[c] > tau), key=lambda c: -t[c])[:limit]
    while chosen:
        _, rho = loo_consistency(z, Y, chosen, residuals=True, code=code)
        rest = np.setdiff1d(np.arange(z.size), chosen)
        if float(np.sum(rho[rest] ** 2)) < float(np.sum(rho0[rest] ** 2)):
            break
        chosen = chosen[:-1]  # drop the least inconsistent one and check again
    return sorted(chosen), scores


def locate_corrupted(
    code: Code,
    results: Blocks,
    returned: Returned,
    adversaries: int,
    *,
    tau: float = DEFAULT_TAU,
    max_coords: int = 64,
) -> Screening:
    """Find up to ``adversaries`` corrupted results among ``returned`` (interpolating codes).

    ApproxIFER's rational locator proposes candidates for the Berrut codes only (its
    model is Berrut's rational encoder); for the others the ``2A`` least consistent
    points and ``2A`` rounds of the greedy leave-one-out test do. Confirmation is the
    same for every code.

    Parameters
    ----------
    code : InterpolatingCode
        The job's code (Berrut or spline, plain or systematic).
    results : array, shape ``(len(returned), ...)``
        The results, or the same linear sketch of each (e.g.
        :func:`dask_bacc.codes.estimate.count_sketch`).
    returned : sequence of int
        Worker indices, in the order of ``results``.
    adversaries : int
        A, the most corrupted results to locate; needs ``len(returned) >= 2K + 2A - 1``.
    tau : float
        Confirmation threshold on the leave-one-out ratio.

    Returns
    -------
    Screening
        ``flagged`` holds the worker indices to exclude (at most A; empty when nothing is
        inconsistent).
    """
    code = _check_interpolating(code, "robust decoding")
    idx, Y = _sorted(code, returned, np.asarray(results))
    Y = unit_scale(Y)
    A = int(adversaries)
    if A < 1:
        return Screening()
    need = required_results(code.K, A)
    if idx.size < need:
        raise ValueError(
            f"locating {A} corrupted result(s) with K={code.K} needs at least 2K + 2A - 1 = "
            f"{need} results, got {idx.size}"
        )
    z = code.worker_points[idx]
    how = _loo_code(code)
    if isinstance(code, BerrutCode):
        votes = approxifer_votes(z, Y, code.K, A, max_coords)
        candidates = set(np.argsort(-votes, kind="stable")[: 2 * A].tolist())
        candidates |= set(_greedy(z, Y, A, tau, how))
    else:
        # a spline's corrupted neighbours inflate each other's expected error, so none
        # may stand out alone: the 2A least consistent points are candidates as well
        t = loo_consistency(z, Y, code=how)
        candidates = set(np.argsort(-t, kind="stable")[: 2 * A].tolist())
        candidates |= set(_greedy(z, Y, 2 * A, tau, how))
    flagged, scores = _confirm(z, Y, candidates, A, tau, how)
    return Screening(
        flagged=[int(idx[i]) for i in flagged],
        scores={int(idx[i]): s for i, s in scores.items()},
        candidates=sorted(int(idx[i]) for i in candidates),
    )


def detect_inconsistent(
    code: Code,
    results: Blocks,
    returned: Returned,
    *,
    tau: float = DEFAULT_TAU,
    max_flags: int = 2,
) -> Screening:
    """Flag results inconsistent with the others (report only; cheap: no rational fits).

    The leave-one-out test of :func:`locate_corrupted` without ApproxIFER's locator and
    without its requirement on the number of results (at least 4 are needed). Returns an
    empty screening for codes that do not interpolate (exact codes).
    """
    if not isinstance(code, InterpolatingCode):
        return Screening()
    idx, Y = _sorted(code, returned, np.asarray(results))
    Y = unit_scale(Y)
    if idx.size < 4:
        return Screening()
    z = code.worker_points[idx]
    rounds = min(int(max_flags), idx.size - 3)
    how = _loo_code(code)
    candidates = _greedy(z, Y, rounds, tau, how)
    flagged, scores = _confirm(z, Y, candidates, rounds, tau, how)
    return Screening(
        flagged=[int(idx[i]) for i in flagged],
        scores={int(idx[i]): s for i, s in scores.items()},
        candidates=sorted(int(idx[i]) for i in candidates),
    )


def _loo_code(code: InterpolatingCode) -> InterpolatingCode | None:
    """None selects Berrut's vectorised leave-one-out matrices."""
    return None if isinstance(code, BerrutCode) else code


def robust_decode(
    code: Code,
    results: Blocks,
    returned: Returned,
    adversaries: int,
    *,
    tau: float = DEFAULT_TAU,
) -> tuple[NDArray[Any], Screening]:
    """Locate up to ``adversaries`` corrupted results and decode without them.

    Returns the decoded blocks (as :meth:`Code.decode`) and the :class:`Screening`.
    """
    results = np.asarray(results)
    screening = locate_corrupted(code, results, returned, adversaries, tau=tau)
    keep = [col for col, i in enumerate(returned) if int(i) not in set(screening.flagged)]
    used = [int(returned[col]) for col in keep]
    return code.decode(results[keep], used), screening
