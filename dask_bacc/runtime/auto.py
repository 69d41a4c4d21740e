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

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..codes import Code, get_code
from ..codes.predict import expected_error
from ..codes.repetition import RepetitionCode, Uncoded
from .placement import spread_order

__all__ = [
    "AUTO",
    "Calibration",
    "ModelView",
    "NoSetting",
    "Option",
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


#: codes ``code="auto"`` weighs (Lagrange needs f's degree, which only the user knows)
AUTO_CODES = ("systematic-spline", "spline", "systematic-berrut", "berrut", "repetition", "uncoded")


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
    in units of the job's median task; ``error`` the predicted relative error.
    """

    code: str
    N: int
    k: int
    time: float
    p90: float
    error: float

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("time", "p90", "error"):
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
    """

    chosen: Option
    workers: list[str]
    alternatives: list[Option]
    reason: str
    error_budget: float
    calibration: float
    jobs: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-serialisable, as in ``report.auto``."""
        return {
            "chosen": self.chosen.as_dict(),
            "reason": self.reason,
            "error_budget": self.error_budget,
            "calibration": _round(self.calibration),
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
    systematic = getattr(code, "systematic_workers", None)
    first = set() if systematic is None else {int(i) for i in systematic}
    spread = spread_order(code.N)
    return [i for i in spread if i in first] + [i for i in spread if i not in first]


def _times(code: Code, L: NDArray[np.float64], ks: Sequence[int]) -> dict[int, NDArray[Any]]:
    """Per draw, when the wait for k results (or, exact codes, a decodable set) is met."""
    if isinstance(code, (RepetitionCode, Uncoded)):
        K = code.K
        copies = [L[:, [i for i in range(code.N) if i % K == j]].min(axis=1) for j in range(K)]
        t = np.max(np.stack(copies, axis=1), axis=1)
        return dict.fromkeys(ks, t)
    ordered = np.sort(L, axis=1)
    systematic = getattr(code, "systematic_workers", None)
    done = None if systematic is None else L[:, list(systematic)].max(axis=1)
    out = {}
    for k in ks:
        t = ordered[:, k - 1]
        out[k] = t if done is None else np.minimum(t, done)
    return out


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
    """

    #: the log error about which the fit is centred (a budget of about 5%)
    x0 = math.log(0.05)

    def __init__(self, weight: float = 0.3, size: int = 256):
        self.weight = weight
        self.size = size
        # per function: EW means of 1, u, y, uu, uy (u = log model - x0, y = log est)
        self._sums: OrderedDict[str, NDArray[np.float64]] = OrderedDict()

    def _prior(self) -> NDArray[np.float64]:
        """The sums of the model itself: two points, u = -1 and 1, with y = x0 + u."""
        x0 = self.x0
        return np.array([1.0, 0.0, x0, 1.0, 1.0])

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
        job = np.array([1.0, u.mean(), y.mean(), (u * u).mean(), (u * y).mean()])
        old = self._sums.pop(func, None)
        w = self.weight
        self._sums[func] = (1 - w) * (self._prior() if old is None else old) + w * job
        while len(self._sums) > self.size:
            self._sums.popitem(last=False)

    def fit(self, func: str) -> tuple[float, float]:
        """``(c, b)``: the fit's log error at ``x0`` and its slope."""
        W, U, Y, UU, UY = self._sums.get(func, self._prior())
        var = UU - U * U / W
        # the prior's spread never vanishes entirely ((1 - weight)^n of it is left): var > 0
        b = min(max((UY - U * Y / W) / var, 0.1), 2.0) if var > 1e-12 else 1.0
        return float((Y - b * U) / W), float(b)

    def scale(self, func: str) -> Callable[[float], float]:
        """The function's predicted error from the model's (0 stays 0)."""
        c, b = self.fit(func)

        def predict(model: float) -> float:
            if model <= 0 or not math.isfinite(model):
                return model
            return math.exp(c + b * (math.log(model) - self.x0))

        return predict


def plan(
    view: ModelView,
    K: int,
    codes: Sequence[tuple[str, dict[str, Any]]],
    *,
    error: float,
    max_n: int,
    n_coded: int | None = None,
    wait: Callable[[Code], int] | None = None,
    calibration: float | Callable[[float], float] = 1.0,
    tolerance: float = 0.05,
    late_cost: float = 4.0,
    placement: Sequence[str] | None = None,
) -> Plan:
    """Choose the code, N, the wait and the workers of a job.

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
        Options within this fraction of the fastest count as equally fast; among them the
        one with fewest tasks wins (then the most accurate).
    late_cost : float
        Late draws (a task known only to be late) count as at least this many median
        tasks.
    placement : sequence of str, optional
        The worker of each coded task, when it is fixed (the shares of a CodedData):
        only the wait is chosen, for these workers.

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
    D = _costed(view, late_cost)[:, order]
    W = len(order)
    opts_of = dict(codes)
    # per (code, N): its options by k, fastest first, and the fewest results within budget
    groups: list[tuple[Code, list[Option]]] = []
    for name, opts in codes:
        for N in _n_range(name, K, n_coded, min(max_n, W), W):
            try:
                code = get_code(name, K, N, **opts)
            except ValueError:
                continue  # too few tasks for this code (Lagrange's threshold)
            cols = np.empty(N, dtype=int)
            if placement is not None:
                cols[:] = np.arange(N)  # coded index i runs on placement[i]
            else:
                cols[index_order(code)] = np.arange(N)  # coded index -> rank of its worker
            if wait is not None:
                kk = wait(code)
                ks = [kk] if code.min_results <= kk <= N else []
            elif code.exact:
                ks = [min(N, code.min_results + code.check_spare)]
            else:
                ks = list(range(max(code.min_results, (K + 1) // 2), N + 1))
            times = _times(code, D[:, cols], ks)
            group = [
                Option(name, N, kk, float(t.mean()), float(np.quantile(t, 0.9)), math.nan)
                for kk, t in times.items()
            ]
            if group:
                groups.append((code, group))
    if not groups:
        raise NoSetting(
            f"no setting to weigh: K={K}, {W} workers, at most {max_n} tasks, "
            f"n_coded={n_coded}, the wait fixed={wait is not None}"
        )

    scale = calibration if callable(calibration) else (lambda e: e * float(calibration))

    def err(code: Code, o: Option) -> Option:
        e = 0.0 if code.exact else scale(expected_error(code, o.k))
        return Option(o.code, o.N, o.k, o.time, o.p90, e)

    # the error falls as k grows: bisect for each group's first option within budget
    feasible: list[tuple[Code, list[Option]]] = []
    alternatives: list[Option] = []
    for code, group in groups:
        lo, hi, found = 0, len(group) - 1, None
        while lo <= hi:
            mid = (lo + hi) // 2
            o = err(code, group[mid])
            if o.error <= error:
                found, hi = (mid, o), mid - 1
            else:
                lo = mid + 1
        if found is None:
            alternatives.append(err(code, group[-1]))  # its most accurate
        else:
            alternatives.append(found[1])
            feasible.append((code, [found[1], *group[found[0] + 1 :]]))
    if feasible:
        best = min(g[0].time for _, g in feasible)
        near = [
            err(code, o) if math.isnan(o.error) else o
            for code, g in feasible
            for o in g
            if o.time <= best * (1 + tolerance)
        ]
        chosen = min(near, key=lambda o: (o.N, o.error, o.time))
        reason = f"least expected time within error <= {error:g}" + (
            f"; the fewest tasks among the {len(near)} within {tolerance:.0%} of it"
            if len(near) > 1
            else ""
        )
    else:
        chosen = min(alternatives, key=lambda o: (o.error, o.time))
        reason = f"no setting is predicted within error <= {error:g}: the most accurate one"
    code = get_code(chosen.code, K, chosen.N, **opts_of[chosen.code])
    workers = [""] * chosen.N
    if placement is not None:
        workers = list(placement)
    else:
        for rank, i in enumerate(index_order(code)):
            workers[i] = view.workers[order[rank]]
    ref = 0.0 if code.exact else expected_error(code, chosen.k)
    return Plan(
        chosen=chosen,
        workers=workers,
        alternatives=sorted((o for o in alternatives if o != chosen), key=lambda o: o.time)[:8],
        reason=reason,
        error_budget=error,
        calibration=chosen.error / ref if 0 < ref < math.inf else 1.0,
        jobs=view.jobs,
    )


def _n_range(name: str, K: int, n_coded: int | None, cap: int, workers: int) -> range:
    if n_coded is not None:
        return range(n_coded, n_coded + 1) if n_coded <= workers else range(0)
    if name == "uncoded":
        return range(K, K + 1) if K <= cap else range(0)
    return range(K + 1, cap + 1)
