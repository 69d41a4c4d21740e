"""The benchmark harness: configuration, the interleaved run loop and the metrics.

One run measures a grid of (K, N) cells. In every cell each strategy runs ``jobs`` jobs with
injected stragglers and (unless ``baseline=False``) ``jobs`` jobs without them, on the same
cluster. Round ``r`` of a cell runs one job of every strategy under each condition; the order
of the two conditions and, within each, the order of the strategies are shuffled per round
with a seeded generator, so machine drift (other load, heating, a slow garbage collection)
hits every strategy and both conditions alike.

Between two jobs the harness waits until no worker thread is still busy (cancelled
stragglers of the previous job finish their current ``func`` call; their injected delay ends
at once), so every job starts on an idle cluster and no strategy inherits another's leftovers.
The work those leftovers do is not lost from the accounts: it is part of "compute spent".

Strategies
----------
``plain``
    Plain Dask: ``client.map`` of the K blocks + ``client.gather``; the scheduler places the
    tasks. Its tasks meet the same injected delays (:func:`dask_bacc.testing.plain_task`)
    but cannot be cancelled.
``uncoded``
    ``submit_coded(code="uncoded")``: N = K pinned tasks, wait for all.
``repetition``
    Block ``i mod K`` on each of the N tasks; exact once every block has a copy.
``speculative``
    K tasks plus backup copies of slow ones (``submit_coded(code="speculative")``); exact.
``berrut``, ``systematic-berrut``
    Berrut approximated coded computing with N tasks, decoding after the default wait
    (``bacc.wait.berrut``, 75% of N) or ``wait``; approximate.
``spline``, ``systematic-spline``
    Spline coded computing with N tasks, decoding after the default wait
    (``bacc.wait.spline``, 75% of N) or ``wait``; approximate (the systematic variant is
    exact for each block whose own task returned). Not in the default set: run them with
    ``strategies=`` (``--strategies``).
``bspline``, ``systematic-bspline``
    The local-support code (each task reads at most 4 blocks); as the spline codes, not
    in the default set.
``lagrange``
    Lagrange coded computing (exact) with N tasks; only for a polynomial task function.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import platform
import sys
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..exceptions import UnknownCodeError
from ..testing.stragglers import (
    PLAIN_SEQ_BASE,
    Bimodal,
    ShiftedExponential,
    SlowWorkers,
    clear_stragglers,
    draw_delay,
    inject_stragglers,
    plain_task,
    task_seconds,
)

__all__ = [
    "DEFAULT_STRATEGIES",
    "STRAGGLER_KINDS",
    "STRATEGIES",
    "TASK_FUNCS",
    "BenchConfig",
    "BenchResult",
    "JobRecord",
    "StragglerSpec",
    "TaskFunction",
    "TaskModel",
    "quantile",
    "run_bench",
    "summarize",
]

#: Every strategy the harness knows, in the order tables list them.
STRATEGIES: tuple[str, ...] = (
    "plain",
    "uncoded",
    "repetition",
    "speculative",
    "berrut",
    "systematic-berrut",
    "spline",
    "systematic-spline",
    "bspline",
    "systematic-bspline",
    "lagrange",
)
_NAMED_ONLY = ("spline", "systematic-spline", "bspline", "systematic-bspline")
#: Strategies run when none are named (``lagrange`` only with a polynomial task function):
#: the reference bench of docs/benchmarks.md, whose figures were measured without the
#: spline codes (name them with ``strategies=`` / ``--strategies``).
DEFAULT_STRATEGIES: tuple[str, ...] = tuple(s for s in STRATEGIES if s not in _NAMED_ONLY)
#: Strategies whose decoded output is an approximation.
APPROXIMATE: frozenset[str] = frozenset({"berrut", "systematic-berrut", *_NAMED_ONLY})
#: Task functions: name -> polynomial degree (None: not a polynomial).
TASK_FUNCS: dict[str, int | None] = {"mlp": None, "square": 2, "linear": 1}
#: Straggler models (``none``: no injected delays; ``kills``: workers are closed mid-job).
STRAGGLER_KINDS: tuple[str, ...] = ("bimodal", "shifted-exp", "slow-workers", "kills", "none")

CONDITIONS = ("stragglers", "clean")


# -- configuration -------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _weights(
    features: int, work: int, output_size: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, 1])
    w1 = rng.standard_normal((features, work)) / np.sqrt(features)
    b1 = 0.1 * rng.standard_normal(work)
    w2 = rng.standard_normal((work, output_size)) / np.sqrt(work)
    for w in (w1, b1, w2):
        w.setflags(write=False)
    return w1, b1, w2


class TaskFunction:
    """The benchmark's ``f``: sleep ``base_duration``, then ``act(block @ W1 + b1) @ W2``.

    Picklable by reference (dask-bacc is installed on the workers), so it runs unchanged as
    a coded eval task and as a plain Dask task. Only the shapes and the seed travel with each
    task; the seeded weights are built once per process and cached (like a model the workers
    load once), so the strategies are not measured on serialising the weights N times.
    :meth:`apply` is the same computation without the sleep: the exact ``f(X)`` the decoded
    output is compared against.

    Parameters
    ----------
    kind : {"mlp", "square", "linear"}
        The activation: ``tanh`` (not a polynomial), ``x**2`` (degree 2) or identity
        (degree 1).
    features, work, output_size : int
        Weights ``W1`` ``(features, work)``, ``b1`` ``(work,)``, ``W2`` ``(work,
        output_size)``, scaled to keep activations of order 1.
    seed : int
        Seed of the weights.
    base_duration : float
        Seconds of ``time.sleep`` per call (releases the GIL, like I/O or native code).
    """

    __name__ = "bench_task"

    def __init__(
        self,
        kind: str,
        features: int,
        work: int,
        output_size: int,
        seed: int,
        base_duration: float,
    ):
        self.kind = kind
        self.features, self.work, self.output_size = int(features), int(work), int(output_size)
        self.seed = int(seed)
        self.base_duration = float(base_duration)

    @property
    def weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(W1, b1, W2)``, built from the seed on first use in this process."""
        return _weights(self.features, self.work, self.output_size, self.seed)

    def apply(self, block: np.ndarray) -> np.ndarray:
        """``act(block @ W1 + b1) @ W2`` without the sleep."""
        w1, b1, w2 = self.weights
        h = np.asarray(block) @ w1 + b1
        if self.kind == "mlp":
            h = np.tanh(h)
        elif self.kind == "square":
            h = h * h
        return h @ w2

    def __call__(self, block: np.ndarray) -> np.ndarray:
        if self.base_duration > 0:
            time.sleep(self.base_duration)
        return self.apply(block)

    def __repr__(self) -> str:
        return (
            f"TaskFunction({self.kind!r}, features={self.features}, work={self.work}, "
            f"output_size={self.output_size}, base_duration={self.base_duration})"
        )


@dataclass(frozen=True)
class TaskModel:
    """What one task does: a fixed sleep plus real NumPy work, and how big its output is.

    Attributes
    ----------
    func : {"mlp", "square", "linear"}
        ``tanh`` hidden layer (any f: Lagrange does not apply), squared hidden layer
        (polynomial of degree 2) or linear (degree 1).
    base_duration : float
        Seconds every task sleeps (default 0.2).
    work : int
        Hidden units of ``block @ W1`` (the NumPy work per block scales with
        ``rows * features * work``).
    output_size : int
        Output columns per row.
    rows : int
        Rows per block (the input has ``K * rows`` rows).
    features : int
        Input columns.
    """

    func: str = "mlp"
    base_duration: float = 0.2
    work: int = 128
    output_size: int = 16
    rows: int = 64
    features: int = 32

    @property
    def degree(self) -> int | None:
        """Polynomial degree of f (None when f is not a polynomial)."""
        return TASK_FUNCS.get(self.func)

    def validate(self) -> None:
        """Raise ``ValueError`` for an impossible task model."""
        if self.func not in TASK_FUNCS:
            raise ValueError(
                f"unknown task function {self.func!r}; choose one of {list(TASK_FUNCS)}"
            )
        if not (math.isfinite(self.base_duration) and self.base_duration >= 0):
            raise ValueError(f"base duration must be >= 0 seconds, got {self.base_duration}")
        for name in ("work", "output_size", "rows", "features"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name.replace('_', ' ')} must be an integer >= 1, got {value!r}")

    def build(self, seed: int) -> TaskFunction:
        """The task function with seeded weights."""
        return TaskFunction(
            self.func, self.features, self.work, self.output_size, seed, self.base_duration
        )

    def data(self, K: int, seed: int) -> np.ndarray:
        """The input: ``(K * rows, features)`` i.i.d. standard normal, seeded per K."""
        rng = np.random.default_rng([seed, 2, K])
        return rng.standard_normal((K * self.rows, self.features))

    def describe(self) -> str:
        """One line for reports."""
        act = {"mlp": "tanh", "square": "square", "linear": "identity"}[self.func]
        poly = "not a polynomial" if self.degree is None else f"polynomial of degree {self.degree}"
        return (
            f"f = sleep({self.base_duration:g} s) + {act}(X_j W1 + b1) W2 with X_j "
            f"{self.rows}x{self.features}, W1 {self.features}x{self.work}, "
            f"W2 {self.work}x{self.output_size} float64 ({poly})"
        )


@dataclass(frozen=True)
class StragglerSpec:
    """The straggler model of the "stragglers" condition.

    Attributes
    ----------
    kind : {"bimodal", "shifted-exp", "slow-workers", "kills", "none"}
        ``bimodal``: each task, independently with probability ``p``, waits
        ``delay + (factor - 1) * elapsed`` more (:class:`dask_bacc.testing.Bimodal`;
        ``elapsed`` includes the base sleep, so base 0.2 s and factor 10 add 1.8 s).
        ``shifted-exp``: every task waits ``shift + Exp(scale)``.
        ``slow-workers``: ``slow_workers`` workers (a seeded choice of names) delay each of
        their tasks by ``delay + (factor - 1) * elapsed``. ``kills``: ``kills`` random workers
        are closed at a uniform random time in ``[0, base_duration]`` after each job was
        submitted and replaced by fresh ones (embedded cluster only). ``none``: no stragglers.
    p, factor, delay : float
        Bimodal and slow-worker parameters.
    scale, shift : float
        Shifted exponential parameters (``scale`` defaults to the base duration).
    slow_workers : int
        Number of slow workers.
    kills : int
        Workers killed per job.
    threshold : float, optional
        An injected delay of at least this many seconds counts the task as a straggler in
        the "error vs stragglers" figures (default: the base duration, i.e. a task at least
        twice its nominal time).
    """

    kind: str = "bimodal"
    p: float = 0.1
    factor: float = 10.0
    delay: float = 0.0
    scale: float | None = None
    shift: float = 0.0
    slow_workers: int = 3
    kills: int = 1
    threshold: float | None = None

    def validate(self, n_workers: int | None = None) -> None:
        """Raise ``ValueError`` for an impossible straggler model."""
        if self.kind not in STRAGGLER_KINDS:
            raise ValueError(
                f"unknown straggler model {self.kind!r}; choose one of {list(STRAGGLER_KINDS)}"
            )
        if not 0 <= self.p <= 1:
            raise ValueError(f"p must lie in [0, 1], got {self.p}")
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise ValueError(f"factor must be >= 1, got {self.factor}")
        for name in ("delay", "shift"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be >= 0 seconds, got {value}")
        if self.scale is not None and not (math.isfinite(self.scale) and self.scale >= 0):
            raise ValueError(f"scale must be >= 0 seconds, got {self.scale}")
        if self.threshold is not None and not self.threshold > 0:
            raise ValueError(f"straggler threshold must be positive, got {self.threshold}")
        if self.kind == "slow-workers":
            if self.slow_workers < 1:
                raise ValueError(f"slow workers must be >= 1, got {self.slow_workers}")
            if n_workers is not None and self.slow_workers > n_workers:
                raise ValueError(
                    f"{self.slow_workers} slow workers but the cluster has {n_workers} workers"
                )
        if self.kind == "kills":
            if self.kills < 1:
                raise ValueError(f"kills must be >= 1 per job, got {self.kills}")
            if n_workers is not None and self.kills >= n_workers:
                raise ValueError(f"{self.kills} kills per job leave no worker of {n_workers}")

    def model(self, base_duration: float, worker_names: Sequence[str], seed: int) -> Any:
        """The :mod:`dask_bacc.testing` model of the "stragglers" condition."""
        if self.kind == "bimodal":
            return Bimodal(p=self.p, delay=self.delay, factor=self.factor)
        if self.kind == "shifted-exp":
            scale = base_duration if self.scale is None else self.scale
            return ShiftedExponential(scale=scale, shift=self.shift)
        if self.kind == "slow-workers":
            names = sorted(worker_names, key=_name_order)
            rng = np.random.default_rng([seed, 5])
            chosen = rng.choice(len(names), size=self.slow_workers, replace=False)
            return SlowWorkers(
                names=tuple(names[i] for i in sorted(chosen)), delay=self.delay, factor=self.factor
            )
        return Bimodal(p=0.0, delay=0.0)  # kills / none: record task times, no delays

    def straggler_threshold(self, base_duration: float) -> float:
        """Delay (seconds) from which a task counts as a straggler."""
        if self.threshold is not None:
            return self.threshold
        return base_duration if base_duration > 0 else 1e-3

    def describe(self, base_duration: float) -> str:
        """One line for reports."""
        if self.kind == "bimodal":
            extra = f"{self.delay:g} s + {self.factor - 1:g} x elapsed"
            if self.delay == 0:
                extra = f"{self.factor:g}x slower"
            return f"bimodal: each task {extra} with probability {self.p:g}"
        if self.kind == "shifted-exp":
            scale = base_duration if self.scale is None else self.scale
            return (
                f"shifted exponential: every task waits {self.shift:g} s + Exp(scale {scale:g} s)"
            )
        if self.kind == "slow-workers":
            return (
                f"{self.slow_workers} slow workers: their tasks wait {self.delay:g} s + "
                f"{self.factor - 1:g} x elapsed"
            )
        if self.kind == "kills":
            return (
                f"{self.kills} worker(s) killed per job at a uniform time in "
                f"[0, {base_duration:g}] s after submission, then replaced"
            )
        return "no stragglers"


def _name_order(name: str) -> tuple[int, Any]:
    return (0, int(name)) if str(name).isdigit() else (1, str(name))


@dataclass(frozen=True)
class BenchConfig:
    """A benchmark run.

    Attributes
    ----------
    K, N : tuple of int
        The grid: data blocks and coded tasks; every pair with ``K < N <= workers`` is a
        cell (other pairs are skipped with a note; none valid is an error).
    strategies : tuple of str, optional
        From :data:`STRATEGIES`; default those of :data:`DEFAULT_STRATEGIES` that apply
        (``lagrange`` only for a polynomial task function).
    jobs : int
        Jobs per strategy, per cell and per condition (default 30).
    workers : int
        Workers of the embedded ``LocalCluster`` (1 thread each; ignored with ``scheduler``).
    processes : bool
        Embedded workers in their own processes (default: threads of this process).
    scheduler : str, optional
        Connect to this scheduler instead of starting a cluster.
    task : TaskModel
        What each task does.
    stragglers : StragglerSpec
        The straggler model.
    wait : int or float, optional
        ``wait=`` for the Berrut strategies (default ``bacc.wait.berrut``).
    speculative_rule : {"spark", "cubed"}, optional
        The speculative strategy's rule (default ``bacc.speculative.rule``).
    baseline : bool
        Also run every strategy without stragglers (for the "vs own clean run" ratios).
    warmup : bool
        One unrecorded clean job per strategy and cell first.
    seed : int
        Seeds the data, weights, straggler draws, kills and the order of jobs.
    job_timeout : float
        Seconds before a job is cancelled and counted as failed.
    settle_timeout : float
        Longest wait for the workers to go idle between jobs.
    """

    K: tuple[int, ...] = (16,)
    N: tuple[int, ...] = (32,)
    strategies: tuple[str, ...] | None = None
    jobs: int = 30
    workers: int = 32
    processes: bool = False
    scheduler: str | None = None
    task: TaskModel = field(default_factory=TaskModel)
    stragglers: StragglerSpec = field(default_factory=StragglerSpec)
    wait: int | float | None = None
    speculative_rule: str | None = None
    baseline: bool = True
    warmup: bool = True
    seed: int = 0
    job_timeout: float = 120.0
    settle_timeout: float = 30.0

    def plan(
        self, n_workers: int | None = None
    ) -> tuple[list[tuple[int, int]], list[str], list[str]]:
        """Validate and expand: the (K, N) cells, the strategies to run, and notes.

        Parameters
        ----------
        n_workers : int, optional
            Workers available: a connected cluster's actual count. Default ``workers`` for
            the embedded cluster; with ``scheduler`` and no count the checks against the
            number of workers wait until connected.

        Raises
        ------
        ValueError
            With a message naming the bad setting.
        """
        if n_workers is None and self.scheduler is None:
            n_workers = self.workers
        notes: list[str] = []
        self.task.validate()
        if self.scheduler is None and (
            isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 1
        ):
            raise ValueError(f"workers must be an integer >= 1, got {self.workers!r}")
        self.stragglers.validate(n_workers)
        if self.stragglers.kind == "kills" and self.scheduler is not None:
            raise ValueError(
                "the 'kills' straggler model needs the embedded cluster (it closes and replaces "
                "workers); drop --scheduler"
            )
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int) or self.jobs < 1:
            raise ValueError(f"jobs must be an integer >= 1, got {self.jobs!r}")
        if not self.K or not self.N:
            raise ValueError("give at least one K and one N")
        for name, values in (("K", self.K), ("N", self.N)):
            for v in values:
                if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                    raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.wait is not None:
            if isinstance(self.wait, bool) or not isinstance(self.wait, (int, float)):
                raise ValueError(f"wait must be an int or a float in (0, 1], got {self.wait!r}")
            if isinstance(self.wait, float) and not 0 < self.wait <= 1:
                raise ValueError(f"wait as a fraction must lie in (0, 1], got {self.wait}")
            if isinstance(self.wait, int) and self.wait < 1:
                raise ValueError(f"wait must be >= 1 result, got {self.wait}")
        if self.speculative_rule not in (None, "spark", "cubed"):
            raise ValueError(
                f"speculative rule must be 'spark' or 'cubed', got {self.speculative_rule!r}"
            )
        if not (self.job_timeout > 0 and self.settle_timeout > 0):
            raise ValueError("job and settle timeouts must be positive")

        # strategies
        degree = self.task.degree
        if self.strategies is None:
            strategies = [s for s in DEFAULT_STRATEGIES if s != "lagrange" or degree is not None]
            if degree is None:
                notes.append(
                    f"lagrange skipped: f ({self.task.func}) is not a polynomial; run with a "
                    "polynomial task function (--func square or linear) to include it"
                )
        else:
            if not self.strategies:
                raise ValueError("give at least one strategy")
            unknown = [s for s in self.strategies if s not in STRATEGIES]
            if unknown:
                raise ValueError(
                    f"unknown strateg{'y' if len(unknown) == 1 else 'ies'} "
                    f"{', '.join(map(repr, unknown))}; choose from {', '.join(STRATEGIES)}"
                )
            if "lagrange" in self.strategies and degree is None:
                raise ValueError(
                    f"lagrange needs a polynomial f but the task function {self.task.func!r} is "
                    "not one; use --func square or --func linear, or drop lagrange"
                )
            strategies = [s for s in STRATEGIES if s in self.strategies]  # canonical order

        # cells
        cells: list[tuple[int, int]] = []
        bad: list[str] = []
        for K in dict.fromkeys(int(k) for k in self.K):
            for N in dict.fromkeys(int(n) for n in self.N):
                if N <= K:
                    bad.append(f"(K={K}, N={N}): N must exceed K")
                elif n_workers is not None and N > n_workers:
                    bad.append(f"(K={K}, N={N}): N tasks need N distinct workers, have {n_workers}")
                elif "speculative" in strategies and n_workers is not None and K >= n_workers:
                    bad.append(
                        f"(K={K}, N={N}): speculative needs a spare worker beyond the K tasks"
                    )
                else:
                    cells.append((K, N))
        if not cells:
            raise ValueError("no valid (K, N) cell: need 1 <= K < N <= workers; " + "; ".join(bad))
        notes += [f"cell skipped {b}" for b in bad]
        for K, N in cells:
            missing = set(strategies) - set(self.strategies_for(K, N, strategies))
            if missing:
                need = (degree or 1) * (K - 1) + 1
                notes.append(
                    f"lagrange skipped in cell K={K}, N={N}: degree {degree} needs N >= {need}"
                )
        return cells, strategies, notes

    def strategies_for(self, K: int, N: int, strategies: Sequence[str]) -> list[str]:
        """The strategies that can run in cell (K, N) (Lagrange needs ``N >= d(K-1)+1``)."""
        degree = self.task.degree or 1
        return [s for s in strategies if s != "lagrange" or N >= degree * (K - 1) + 1]


# -- records and results ------------------------------------------------------------------


@dataclass
class JobRecord:
    """One measured job.

    Attributes
    ----------
    K, N : int
        The cell.
    strategy, condition : str
        Strategy; ``"stragglers"`` or ``"clean"``.
    round : int
        Round within the cell.
    seq : int
        Job number of the straggler draws (dask-bacc's ``CodedJob.seq``, or
        ``PLAIN_SEQ_BASE + n`` for plain jobs).
    latency : float or None
        Seconds from submission to the output in hand on the client; None if the job failed.
    error : str or None
        Why the job failed.
    rel_error : float or None
        ``||out - f(X)||_F / ||f(X)||_F``.
    tasks : int
        Eval tasks launched (N; uncoded/plain K; speculative K plus backups).
    stragglers : int
        The job's tasks that drew a delay of at least the straggler threshold (replayed from
        the seeded draws) or, under ``kills``, that were running or queued on a killed worker.
    cancelled : int
        Eval tasks cancelled while running or queued.
    compute : float
        Thread-seconds the job's eval tasks occupied (incl. cancelled ones until their delay
        was interrupted; work on a killed worker is lost from the count).
    trigger : str or None
        What started the decode.
    unused : list of int
        Coded tasks the decode did not use (stragglers, late, failed, never launched
        backups excluded); which ones matters for Berrut's error.
    slowest_used, time_to_decode : float or None
        From the job's report: arrival of the last result decoded from, and when the
        decoded blocks were ready (seconds after submission; coded strategies only).
    killed : list of str
        Workers killed during the job.
    """

    K: int
    N: int
    strategy: str
    condition: str
    round: int
    seq: int
    latency: float | None = None
    error: str | None = None
    rel_error: float | None = None
    tasks: int = 0
    stragglers: int = 0
    cancelled: int = 0
    compute: float = 0.0
    trigger: str | None = None
    unused: list[int] = field(default_factory=list)
    slowest_used: float | None = None
    time_to_decode: float | None = None
    killed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Whether the job delivered an output."""
        return self.latency is not None


@dataclass
class BenchResult:
    """What :func:`run_bench` measured.

    Attributes
    ----------
    config : BenchConfig
    cells : list of (K, N)
    strategies : list of str
        Strategies that ran (skipped ones are in ``skipped``).
    records : list of JobRecord
    summary : dict
        ``summary[(K, N)][strategy]``: see :func:`summarize`.
    notes : list of str
        What was skipped or adjusted, and why.
    skipped : dict of str to str
        Strategies skipped at run time (e.g. not supported by this dask-bacc) and why.
    wall_seconds : float
    environment : dict
    """

    config: BenchConfig
    cells: list[tuple[int, int]]
    strategies: list[str]
    records: list[JobRecord]
    summary: dict[tuple[int, int], dict[str, dict[str, Any]]]
    notes: list[str]
    skipped: dict[str, str]
    wall_seconds: float
    environment: dict[str, Any]

    def targets(self, K: int, N: int) -> dict[str, Any]:
        """The issue's target figures for one cell (where the strategies ran).

        ``berrut_p50_vs_clean`` (target <= 1.3), ``berrut_p99_vs_uncoded`` (<= 0.25) and
        ``berrut_p99_vs_speculative`` (< 1).
        """
        cell = self.summary.get((K, N), {})
        out: dict[str, Any] = {}
        b = cell.get("berrut")
        if b is None:
            return out
        if b["vs_clean"]["p50"] is not None:
            v = b["vs_clean"]["p50"]
            out["berrut_p50_vs_clean"] = {"value": v, "target": "<= 1.3", "met": v <= 1.3}
        if "uncoded" in cell and b["vs_uncoded"]["p99"] is not None:
            v = b["vs_uncoded"]["p99"]
            out["berrut_p99_vs_uncoded"] = {"value": v, "target": "<= 0.25", "met": v <= 0.25}
        if "speculative" in cell:
            ps = cell["speculative"]["latency"]["p99"]
            pb = b["latency"]["p99"]
            v = _ratio(pb, ps)
            if v is not None:
                out["berrut_p99_vs_speculative"] = {"value": v, "target": "< 1", "met": v < 1}
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary (infinite latencies, i.e. failed jobs, as ``"inf"``)."""
        cfg = asdict(self.config)
        cells = []
        for K, N in self.cells:
            cells.append(
                {
                    "K": K,
                    "N": N,
                    "strategies": self.summary.get((K, N), {}),
                    "targets": self.targets(K, N),
                }
            )
        return _json_safe(
            {
                "config": cfg,
                "environment": self.environment,
                "wall_seconds": self.wall_seconds,
                "strategies": self.strategies,
                "skipped": self.skipped,
                "notes": self.notes,
                "task": self.config.task.describe(),
                "stragglers": self.config.stragglers.describe(self.config.task.base_duration),
                "cells": cells,
                "jobs": [asdict(r) for r in self.records],
            }
        )


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        x = float(obj)
        return x if math.isfinite(x) else ("inf" if x > 0 else "nan" if x != x else "-inf")
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


# -- metrics ---------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile where ``inf`` (a failed job) counts as slowest.

    Returns ``inf`` when the quantile reaches into the failed jobs and ``nan`` for no values.
    """
    x = np.sort(np.asarray(values, dtype=float))
    if x.size == 0:
        return float("nan")
    h = (x.size - 1) * q
    lo, hi = math.floor(h), math.ceil(h)
    if not math.isfinite(x[hi]) and (hi != lo or not math.isfinite(x[lo])):
        return float("inf")
    if not math.isfinite(x[lo]):
        return float("inf")
    return float(x[lo] + (h - lo) * (x[hi] - x[lo]))


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or math.isnan(a) or math.isnan(b):
        return None
    if math.isinf(b):  # the baseline failed: no meaningful ratio
        return None
    if math.isinf(a):
        return float("inf")
    return a / b if b > 0 else None


def _lat_stats(records: Sequence[JobRecord]) -> dict[str, float | None]:
    lat = [r.latency if r.latency is not None else float("inf") for r in records]
    if not lat:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    done = [x for x in lat if math.isfinite(x)]
    return {
        "p50": quantile(lat, 0.5),
        "p90": quantile(lat, 0.9),
        "p99": quantile(lat, 0.99),
        "mean": float(np.mean(done)) if done else None,
    }


def summarize(
    records: Sequence[JobRecord], cells: Sequence[tuple[int, int]], strategies: Sequence[str]
) -> dict[tuple[int, int], dict[str, dict[str, Any]]]:
    """Per cell and strategy: latency quantiles, ratios, error, compute and counts.

    The entries of ``summary[(K, N)][strategy]``: ``jobs``, ``failed`` (jobs without an
    output; they count as infinitely slow in the quantiles), ``tasks`` (mean per job),
    ``latency`` and ``clean_latency`` (``p50``/``p90``/``p99``/``mean`` seconds, stragglers
    and clean runs), ``vs_uncoded`` and ``vs_clean`` (each quantile's ratio to uncoded's
    with stragglers and to the strategy's own clean run), ``rel_error`` (``median``,
    ``max``, ``mean`` over the straggler jobs), ``compute`` (``per_job`` task-seconds with
    stragglers, ``clean_per_job``, ``vs_uncoded``), ``stragglers_per_job``,
    ``cancelled_per_job``, ``exact`` and ``errors`` (distinct failure messages).
    """
    out: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for K, N in cells:
        cell: dict[str, dict[str, Any]] = {}
        for s in strategies:
            hit = [
                r for r in records if (r.K, r.N, r.strategy, r.condition) == (K, N, s, "stragglers")
            ]
            clean = [
                r for r in records if (r.K, r.N, r.strategy, r.condition) == (K, N, s, "clean")
            ]
            if not hit and not clean:
                continue
            errs = [r.rel_error for r in hit if r.rel_error is not None]
            cell[s] = {
                "jobs": len(hit),
                "clean_jobs": len(clean),
                "failed": sum(not r.ok for r in hit),
                "clean_failed": sum(not r.ok for r in clean),
                "tasks": float(np.mean([r.tasks for r in hit])) if hit else None,
                "latency": _lat_stats(hit),
                "clean_latency": _lat_stats(clean),
                "rel_error": {
                    "median": float(np.median(errs)) if errs else None,
                    "max": float(np.max(errs)) if errs else None,
                    "mean": float(np.mean(errs)) if errs else None,
                },
                "compute": {
                    "per_job": float(np.mean([r.compute for r in hit])) if hit else None,
                    "clean_per_job": float(np.mean([r.compute for r in clean])) if clean else None,
                },
                "stragglers_per_job": float(np.mean([r.stragglers for r in hit])) if hit else None,
                "cancelled_per_job": float(np.mean([r.cancelled for r in hit])) if hit else None,
                "exact": s not in APPROXIMATE,
                "errors": sorted({r.error for r in hit + clean if r.error}),
            }
        base = cell.get("uncoded")
        for v in cell.values():
            v["vs_uncoded"] = {
                q: _ratio(v["latency"][q], base["latency"][q] if base else None)
                for q in ("p50", "p90", "p99")
            }
            v["vs_clean"] = {
                q: _ratio(v["latency"][q], v["clean_latency"][q]) for q in ("p50", "p90", "p99")
            }
            v["compute"]["vs_uncoded"] = _ratio(
                v["compute"]["per_job"], base["compute"]["per_job"] if base else None
            )
        out[(K, N)] = cell
    return out


# -- the run ---------------------------------------------------------------------------


class _Unsupported(Exception):
    """A strategy this dask-bacc does not offer (skipped with a note)."""


def _is_unknown_code(exc: BaseException) -> bool:
    return isinstance(exc, UnknownCodeError)


def _busy_threads(dask_worker: Any) -> int:
    return int(dask_worker.state.executing_count)


def _task_index(key: Any, token: str) -> int | None:
    """Index of a coded eval/backup task of job ``token`` from its key, else None."""
    if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str):
        name = key[0]
        if name.endswith(token) and name.startswith(("bacc-eval-", "bacc-backup-")):
            return int(key[1])
    return None


class _Killer:
    """Close ``count`` random workers at random times during a job; the cluster replaces them.

    An in-process worker cannot be SIGKILLed, so a "kill" closes the ``Worker`` (or
    ``Nanny``) object without waiting for its running tasks (``executor_wait=False``): the
    scheduler drops the worker at once, its strictly pinned coded tasks are orphaned (dask-bacc
    writes them off as "worker left") and plain tasks are rescheduled elsewhere. The worker
    is removed from the ``SpecCluster`` (spec and object) and ``cluster.scale(W)`` starts a
    fresh one under the same name; the next job waits until all W workers are back.
    """

    def __init__(self, run: _Run, count: int, rng: np.random.Generator):
        self.run = run
        self.times = sorted(rng.uniform(0.0, max(run.cfg.task.base_duration, 0.01), size=count))
        self.picks = rng.random(count)
        self.snapshots: list[set[Any]] = []
        self.killed: list[str] = []
        self.errors: list[str] = []
        self._thread = threading.Thread(target=self._main, name="bacc-bench-killer", daemon=True)
        self._t0 = time.perf_counter()
        self._thread.start()

    def _main(self) -> None:
        for at, pick in zip(self.times, self.picks, strict=True):
            time.sleep(max(0.0, at - (time.perf_counter() - self._t0)))
            try:
                self._kill_one(pick)
            except Exception as exc:  # report, never crash the bench thread
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _kill_one(self, pick: float) -> None:
        run = self.run
        client, cluster = run.client, run.cluster
        info = client.scheduler_info(n_workers=-1)["workers"]
        addrs = sorted(a for a in info if str(info[a].get("name")) not in self.killed)
        if len(addrs) <= 1:
            return
        addr = addrs[int(pick * len(addrs))]
        name = info[addr].get("name")
        self.snapshots.append(set(client.processing(workers=[addr]).get(addr, ())))
        self.killed.append(str(name))

        async def close() -> None:
            # on the cluster's loop: forget the worker (a spec without a worker object would
            # look alive to SpecCluster) and close it without waiting for its running tasks
            cluster.worker_spec.pop(name, None)
            obj = cluster.workers.pop(name, None)
            if obj is None:
                return
            try:
                await obj.close(timeout=0.5, executor_wait=False, reason="bacc-bench kill")
            except TypeError:  # a Nanny: no executor_wait
                await obj.close(timeout=0.5, reason="bacc-bench kill")

        cluster.sync(close)
        cluster.scale(run.n_workers)

    def join(self) -> None:
        self._thread.join()


class _Run:
    """State of one benchmark run on one client."""

    def __init__(
        self, cfg: BenchConfig, client: Any, cluster: Any, n_workers: int, notes: list[str]
    ):
        self.cfg = cfg
        self.client = client
        self.cluster = cluster
        self.n_workers = n_workers
        self.notes = notes
        self.skipped: dict[str, str] = {}
        self.func = cfg.task.build(cfg.seed)
        self.threshold = cfg.stragglers.straggler_threshold(cfg.task.base_duration)
        self.plain_seq = PLAIN_SEQ_BASE
        self.kill_rng = np.random.default_rng([cfg.seed, 4])
        self.busy: dict[tuple[int, int, str], float] = {}
        self.condition: str | None = None
        self.model: Any = None
        self.clean_model: Any = None
        self.straggler_model: Any = None
        self._names: dict[str, str] = {}

    # -- plugin -------------------------------------------------------------------------
    def setup_models(self) -> None:
        names = [str(w.get("name")) for w in self.worker_info().values()]
        self.clean_model = Bimodal(p=0.0, delay=0.0)
        self.straggler_model = self.cfg.stragglers.model(
            self.cfg.task.base_duration, names, self.cfg.seed
        )

    def worker_info(self) -> dict[str, Any]:
        return self.client.scheduler_info(n_workers=-1)["workers"]

    def set_condition(self, condition: str) -> None:
        """Install the straggler plugin of ``condition`` (after saving the task times)."""
        if condition == self.condition:
            return
        self.collect()
        model = self.straggler_model if condition == "stragglers" else self.clean_model
        inject_stragglers(model, seed=self.cfg.seed, client=self.client)
        self.condition, self.model = condition, model

    def collect(self) -> None:
        """Save the thread time every instrumented task occupied (deduplicated)."""
        if self.condition is None:
            return
        for seq, index, worker, seconds in task_seconds(self.client):
            self.busy[(int(seq), int(index), str(worker))] = float(seconds)

    def settle(self) -> None:
        """Wait until every worker is back (after kills) and no worker thread is busy."""
        deadline = time.perf_counter() + self.cfg.settle_timeout
        if self.cfg.stragglers.kind == "kills":
            with contextlib.suppress(Exception):
                self.client.wait_for_workers(self.n_workers, timeout=self.cfg.settle_timeout)
        while time.perf_counter() < deadline:
            counts = self.client.run(_busy_threads, on_error="return")
            if all(isinstance(c, int) and c == 0 for c in counts.values()):
                return
            time.sleep(0.02)

    # -- one job ----------------------------------------------------------------------------
    def submit_kwargs(self, strategy: str, K: int, N: int) -> dict[str, Any]:
        if strategy == "uncoded":
            return {"code": "uncoded"}
        if strategy == "speculative":
            opts = {"rule": self.cfg.speculative_rule} if self.cfg.speculative_rule else {}
            return {"code": "speculative", "code_options": opts}
        if strategy == "lagrange":
            return {
                "code": "lagrange",
                "n_coded": N,
                "code_options": {"degree": self.cfg.task.degree},
            }
        kw: dict[str, Any] = {"code": strategy, "n_coded": N}
        if strategy in APPROXIMATE and self.cfg.wait is not None:
            kw["wait"] = self.cfg.wait
        return kw

    def run_job(
        self, strategy: str, K: int, N: int, X: np.ndarray, exact: np.ndarray, rnd: int
    ) -> JobRecord:
        """Run one job of ``strategy`` under the current condition and measure it."""
        import dask_bacc

        client, K_blocks = self.client, np.split(X, K)
        kills = self.condition == "stragglers" and self.cfg.stragglers.kind == "kills"
        rec = JobRecord(
            K=K, N=N, strategy=strategy, condition=str(self.condition), round=rnd, seq=-1
        )
        killer: _Killer | None = None
        token: str | None = None
        plain_keys: dict[Any, int] = {}
        names: list[str] = []
        t0 = time.perf_counter()
        try:
            if strategy == "plain":
                self.plain_seq += 1
                rec.seq = self.plain_seq
                futures = client.map(
                    plain_task,
                    K_blocks,
                    [rec.seq] * K,
                    range(K),
                    [self.func] * K,
                    pure=False,  # a fresh computation every job, never a cached result
                )
                plain_keys = {f.key: i for i, f in enumerate(futures)}
                if kills:
                    killer = _Killer(self, self.cfg.stragglers.kills, self.kill_rng)
                try:
                    parts = client.gather(futures)
                    out = np.concatenate(parts, axis=0)
                    rec.latency = time.perf_counter() - t0
                    if isinstance(self.model, SlowWorkers):
                        where = client.who_has(futures)
                        names = [self._name(next(iter(where.get(f.key, ())), "")) for f in futures]
                finally:
                    rec.tasks = K
                    del futures
            else:
                try:
                    job = dask_bacc.submit_coded(
                        self.func,
                        X,
                        client=client,
                        n_blocks=K,
                        **self.submit_kwargs(strategy, K, N),
                    )
                except Exception as exc:
                    if _is_unknown_code(exc):
                        raise _Unsupported(str(exc)) from exc
                    raise
                rec.seq, token = job.seq, job.token
                if kills:
                    killer = _Killer(self, self.cfg.stragglers.kills, self.kill_rng)
                try:
                    with warnings.catch_warnings():  # the benchmark measures the error itself
                        warnings.simplefilter("ignore", dask_bacc.ApproximationWarning)
                        out = job.result(timeout=self.cfg.job_timeout)
                    rec.latency = time.perf_counter() - t0
                except TimeoutError:
                    with contextlib.suppress(Exception):
                        job.cancel()
                    raise TimeoutError(f"no output after {self.cfg.job_timeout:g} s") from None
                finally:
                    rep = job.report
                    rec.tasks = int(rep.N)
                    rec.cancelled = int(rep.cancelled)
                    rec.trigger = rep.trigger
                    rec.slowest_used = rep.slowest_used
                    if rep.returned:
                        used = set(rep.returned)
                        rec.unused = [i for i, a in enumerate(rep.workers) if a and i not in used]
                    rec.time_to_decode = rep.time_to_decode
                    names = [self._name(a) if a else "" for a in rep.workers]
            rec.rel_error = float(np.linalg.norm(out - exact) / np.linalg.norm(exact))
        except _Unsupported:
            raise
        except Exception as exc:
            rec.latency = None
            rec.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        finally:
            if killer is not None:
                killer.join()
                rec.killed = list(killer.killed)
                if killer.errors:
                    self.notes.append("kill failed: " + "; ".join(killer.errors))
        if killer is not None:
            hit = set()
            for snap in killer.snapshots:
                for key in snap:
                    i = plain_keys.get(key) if token is None else _task_index(key, token)
                    if i is not None:
                        hit.add(i)
            rec.stragglers = len(hit)
        else:
            rec.stragglers = self._count_stragglers(rec, names)
        return rec

    def _name(self, addr: str) -> str:
        if addr not in self._names:
            self._names = {a: str(w.get("name")) for a, w in self.worker_info().items()}
        return self._names.get(addr, "")

    def _count_stragglers(self, rec: JobRecord, names: list[str]) -> int:
        """Replay the plugin's seeded draws: tasks whose delay reaches the threshold."""
        if rec.condition != "stragglers" or rec.seq < 0 or self.model is None:
            return 0
        n = len(names) if names else rec.tasks
        count = 0
        for i in range(n):
            name = names[i] if i < len(names) else ""
            if rec.strategy != "plain" and names and not name:
                continue  # a speculative backup slot that was never launched
            d = draw_delay(self.model, self.cfg.seed, rec.seq, i, name, self.cfg.task.base_duration)
            count += d >= self.threshold
        return count

    def skip(self, strategy: str, exc: BaseException) -> None:
        """Drop a strategy this dask-bacc does not offer, with a note."""
        if strategy not in self.skipped:
            self.skipped[strategy] = str(exc)
            self.notes.append(f"{strategy} skipped: this dask-bacc does not offer it ({exc})")

    def fill_compute(self, records: Sequence[JobRecord]) -> None:
        per_seq: dict[int, float] = {}
        for (seq, _i, _w), sec in self.busy.items():
            per_seq[seq] = per_seq.get(seq, 0.0) + sec
        for r in records:
            r.compute = per_seq.get(r.seq, 0.0)


@contextlib.contextmanager
def _connect(cfg: BenchConfig, client: Any) -> Iterator[tuple[Any, Any]]:
    """The client (and embedded cluster) to run on."""
    import dask.config
    from distributed import Client, LocalCluster

    if client is not None:
        yield client, getattr(client, "cluster", None)
        return
    if cfg.scheduler is not None:
        with Client(cfg.scheduler) as c:
            yield c, None
        return
    # Each worker keeps its last ``low-level-log-length`` state-machine events (1000), and
    # each event holds its task's spec with the embedded data: with 32 workers in one
    # process that grows by ~2 MB per coded job until ~32,000 events are held. A short log
    # keeps a long run's memory flat.
    with (
        dask.config.set({"distributed.admin.low-level-log-length": 50}),
        LocalCluster(
            n_workers=cfg.workers,
            threads_per_worker=1,
            processes=cfg.processes,
            dashboard_address=":0",
            # in-process workers share one process but each would compare its RSS with a
            # 1/W share of the RAM, and pause (and gc.collect() every second) above 80%
            **({} if cfg.processes else {"memory_limit": 0}),
        ) as cluster,
        Client(cluster) as c,
    ):
        c.wait_for_workers(cfg.workers)
        yield c, cluster


def _git_commit() -> str | None:
    """The git commit of the dask-bacc source tree (``+dirty`` with local changes), if any."""
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    try:
        commit = subprocess.run(
            ["git", "-C", here, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", here, "status", "--porcelain", "--untracked-files=no", "--", ".."],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "") if commit else None


def _environment(n_workers: int, cfg: BenchConfig) -> dict[str, Any]:
    import dask
    import distributed

    import dask_bacc

    return {
        "dask_bacc": dask_bacc.__version__,
        "dask_bacc_commit": _git_commit(),
        "python": platform.python_version(),
        "platform": sys.platform,
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "numpy": np.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "workers": n_workers,
        "cluster": (
            f"scheduler {cfg.scheduler}"
            if cfg.scheduler
            else f"LocalCluster({cfg.workers} workers x 1 thread, "
            f"{'processes' if cfg.processes else 'threads'})"
        ),
    }


def run_bench(
    config: BenchConfig | None = None,
    *,
    client: Any = None,
    progress: bool = True,
) -> BenchResult:
    """Run the benchmark grid and return the measurements.

    Parameters
    ----------
    config : BenchConfig, optional
        The run (default: the issue's default bench, K=16, N=32, 30 jobs).
    client : distributed.Client, optional
        Run on this client's cluster instead of starting one (``config.scheduler`` and
        ``config.workers`` are then ignored; the ``kills`` model needs the client's
        ``LocalCluster`` in ``client.cluster``).
    progress : bool
        Show a progress bar (tqdm) on stderr.

    Returns
    -------
    BenchResult

    Raises
    ------
    ValueError
        A bad configuration (raised before any job runs).
    """
    from tqdm.auto import tqdm

    cfg = config if config is not None else BenchConfig()
    if client is None:
        cfg.plan()  # validate before starting a cluster
    t_start = time.perf_counter()
    with _connect(cfg, client) as (c, cluster):
        n_workers = len(c.scheduler_info(n_workers=-1)["workers"])
        cells, strategies, notes = cfg.plan(n_workers)
        if cfg.stragglers.kind == "kills" and cluster is None:
            raise ValueError("the 'kills' straggler model needs an embedded LocalCluster")
        run = _Run(cfg, c, cluster, n_workers, notes)
        run.setup_models()
        conditions = list(CONDITIONS) if cfg.baseline else ["stragglers"]
        order_rng = np.random.default_rng([cfg.seed, 3])
        records: list[JobRecord] = []
        per_cell = {cell: cfg.strategies_for(*cell, strategies) for cell in cells}
        total = sum(len(v) for v in per_cell.values()) * cfg.jobs * len(conditions)
        bar = tqdm(total=total, desc="dask bacc bench", unit="job", disable=not progress)

        def skip(strategy: str, exc: BaseException) -> None:
            run.skip(strategy, exc)
            left = sum(strategy in v for v in per_cell.values()) * cfg.jobs * len(conditions)
            assert bar.total is not None  # tqdm(total=total) above
            bar.total -= left - sum(r.strategy == strategy for r in records)
            bar.refresh()
            for v in per_cell.values():
                if strategy in v:
                    v.remove(strategy)

        try:
            for K, N in cells:
                X = cfg.task.data(K, cfg.seed)
                exact = run.func.apply(X)
                if cfg.warmup:  # imports, connections, first serialisations: not recorded
                    run.set_condition("clean")
                    for s in list(per_cell[(K, N)]):
                        try:
                            run.run_job(s, K, N, X, exact, -1)
                        except _Unsupported as exc:
                            skip(s, exc)
                        run.settle()
                for rnd in range(cfg.jobs):
                    for ci in order_rng.permutation(len(conditions)):
                        run.set_condition(conditions[ci])
                        here = list(per_cell[(K, N)])
                        for s in [here[i] for i in order_rng.permutation(len(here))]:
                            if s in run.skipped:
                                continue
                            bar.set_postfix_str(f"K={K} N={N} {conditions[ci]} {s}", refresh=False)
                            try:
                                rec = run.run_job(s, K, N, X, exact, rnd)
                            except _Unsupported as exc:
                                skip(s, exc)
                                continue
                            records.append(rec)
                            run.settle()
                            bar.update(1)
            run.collect()
        finally:
            bar.close()
            with contextlib.suppress(Exception):
                clear_stragglers(c)
        run.fill_compute(records)
        ran = [s for s in strategies if s not in run.skipped]
        environment = _environment(n_workers, cfg)
    wall = time.perf_counter() - t_start
    return BenchResult(
        config=cfg,
        cells=cells,
        strategies=ran,
        records=records,
        summary=summarize(records, cells, ran),
        notes=notes,
        skipped=dict(run.skipped),
        wall_seconds=wall,
        environment=environment,
    )
