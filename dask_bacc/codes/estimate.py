"""A-posteriori error estimates for decoded blocks (pure NumPy; see docs/accuracy.md).

Berrut decoding evaluates the rational interpolant r of ``g(z) = f(u(z))`` through the
returned worker points at the data points ``alpha_j``; since the encoder interpolates the
data, ``g(alpha_j) = f(X_j)``, so the decoding error is the interpolation error of r at the
data points. It is estimated from the returned results alone, in five steps:

1. **Embedded pair.** Decode a second time with the Floater-Hormann interpolant of degree
   1 through the same points (one order more accurate than Berrut's, which is
   Floater-Hormann of degree 0) and take the difference: ``e_j = ||r1(alpha_j) -
   r0(alpha_j)||``. Where g is smooth at the scale of the point spacing, r1 is much closer
   to g than r0 is, so ``e_j`` is close to the true error (the idea of embedded
   Runge-Kutta pairs).
2. **Self-calibration by leave-one-out.** At (up to ``loo_points``) interior returned
   points ``z_l`` the truth is known: decode ``z_l`` from the other points with both
   interpolants and compare the true leave-one-out error ``||r0_{-l}(z_l) - y_l||`` with the
   embedded estimate there. Their ratio (root of summed squares) is how much the pair
   underestimates on this very function; it multiplies ``e_j``, clipped to
   ``[1, MAX_CALIBRATION]`` (the pair is never scaled down, and never up by more than 4;
   the spline codes: ``[0.25, 4]``).
3. **Prediction bound.** The factor is at least ``prediction_factor`` of the
   pointwise leave-one-out ratios: half their one-sided 95% upper prediction bound
   (log-normal model, Student's t with m - 1 degrees of freedom for m informative
   points), so that the estimate is at least half the true error at a data point in 95%
   of cases when that point behaves like the left-out ones. Few or scattered ratios (small
   K, few results, a function rough at the spacing of the points) widen it; many
   consistent ones leave step 2 in charge. With fewer than
   ``MIN_CALIBRATION_POINTS`` informative points (3 results: the one interior point
   is predicted from two, where both interpolants are the same line) nothing checks the
   pair: the estimate is ``nan``, method ``"unreliable"``, and a job warns.
4. **Balance and wide gaps.** A test checks the pair only through as many points as
   the companion's degree needs (``full_pair_nodes``: the spline codes' tests from
   4 results, through 3 points, check a quadratic, not the cubic of the decode), and a
   data point more evenly surrounded by returned points than a test (``balance``) is
   checked by the tests at least as balanced (their prediction bound; with none of them,
   ``"unreliable"``). A data point in a gap of the returned points wider than the median
   leave-one-out test spans (adjacent stragglers, a straggler where points are sparse)
   is checked by the tests that open a gap at least as wide: single points, or runs of
   consecutive interior points, left out; its factor is at least the prediction bound of
   those ratios, and with fewer than two of them the estimate is ``"unreliable"`` too.
5. **Cap.** Across a wide gap in the returned points (adjacent stragglers) the linear
   interpolant of a rough g can overshoot wildly, while Berrut's estimate stays a
   weighted average of the results. The estimate of block j is therefore capped by the
   root mean square distance from the decoded block to the returned results: the error
   of knowing nothing about ``f(X_j)`` beyond the spread of the values seen.

Relative errors divide by the norm of the decoded block (the true one is unknown), at most
the largest norm of the returned results (a decode across a wide gap can overshoot far
beyond every result, which would otherwise make its relative estimate look small). The
calibration benchmark (``benchmarks/accuracy.py``) measured this method against leave-one-out
residuals alone, split-half re-decoding, higher-degree embedded pairs and a variogram
(kriging) model; this one had the most cells within a factor of 2 of the true error.

The inputs may be the coded results themselves or any fixed linear sketch of them (all
steps only take norms of linear combinations of results): the runtime uses
:func:`count_sketch` on each worker so that only ``sketch_size`` numbers per result reach
the client.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
from numpy.typing import ArrayLike

from ..exceptions import InsufficientResults
from ._types import Blocks, FloatArray, IndexArray, IntArray, Returned
from .base import AMPLIFICATION_LIMIT, Code, InterpolatingCode, as_returned
from .berrut import COINCIDENCE_TOL, BerrutCode, barycentric_matrix, floater_hormann_weights
from .grouped import GroupedCode
from .transform import Transform

__all__ = [
    "MAX_CALIBRATION",
    "MIN_CALIBRATION_POINTS",
    "MIN_RESULTS",
    "ErrorEstimate",
    "ErrorEstimateDict",
    "barycentric_matrix",
    "count_sketch",
    "estimate_error",
    "floater_hormann_weights",
    "loo_pair",
    "prediction_factor",
    "sample_sketch",
    "sketch",
    "t95",
]

#: The leave-one-out calibration factor is clipped to ``[1, MAX_CALIBRATION]``.
MAX_CALIBRATION = 4.0
#: Fewest results an approximate code's estimate is computed from (else it is unknown).
MIN_RESULTS = 3


class ErrorEstimateDict(TypedDict):
    """:meth:`ErrorEstimate.to_dict`: the estimate's fields, ``nan`` as ``None``."""

    overall: float | None
    per_block: list[float | None]
    method: str
    calibration: float
    n_results: int


@dataclass
class ErrorEstimate:
    """Estimated relative error of a decode (``CodedJob.report`` carries its fields).

    Attributes
    ----------
    overall : float
        ``||estimate - truth|| / ||truth||`` over the whole output, estimated; ``nan`` when
        it cannot be estimated (fewer than :data:`MIN_RESULTS` results for an approximate
        code, or an exact code's ill-conditioned decode).
    per_block : ndarray, shape (K,)
        The same for each decoded block; 0 for blocks decoded exactly.
    method : str
        ``"exact"`` (an exact decode: every block is f(X_j)), ``"embedded-fh1"`` (see the
        module docstring; ``"embedded-fh3"`` for the spline codes), ``"ill-conditioned"``
        (an exact code whose decode from these results amplifies rounding errors by more
        than :data:`~dask_bacc.codes.base.AMPLIFICATION_LIMIT`: it may be far from exact),
        ``"unreliable"`` (fewer than ``MIN_CALIBRATION_POINTS`` results can be checked
        by leave-one-out, e.g. 3 results: no figure to vouch for) or ``"unknown"``.
    calibration : float
        The leave-one-out factor applied (1 for exact decodes).
    n_results : int
        Results the estimate was computed from.
    """

    overall: float
    per_block: FloatArray
    method: str
    calibration: float = 1.0
    n_results: int = 0
    capped: list[int] = field(default_factory=list)

    def to_dict(self) -> ErrorEstimateDict:
        """JSON-serialisable fields (``nan`` becomes ``None``)."""

        def num(x: float) -> float | None:
            return None if not math.isfinite(x) else float(x)

        return {
            "overall": num(self.overall),
            "per_block": [num(x) for x in self.per_block],
            "method": self.method,
            "calibration": float(self.calibration),
            "n_results": int(self.n_results),
        }


#: Entries of a result a sketch reads at most: larger results are sampled (same positions
#: for every result of a job), so sketching costs far less than the decode it estimates
SKETCH_MAX_ENTRIES = 1 << 18


def count_sketch(
    array: ArrayLike, size: int = 256, seed: int = 0, max_entries: int = SKETCH_MAX_ENTRIES
) -> FloatArray:
    """A linear sketch of ``array`` (flattened) into ``size`` numbers that keeps norms.

    Each entry is added, with a random sign, into one of ``size`` buckets (a count sketch):
    the sketch of a linear combination of equal-shape arrays is the same combination of
    their sketches, and ``||sketch(x)||^2`` is ``||x||^2`` in expectation (relative spread
    about ``sqrt(2/size)``). Hashes depend on ``seed`` and the array's size only, so equal-
    shape results of one job are sketched consistently on different workers. Arrays with
    at most ``size`` entries are returned flattened (exact). Arrays with more than
    ``max_entries`` entries are sampled first: ``max_entries`` positions drawn with
    replacement (again from ``seed`` and the size only), scaled by ``sqrt(n / max_entries)``
    so norms stay unbiased; linearity holds as before. Costs one pass over at most
    ``max_entries`` entries and memory for 2**20 hashes at a time.
    """
    flat = np.asarray(array).reshape(-1)
    if flat.dtype.kind not in "biuf":
        raise TypeError(f"can only sketch real numeric arrays, got dtype {flat.dtype}")
    if flat.size <= size:
        return flat.astype(np.float64)
    n = flat.size
    positions, slots = _sketch_plan(seed, n, size, max_entries)
    if positions is not None:
        flat = flat[positions].astype(np.float64) * np.sqrt(n / max_entries)
    out = np.zeros(2 * size)
    for start, chunk_slots in zip(range(0, flat.size, _SKETCH_CHUNK), slots, strict=True):
        part = flat[start : start + _SKETCH_CHUNK].astype(np.float64, copy=False)
        out += np.bincount(chunk_slots, weights=part, minlength=2 * size)
    return out[0::2] - out[1::2]


_SKETCH_CHUNK = 1 << 20


@functools.lru_cache(maxsize=4)
def _sketch_plan(
    seed: int, n: int, size: int, max_entries: int
) -> tuple[IntArray | None, tuple[IntArray, ...]]:
    """The sampled positions (None: every entry) and each chunk's bucket-and-sign slots of
    :func:`count_sketch`: they depend on ``(seed, n)`` only, so every equal-shape result of
    a job shares them (drawing and sorting them was most of a sketch's cost)."""
    positions = None
    m = n
    if n > max_entries:
        positions = np.random.default_rng([seed, n, 1]).integers(0, n, max_entries)
        positions.sort()  # memory order: a faster gather
        m = max_entries
    slots = tuple(
        # bucket * 2 + sign bit
        np.random.default_rng([seed, n, start // _SKETCH_CHUNK]).integers(
            0, 2 * size, min(_SKETCH_CHUNK, m - start), dtype=np.int64
        )
        for start in range(0, m, _SKETCH_CHUNK)
    )
    for a in (positions, *slots):
        if a is not None:
            a.flags.writeable = False  # shared between calls (and threads)
    return positions, slots


def sample_sketch(array: ArrayLike, size: int = 256, seed: int = 0) -> FloatArray:
    """The same whole rows (last axis) of every equal-shape result, about ``size`` entries.

    Unlike :func:`count_sketch` a sample commutes with elementwise and row-wise maps, so
    the error of a decode in a transformed domain can be measured after the inverse map
    (``estimate_error(transform=...)``). Rows are drawn without replacement from ``seed``
    and the shape only; returns shape ``(rows, width)`` (the whole array, as rows, when
    it has at most that many).
    """
    arr = np.asarray(array)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"can only sketch real numeric arrays, got dtype {arr.dtype}")
    rows = arr.reshape(-1, arr.shape[-1]) if arr.ndim else arr.reshape(1, 1)
    n, width = rows.shape
    take = max(1, size // max(width, 1))
    if n > take:
        pick = np.random.default_rng([seed, n, width]).choice(n, take, replace=False)
        rows = rows[np.sort(pick)]
    return rows.astype(np.float64)


def sketch(
    array: ArrayLike, size: int = 256, seed: int = 0, transform: Transform | None = None
) -> FloatArray:
    """The sketch :func:`estimate_error` needs: a count sketch, or with ``transform`` a
    row sample (:func:`sample_sketch`)."""
    if transform is None:
        return count_sketch(array, size, seed)
    return sample_sketch(array, size, seed)


def _sorted(code: Code, returned: Returned, results: ArrayLike) -> tuple[IndexArray, FloatArray]:
    idx = as_returned(returned, code.N)
    order = np.argsort(idx, kind="stable")  # ascending worker index: monotone points
    Y = np.asarray(results, dtype=np.float64).reshape(idx.size, -1)[order]
    return idx[order], Y


def _norms(M: FloatArray) -> FloatArray:
    sq: FloatArray = np.einsum("ij,ij->i", M, M)
    return np.sqrt(sq)


def loo_matrices(z: FloatArray, base: IntArray, targets: IntArray) -> tuple[FloatArray, FloatArray]:
    """Leave-one-out interpolation matrices, all targets at once.

    For each target point ``z[k]`` (k in ``targets``), the Berrut (P0) and degree-1
    Floater-Hormann (P1) interpolants through the points ``base`` (sorted indices into
    ``z``, a monotone array) other than k, evaluated at ``z[k]``: rows of shape
    ``(len(targets), len(z))`` with zeros outside ``base`` minus k. Rows with fewer than
    2 points left are zero. Same values as :func:`barycentric_matrix` with
    :func:`floater_hormann_weights` per target, without the loop.
    """
    base = np.asarray(base, dtype=int)
    targets = np.asarray(targets, dtype=int)
    nb = base.size
    zb = z[base]
    # position of each target in base, or -1 if it is not a base point
    pos = np.full(z.size, -1)
    pos[base] = np.arange(nb)
    p = pos[targets][:, None]  # (T, 1)
    j = np.arange(nb)[None, :]  # (1, nb)
    keep = j != p
    rank = j - ((p >= 0) & (j > p))
    prev = j - 1 - ((p >= 0) & (j - 1 == p))
    nxt = j + 1 + ((p >= 0) & (j + 1 == p))
    n_left = (nb - (p >= 0))[:, 0]  # points in each leave-one-out set
    zpad = np.concatenate([[np.nan], zb, [np.nan]])
    left = np.where(prev >= 0, 1.0 / np.abs(zb[j] - zpad[np.clip(prev, -1, nb) + 1]), 0.0)
    right = np.where(nxt <= nb - 1, 1.0 / np.abs(zpad[np.clip(nxt, -1, nb) + 1] - zb[j]), 0.0)
    sign = np.where(rank % 2 == 0, 1.0, -1.0)
    w0 = np.where(keep, sign, 0.0)
    w1 = np.where(keep, sign * (left + right), 0.0)
    w1 = np.where(n_left[:, None] >= 2, w1, w0)  # one point left: degree 0
    diff = z[targets][:, None] - zb[None, :]
    hit = keep & (np.abs(diff) <= COINCIDENCE_TOL)
    out: list[FloatArray] = []
    for w in (w0, w1):
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(keep, w / np.where(hit | ~keep, 1.0, diff), 0.0)
        terms[hit] = 0.0
        rows_hit = hit.any(axis=1)
        total = terms.sum(axis=1)
        M = np.zeros((targets.size, z.size))
        ok = n_left >= 2
        with np.errstate(divide="ignore", invalid="ignore"):
            vals = terms / np.where(rows_hit | (total == 0), 1.0, total)[:, None]
        vals[rows_hit] = hit[rows_hit].astype(float)
        vals[~ok] = 0.0
        M[:, base] = vals
        out.append(M)
    return out[0], out[1]


def loo_pair(
    code: InterpolatingCode, z: FloatArray, base: IntArray, targets: IntArray
) -> tuple[FloatArray, FloatArray]:
    """:func:`loo_matrices` for any interpolating code (its :meth:`interpolant` and
    :meth:`companion`); Berrut's codes take the vectorised function."""
    if isinstance(code, BerrutCode):
        return loo_matrices(z, base, targets)
    return code.loo_matrices(z, base, targets)


def _loo_calibration(
    code: InterpolatingCode,
    z: FloatArray,
    Y: FloatArray,
    out: Callable[[FloatArray], FloatArray],
    loo_points: int,
) -> tuple[float, FloatArray, bool, IntArray]:
    """The leave-one-out calibration at interior returned points.

    Returns ``(factor, ratios, reproduced, balance)``: ``factor`` is sqrt(sum true LOO
    error^2 / sum embedded estimate^2) (with a transform: the median of the pointwise
    ratios), clipped to the code's ``calibration_range``; ``ratios`` are the pointwise
    ratios true / embedded at the informative points (those where the pair differs: a
    point predicted from two others by two interpolants that are both linear there tells
    nothing); ``reproduced`` says that every left-out point was predicted exactly (up to
    rounding: e.g. a constant or linear function), itself evidence that the decode is
    exact; ``balance`` is each informative test's :func:`balance`.
    """
    M = z.size
    interior = np.arange(1, M - 1)
    if interior.size == 0:
        return 1.0, np.zeros(0), False, np.zeros(0, dtype=int)
    if interior.size > loo_points:  # evenly spread subset: bounded cost for large N
        interior = interior[np.round(np.linspace(0, interior.size - 1, loo_points)).astype(int)]
    P0, P1 = loo_pair(code, z, np.arange(M), interior)
    p0 = out(P0 @ Y)
    t = _norms(p0 - out(Y[interior]))
    e = _norms(out(P1 @ Y) - p0)
    scale = float(np.max(_norms(out(Y)), initial=0.0))
    tiny = INFORMATIVE * max(scale, 1e-300)
    informative = np.isfinite(t) & np.isfinite(e) & (e > tiny)
    if M - 1 < full_pair_nodes(code, M):
        # the companion through the M - 1 nodes a test keeps has a lower degree than
        # through all M (the spline codes' degree 3 from 4 results: a quadratic against a
        # cubic): the test checks another pair than the decode's, and says nothing about it
        informative[:] = False
    ratios = t[informative] / e[informative]
    # every left-out point predicted exactly vouches for an exact decode only when there
    # are enough of them: 3 results have one, and any 3 collinear results pass it (f =
    # int(median(b)) on the spline's shares gave 0, 1, 2 at K = 2, N = 3, and the
    # decode, 0.5 and 1.5 where f gives 1 and 2, was reported exact: issue 41)
    reproduced = t.size >= MIN_CALIBRATION_POINTS and bool(np.all(t <= tiny))
    # the left-out point keeps ``l`` of the other points on one side, M - 1 - l on the other
    balanced = balance(code, interior[informative], M - 1 - interior[informative])
    lo, hi = code.calibration_range
    if out is not _identity:
        # after an inverse map single points can overshoot by orders of magnitude: a
        # median of the pointwise ratios, not a ratio of sums they dominate
        if not ratios.size:
            return 1.0, ratios, reproduced, balanced
        return float(np.clip(np.median(ratios), lo, hi)), ratios, reproduced, balanced
    true2 = float(np.sum(t**2))
    est2 = float(np.sum(e**2))
    if est2 <= 0.0:
        return 1.0, ratios, reproduced, balanced
    return float(np.clip(math.sqrt(true2 / est2), lo, hi)), ratios, reproduced, balanced


def full_pair_nodes(code: InterpolatingCode, M: int) -> int:
    """Fewest nodes a leave-out test must keep to check the embedded pair of a decode from
    ``M`` results: the companion's degree there plus one (Floater-Hormann of degree d
    through n nodes has degree ``min(d, n - 1)``). A test through fewer nodes compares
    another pair, whose ratio true error / pair's difference does not carry over: the
    spline codes' pair from 4 results (natural spline against the cubic through them)
    agrees to 3% of a decode's weights midway between the middle two results, while the
    tests, through 3 (spline against the quadratic), gave a ratio true error / pair's
    difference of 3.3 where the data point's was 31 (issue 41: K = 3, N = 5 with the middle
    block's task late, an error of 0.6 estimated at 0.06). So the spline codes need 5
    results for an estimate, Berrut's and the local code's (degree 1) 3."""
    return min(int(code.companion_degree), M - 1) + 1


def balance(code: InterpolatingCode, left: IntArray, right: IntArray) -> IntArray:
    """How evenly a point is surrounded, as the embedded pair sees it: the returned points
    on its sparser side, counted up to the companion's degree (a Floater-Hormann
    interpolant of degree d blends the polynomials through d + 1 consecutive points;
    beyond d points on each side, more change nothing near the point).

    The spline codes' pair (a cubic spline against Floater-Hormann of degree 3) agrees
    best where a point has 3 returned points on each side, and less well near the ends of
    the returned range: a data point midway between 6 results (3 on each side) is more
    balanced than any leave-one-out test (5 points left: 3 and 2 at best), and the tests'
    ratios did not carry over to it: its estimate was below half the true error in 28-32%
    of the decodes against 0-4% for the other data points (issue 41; K = 3-5, 6 of N =
    7-12 results, random and smooth rows). Degree 1 (Berrut's codes, the local code):
    every point between two returned ones has balance 1, the tests too.
    """
    d = int(code.companion_degree)
    return np.minimum(np.minimum(np.asarray(left), np.asarray(right)), d)


#: A leave-one-out point informs the calibration when the pair differs there by more than
#: this, relative to the largest result (below it the difference is rounding)
INFORMATIVE = 1e-9
#: Fewest informative leave-one-out points the estimate is computed from (else it is
#: ``nan`` with method ``"unreliable"``): the prediction bound needs a spread
MIN_CALIBRATION_POINTS = 2
#: One-sided 95% quantiles of Student's t with 1..30 degrees of freedom
_T95 = (
    6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
    1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
    1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697,
)  # fmt: skip


def t95(df: int) -> float:
    """One-sided 95% quantile of Student's t with ``df >= 1`` degrees of freedom (table to
    30, then the Cornish-Fisher expansion ``1.645 + 1.524 / df``)."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    return _T95[df - 1] if df <= len(_T95) else 1.6449 + 1.5240 / df


def prediction_factor(ratios: FloatArray) -> float:
    """Half the one-sided 95% upper prediction bound of one more leave-one-out ratio.

    The pointwise ratios ``r_l = true LOO error / embedded estimate`` at the m informative
    leave-one-out points are a sample of how far the embedded pair is off on this very
    function. Modelling ``log r`` as normal with unknown mean and spread, the next ratio
    (the one at a data point) is below ``exp(mean + t95(m - 1) * sd * sqrt(1 + 1/m))``
    with probability 0.95; an estimate at least half the true error (the contract:
    ``>= 0.5x``) therefore needs half that factor. Ratios are clipped to ``[1e-3, 1e3]``
    (a point the pair gets exactly right says "at most", not "zero"). Needs m >= 2.
    """
    r = np.clip(np.asarray(ratios, dtype=np.float64), 1e-3, 1e3)
    m = r.size
    if m < MIN_CALIBRATION_POINTS:
        raise ValueError(f"a prediction bound needs {MIN_CALIBRATION_POINTS} ratios, got {m}")
    logs = np.log(r)
    spread = float(np.std(logs, ddof=1))
    return 0.5 * math.exp(float(np.mean(logs)) + t95(m - 1) * spread * math.sqrt(1.0 + 1.0 / m))


def _gaps(z: FloatArray, alpha: FloatArray) -> FloatArray:
    """Width of the gap in the returned points ``z`` (monotone) around each data point:
    the distance between its nearest returned neighbours on either side (twice the
    distance to the nearest end point beyond the returned range)."""
    x = np.sort(z)
    pos = np.searchsorted(x, alpha)
    inside = (pos > 0) & (pos < x.size)
    left = x[np.clip(pos - 1, 0, x.size - 1)]
    right = x[np.clip(pos, 0, x.size - 1)]
    outside = 2.0 * np.minimum(np.abs(alpha - x[0]), np.abs(alpha - x[-1]))
    return np.where(inside, right - left, outside)


#: Runs left out per wide gap (evenly spread over the possible positions): bounded cost
MAX_RUNS = 16


def _run_ratios(
    code: InterpolatingCode,
    z: FloatArray,
    Y: FloatArray,
    out: Callable[[FloatArray], FloatArray],
    width: float,
    tiny: float,
) -> tuple[FloatArray, bool]:
    """Leave-run-out: the pointwise ratios true error / embedded estimate at interior
    returned points left out in runs of consecutive points whose gap (from the point
    before the run to the point after it) is at least ``width`` wide: the geometry of a
    data point in a gap of that width, which leave-one-out does not test. Also returns
    whether every left-out point was predicted exactly (up to rounding)."""
    M = z.size
    pos = np.abs(z - z[0])  # increasing along the monotone points
    first = np.arange(1, M - 1)  # the run's first point, interior
    # the point after the run: the first one at least ``width`` beyond the point before it
    after = np.searchsorted(pos, pos[first - 1] + width * (1 - 1e-9), side="left")
    after = np.maximum(after, first + 1)
    ok = after <= M - 1
    # a run must leave enough nodes for the decode's pair (:func:`full_pair_nodes`)
    ok &= M - (after - first) >= full_pair_nodes(code, M)
    runs = list(zip(first[ok].tolist(), (after[ok] - 1).tolist(), strict=True))
    if len(runs) > MAX_RUNS:
        runs = [runs[i] for i in np.round(np.linspace(0, len(runs) - 1, MAX_RUNS)).astype(int)]
    ratios, reproduced = [], True
    for a, b in runs:
        keep = np.concatenate([np.arange(a), np.arange(b + 1, M)])
        left = np.arange(a, b + 1)
        p0 = out(code.interpolant(z[left], z[keep]) @ Y[keep])
        t = _norms(p0 - out(Y[left]))
        e = _norms(out(code.companion(z[left], z[keep]) @ Y[keep]) - p0)
        ok = np.isfinite(t) & np.isfinite(e) & (e > tiny)
        ratios.append(t[ok] / e[ok])
        reproduced = reproduced and bool(np.all(t <= tiny))
    return (np.concatenate(ratios) if ratios else np.zeros(0)), reproduced and bool(runs)


def estimate_error(
    code: Code,
    results: Blocks,
    returned: Returned,
    *,
    transform: Transform | None = None,
    loo_points: int = 64,
) -> ErrorEstimate:
    """Estimate the relative error of ``code.decode(results, returned)``, per block and overall.

    Parameters
    ----------
    code : Code
        The job's code. Exact codes give 0 whenever the set is decodable (``nan``,
        ``"ill-conditioned"``, when their decode is not exact in floating point);
        interpolating codes (Berrut, spline; plain and systematic) use the self-calibrated
        embedded pair of the module docstring; blocks a systematic code decodes exactly
        get 0.
    results : array, shape ``(len(returned), ...)``
        ``results[l]`` is worker ``returned[l]``'s result, or the same linear sketch of
        every result (e.g. :func:`count_sketch`). With ``transform``, the transformed
        results (or the same sample of their entries, :func:`sample_sketch`).
    returned : sequence of int
        Worker indices, in the order of ``results``.
    transform : Transform, optional
        The job decodes in a transformed domain: errors are measured after the inverse
        map (on ``results[l]`` reshaped to ``results.shape[1:]``), relative to the
        inverse-mapped decode, as the user sees them.
    loo_points : int
        At most this many interior points are left out for the calibration (cost
        ``O(loo_points * len(returned) * size)``).

    Returns
    -------
    ErrorEstimate

    Raises
    ------
    InsufficientResults
        The code cannot decode from ``returned`` (an exact code short of its threshold,
        blocks a local code has no returned share near).
    """
    results = np.asarray(results)
    if isinstance(code, GroupedCode):
        return _grouped_estimate(code, results, returned, transform, loo_points)
    idx, Y = _sorted(code, returned, results)
    K = code.K
    if not code.can_decode(idx):  # (an exact code short of its threshold, a gap)
        raise InsufficientResults(f"{code!r} cannot decode from {idx.tolist()}")
    if code.exact or code.is_exact(idx):
        if code.exact and code.amplification(idx) > AMPLIFICATION_LIMIT:
            # exact in exact arithmetic, not in floating point: no figure to vouch for
            return ErrorEstimate(
                math.nan, np.full(K, math.nan), "ill-conditioned", n_results=idx.size
            )
        return ErrorEstimate(0.0, np.zeros(K), "exact", n_results=idx.size)
    if not isinstance(code, InterpolatingCode):
        return ErrorEstimate(math.nan, np.full(K, math.nan), "unknown", n_results=idx.size)
    if transform is None:  # relative errors do not depend on scale
        Y = unit_scale(Y)
    out = _identity if transform is None else InverseRows(transform, results.shape[1:])
    z = code.worker_points[idx]
    alpha = code.data_points
    D0 = code.interpolant(alpha, z)
    decoded = out(D0 @ Y)
    dec_norm = _norms(decoded)
    exact_rows = np.isclose(D0.max(axis=1), 1.0) & np.isclose(np.abs(D0).sum(axis=1), 1.0)
    if idx.size < MIN_RESULTS:
        per_block = np.where(exact_rows, 0.0, math.nan)
        return ErrorEstimate(math.nan, per_block, "unknown", n_results=idx.size)
    embedded = _norms(out(code.companion(alpha, z) @ Y) - decoded)
    calibration, ratios, reproduced, test_balance = _loo_calibration(code, z, Y, out, loo_points)
    if ratios.size < MIN_CALIBRATION_POINTS and not reproduced:
        # nothing checks the pair on this function (3 results: the one interior point
        # is predicted from two, where both interpolants are the same line; the spline
        # codes' 4: tests through 3 nodes check another pair, full_pair_nodes)
        per_block = np.where(exact_rows, 0.0, math.nan)
        return ErrorEstimate(math.nan, per_block, "unreliable", n_results=idx.size)
    # at least the prediction bound: few or scattered leave-one-out points give a wide one
    if ratios.size >= MIN_CALIBRATION_POINTS:
        calibration = max(calibration, prediction_factor(ratios))
    factors = np.full(K, calibration)
    # a data point more evenly surrounded than some tests (balance): its factor is at
    # least the prediction bound of the tests at least as balanced as it; with none of
    # them nothing checks it (the spline codes' data point midway between 6 results);
    # with one, the bound above stays (5 and 7 results: docs/accuracy.md "Small K")
    around = balance(
        code, np.sum(z[None, :] > alpha[:, None], 1), np.sum(z[None, :] < alpha[:, None], 1)
    )
    for b in np.unique(around[~exact_rows]):
        at = ~exact_rows & (around == b)
        level = test_balance >= b
        if level.all():
            continue  # every test is (the bound above)
        if np.count_nonzero(level) >= MIN_CALIBRATION_POINTS:
            factors[at] = np.maximum(factors[at], prediction_factor(ratios[level]))
        elif not level.any() and not reproduced:
            per_block = np.where(exact_rows, 0.0, math.nan)
            return ErrorEstimate(math.nan, per_block, "unreliable", n_results=idx.size)
    # data points in a gap wider than the typical leave-one-out test spans (a straggler
    # next to another, or a systematic one where the points are sparse): checked by the
    # tests that open a gap at least as wide (leave-one-out or leave-run-out), or none
    spans = np.abs(z[2:] - z[:-2])
    typical = float(np.median(spans)) if spans.size else 0.0
    gaps = _gaps(z, alpha)
    wide = ~exact_rows & (gaps > typical * (1 + 1e-9))
    # widths rounded up to steps of 2**(1/4) (bounded cost: a wider test is the stricter)
    steps = np.ceil(np.log2(np.where(wide, gaps, 1.0) / max(typical, 1e-300)) * 4 - 1e-9)
    tested = typical * 2.0 ** (steps / 4)
    tiny = INFORMATIVE * max(float(np.max(_norms(out(Y)), initial=0.0)), 1e-300)
    for width in np.unique(tested[wide]):
        at = wide & (tested == width)
        run, run_reproduced = _run_ratios(code, z, Y, out, float(width), tiny)
        if run.size >= MIN_CALIBRATION_POINTS:
            factors[at] = np.maximum(factors[at], prediction_factor(run))
        elif not run_reproduced:
            per_block = np.where(exact_rows, 0.0, math.nan)
            return ErrorEstimate(math.nan, per_block, "unreliable", n_results=idx.size)
    # root mean square distance of each decoded block from the returned results
    V = out(Y)
    sq = np.einsum("ij,ij->i", V, V)
    cap = np.sqrt(np.maximum(sq.mean() - 2.0 * decoded @ V.mean(axis=0) + dec_norm**2, 0.0))
    scaled = factors * embedded
    absolute = np.minimum(scaled, cap)
    absolute[exact_rows] = 0.0
    # f(X_j)'s norm is unknown; a decode across a wide gap (or an inverse map) can
    # overshoot far beyond every result seen, so the relative error is taken against at
    # most the largest result's norm
    dec_norm = np.minimum(dec_norm, float(np.sqrt(sq.max())))
    with np.errstate(divide="ignore", invalid="ignore"):
        per_block = np.where(absolute == 0.0, 0.0, absolute / dec_norm)
        total = float(np.sqrt(np.sum(dec_norm**2)))
        overall = float(np.sqrt(np.sum(absolute**2))) / total if total else math.inf
    if not np.any(absolute):
        overall = 0.0
    return ErrorEstimate(
        overall,
        per_block,
        code.estimate_method,
        calibration=calibration,
        n_results=idx.size,
        capped=np.flatnonzero(scaled > cap).tolist(),
    )


def _grouped_estimate(
    code: GroupedCode,
    results: FloatArray,
    returned: Returned,
    transform: Transform | None,
    loo_points: int,
) -> ErrorEstimate:
    """:func:`estimate_error` of a grouped code: each group's own estimate, from its own
    results, and their root sum of squares weighted by the decoded blocks' norms (which
    each group's decode gives; without a transform, from the results as given). The
    estimate is ``nan`` ("unreliable" / "unknown") when a group's is."""
    idx = as_returned(returned, code.N)
    per_block = np.zeros(code.K)
    absolute2 = norms2 = 0.0
    methods, calibration = set(), 1.0
    capped: list[int] = []
    for g, pos, local in code.split(idx):
        est = estimate_error(
            g.code, results[pos], local, transform=transform, loo_points=loo_points
        )
        per_block[g.blocks.start : g.blocks.stop] = est.per_block
        methods.add(est.method)
        calibration = max(calibration, est.calibration)
        capped += [g.blocks.start + j for j in est.capped]
        Y = np.asarray(results[pos], dtype=np.float64).reshape(pos.size, -1)
        if transform is not None:
            Y = InverseRows(transform, results.shape[1:])(Y)
        norms = _norms(g.code.decoding_matrix(local) @ Y) if transform is None else _norms(Y)
        if transform is not None:  # the decoded norms after the inverse map: the results'
            norms = np.full(len(g.blocks), float(np.sqrt(np.mean(norms**2))))
        absolute2 += float(np.sum((est.per_block * norms) ** 2))
        norms2 += float(np.sum(norms**2))
    bad = methods & {"unreliable", "unknown", "ill-conditioned"}
    if bad:
        return ErrorEstimate(math.nan, per_block, sorted(bad)[0], n_results=idx.size)
    overall = math.sqrt(absolute2 / norms2) if norms2 > 0 else 0.0
    method = methods.pop() if len(methods) == 1 else "+".join(sorted(methods))
    return ErrorEstimate(
        overall, per_block, method, calibration=calibration, n_results=idx.size, capped=capped
    )


def unit_scale(Y: FloatArray) -> FloatArray:
    """Results scaled to at most 1 in magnitude, for figures that compare ratios: squares
    of data near 1e200 would overflow."""
    peak = float(np.abs(Y).max()) if Y.size else 0.0
    return Y / peak if peak > 0 and np.isfinite(peak) else Y


def _identity(V: FloatArray) -> FloatArray:
    return V


class InverseRows:
    """Rows of flattened transformed values -> rows of flattened output values (the
    inverse map applied to each row reshaped to ``inner``, overflow left as inf)."""

    def __init__(self, transform: Transform, inner: tuple[int, ...]):
        self.transform, self.inner = transform, inner

    def __call__(self, V: FloatArray) -> FloatArray:
        rows = V.shape[0]
        with np.errstate(over="ignore", invalid="ignore"):  # overshoots are what it measures
            out = self.transform.inverse(V.reshape(rows, *self.inner))
        return np.asarray(out, dtype=np.float64).reshape(rows, -1)
