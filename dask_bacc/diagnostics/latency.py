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
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LatencyModel", "TaskObservation", "TaskTimes", "WorkerPrediction"]

#: a job median below this (seconds) is taken as this: no division by zero
_TINY = 1e-6


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

    __slots__ = ("at", "late", "n", "pair_late", "pairs", "samples")

    def __init__(self, samples: int):
        self.at = 0  # job number the sums were last decayed to
        self.late = 0.0
        self.n = 0.0
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
            self.pairs *= f
            self.pair_late *= f
            self.at = job

    def add(self, job: int, rel: float, late: bool, cut: bool = False) -> None:
        self.n += 1.0
        self.late += late
        self.samples.append((job, rel, CUT if late and cut else LATE if late else ON_TIME))

    def add_censored(self, credit: float) -> None:
        """A task cut short before the threshold: late with probability ``credit``."""
        self.n += 1.0
        self.late += credit

    def rate(self, prior: float) -> float:
        """P(late) shrunk towards ``prior`` by one observation: a worker seen rarely, or
        long ago, drifts back to the prior and is tried again."""
        return (self.late + prior) / (self.n + 1.0)

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

    Notes
    -----
    :meth:`predict` of a worker never seen falls back on its host's figures when the host
    is given and known, then on the whole cluster's, and when nothing at all is known on
    ``p_late=0``, every quantile 1 and ``n_eff=0``.
    """

    def __init__(
        self,
        late_factor: float = 1.5,
        half_life: float = 3.0,
        samples: int = 64,
        max_workers: int = 1000,
    ):
        if late_factor <= 1.0 or half_life <= 0.0 or samples < 1 or max_workers < 1:
            raise ValueError("need late_factor > 1, half_life > 0, samples >= 1, max_workers >= 1")
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
        per_host: dict[str, list[int]] = {}  # host -> [tasks, late]
        ontime = self.cluster.pool(job, factor, (ON_TIME,))  # before this job's tasks
        # tasks cut short first: their credit comes from the model before this job
        for t in sorted(tasks, key=lambda t: t.finished or t.duration / median > threshold):
            rel = t.duration / median
            late = rel > threshold  # a censored task: at least rel, so late when past it
            if not t.finished and not late:
                self._censored(t, rel, ontime)
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
        for host, (n, n_late) in per_host.items():
            if n >= 2:
                h = self.hosts[host]
                h.pairs += n_late * (n - 1)
                h.pair_late += n_late * (n_late - 1)
        self._trim()
        return True

    def _censored(
        self, t: TaskObservation, rel: float, ontime: tuple[np.ndarray, np.ndarray, np.ndarray]
    ) -> None:
        """Credit a task cut short at ``rel`` below the threshold as late with probability
        ``p / (p + (1 - p) s(rel))``: p its worker's rate of lateness, s(rel) the share of
        on-time tasks that run longer than ``rel`` (Bayes' rule on "still running")."""
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

    def _rate(self, worker: str, host: str | None) -> float:
        """The shrunk P(late) of a worker (its host's, then the cluster's, as prior)."""
        c = self.cluster
        c.decay(self.jobs, self._factor)
        prior = c.late / c.n if c.n > 0 else 0.5
        for tally in (self.hosts.get(host) if host else None, self.workers.get(worker)):
            if tally is not None:
                tally.decay(self.jobs, self._factor)
                prior = tally.rate(prior)
        return prior

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
        host's and the cluster's by one observation (a worker seen rarely or long ago is
        drawn much like the others, so a planner tries it again). An on-time draw comes
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
        return {
            "late_factor": self.late_factor,
            "half_life": self.half_life,
            "jobs": self.jobs,
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
