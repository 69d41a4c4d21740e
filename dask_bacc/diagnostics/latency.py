"""A straggler model learned online from the history of coded jobs.

Pure Python and NumPy (no distributed): the scheduler plugin feeds it each closed job's
coded tasks, tests feed it synthetic histories.

Every task is measured against its own job: its *relative latency* is its duration over
the median duration of the job's finished tasks, so a job of slow tasks does not make
every worker look slow. A task is *late* when its relative latency exceeds
``late_factor``. A task cancelled or still running when its job ended is right-censored
(it took at least its elapsed time): once that elapsed time is past the threshold it
counts as late and enters the quantiles at that lower bound. Before, its latency is
unknown: it counts as late with the probability that a task still running at that
relative latency is late (from the worker's rate of lateness and how rarely on-time tasks
run that long), and stays out of the quantiles. Leaving such tasks out would make a
cluster whose jobs decode early look free of stragglers: most of what a first-k decode
cuts short are stragglers.

Forgetting is exponential in jobs: an observation ``k`` jobs old weighs
``0.5 ** (k / half_life)``, so a worker that becomes slow, or recovers, crosses
``p_late = 0.5`` within about ``half_life + 1`` jobs.

What the planner draws (:meth:`LatencyModel.sample`) shrinks each host's rate of lateness
towards the cluster's, and each worker's towards its host's, by a strength learned from
how much they truly differ (empirical Bayes, a beta-binomial method of moments): the
workers a planner picks are those whose few observations happen to look good, and
without shrinkage that luck reads as speed (the winner's curse). A one-sided CUSUM per
worker and per host drops the strength of one that just turned slow, so it is avoided
about as fast as without shrinkage.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import config

__all__ = ["LatencyModel", "TaskObservation", "TaskTimes", "WorkerPrediction"]

#: a job median below this (seconds) is taken as this: no division by zero
_TINY = 1e-6

#: the shrinkage rules: "adaptive" (empirical Bayes with a change detector) or "fixed"
#: (one observation of the prior, the rule before issue 42)
SHRINKAGE = ("adaptive", "fixed")

#: the change detector's null rate is the cluster's, kept within these bounds: a cluster
#: with no straggler at all would make one late task an alarm, one always late none
_P0_RANGE = (0.02, 0.8)


@dataclass(frozen=True)
class TaskObservation:
    """One coded task of a job, as fed to :meth:`LatencyModel.observe_job`.

    Parameters
    ----------
    worker : str
        The worker's address.
    host : str
        Its host (tasks on one host may straggle together).
    duration : float
        Seconds from dispatch to return; for a censored task, the seconds it had run.
    finished : bool
        False when the task was cancelled or still running at the job's end: it took
        *at least* ``duration``.
    """

    worker: str
    host: str
    duration: float
    finished: bool = True


@dataclass(frozen=True)
class WorkerPrediction:
    """What the model expects of a worker's next coded task.

    Parameters
    ----------
    p_late : float
        Probability that its task is late (relative latency above ``late_factor``).
    q50, q90, q99 : float
        Quantiles of its relative latency (1 is the job's median task).
    n_eff : float
        Effective number of observations behind the figures (0: a prior).
    """

    p_late: float
    q50: float
    q90: float
    q99: float
    n_eff: float


#: the prediction when nothing is known: never late, always at the median
NOTHING_KNOWN = WorkerPrediction(p_late=0.0, q50=1.0, q90=1.0, q99=1.0, n_eff=0.0)

#: kinds of latency sample: on time, late (it finished), late and cut short (a lower bound)
ON_TIME, LATE, CUT = 0, 1, 2
ANY_LATE = (LATE, CUT)


class _Tally:
    """Exponentially forgotten counts and recent relative latencies of a worker, a host
    or the whole cluster."""

    __slots__ = ("at", "cusum", "late", "n", "n2", "pair_late", "pairs", "samples")

    def __init__(self, samples: int):
        self.at = 0  # job number the sums were last decayed to
        self.late = 0.0
        self.n = 0.0
        # the sum of the squared weights: how noisy late / n is (Kish's n**2 / n2 equal
        # observations), for the method of moments
        self.n2 = 0.0
        # one-sided CUSUM of the log-likelihood ratio "slow" against the cluster's rate
        # (not forgotten: it moves only with the tally's own observations)
        self.cusum = 0.0
        # host correlation: ordered pairs (i, j) of tasks of one job on the host with i
        # late, and those with j late too
        self.pairs = 0.0
        self.pair_late = 0.0
        # (job, relative latency, kind): ON_TIME, LATE, or CUT (late, cut short: the
        # latency is a lower bound)
        self.samples: deque[tuple[int, float, int]] = deque(maxlen=samples)

    def decay(self, job: int, factor: float) -> None:
        if job != self.at:
            f = factor ** (job - self.at)
            self.late *= f
            self.n *= f
            self.n2 *= f * f
            self.pairs *= f
            self.pair_late *= f
            self.at = job

    def add(self, job: int, rel: float, late: bool, cut: bool = False) -> None:
        self.n += 1.0
        self.n2 += 1.0
        self.late += late
        self.samples.append((job, rel, CUT if late and cut else LATE if late else ON_TIME))

    def add_censored(self, credit: float) -> None:
        """A task cut short before the threshold: late with probability ``credit``."""
        self.n += 1.0
        self.n2 += 1.0
        self.late += credit

    def rate(self, prior: float, strength: float = 1.0) -> float:
        """P(late) shrunk towards ``prior`` by ``strength`` observations: a worker seen
        rarely, or long ago, drifts back to the prior and is tried again."""
        return (self.late + strength * prior) / (self.n + strength)

    def kish(self) -> float:
        """Equal observations as informative as the decayed ones (0 when none)."""
        return self.n * self.n / self.n2 if self.n2 > 0.0 else 0.0

    def pool(
        self, job: int, factor: float, kinds: tuple[int, ...]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The relative latencies of the samples of ``kinds``, their weights and whether
        each is a lower bound (cut short)."""
        rows = [(j, r, kind == CUT) for j, r, kind in self.samples if kind in kinds]
        if not rows:
            return np.empty(0), np.empty(0), np.empty(0, dtype=bool)
        arr = np.array(rows, dtype=float)
        return arr[:, 1], factor ** (job - arr[:, 0]), arr[:, 2] > 0

    def quantiles(self, job: int, factor: float) -> tuple[float, float, float]:
        if not self.samples:
            return (1.0, 1.0, 1.0)
        arr = np.array([(j, r) for j, r, _ in self.samples], dtype=float)
        order = np.argsort(arr[:, 1])
        values = arr[order, 1]
        cum = np.cumsum(factor ** (job - arr[order, 0]))
        cum /= cum[-1]
        idx = np.searchsorted(cum, (0.5, 0.9, 0.99))
        q = values[np.minimum(idx, len(values) - 1)]
        return (float(q[0]), float(q[1]), float(q[2]))

    def predict(self, job: int, factor: float) -> WorkerPrediction:
        self.decay(job, factor)
        if self.n <= 0.0:
            return NOTHING_KNOWN
        q50, q90, q99 = self.quantiles(job, factor)
        return WorkerPrediction(self.late / self.n, q50, q90, q99, self.n)


def _draw(
    rng: np.random.Generator,
    pool: tuple[np.ndarray, np.ndarray, np.ndarray],
    n: int,
    empty: float,
    finished: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """``n`` latencies drawn from ``pool`` (by weight); a draw that is a lower bound is
    replaced by a draw from the ``finished`` latencies at or above it, when there are any
    (a straggler cut short takes what the stragglers that did finish took)."""
    values, weights, cut = pool
    if not len(values):
        return np.full(n, empty)
    idx = rng.choice(len(values), size=n, p=weights / weights.sum())
    out = values[idx]
    bound = cut[idx]
    if finished is None or not len(finished[0]) or not bound.any():
        return out
    order = np.argsort(finished[0])
    fv, cum = finished[0][order], np.concatenate([[0.0], np.cumsum(finished[1][order])])
    low = out[bound]
    start = np.searchsorted(fv, low)  # the first finished latency at or above the bound
    ok = start < len(fv)
    # by weight among those at or above the bound
    u = cum[start[ok]] + rng.random(int(ok.sum())) * (cum[-1] - cum[start[ok]])
    low[ok] = fv[np.minimum(np.searchsorted(cum, u, side="right") - 1, len(fv) - 1)]
    out[bound] = low
    return out


def _first_pool(
    tallies: tuple[_Tally | None, ...],
    job: int,
    factor: float,
    kinds: tuple[int, ...],
    default: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The first non-empty pool of ``kinds`` among ``tallies`` (worker, then host), else
    ``default`` (the cluster's)."""
    for t in tallies:
        if t is not None and len((pool := t.pool(job, factor, kinds))[0]):
            return pool
    return default


class LatencyModel:
    """Per-worker and per-host straggler statistics, learned online from coded jobs.

    Parameters
    ----------
    late_factor : float
        A task is late when its duration exceeds this multiple of its job's median.
    half_life : float
        Jobs after which an observation weighs half as much.
    samples : int
        Recent relative latencies kept per worker and per host for the quantiles.
    max_workers : int
        Workers (and hosts) kept at most; the least recently seen are dropped first, so
        a cluster whose workers come and go does not grow the model without limit.
    shrinkage : {"adaptive", "fixed"}, optional
        How :meth:`sample` shrinks a host's P(late) towards the cluster's and a worker's
        towards its host's: "adaptive" by a strength learned from how much they differ,
        "fixed" by one observation (the rule before issue 42). Default
        ``bacc.diagnostics.model.shrinkage``.
    strength : (float, float), optional
        The bounds of the learned strength, in effective observations. Default
        ``bacc.diagnostics.model.strength``.
    change_threshold : float, optional
        The change detector's alarm: a CUSUM of log-likelihood ratios above it marks a
        worker (or host) as changed, and its strength drops to the lower bound. Default
        ``bacc.diagnostics.model.change-threshold``.

    Notes
    -----
    :meth:`predict` of a worker never seen falls back on its host's figures when the host
    is given and known, then on the whole cluster's, and when nothing at all is known on
    ``p_late=0``, every quantile 1 and ``n_eff=0``. Its ``p_late`` is the worker's own
    record, unshrunk; :meth:`sample`, what a planner uses, shrinks it.

    The adaptive strength (a beta-binomial method of moments): with ``p`` the cluster's
    rate, ``r_i`` a host's and ``k_i`` its effective observations (Kish's, of the
    decayed weights), the spread of the hosts' true rates is estimated as
    ``tau2 = sum((r_i - p)**2 - p (1 - p) / k_i) / sum(1 - 1 / k_i)`` (the observed
    spread less the binomial noise) over hosts with ``k_i > 1``, and the strength as
    ``p (1 - p) / tau2 - 1``, clipped to ``strength`` (the upper bound when ``tau2 <= 0``:
    hosts that do not differ). Workers are shrunk towards their host's shrunk rate by the
    same estimate over the workers of hosts with several (their spread about their
    host's rate); a worker alone on its host is its host. The strength counts decayed
    observations (``n_eff``), so a worker seen long ago still drifts back to the prior.

    The change detector: per job, a tally's CUSUM grows by ``x log(p1 / p0) + (1 - x)
    log((1 - p1) / (1 - p0))`` per task (``x`` 1 late, 0 on time, the credit of a task cut
    short), ``p0`` the cluster's rate before the job (within 0.02 and 0.8), ``p1 =
    min(0.95, max(0.5, 2 p0))``; it stays within 0 and twice the threshold.
    """

    def __init__(
        self,
        late_factor: float = 1.5,
        half_life: float = 3.0,
        samples: int = 64,
        max_workers: int = 1000,
        shrinkage: str | None = None,
        strength: tuple[float, float] | None = None,
        change_threshold: float | None = None,
    ):
        if late_factor <= 1.0 or half_life <= 0.0 or samples < 1 or max_workers < 1:
            raise ValueError("need late_factor > 1, half_life > 0, samples >= 1, max_workers >= 1")
        # the scheduler plugin passes the older settings; these come from the config here
        if shrinkage is None:
            shrinkage = str(config.get("diagnostics.model.shrinkage"))
        if strength is None:
            low, high = config.get("diagnostics.model.strength")
            strength = (float(low), float(high))
        if change_threshold is None:
            change_threshold = float(config.get("diagnostics.model.change-threshold"))
        if shrinkage not in SHRINKAGE:
            raise ValueError(f"shrinkage must be one of {SHRINKAGE}, not {shrinkage!r}")
        if not 0.0 < strength[0] <= strength[1] or change_threshold <= 0.0:
            raise ValueError("need 0 < strength[0] <= strength[1] and change_threshold > 0")
        self.shrinkage = shrinkage
        self.strength = (float(strength[0]), float(strength[1]))
        self.change_threshold = float(change_threshold)
        self.late_factor = float(late_factor)
        self.half_life = float(half_life)
        self.samples = int(samples)
        self.max_workers = int(max_workers)
        self._factor = 0.5 ** (1.0 / self.half_life)
        self.jobs = 0  # jobs observed
        self.cluster = _Tally(self.samples)
        self.workers: OrderedDict[str, _Tally] = OrderedDict()  # least recently seen first
        self.hosts: OrderedDict[str, _Tally] = OrderedDict()
        self.host_of: dict[str, str] = {}
        # the last snapshot, until a job or a departure changes the model: the dashboard
        # asks for it every half second, and a cluster of many workers makes it dear
        self._snapshot: dict[str, Any] | None = None
        # (job, host strength, worker strength): what _rate shrinks by, learned once a job
        self._strengths: tuple[int, float, float] | None = None

    # -- learning ---------------------------------------------------------------------------
    def observe_job(self, tasks: Iterable[TaskObservation]) -> bool:
        """Learn from one job's coded tasks.

        Parameters
        ----------
        tasks : iterable of TaskObservation
            The job's tasks that ran (failed tasks are not latencies: leave them out).

        Returns
        -------
        bool
            False when the job taught nothing (no finished task gives it a median).
        """
        tasks = list(tasks)
        finished = [t.duration for t in tasks if t.finished]
        if not finished:
            return False
        median = max(float(np.median(finished)), _TINY)
        self.jobs += 1
        self._snapshot = None
        job, factor, threshold = self.jobs, self._factor, self.late_factor
        self.cluster.decay(job, factor)
        # the change detector's steps, from the cluster before this job (none on the first)
        step = self._cusum_steps()
        # per tally this job: the sum of its log-likelihood ratios
        moved: dict[int, tuple[_Tally, float]] = {}
        per_host: dict[str, list[int]] = {}  # host -> [tasks, late]
        ontime = self.cluster.pool(job, factor, (ON_TIME,))  # before this job's tasks
        # tasks cut short first: their credit comes from the model before this job
        for t in sorted(tasks, key=lambda t: t.finished or t.duration / median > threshold):
            rel = t.duration / median
            late = rel > threshold  # a censored task: at least rel, so late when past it
            if not t.finished and not late:
                credit = self._censored(t, rel, ontime)
                if step is not None:
                    for tally in (self.workers[t.worker], self.hosts[t.host]):
                        llr = credit * step[0] + (1.0 - credit) * step[1]
                        moved[id(tally)] = (tally, moved.get(id(tally), (tally, 0.0))[1] + llr)
                continue
            cut = not t.finished
            w = self._tally(self.workers, t.worker)
            w.decay(job, factor)
            w.add(job, rel, late, cut)
            h = self._tally(self.hosts, t.host)
            h.decay(job, factor)
            h.add(job, rel, late, cut)
            self.cluster.add(job, rel, late, cut)
            self.host_of[t.worker] = t.host
            counts = per_host.setdefault(t.host, [0, 0])
            counts[0] += 1
            counts[1] += late
            if step is not None:
                for tally in (w, h):
                    llr = step[0] if late else step[1]
                    moved[id(tally)] = (tally, moved.get(id(tally), (tally, 0.0))[1] + llr)
        for host, (n, n_late) in per_host.items():
            if n >= 2:
                h = self.hosts[host]
                h.pairs += n_late * (n - 1)
                h.pair_late += n_late * (n_late - 1)
        cap = 2.0 * self.change_threshold  # so that a recovery is seen within a few tasks
        for tally, llr in moved.values():
            tally.cusum = min(cap, max(0.0, tally.cusum + llr))
        self._strengths = None
        self._trim()
        return True

    def _cusum_steps(self) -> tuple[float, float] | None:
        """The change detector's step for a late task and for one on time: the
        log-likelihood ratios of a "slow" rate against the cluster's (None before the
        first job: no rate to compare with)."""
        c = self.cluster
        if c.n <= 0.0:
            return None
        p0 = min(max(c.late / c.n, _P0_RANGE[0]), _P0_RANGE[1])
        p1 = min(0.95, max(0.5, 2.0 * p0))
        return float(np.log(p1 / p0)), float(np.log((1.0 - p1) / (1.0 - p0)))

    def _censored(
        self, t: TaskObservation, rel: float, ontime: tuple[np.ndarray, np.ndarray, np.ndarray]
    ) -> float:
        """Credit a task cut short at ``rel`` below the threshold as late with probability
        ``p / (p + (1 - p) s(rel))``: p its worker's rate of lateness (shrunk as in
        :meth:`sample`), s(rel) the share of on-time tasks that run longer than ``rel``
        (Bayes' rule on "still running"). Returns the credit."""
        values, weights, _ = ontime
        # shrunk by half a task: never 0, however few on-time tasks were seen
        s = (float(weights[values > rel].sum()) + 0.5) / (float(weights.sum()) + 1.0)
        p = self._rate(t.worker, t.host)
        credit = p / (p + (1.0 - p) * s)
        self.host_of[t.worker] = t.host
        for tally in (
            self._tally(self.workers, t.worker),
            self._tally(self.hosts, t.host),
            self.cluster,
        ):
            tally.decay(self.jobs, self._factor)
            tally.add_censored(credit)
        return credit

    def _rate(self, worker: str, host: str | None) -> float:
        """The shrunk P(late) of a worker: its host's towards the cluster's, then its own
        towards that (a changed one by the lower bound of the strength)."""
        c = self.cluster
        c.decay(self.jobs, self._factor)
        prior = c.late / c.n if c.n > 0 else 0.5
        strengths = self._strength()
        low = self.strength[0] if self.shrinkage == "adaptive" else 1.0
        tallies = (self.hosts.get(host) if host else None, self.workers.get(worker))
        for tally, m in zip(tallies, strengths, strict=True):
            if tally is not None:
                tally.decay(self.jobs, self._factor)
                prior = tally.rate(prior, low if self._changed(tally) else m)
        return prior

    def _changed(self, tally: _Tally) -> bool:
        return self.shrinkage == "adaptive" and tally.cusum > self.change_threshold

    def _strength(self) -> tuple[float, float]:
        """The strengths the hosts' and the workers' rates are shrunk by (learned once a
        job: the method of moments of the class docstring)."""
        if self.shrinkage == "fixed":
            return (1.0, 1.0)
        if self._strengths is not None and self._strengths[0] == self.jobs:
            return self._strengths[1:]
        job, factor = self.jobs, self._factor
        c = self.cluster
        c.decay(job, factor)
        p = c.late / c.n if c.n > 0 else 0.5
        noise = p * (1.0 - p)
        low, high = self.strength

        def strength(spread: float, dof: float) -> float:
            if dof <= 0.0 or spread <= 0.0 or noise <= 0.0:
                return high  # nothing says they differ
            return min(high, max(low, noise * dof / spread - 1.0))

        # hosts about the cluster
        spread = dof = 0.0
        for h in self.hosts.values():
            h.decay(job, factor)
            k = h.kish()
            if k > 1.0:
                spread += h.n * ((h.late / h.n - p) ** 2 - noise / k)
                dof += h.n * (1.0 - 1.0 / k)
        m_host = strength(spread, dof)
        # workers about their host, over hosts with several workers
        spread = dof = 0.0
        for worker, w in self.workers.items():
            on = self.hosts.get(self.host_of.get(worker, ""))
            w.decay(job, factor)
            if on is None or on.n <= w.n * (1.0 + 1e-9):
                continue  # alone on its host (or its host is its own record)
            k, k_host = w.kish(), on.kish()
            if k > 1.0:
                d2 = (w.late / w.n - on.late / on.n) ** 2 - noise * max(1.0 / k - 1.0 / k_host, 0.0)
                spread += w.n * d2
                dof += w.n * (1.0 - w.n / on.n) * (1.0 - 1.0 / k)
        m_worker = strength(spread, dof)
        self._strengths = (job, m_host, m_worker)
        return (m_host, m_worker)

    def _tally(self, table: OrderedDict[str, _Tally], key: str) -> _Tally:
        tally = table.get(key)
        if tally is None:
            tally = table[key] = _Tally(self.samples)
            tally.at = self.jobs
        else:
            table.move_to_end(key)
        return tally

    def _trim(self) -> None:
        while len(self.workers) > self.max_workers:
            worker, _ = self.workers.popitem(last=False)
            self.host_of.pop(worker, None)
        while len(self.hosts) > self.max_workers:
            self.hosts.popitem(last=False)

    def forget(self, worker: str) -> None:
        """Drop a worker that left the cluster (its host's figures stay)."""
        self._snapshot = None
        self._strengths = None
        self.workers.pop(worker, None)
        self.host_of.pop(worker, None)

    # -- predictions --------------------------------------------------------------------------
    def predict(self, worker: str, host: str | None = None) -> WorkerPrediction:
        """The figures of ``worker``, or a prior when it was never seen.

        Parameters
        ----------
        worker : str
            The worker's address.
        host : str, optional
            Its host: the prior of a worker never seen is its host's figures.

        Returns
        -------
        WorkerPrediction
        """
        tally = self.workers.get(worker)
        if tally is None and host is not None:
            tally = self.hosts.get(host)
        if tally is None:
            tally = self.cluster
        return tally.predict(self.jobs, self._factor)

    def host_correlation(self, host: str) -> float | None:
        """P(another task of the same job on ``host`` is late | one is late).

        Over jobs with at least two tasks on the host; compare with the host's ``p_late``
        (independent stragglers give about that, stragglers that come together give more).
        None when no such job had a late task.
        """
        tally = self.hosts.get(host)
        if tally is None:
            return None
        tally.decay(self.jobs, self._factor)
        return tally.pair_late / tally.pairs if tally.pairs > 0.0 else None

    def sample(self, workers: Sequence[str], rng: np.random.Generator, size: int = 1) -> np.ndarray:
        """Relative latencies drawn from the model: one column per worker.

        Each draw is late with the worker's probability of lateness, shrunk towards its
        host's and that towards the cluster's (by the learned strengths of the class
        notes, or one observation with ``shrinkage="fixed"``): workers that do not truly
        differ are drawn much like the cluster, however lucky their few observations, one
        seen rarely or long ago drifts back to the others so a planner tries it again, and
        one the change detector flags follows its own record. An on-time draw comes
        from the worker's recent on-time latencies (the cluster's while it has fewer than
        4), a late one from its late latencies (its host's, then the cluster's when it has
        none; ``late_factor`` when no task was ever late). Samples weigh as in the
        quantiles. A late latency known only as a lower bound (a task cut short) is
        replaced by one of the late tasks that finished at or above it (the worker's, its
        host's, then the cluster's), or stays the bound when none did. Workers are drawn
        independently of each other.

        Parameters
        ----------
        workers : sequence of str
            Worker addresses.
        rng : numpy.random.Generator
        size : int
            Draws per worker.

        Returns
        -------
        numpy.ndarray
            Shape ``(size, len(workers))``; all 1 while the model knows nothing.
        """
        out = np.ones((size, len(workers)))
        if self.jobs == 0:
            return out
        job, factor = self.jobs, self._factor
        cluster_on = self.cluster.pool(job, factor, (ON_TIME,))
        cluster_late = self.cluster.pool(job, factor, ANY_LATE)
        cluster_done = self.cluster.pool(job, factor, (LATE,))
        for k, worker in enumerate(workers):
            host = self.host_of.get(worker)
            w, h = self.workers.get(worker), self.hosts.get(host or "")
            on = w.pool(job, factor, (ON_TIME,)) if w is not None else cluster_on
            if len(on[0]) < 4:
                on = cluster_on
            late = _first_pool((w, h), job, factor, ANY_LATE, cluster_late)
            done = _first_pool((w, h), job, factor, (LATE,), cluster_done)
            is_late = rng.random(size) < self._rate(worker, host)
            out[:, k] = _draw(rng, on, size, 1.0)
            out[is_late, k] = _draw(rng, late, int(is_late.sum()), self.late_factor, done)
        return out

    # -- read-out -------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """A JSON-serialisable picture: settings, and the figures per worker, per host and
        for the whole cluster (workers and hosts sorted by name).

        The same object until the model learns or forgets something: read it, do not
        modify it.
        """
        if self._snapshot is None:
            self._snapshot = self._make_snapshot()
        return self._snapshot

    def _make_snapshot(self) -> dict[str, Any]:

        def figures(tally: _Tally) -> dict[str, float]:
            p = tally.predict(self.jobs, self._factor)
            return {
                "p_late": round(p.p_late, 4),
                "q50": round(p.q50, 4),
                "q90": round(p.q90, 4),
                "q99": round(p.q99, 4),
                "n_eff": round(p.n_eff, 3),
            }

        hosts = {}
        for host in sorted(self.hosts):
            corr = self.host_correlation(host)
            hosts[host] = {
                **figures(self.hosts[host]),
                "p_late_given_late": None if corr is None else round(corr, 4),
                "workers": sorted(w for w, h in self.host_of.items() if h == host),
            }
        m_host, m_worker = self._strength()
        return {
            "late_factor": self.late_factor,
            "half_life": self.half_life,
            "jobs": self.jobs,
            # what the planner's draws shrink by, and who the change detector flags
            "shrinkage": {
                "rule": self.shrinkage,
                "host_strength": round(m_host, 3),
                "worker_strength": round(m_worker, 3),
                "changed_workers": sorted(w for w, t in self.workers.items() if self._changed(t)),
                "changed_hosts": sorted(h for h, t in self.hosts.items() if self._changed(t)),
            },
            "cluster": figures(self.cluster),
            "workers": {
                w: {"host": self.host_of.get(w), **figures(self.workers[w])}
                for w in sorted(self.workers)
            },
            "hosts": hosts,
        }


class TaskTimes:
    """Per function: the run times (seconds) of its recent finished tasks.

    The hedging rule's prior (``code="hedged"``): before enough tasks of a job finished,
    a task is late by what its function's earlier jobs on this cluster took. Absolute
    times, unlike :class:`LatencyModel`'s relative ones: a job needs a threshold in
    seconds before any of its own tasks finished.

    Parameters
    ----------
    samples : int
        Run times kept per function (the newest).
    max_functions : int
        Functions kept; the least recently seen are dropped first.
    """

    def __init__(self, samples: int = 64, max_functions: int = 1000):
        self.samples = samples
        self.max_functions = max_functions
        self._of: OrderedDict[str, deque[float]] = OrderedDict()

    def observe(self, func: str, seconds: Iterable[float]) -> None:
        """Run times of finished tasks of ``func`` (non-finite or negative ones ignored)."""
        good = [float(s) for s in seconds if np.isfinite(s) and s >= 0]
        if not good:
            return
        kept = self._of.pop(func, None) or deque(maxlen=self.samples)
        kept.extend(good)
        self._of[func] = kept
        while len(self._of) > self.max_functions:
            self._of.popitem(last=False)

    def expected(self, func: str) -> float | None:
        """The median of ``func``'s kept run times; None when none is known."""
        kept = self._of.get(func)
        return float(np.median(np.fromiter(kept, float))) if kept else None

    def snapshot(self) -> dict[str, dict[str, float]]:
        """Per function: the median run time and how many run times it is over."""
        return {f: {"median": float(np.median(list(t))), "n": len(t)} for f, t in self._of.items()}
