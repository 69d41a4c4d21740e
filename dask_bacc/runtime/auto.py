"""Auto mode: the code, N, the wait and the placement of a job, from the straggler model.

A pure planner (no cluster, no asyncio): :func:`plan` takes what the scheduler's
:class:`~dask_bacc.diagnostics.LatencyModel` predicts of the workers (a
:class:`ModelView`: relative latencies drawn per worker) and returns the setting with the
least expected time to answer whose predicted error is within the budget, the workers to
run it on and the alternatives it weighed. ``map_coded(..., n_coded="auto",
wait="auto", code="auto")`` and ``CodedData.map(wait="auto")`` call it per job.

Times are in units of the job's median task (the model is relative): the time to answer
of a setting is when its wait policy is met, the k-th of its N draws for a first-k wait.
The error is :func:`dask_bacc.codes.predict.expected_error` (the reference signal of the
accuracy benchmark, k random results of N) times the calibration that the jobs' own error
estimates give (:class:`Calibration`, fitted per function).
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..codes import Code, get_code
from ..codes.predict import expected_error, stored_errors
from ..codes.repetition import RepetitionCode, Uncoded
from .placement import spread_order

__all__ = [
    "AUTO",
    "AUTO_CODES",
    "EXACT_AUTO_CODES",
    "HEDGED",
    "Calibration",
    "ModelView",
    "NoSetting",
    "Option",
    "Overheads",
    "Plan",
    "expected_latency",
    "order_workers",
    "plan",
]

#: the value of ``n_coded``, ``wait`` and ``code`` that asks for the planner
AUTO = "auto"


class NoSetting(ValueError):
    """No setting fits: the defaults run instead (fewer workers than K + 1, a fixed N above
    the workers, a fixed wait that no weighed code can take)."""


def is_auto(value: object) -> bool:
    """``value`` asks for the planner: ``"auto"``, in any case."""
    return isinstance(value, str) and value.strip().lower() == AUTO


#: the backup strategy the planner weighs beside the codes (``code="hedged"``: K tasks,
#: a copy of a task once it runs late, on a worker that is free)
HEDGED = "hedged"
#: what ``code="auto"`` weighs without an error budget: the exact strategies only
EXACT_AUTO_CODES = (HEDGED, "repetition", "uncoded")
#: what ``code="auto"`` weighs with an error budget (``error=``): the systematic
#: approximate codes too. A planned approximate job waits past its k while its estimate is
#: above the budget (:func:`~dask_bacc.runtime.submit.planned_wait`), and only a
#: systematic code is sure to end within it, exact at worst once its systematic tasks are
#: in; spline and Berrut can end every result in above it (Lagrange needs f's degree,
#: which only the user knows)
AUTO_CODES = ("systematic-spline", "systematic-berrut", *EXACT_AUTO_CODES)


@dataclass(frozen=True)
class ModelView:
    """What the planner knows of the workers a job may use.

    Parameters
    ----------
    workers : list of str
        Candidate workers, in the order to prefer among equals (least busy first).
    draws : numpy.ndarray
        ``(S, len(workers))`` relative latencies drawn from the model
        (:meth:`~dask_bacc.diagnostics.LatencyModel.sample`).
    jobs : int
        Jobs the model has learned from.
    hosts : list of str
        Each worker's host.
    correlated : frozenset of str
        Hosts whose stragglers come together (a late task there makes another one late).
    late_factor : float
        The model's threshold: a draw above it is a late task.
    """

    workers: list[str]
    draws: NDArray[np.float64]
    jobs: int
    hosts: list[str] = field(default_factory=list)
    correlated: frozenset[str] = frozenset()
    late_factor: float = 1.5


@dataclass(frozen=True)
class Option:
    """One setting the planner weighed.

    ``time`` and ``p90`` are the mean and 90th percentile of the predicted time to answer,
    in units of the job's median task; ``error`` the predicted relative error; ``cpu``
    the expected task time of the job (median tasks, summed over its tasks); ``score``
    what the planner minimises: ``time`` plus the cost weight times ``cpu`` over the
    workers; ``overhead`` the code's learned fixed cost (median tasks), included in
    ``time`` and ``p90``.
    """

    code: str
    N: int
    k: int
    time: float
    p90: float
    error: float
    cpu: float = math.nan
    score: float = math.nan
    overhead: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("time", "p90", "error", "cpu", "score", "overhead"):
            out[key] = _round(out[key])
        return out


@dataclass
class Plan:
    """The planner's answer: the chosen option, its placement and why.

    Attributes
    ----------
    chosen : Option
    workers : list of str
        Worker of each coded task (index i runs on ``workers[i]``).
    alternatives : list of Option
        For each code and N weighed, its fastest option within the error budget (or its
        most accurate, when none is), fastest first.
    reason : str
        Why this option, in words.
    error_budget : float
    calibration : float
        The chosen option's predicted error over the reference's (1 for exact codes).
    jobs : int
        Jobs the straggler model had learned from.
    confidence : float
        How sure the planner is that the chosen setting is within the error budget: the
        probability under the calibration's uncertainty (1 for an exact code).
    sigma : float
        That uncertainty: the log-scale spread of the predicted error.
    kept : bool
        The last job's choice was kept (hysteresis).
    cost_weight : float
        The weight of the task time in the score.
    """

    chosen: Option
    workers: list[str]
    alternatives: list[Option]
    reason: str
    error_budget: float
    calibration: float
    jobs: int
    confidence: float = 1.0
    sigma: float = 0.0
    kept: bool = False
    cost_weight: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable, as in ``report.auto``."""
        return {
            "chosen": self.chosen.as_dict(),
            "reason": self.reason,
            "error_budget": self.error_budget,
            "calibration": _round(self.calibration),
            "confidence": _round(self.confidence),
            "sigma": _round(self.sigma),
            "kept": self.kept,
            "cost_weight": self.cost_weight,
            "model_jobs": self.jobs,
            "alternatives": [o.as_dict() for o in self.alternatives],
        }


def _round(x: float) -> float | None:
    return None if not math.isfinite(x) else float(f"{x:.4g}")


def order_workers(view: ModelView, late_cost: float) -> list[int]:
    """Worker positions, predicted fastest first; the second and later workers of a host
    whose stragglers correlate go after every other worker."""
    expected = _costed(view, late_cost).mean(axis=0)
    ranked = sorted(range(len(view.workers)), key=lambda j: float(expected[j]))  # stable
    first, deferred, seen = [], [], set()
    for j in ranked:
        host = view.hosts[j] if view.hosts else view.workers[j]
        if host in view.correlated and host in seen:
            deferred.append(j)
        else:
            first.append(j)
            seen.add(host)
    return first + deferred


def expected_latency(view: ModelView, late_cost: float) -> dict[str, float]:
    """Each worker's predicted mean relative latency (late draws costed)."""
    means = _costed(view, late_cost).mean(axis=0)
    return {w: float(m) for w, m in zip(view.workers, means, strict=True)}


def _costed(view: ModelView, late_cost: float) -> NDArray[np.float64]:
    """The draws with every late one (above the model's threshold, often only a lower
    bound: a straggler cut short) counted as at least ``late_cost`` median tasks."""
    D = view.draws
    return np.where(D > view.late_factor, np.maximum(D, late_cost), D)


def index_order(code: Code) -> list[int]:
    """Coded task indices in the order they take the workers, fastest first: systematic
    tasks first (their results are exact), each group in bit-reversed order so that the
    slowest tasks are spread over the interpolation points rather than bunched."""
    return list(_index_order(code.name, code.K, code.N, _systematic(code)))


@functools.lru_cache(maxsize=8192)
def _systematic(code: Code) -> tuple[int, ...]:
    systematic = getattr(code, "systematic_workers", None)
    return () if systematic is None else tuple(int(i) for i in systematic)


@functools.lru_cache(maxsize=4096)
def _index_order(name: str, K: int, N: int, systematic: tuple[int, ...]) -> tuple[int, ...]:
    first = set(systematic)
    spread = spread_order(N)
    return tuple([i for i in spread if i in first] + [i for i in spread if i not in first])


@functools.lru_cache(maxsize=4096)
def _code(name: str, K: int, N: int, options: tuple[tuple[str, Any], ...]) -> Code | None:
    """The code, built once per process (a planner weighs ~100 of them per job); None when
    ``name`` cannot have N tasks (Lagrange's threshold)."""
    try:
        return get_code(name, K, N, **dict(options))
    except ValueError:
        return None


def _frozen(options: dict[str, Any]) -> tuple[tuple[str, Any], ...] | None:
    """``options`` as a cache key, or None when a value cannot be one."""
    try:
        items = tuple(sorted(options.items()))
        hash(items)
    except TypeError:
        return None
    return items


def _build(name: str, K: int, N: int, options: dict[str, Any]) -> Code | None:
    key = _frozen(options)
    if key is not None:
        return _code(name, K, N, key)
    try:
        return get_code(name, K, N, **options)
    except ValueError:
        return None


@functools.lru_cache(maxsize=4096)
def _layout(
    name: str, K: int, N: int, systematic: tuple[int, ...]
) -> tuple[NDArray[np.intp], tuple[int, ...]]:
    """Where a code's tasks go among N workers ranked fastest first: the rank of each coded
    index (:func:`index_order`), and the ranks of its systematic tasks."""
    cols = np.empty(N, dtype=np.intp)
    cols[list(_index_order(name, K, N, systematic))] = np.arange(N)
    cols.setflags(write=False)
    return cols, tuple(sorted(int(cols[i]) for i in systematic))


class _Times:
    """When each setting's wait is met, per draw, for one ordering of the workers: shared by
    the codes whose times coincide (every approximate code of an N waits for the k-th of
    the N draws of its workers; the systematic ones also for the same systematic tasks)."""

    def __init__(self, D: NDArray[np.float64]):
        self.D = D
        self._sorted: dict[int, NDArray[np.float64]] = {}
        self._memo: dict[
            tuple[Any, ...], tuple[NDArray[np.float64], NDArray[np.float64], float]
        ] = {}

    def _order_stats(self, N: int) -> NDArray[np.float64]:
        if N not in self._sorted:
            self._sorted[N] = np.sort(self.D[:, :N], axis=1)
        return self._sorted[N]

    def of(
        self,
        copies: bool,
        K: int,
        cols: NDArray[np.intp],
        sys_cols: tuple[int, ...],
        k0: int,
        k1: int,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
        """``(T, mean, cpu)``: per draw (rows) and k in ``k0..k1`` (columns) the time to
        answer, its mean over draws, and the expected task time of the job (every task
        runs to its end: a straggler's thread cannot be stopped), for the N tasks whose
        coded index i runs on the worker ranked ``cols[i]`` (``cols``: a permutation of
        ``0..N-1``); ``copies``: the tasks are copies of the K blocks (repetition,
        uncoded: done when every block has one), else done at the k-th result (or when
        every systematic task is in)."""
        N = len(cols)
        key: tuple[Any, ...] = (copies, N, sys_cols, k0, k1)
        if copies:
            key += (cols.tobytes(),)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        if copies:  # repetition: coded index i = c K + j is a copy of block j
            L = self.D[:, cols]
            c = -(-N // K)
            padded = np.full((L.shape[0], c * K), np.inf)
            padded[:, :N] = L
            T = padded.reshape(L.shape[0], c, K).min(axis=1).max(axis=1)[:, None]
        else:
            T = self._order_stats(N)[:, k0 - 1 : k1]
            if sys_cols:
                T = np.minimum(T, self.D[:, list(sys_cols)].max(axis=1)[:, None])
        cpu = float(self.D[:, :N].sum(axis=1).mean())  # cols: a permutation of 0..N-1
        out = (T, T.mean(axis=0), cpu)
        self._memo[key] = out
        return out

    def hedged(
        self, K: int, threshold: float, copies: int = 2, budget: float | None = None
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
        """``(T, mean, cpu)`` of hedging (:func:`~dask_bacc.runtime.rules.share_backups`'s
        first check): block j runs on the worker ranked j; once it has run ``threshold``
        median tasks it gets ``copies - 1`` backups at once when the budget (``budget``
        times K backups, at least one; None: no limit) holds them for every late block,
        else one each while it lasts. A backup starts on the first worker free: an idle
        one (ranked K and after) while there is one, then the workers of the job in the
        order their own tasks end; the block is in at the first copy to finish. A copy's
        latency is another draw of its worker (a later row: draws are independent). Its
        cost: every primary to its end, and every copy started, to its end.

        A backup that runs late too is not backed up again (a threshold later, in the
        rule): this is the rule's first round, which decides a one-wave job's tail."""
        D = self.D
        S, W = D.shape
        primary = D[:, :K]
        launched = primary > threshold
        late = launched.sum(axis=1, keepdims=True)
        slots = np.inf if budget is None else max(1, math.floor(budget * K))
        each = np.where(late * (copies - 1) <= slots, copies - 1, 1)  # per draw
        # the slots a copy can take, first free first: idle workers, then the job's own
        ends = np.argsort(primary, axis=1, kind="stable")
        slot_col = np.concatenate([np.tile(np.arange(K, W), (S, 1)), ends], axis=1)
        slot_free = np.concatenate(
            [np.zeros((S, W - K)), np.take_along_axis(primary, ends, axis=1)], axis=1
        )
        order = np.cumsum(launched, axis=1) - 1  # the rank of each late block in its draw
        T = primary.copy()
        cpu = primary.sum(axis=1)
        for c in range(copies - 1):
            on = launched & (c < each) & (order < slots)
            rank = np.minimum(order * each + c, W - 1).clip(0)
            col = np.take_along_axis(slot_col, rank, axis=1)
            start = np.maximum(threshold, np.take_along_axis(slot_free, rank, axis=1))
            backup = np.take_along_axis(np.roll(D, 1 + c, axis=0), col, axis=1)
            T = np.where(on, np.minimum(T, start + backup), T)
            cpu = cpu + np.where(on, backup, 0.0).sum(axis=1)
        T = T.max(axis=1)[:, None]
        return T, T.mean(axis=0), float(cpu.mean())


def _stored_row(
    name: str, K: int, N: int, options: dict[str, Any], k0: int, k1: int
) -> NDArray[np.float64] | None:
    """The stored model's errors of a code for k in ``k0..k1`` (None: not stored)."""
    key = _frozen(options)
    if key is None:
        code = _build(name, K, N, options)
        return None if code is None else stored_errors(code, range(k0, k1 + 1))
    return _stored_row_of(name, K, N, key, k0, k1)


@functools.lru_cache(maxsize=8192)
def _stored_row_of(
    name: str, K: int, N: int, options: tuple[tuple[str, Any], ...], k0: int, k1: int
) -> NDArray[np.float64] | None:
    code = _code(name, K, N, options)
    row = None if code is None else stored_errors(code, range(k0, k1 + 1))
    if row is not None:
        row.setflags(write=False)
    return row


def _p90(t: NDArray[np.float64]) -> float:
    """The 90th percentile of the draws ``t`` (linear, as ``numpy.quantile``)."""
    S = t.shape[0]
    pos = 0.9 * (S - 1)
    lo = int(pos)
    part = np.partition(t, (lo, min(lo + 1, S - 1)))
    return float(part[lo] + (pos - lo) * (part[min(lo + 1, S - 1)] - part[lo]))


@dataclass
class _Group:
    """The settings of one code and N: k in ``k0..k1`` (one k for exact codes)."""

    name: str
    code: Code
    k0: int
    k1: int
    T: NDArray[np.float64]
    mean: NDArray[np.float64]
    score: NDArray[np.float64]
    cpu: float
    fixed: float
    errors: NDArray[np.float64] | None = None  # stored model's, calibrated (None: lazily)

    def option(self, j: int, error: float = math.nan) -> Option:
        return Option(
            self.name,
            self.code.N,
            self.k0 + j,
            float(self.mean[j]),
            _p90(self.T[:, j]) + self.fixed,
            error,
            self.cpu,
            float(self.score[j]),
            self.fixed,
        )


class Calibration:
    """What the jobs' own error estimates say of the accuracy model, per function.

    A function's error need not follow the reference's: a nonlinear f may lose more, and
    gain less from each extra result. The calibration fits, per function, the jobs'
    error estimates against the model's prediction for the same code and number of
    results, in logs: ``log est = c + b (log model - x0)``. Each approximate job gives the
    estimate of its own decode and, from the same results, the estimates of decoding
    from its first m arrivals for a few m below (what a shorter wait would have given:
    ``JobQuality.fewer_results``), so the slope ``b`` shows within one job. The fit is
    exponentially weighted over jobs (``weight`` per job) and starts from the model
    itself (``c = x0``, ``b = 1``, as if from one earlier job): a new function starts at
    the model and one job's luck moves it part of the way. The prediction is the fitted
    typical (geometric mean) error, not the mean: the estimates' spread about the fit is
    mostly the estimator's own noise (it overestimates some decodes threefold), and
    inflating the prediction by it made every short wait look over budget. Kept in the
    client process, bounded to ``size`` functions.

    How sure the prediction is (:meth:`sigma`): the log-scale spread of the fit's level,
    from the prior's share (``prior_sigma``, a factor of 2 before any job, fading as
    ``(1 - weight)^jobs``) and the estimates' scatter about the fit over the jobs it
    rests on. The planner asks a setting it did not choose last time to be within the
    budget with a margin of it (:func:`plan`'s ``confidence``).
    """

    #: the log error about which the fit is centred (a budget of about 5%)
    x0 = math.log(0.05)
    #: log-scale uncertainty of the model before any job of a function (a factor of 2)
    prior_sigma = math.log(2.0)

    def __init__(self, weight: float = 0.3, size: int = 256):
        self.weight = weight
        self.size = size
        # per function: EW means of 1, u, y, uu, uy, yy (u = log model - x0, y = log est),
        # and the jobs learned from
        self._sums: OrderedDict[str, tuple[NDArray[np.float64], int]] = OrderedDict()

    def _prior(self) -> NDArray[np.float64]:
        """The sums of the model itself: two points, u = -1 and 1, with y = x0 + u."""
        x0 = self.x0
        return np.array([1.0, 0.0, x0, 1.0, 1.0, x0 * x0 + 1.0])

    def jobs(self, func: str) -> int:
        """Jobs of ``func`` learned from (0 when none, or forgotten)."""
        return self._sums.get(func, (None, 0))[1]

    def observe(self, func: str, code: Code, points: Sequence[tuple[int, float]]) -> None:
        """Learn from a job of ``code``: ``points`` are (results decoded from, estimate)."""
        if code.exact:
            return
        rows = []
        for m, est in points:
            model = expected_error(code, m) if code.min_results <= m <= code.N else math.nan
            if 0 < est < math.inf and 0 < model < math.inf:
                rows.append((math.log(model) - self.x0, math.log(est)))
        if not rows:
            return  # exact decodes (estimate 0) say nothing of the curve
        u, y = np.array(rows).T
        job = np.array([1.0, u.mean(), y.mean(), (u * u).mean(), (u * y).mean(), (y * y).mean()])
        old, n = self._sums.pop(func, (self._prior(), 0))
        w = self.weight
        self._sums[func] = ((1 - w) * old + w * job, n + 1)
        while len(self._sums) > self.size:
            self._sums.popitem(last=False)

    def _of(self, func: str) -> NDArray[np.float64]:
        return self._sums.get(func, (self._prior(), 0))[0]

    def fit(self, func: str) -> tuple[float, float]:
        """``(c, b)``: the fit's log error at ``x0`` and its slope."""
        W, U, Y, UU, UY, _ = self._of(func)
        var = UU - U * U / W
        # the prior's spread never vanishes entirely ((1 - weight)^n of it is left): var > 0
        b = min(max((UY - U * Y / W) / var, 0.1), 2.0) if var > 1e-12 else 1.0
        return float((Y - b * U) / W), float(b)

    def sigma(self, func: str) -> float:
        """Log-scale uncertainty of the function's predicted error: the prior's share of
        ``prior_sigma``, plus the scatter of the estimates about the fit over the jobs'
        effective number (an exponential weighting keeps about ``(2 - w) / w``)."""
        W, U, Y, UU, UY, YY = self._of(func)
        n = self.jobs(func)
        c, b = self.fit(func)
        resid = (YY - 2 * c * Y - 2 * b * UY + c * c * W + 2 * c * b * U + b * b * UU) / W
        w = self.weight
        share = (1 - w) ** n
        n_eff = max(1.0, min(float(n), (2 - w) / w))
        return math.sqrt(share * self.prior_sigma**2 + (1 - share) * max(resid, 0.0) / n_eff)

    def scale(self, func: str) -> Callable[[Any], Any]:
        """The function's predicted error from the model's (0 stays 0)."""
        c, b = self.fit(func)

        def predict(model: Any) -> Any:
            """Scalars or arrays (what is 0 or not finite stays so)."""
            m = np.asarray(model, dtype=float)
            ok = (m > 0) & np.isfinite(m)
            with np.errstate(divide="ignore", invalid="ignore"):
                out = np.where(ok, np.exp(c + b * (np.log(np.where(ok, m, 1.0)) - self.x0)), m)
            return float(out) if out.ndim == 0 else out

        return predict


class Overheads:
    """What each code costs a function's job besides its tasks, learned on the client.

    The planner's times are in units of the job's median task and see only when the wait
    is met; a code's fixed costs (encoding on the cluster, scheduling, moving the results,
    the sketches, the decode) are invisible to it, and on short tasks they decide. Every
    finished job of a function, planned or not, measures them: the median over its
    returned tasks of when each result arrived less how long the task ran (the start-up:
    encode, scheduling, the result's transfer), plus the time from the wait being met to
    the decoded answer. They are averaged per function and code (exponentially,
    ``weight`` per job), as is ``tau``, the function's median task in seconds (the
    scheduler plugin's compute spans); :meth:`units` gives them in median tasks for
    :func:`plan`. Straggler waits are not in them: those are the time model's. A code
    never run for a function has none yet. Bounded to ``size`` functions.
    """

    def __init__(self, weight: float = 0.3, size: int = 256):
        self.weight = weight
        self.size = size
        # per function: (tau seconds, {code: overhead seconds}, jobs learned from)
        self._of: OrderedDict[str, tuple[float, dict[str, float], int]] = OrderedDict()

    def observe(self, func: str, code: str, seconds: float, tau: float) -> None:
        """A job of ``code`` spent ``seconds`` besides its tasks; its median task took
        ``tau`` seconds."""
        if not (tau > 0 and math.isfinite(tau) and 0 <= seconds < math.inf):
            return
        old_tau, codes, n = self._of.pop(func, (tau, {}, 0))
        w = self.weight
        codes = dict(codes)
        codes[code] = seconds if code not in codes else (1 - w) * codes[code] + w * seconds
        self._of[func] = ((1 - w) * old_tau + w * tau, codes, n + 1)
        while len(self._of) > self.size:
            self._of.popitem(last=False)

    def units(self, func: str) -> dict[str, float]:
        """Each code's learned overhead, in the function's median tasks."""
        tau, codes, _ = self._of.get(func, (1.0, {}, 0))
        return {code: extra / tau for code, extra in codes.items()}

    def jobs(self, func: str) -> int:
        """Jobs of ``func`` learned from."""
        return self._of.get(func, (1.0, {}, 0))[2]


def plan(
    view: ModelView,
    K: int,
    codes: Sequence[tuple[str, dict[str, Any]]],
    *,
    error: float,
    max_n: int,
    n_coded: int | None = None,
    wait: Callable[[Code], int] | None = None,
    calibration: float | Callable[[Any], Any] = 1.0,
    tolerance: float = 0.05,
    late_cost: float = 4.0,
    placement: Sequence[str] | None = None,
    cost_weight: float = 0.0,
    exact_preference: float = 0.0,
    sigma: float = 0.0,
    confidence: float = 0.5,
    hysteresis: float = 0.0,
    incumbent: tuple[str, int, int] | None = None,
    overhead: dict[str, float] | None = None,
    hedge: tuple[float, int, float | None] = (1.5, 3, 0.25),
) -> Plan:
    """Choose the code, N, the wait and the workers of a job.

    Every setting is scored by its expected time to answer plus ``cost_weight`` times its
    expected task time over the workers (what it takes from a busy cluster); settings are
    visited in order of that score, and a setting's predicted error is only computed when
    it could still be chosen (exact codes need none).

    Parameters
    ----------
    view : ModelView
        The candidate workers and latencies drawn for them.
    K : int
        Data blocks.
    codes : sequence of (name, options)
        Codes to weigh (one, unless ``code="auto"``).
    error : float
        Error budget: options predicted less accurate are only taken when none is within.
    max_n : int
        Most coded tasks to choose (the compute budget); never more than the workers.
    n_coded : int, optional
        Fixed N (the user's, or the shares of a CodedData; kept above ``max_n``, not above
        the workers); chosen when None.
    wait : callable, optional
        ``wait(code)``: the fixed number of results to wait for with ``code`` (the user's
        wait policy; 0 when it does not apply to that code, which is then not weighed);
        chosen when None, exact codes then waiting for their own rule.
    calibration : float or callable
        The predicted error from the reference's (:meth:`Calibration.scale`), or a
        factor on it.
    tolerance : float
        Options whose score is within this fraction of the best count as equally good;
        among them the incumbent is kept, else the one with fewest tasks wins (then the
        most accurate).
    late_cost : float
        Late draws (a task known only to be late) count as at least this many median
        tasks.
    placement : sequence of str, optional
        The worker of each coded task, when it is fixed (the shares of a CodedData):
        only the wait is chosen, for these workers.
    cost_weight : float
        Weight of the expected task time (in median tasks, summed over the job's tasks and
        divided by the candidate workers) in the score: 0 for an idle cluster (time to
        answer alone), 1 for one whose every worker-second is wanted by other work.
    exact_preference : float
        An exact setting whose score is within this fraction of the best is chosen over
        approximate ones.
    sigma : float
        Log-scale uncertainty of the predicted error (:meth:`Calibration.sigma`).
    confidence : float
        With an ``incumbent``, another setting must be within the budget with this
        probability (its error times ``exp(z sigma)``, ``z`` the normal quantile, within
        the budget), while the incumbent only needs its predicted error within: the
        choice does not flip on the estimates' noise near the budget.
    hysteresis : float
        ... and by at least this fraction (the band is never narrower).
    incumbent : (code, N, k), optional
        Last job's choice for the same function and settings (None: a first plan, the
        predicted error alone decides).
    overhead : dict of str to float, optional
        Per code, what a job of it costs besides waiting for its tasks, in median tasks
        (:meth:`Overheads.units`): added to its predicted times.
    hedge : (float, int, float or None)
        Where ``codes`` has :data:`HEDGED`: the median tasks after which a task gets a
        copy, the most copies of a task and the budget of backups as a fraction of K
        (``bacc.hedge.multiplier``, ``copies``, ``budget``; :meth:`_Times.hedged`).
        Hedging runs K tasks (its ``N`` is K) and is weighed only when N, the wait and
        the placement are free.

    Returns
    -------
    Plan

    Raises
    ------
    NoSetting
        When no setting can be weighed.
    """
    if placement is not None:
        if len(codes) != 1 or n_coded != len(placement):
            raise ValueError("a fixed placement needs one code and n_coded == its length")
        position = {w: j for j, w in enumerate(view.workers)}
        order = [position[w] for w in placement]
    else:
        order = order_workers(view, late_cost)
    W = len(order)
    times = _Times(_costed(view, late_cost)[:, order])
    opts_of = dict(codes)
    groups: list[_Group] = []
    for name, opts in codes:
        if name == HEDGED:
            if placement is None and wait is None and n_coded is None and K <= W:
                T, mean, cpu = times.hedged(K, *hedge)
                fixed = (overhead or {}).get(name, 0.0)
                mean = mean + fixed
                code = _build("uncoded", K, K, {})
                assert code is not None
                groups.append(
                    _Group(name, code, K, K, T, mean, mean + cost_weight * cpu / W, cpu, fixed)
                )
            continue  # (its tasks are not pinned coded tasks: no fixed N, wait or placement)
        for N in _n_range(name, K, n_coded, min(max_n, W), W):
            code = _build(name, K, N, opts)
            if code is None:
                continue  # too few tasks for this code (Lagrange's threshold)
            systematic = _systematic(code)
            if placement is not None:
                cols = np.arange(N)  # coded index i runs on placement[i]
                sys_cols = tuple(sorted(systematic))
            else:
                cols, sys_cols = _layout(name, K, N, systematic)
            if wait is not None:
                k0 = k1 = wait(code)
                if not code.min_results <= k0 <= N:
                    continue
            elif code.exact:
                k0 = k1 = min(N, code.min_results + code.check_spare)
            else:
                k0, k1 = max(code.min_results, (K + 1) // 2), N
            if k0 > k1:
                continue
            copies = isinstance(code, (RepetitionCode, Uncoded))
            T, mean, cpu = times.of(copies, K, cols, sys_cols, k0, k1)
            fixed = (overhead or {}).get(name, 0.0)
            mean = mean + fixed
            groups.append(
                _Group(name, code, k0, k1, T, mean, mean + cost_weight * cpu / W, cpu, fixed)
            )
    if not groups:
        raise NoSetting(
            f"no setting to weigh: K={K}, {W} workers, at most {max_n} tasks, "
            f"n_coded={n_coded}, the wait fixed={wait is not None}"
        )
    scale = calibration if callable(calibration) else (lambda e: e * float(calibration))
    z = NormalDist().inv_cdf(min(max(confidence, 1e-6), 1 - 1e-6))
    inc = incumbent
    # a setting other than the last job's needs a margin (none for a first plan)
    limit = error if inc is None else error / max(math.exp(z * sigma), 1.0 + hysteresis)
    computed: dict[tuple[int, int], float] = {}  # errors computed one by one

    def err(g: int, j: int) -> float:
        """The predicted error of option j of group g: from the stored model, in one
        slice per group, or computed once."""
        grp = groups[g]
        if grp.code.exact:
            return 0.0
        if grp.errors is None:
            row = _stored_row(grp.name, K, grp.code.N, opts_of[grp.name], grp.k0, grp.k1)
            grp.errors = np.empty(0) if row is None else np.asarray(scale(row), dtype=float)
        if grp.errors.size:
            return float(grp.errors[j])
        if (g, j) not in computed:
            computed[(g, j)] = float(scale(expected_error(grp.code, grp.k0 + j)))
        return computed[(g, j)]

    def first_within(g: int) -> int | None:
        """The first option of group g within a newcomer's budget: the error falls as k
        grows (bisection where it is computed one by one)."""
        grp = groups[g]
        if grp.code.exact:
            return 0
        err(g, 0)
        if grp.errors is not None and grp.errors.size:
            hits = np.flatnonzero(grp.errors <= limit)
            return int(hits[0]) if hits.size else None
        lo, hi, found = 0, grp.k1 - grp.k0, None
        while lo <= hi:
            mid = (lo + hi) // 2
            if err(g, mid) <= limit:
                found, hi = mid, mid - 1
            else:
                lo = mid + 1
        return found

    def with_error(g: int, j: int) -> Option:
        return groups[g].option(j, err(g, j))

    # groups by their best score: a group whose best cannot come near is never priced.
    # "Near" is relative to the best's time and cost, not its code's fixed overhead: a
    # large overhead shared by every setting of a code must not widen the bands.
    by_score = sorted(range(len(groups)), key=lambda g: float(groups[g].score[0]))
    slack = max(tolerance, exact_preference)
    best: float | None = None
    base = 0.0  # the best's score less its overhead

    def offer(score: float, fixed: float) -> None:
        nonlocal best, base
        if best is None or score < best:
            best, base = score, max(score - fixed, 1e-9)

    def close(score: float, frac: float) -> bool:
        return best is not None and score <= best + frac * base

    candidates: list[tuple[int, int]] = []  # (group, first position within)
    kept: Option | None = None
    for g in by_score:
        grp = groups[g]
        if best is not None and not close(float(grp.score[0]), slack):
            break
        if inc is not None and (grp.name, grp.code.N) == inc[:2] and grp.k0 <= inc[2] <= grp.k1:
            j = inc[2] - grp.k0
            if err(g, j) <= error:  # the incumbent keeps the full budget
                kept = with_error(g, j)
                offer(kept.score, kept.overhead)
        f = first_within(g)
        if f is not None:
            candidates.append((g, f))
            offer(float(grp.score[f]), grp.fixed)
    if best is not None:
        # the settings within the slack of the best, with their errors
        bound = best + slack * base
        near = [
            with_error(g, j)
            for g, f in candidates
            for j in range(f, int(np.searchsorted(groups[g].score, bound, side="right")))
            if groups[g].code.exact or err(g, j) <= limit
        ]
        if kept is not None:
            near.append(kept)
        exact = [o for o in near if o.error == 0.0 and close(o.score, exact_preference)]
        equal = [o for o in near if close(o.score, tolerance)]
        if kept is not None and close(kept.score, tolerance):
            chosen = kept
            reason = "the last job's setting, still within the budget and as good as any"
        elif exact:
            top = min(o.score for o in exact)
            chosen = min(
                (o for o in exact if o.score <= top + tolerance * base),
                key=lambda o: (o.N, o.code != HEDGED, o.score),  # hedging: K tasks, insured
            )
            reason = (
                f"an exact setting within {exact_preference:.0%} of the best score "
                f"(error <= {error:g}); the fewest tasks among those within "
                f"{tolerance:.0%} of it"
            )
        else:
            chosen = min(equal, key=lambda o: (o.N, o.error, o.score))
            reason = (
                f"least expected {'time' if cost_weight == 0 else 'score'} "
                f"within error <= {error:g}"
            ) + (
                f"; the fewest tasks among the {len(equal)} within {tolerance:.0%} of it"
                if len(equal) > 1
                else ""
            )
        # for the report: the best option within of each group priced, else its fastest
        priced = {g for g, _ in candidates}
        seen = [with_error(g, f) for g, f in candidates]
        seen += [with_error(g, 0) for g in by_score[:8] if g not in priced]
    else:
        # nothing within: the most accurate setting of each code and N
        seen = [with_error(g, grp.k1 - grp.k0) for g, grp in enumerate(groups)]
        chosen = min(seen, key=lambda o: (o.error, o.score))
        reason = f"no setting is predicted within error <= {error:g}: the most accurate one"
    code = _build("uncoded" if chosen.code == HEDGED else chosen.code, K, chosen.N,
                  opts_of[chosen.code])  # fmt: skip
    assert code is not None
    workers = [""] * chosen.N
    if placement is not None:
        workers = list(placement)
    elif chosen.code == HEDGED:  # block j on the worker ranked j (backups: where free)
        workers = [view.workers[order[j]] for j in range(K)]
    else:
        for rank, i in enumerate(_index_order(code.name, K, code.N, _systematic(code))):
            workers[i] = view.workers[order[rank]]
    ref = 0.0 if code.exact else expected_error(code, chosen.k)
    if chosen.error == 0.0:
        sure = 1.0
    elif sigma > 0 and chosen.error > 0:
        sure = NormalDist().cdf((math.log(error) - math.log(chosen.error)) / sigma)
    else:
        sure = float(chosen.error <= error)
    return Plan(
        chosen=chosen,
        workers=workers,
        alternatives=sorted((o for o in seen if o != chosen), key=lambda o: o.score)[:8],
        reason=reason,
        error_budget=error,
        calibration=chosen.error / ref if 0 < ref < math.inf else 1.0,
        jobs=view.jobs,
        confidence=sure,
        sigma=sigma,
        kept=kept is not None and chosen == kept,
        cost_weight=cost_weight,
    )


def _n_range(name: str, K: int, n_coded: int | None, cap: int, workers: int) -> list[int]:
    """The N to weigh: every one up to K + 8, then a grid of steps of ceil(K / 8) up to
    the cap (the time changes smoothly with N; planning stays a few ms at K = 32)."""
    if n_coded is not None:
        return [n_coded] if n_coded <= workers else []
    if name == "uncoded":
        return [K] if K <= cap else []
    dense = list(range(K + 1, min(cap, K + 8) + 1))
    step = -(-K // 8)
    coarse = list(range(K + 8 + step, cap + 1, step))
    if cap > K + 8 and (not coarse or coarse[-1] != cap):
        coarse.append(cap)
    return dense + coarse
