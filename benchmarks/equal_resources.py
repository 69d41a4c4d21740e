"""The regime map's equal-resources axis (issues 39 and 42): a fixed cluster, a fixed dataset.

Every strategy gets the same W one-thread worker processes and the same rows, and splits
the rows into as many blocks as its redundancy lets it run one task per worker: plain
Dask and the backup codes (hedged, speculative) K = W, repetition K = W / 2 (N = W).
``f`` costs ``task`` seconds per W-th of the rows (a sleep, so that 2 cores model W
workers), and each call of ``f`` (a backup's too) is 10x slow with probability ``p``,
i.i.d. A straggler sleeps to its end (Python cannot stop a thread); after each job the
harness waits until no worker thread is busy, so every job starts on an idle cluster.

Cells: one job at a time with ``p`` 0 and 0.1 (``stragglers``), stragglers that burn a
core instead of sleeping (``burn``), the systematic spline at K = W / 1.25 and W / 1.5
(N = W) on smooth rows (``smooth``) and on i.i.d. rows (``iid-approx``), 4x the rows at 4x
the task time (``large``: the same shape, larger blocks), three concurrent jobs with ``p``
0 and 0.1 (throughput), and waves: ``n_parts`` partitions of a dask array on the same
workers, ``coding()`` against plain ``compute()``, with no stragglers and with 5% of
tasks 10x slow. Variants are
interleaved in a seeded-shuffled order each round; figures are medians and quantiles over
the rounds, as ratios against plain Dask in the same run.

Issue 42 adds, with ``p`` = 0.1:

* saturation cells ``sat-<smooth|iid>-J<3|6>``: J one-wave jobs submitted at once (no idle
  worker for backups), every exact strategy, ``auto`` (``code="auto"``, no ``n_blocks``)
  and ``auto-e0.02`` (``code="auto", error=0.02``), and every approximate code at
  r = 1.25 and 1.5 (``<code>-r<r>``: K = floor(W / r) blocks, N = W coded tasks);
* ``stragglers-J1``: one job at a time on i.i.d. rows, the exact strategies and auto;
* deadline cells ``deadline-J1`` / ``deadline-J3`` (smooth rows): the approximate codes wait
  with ``dask_bacc.until(deadline=1.5 * task)`` (skipped, and said so, while ``until``
  has no ``deadline``);
* ``sweep-J3``: three concurrent parameter sweeps of a Monte Carlo option pricer
  (``dask_bacc.bench.workloads.PricerTask`` / ``sweep_grid``, skipped while missing).

In these cells the quantiles are over jobs (each job's time from the common submission
to its answer), not over rounds; the auto strategies first run ``--warmup`` unrecorded
rounds (auto learns from earlier jobs). Once every job of a variant has answered, the
sleeps still running (stragglers, tasks no job waits for) are ended rather than waited
out (:func:`end_sleeps`; their thread time still counts to their scheduled end): the
next variant starts on an idle cluster as before, a round takes about a third less.
``--cells`` takes per cell the strategies to keep, ``+``-separated patterns in brackets
(``sat-smooth-J6[hedged+auto*+*-r1.25]``; :func:`parse_cells`). Per strategy also the
median, mean and worst relative error of each job's answer against the exact one, for
approximate decodes the fraction of jobs whose ``report.error_estimate`` is at least half
the true error of the decoded rows, and what auto chose; per cell the hindsight summary
(best exact and approximate strategies, auto against them, ``auto-e0.02`` against the
oracle of every strategy whose worst error is <= 0.02) and the issue's targets
(:func:`targets`). The issue-39 cells ``smooth`` and ``iid-approx`` name the systematic
spline ``systematic-spline-r1.25`` / ``-r1.5`` (``spline-r<r>`` is now the spline code).

Per cell and strategy: p50 / p90 / p99 of the time to answer, the thread-seconds of ``f``
per answer (every call, stragglers to their end, backups included) and the error against
plain Dask's answer (0: exact)::

    python benchmarks/equal_resources.py                    # W = 16, 10 rounds
    python benchmarks/equal_resources.py --workers 64 --rounds 20 --out result.json
    python benchmarks/equal_resources.py --cells sat-smooth-J3,deadline-J1 --rounds 2
    python benchmarks/equal_resources.py --big              # 16 cores, W = 64, < 8 min
    python benchmarks/equal_resources.py --from-json benchmarks/results/x.json  # tables
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import json
import math
import os
import platform
import random
import subprocess
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: one-job strategies of the issue-39 cells
STRATEGIES = ("plain", "hedged", "speculative", "repetition", "default")
#: auto mode without and with an error budget (``auto-e<budget>``)
AUTO = ("auto", "auto-e0.02")
#: the approximate codes; ``<code>-r<r>``: K = floor(W / r) blocks, N = W coded tasks
APPROX_CODES = ("systematic-spline", "bspline", "spline", "berrut", "systematic-berrut")
RATIOS = (1.25, 1.5)
APPROX = tuple(f"{c}-r{r:g}" for c in APPROX_CODES for r in RATIOS)
#: the systematic spline only (the issue-39 cells ``smooth`` and ``iid-approx``)
SPLINE = ("systematic-spline-r1.25", "systematic-spline-r1.5")
SATURATION = (*STRATEGIES, *AUTO, *APPROX)
#: a true relative error below this is an exact decode (rounding)
EXACT_TOL = 1e-9
#: the issue's targets
TARGET_APPROX_P90 = 0.5  # (a) best approximate p90 against the best exact strategy's
TARGET_ERROR = 0.02  # (a) median error, (c) the budget
TARGET_ESTIMATE = 0.95  # (a) jobs whose estimate is >= 0.5x the true error
TARGET_AUTO = 1.2  # (b), (c) within this factor
DEFAULT_CELLS = "one,stragglers,burn,smooth,iid-approx,large,concurrent,concurrent-stragglers,waves"
ISSUE42_CELLS = (
    "stragglers-J1,sat-smooth-J3,sat-iid-J3,sat-smooth-J6,sat-iid-J6,deadline-J1,deadline-J3,"
    "sweep-J3"
)
BIG_CELLS = "stragglers-J1,sat-smooth-J3,sat-iid-J3,deadline-J1"


@dataclass(frozen=True)
class Strategy:
    """A strategy name parsed: ``kind`` is ``plain`` (``client.map``), ``exact`` (a code
    with ``n_blocks``), ``default`` (no ``code=``), ``auto`` or ``approx``."""

    name: str
    kind: str
    code: str | None = None
    ratio: float | None = None
    error: float | None = None

    def blocks(self, W: int) -> int | None:
        """K for W workers (None: the library chooses)."""
        if self.kind == "approx":
            assert self.ratio is not None
            return max(1, int(W / self.ratio + 1e-9))
        if self.kind == "exact":
            return W // 2 if self.code == "repetition" else W
        return W if self.kind == "plain" else None


def parse_strategy(name: str) -> Strategy:
    """``plain``, ``hedged``, ``speculative``, ``repetition``, ``default``, ``auto``,
    ``auto-e<budget>`` or ``<approximate code>-r<ratio>``; ValueError otherwise."""
    if name in ("plain", "default"):
        return Strategy(name, name)
    if name in ("hedged", "speculative", "repetition", "uncoded"):
        return Strategy(name, "exact", code=name)
    if name == "auto":
        return Strategy(name, "auto", code="auto")
    if name.startswith("auto-e"):
        error = _positive(name[len("auto-e") :], name)
        return Strategy(name, "auto", code="auto", error=error)
    code, sep, ratio = name.rpartition("-r")
    if sep and code in APPROX_CODES:
        r = _positive(ratio, name)
        if r < 1:
            raise ValueError(f"{name}: the redundancy r must be >= 1")
        return Strategy(name, "approx", code=code, ratio=r)
    raise ValueError(
        f"unknown strategy {name!r}: one of {', '.join(STRATEGIES)}, auto, auto-e<budget>, "
        f"or <code>-r<ratio> with a code of {', '.join(APPROX_CODES)}"
    )


def parse_cells(spec: str) -> dict[str, list[str] | None]:
    """``--cells``: comma-separated cell names, each optionally with the strategies to keep
    in brackets, ``+``-separated shell-style patterns (``sat-smooth-J6[hedged+auto*+*-r1.25]``;
    plain always stays). Cell -> its patterns (None: every strategy)."""
    out: dict[str, list[str] | None] = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, bracket, rest = item.partition("[")
        if bracket and not rest.endswith("]"):
            raise ValueError(f"cell {item!r}: strategies in [...] must close with ']'")
        patterns = [x for x in rest[:-1].split("+") if x] if bracket else None
        out[name] = patterns
    return out


def keep(strategies: Iterable[str], patterns: Iterable[str] | None) -> list[str]:
    """The strategies matching one of ``patterns`` (None: all), plain always."""
    if patterns is None:
        return list(strategies)
    pats = list(patterns)
    return [s for s in strategies if s == "plain" or any(fnmatch.fnmatchcase(s, p) for p in pats)]


def _positive(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a number") from None
    if not 0 < value < math.inf:
        raise ValueError(f"{name}: {text!r} must be a positive number")
    return value


def costly(block: np.ndarray, unit: float, p: float, burn: bool = False) -> np.ndarray:
    """``unit`` seconds per row of work (a sleep), 10x with probability ``p``; with
    ``burn`` the straggler's extra 9x is a busy loop (it holds a core, as a slow task on a
    real cluster does). The thread-seconds are added to the worker's tally: a sleep the
    harness ended early (:func:`end_sleeps`, once every job of a variant answered) counts
    to its scheduled end."""
    from distributed import get_worker

    w = get_worker()
    t0 = time.perf_counter()
    seconds = unit * len(block)
    ended = _pause(w, seconds)
    if np.random.default_rng().random() < p:  # fresh entropy: i.i.d. in every process
        if burn:
            end = time.perf_counter() + 9 * seconds
            while time.perf_counter() < end:
                pass
        else:
            ended = _pause(w, 9 * seconds) or ended
            seconds *= 10
    _tally(w, time.perf_counter() - t0, seconds if ended else 0.0)
    return np.tanh(block) * 2.0


def _ender(w: Any) -> threading.Event:
    return w.__dict__.setdefault("_bench_end", threading.Event())


def _pause(w: Any, seconds: float) -> bool:
    """Sleep ``seconds``, or less once the harness ends the sleeps; whether it did."""
    return _ender(w).wait(seconds)


def _tally(w: Any, spent: float, scheduled: float) -> None:
    w._bench_busy = getattr(w, "_bench_busy", 0.0) + max(spent, scheduled)


def _end_sleeps(dask_worker: Any) -> None:
    _ender(dask_worker).set()


def _allow_sleeps(dask_worker: Any) -> None:
    _ender(dask_worker).clear()


def end_sleeps(client: Any) -> float:
    """End the sleeps still running (stragglers, tasks not waited for: their jobs have
    answered), wait until no worker runs a task, let tasks sleep again; the thread-seconds
    of f so far, ended sleeps counted to their scheduled end. What the wait for the
    stragglers to end would give, without waiting for it (the issue-42 cells)."""
    client.run(_end_sleeps)
    busy = wait_idle(client)
    client.run(_allow_sleeps)
    return busy


class Priced:
    """The sweep cell's task: a pricer's ``apply`` on a block of parameter rows, then the
    straggler sleep of :func:`costly` (``unit`` seconds per row, 10x with probability
    ``p``), counted in the worker's tally like ``costly``'s. ``__name__`` is the pricer's,
    so that auto learns one function."""

    def __init__(self, pricer: Any, unit: float, p: float) -> None:
        self.pricer, self.unit, self.p = pricer, unit, p
        self.__name__ = "priced_" + type(pricer).__name__.lower()

    def __call__(self, block: np.ndarray) -> np.ndarray:
        from distributed import get_worker

        w = get_worker()
        t0 = time.perf_counter()
        out = np.asarray(self.pricer.apply(block), dtype=float)
        seconds = self.unit * len(block)
        ended = _pause(w, seconds - (time.perf_counter() - t0))
        if np.random.default_rng().random() < self.p:
            ended = _pause(w, 9 * seconds) or ended
            seconds *= 10
        _tally(w, time.perf_counter() - t0, seconds if ended else 0.0)
        return out


def _busy(dask_worker: Any) -> tuple[int, float]:
    return dask_worker.state.executing_count, getattr(dask_worker, "_bench_busy", 0.0)


def wait_idle(client: Any) -> float:
    """Wait until no worker runs a task; the thread-seconds of f so far."""
    while True:
        got = client.run(_busy)
        if all(n == 0 for n, _ in got.values()):
            return sum(s for _, s in got.values())
        time.sleep(0.02)


@dataclass
class Outcome:
    """One job's answer: the whole output, the coded job's report (None for plain Dask)
    and the rows its code decoded (the first ``rows``; the rest were computed exactly)."""

    out: np.ndarray
    report: Any = None
    rows: int | None = None
    code: str | None = None


def deadline_supported() -> bool:
    """Whether ``dask_bacc.until`` takes ``deadline=``."""
    import dask_bacc

    return "deadline" in inspect.signature(dask_bacc.until).parameters


def deadline_wait(seconds: float) -> Any:
    """``dask_bacc.until(deadline=seconds)``."""
    import dask_bacc

    return dask_bacc.until(deadline=seconds)


def one_job(
    client: Any,
    strategy: str,
    X: np.ndarray,
    W: int,
    unit: float,
    p: float,
    burn: bool,
    wait: Any = None,
    func: Callable[[np.ndarray], np.ndarray] | None = None,
    exact: Callable[[np.ndarray], np.ndarray] | None = None,
) -> Any:
    """One job of ``strategy``: the answer of ``costly`` over ``X`` (the issue-39 cells);
    with ``func`` (called ``func(block)``: ``f`` and its straggler sleep) an
    :class:`Outcome` with the job's report instead. ``wait`` applies to the approximate
    codes only; ``exact``: f itself, for the rows a code's K leaves over."""
    import dask_bacc

    s = parse_strategy(strategy)
    f: Callable[..., Any] = costly if func is None else func
    args: tuple[Any, ...] = (unit, p, burn) if func is None else ()
    exact = exact if exact is not None else (lambda x: np.tanh(x) * 2.0)
    K = s.blocks(W)
    if s.kind == "plain":
        blocks = np.array_split(X, W)
        futs = client.map(f, blocks, *[[a] * W for a in args], pure=False)
        out = np.concatenate(client.gather(futs))
        return out if func is None else Outcome(out)
    rows = X.shape[0]
    kw: dict[str, Any] = {}
    if s.kind == "approx":  # the rows that do not divide into K blocks are computed exactly
        assert K is not None
        rows = rows // K * K
        kw = {"code": s.code, "n_blocks": K, "n_coded": W}
        if wait is not None:
            kw["wait"] = wait
    elif s.kind == "exact":
        kw = {"code": s.code, "n_blocks": K}
    elif s.kind == "auto":  # auto plans K, N and the code itself
        kw = {"code": "auto"} if s.error is None else {"code": "auto", "error": s.error}
    job = dask_bacc.submit_coded(f, X[:rows], *args, client=client, **kw)
    out = np.asarray(job.result())
    if rows < X.shape[0]:
        out = np.concatenate([out, exact(X[rows:])])
    return out if func is None else Outcome(out, job.report, rows, s.code)


def waves_job(client: Any, strategy: str, x: Any, unit: float, p: float, burn: bool) -> Any:
    import dask_bacc

    y = x.map_blocks(costly, unit, p, burn, dtype=float)
    if strategy == "plain":
        return y.compute()
    with dask_bacc.coding(code=strategy, only=costly):
        return y.compute()


def summarise(times: list[float], base: list[float]) -> dict[str, float]:
    q = lambda v, f: float(np.quantile(v, f)) if len(v) else math.nan  # noqa: E731
    return {
        "p50": q(times, 0.5) / q(base, 0.5),
        "p90": q(times, 0.9) / q(base, 0.9),
        "p99": q(times, 0.99) / q(base, 0.99),
        "p50_s": q(times, 0.5),
        "p90_s": q(times, 0.9),
    }


def relative_error(out: Any, reference: np.ndarray) -> float:
    """``||out - reference|| / ||reference||``."""
    ref = float(np.linalg.norm(reference))
    diff = float(np.linalg.norm(np.asarray(out, dtype=float) - reference))
    return diff / ref if ref > 0 else diff


def approximate(code: str | None) -> bool:
    """Whether a job ran an approximate code (name as in the report's config or ours)."""
    if code is None:
        return False
    try:
        from dask_bacc.codes.registry import code_class

        return not code_class(code).exact
    except Exception:  # backup codes (hedged, speculative) are not in the registry
        return False


def job_record(
    answer: Any,
    reference: np.ndarray,
    latency: float,
    price: Callable[[np.ndarray, np.ndarray], dict[str, float]] | None = None,
) -> dict[str, Any]:
    """The per-job figures of the issue-42 cells (JSON-serialisable); ``price``: the sweep
    cell's errors in currency units (``workloads.price_error(answer, reference)``)."""
    if isinstance(answer, BaseException):
        return {"t": latency, "failed": f"{type(answer).__name__}: {answer}"[:300]}
    o = answer if isinstance(answer, Outcome) else Outcome(np.asarray(answer))
    rec: dict[str, Any] = {"t": latency, "error": relative_error(o.out, reference)}
    if price is not None:
        rec["price"] = price(o.out, reference)
    rep = o.report
    if rep is None:
        return rec
    name = rep.code.get("name") if isinstance(rep.code, dict) else None
    if rep.code.get("systematic") and name in ("spline", "berrut", "bspline"):
        name = f"systematic-{name}"
    rec.update(
        code=name or o.code,
        K=rep.K,
        N=rep.N,
        trigger=rep.trigger,
        returned=len(rep.returned),
        estimate=rep.error_estimate,
        method=rep.estimate_method,
        warned=bool(rep.warnings),
    )
    if rep.auto is not None:
        chosen = rep.auto.get("chosen")
        rec["chosen"] = (
            None
            if not chosen
            else {k: chosen.get(k) for k in ("code", "N", "k", "time", "p90", "error")}
        )
        rec["auto_reason"] = str(rep.auto.get("reason"))[:200]
    if approximate(rec["code"]) or approximate(o.code):
        rows = o.rows if o.rows is not None else reference.shape[0]
        rec["approximate"] = True
        rec["coded_error"] = relative_error(o.out[:rows], reference[:rows])
    return rec


def estimate_holds(estimate: float | None, error: float) -> bool:
    """The estimate vouches for the decode: at least half the true error (an exact decode,
    true error below :data:`EXACT_TOL`, needs no estimate above 0)."""
    if error <= EXACT_TOL:
        return estimate is not None
    return estimate is not None and estimate >= 0.5 * error


def job_figures(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, mean and worst error over jobs, the estimate check over approximate
    decodes, failures, and auto's choices."""
    ok = [r for r in records if "failed" not in r]
    errors = [r["error"] for r in ok]
    out: dict[str, Any] = {
        "jobs": len(records),
        "failed": len(records) - len(ok),
        "median_error": float(np.median(errors)) if errors else math.nan,
        "mean_error": float(np.mean(errors)) if errors else math.nan,
        "max_error": float(np.max(errors)) if errors else math.nan,
    }
    approx = [r for r in ok if r.get("approximate")]
    if approx:
        held = [estimate_holds(r.get("estimate"), r["coded_error"]) for r in approx]
        out["approximate_jobs"] = len(approx)
        out["estimate_ok"] = sum(held) / len(held)
        out["no_estimate"] = sum(1 for r in approx if r.get("estimate") is None)
    chosen = [r for r in ok if "chosen" in r]
    if chosen:
        names = Counter(
            "defaults" if r["chosen"] is None else f"{r['chosen']['code']} N={r['chosen']['N']}"
            for r in chosen
        )
        out["chosen"] = dict(names.most_common())
    priced = [r["price"] for r in ok if "price" in r]
    if priced:  # currency units: each job's median and largest absolute price error
        out["price_median_abs"] = float(np.median([x["median_abs"] for x in priced]))
        out["price_max_abs"] = float(np.max([x["max_abs"] for x in priced]))
        out["median_price"] = float(np.median([x["median_price"] for x in priced]))
    return out


def run_jobs(job: Callable[[str], Any], s: str, concurrent: int) -> tuple[list[Any], list[float]]:
    """``concurrent`` jobs of ``s`` started together; the answers (an exception where one
    failed) and each job's time from the common start to its answer."""
    out: list[Any] = [None] * concurrent
    lat = [math.nan] * concurrent
    t0 = time.perf_counter()

    def run(i: int) -> None:
        try:
            out[i] = job(s)
        except Exception as exc:  # one failed job must not end the run
            out[i] = exc
        lat[i] = time.perf_counter() - t0

    if concurrent == 1:
        run(0)
    else:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(concurrent)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return out, lat


def run_cell(
    client: Any,
    strategies: list[str],
    rounds: int,
    seed: int,
    job: Callable[[str], Any],
    reference: np.ndarray,
    concurrent: int = 1,
    per_job: bool = False,
    warmup: int = 0,
    budget_s: float | None = None,
    price: Callable[[np.ndarray, np.ndarray], dict[str, float]] | None = None,
) -> dict[str, Any]:
    """Interleaved rounds of every strategy. ``per_job`` (the issue-42 cells): quantiles
    over jobs rather than rounds, and per-job error figures; ``warmup`` unrecorded rounds
    of the auto strategies first; ``budget_s``: start no round that would end past it (at
    least one round runs)."""
    start = time.perf_counter()
    rng = random.Random(seed)
    autos = [s for s in strategies if parse_strategy(s).kind == "auto"]
    for _ in range(warmup if autos else 0):
        for s in autos:
            wait_idle(client)
            run_jobs(job, s, concurrent)
            end_sleeps(client)
    times: dict[str, list[float]] = {s: [] for s in strategies}
    job_times: dict[str, list[float]] = {s: [] for s in strategies}
    busy: dict[str, list[float]] = {s: [] for s in strategies}
    errors: dict[str, float] = dict.fromkeys(strategies, 0.0)
    records: dict[str, list[dict[str, Any]]] = {s: [] for s in strategies}
    for done in range(rounds):
        spent = time.perf_counter() - start
        if budget_s is not None and done and spent + spent / (done + 0.5) > budget_s:
            print(f"  budget: {done} of {rounds} rounds", flush=True)
            break
        order = list(strategies)
        rng.shuffle(order)
        idle: float | None = None  # the tally on an idle cluster, if just measured
        for s in order:
            before = wait_idle(client) if idle is None else idle
            out, lat = run_jobs(job, s, concurrent)
            times[s].append(max(lat))
            after = end_sleeps(client) if per_job else wait_idle(client)
            idle = after if per_job else None
            busy[s].append((after - before) / concurrent)
            for o, t in zip(out, lat, strict=True):
                if isinstance(o, BaseException):
                    print(f"  {s}: job failed: {type(o).__name__}: {o}", flush=True)
                    if not per_job:
                        raise o
                if per_job:
                    rec = job_record(o, reference, t, price)
                    records[s].append(rec)
                    if "failed" not in rec:
                        job_times[s].append(t)
                        errors[s] = max(errors[s], rec["error"])
                else:  # relative error of the whole answer (0: identical)
                    errors[s] = max(errors[s], relative_error(o, reference))
    base = job_times["plain"] if per_job else times["plain"]
    result = {}
    for s in strategies:
        result[s] = {
            **summarise(job_times[s] if per_job else times[s], base),
            "thread_seconds": float(np.median(busy[s])) / float(np.median(busy["plain"])),
            "max_error": errors[s],
            "times": times[s],
        }
        if per_job:
            result[s].update(job_figures(records[s]))
            result[s]["job_times"] = job_times[s]
            result[s]["records"] = records[s]
        if concurrent > 1:
            result[s]["answers_per_minute"] = concurrent * 60 / float(np.median(times[s]))
    return result


# -- the hindsight summary and the issue's targets (pure: tests/test_equal_resources.py) --


def _best(cell: Mapping[str, Mapping[str, Any]], names: Iterable[str], key: str) -> str | None:
    names = [s for s in names if s in cell and math.isfinite(cell[s].get(key, math.nan))]
    return min(names, key=lambda s: cell[s][key]) if names else None


def hindsight(cell: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """What an oracle that saw the cell's results would have run, and auto against it.

    ``best_exact_p50`` / ``best_exact_p90``: the exact strategies' least p50 and least p90
    (hedged included, auto excluded; each may be another strategy); ``best_approx``: the
    approximate code with the least p90 among those with median error <= 0.02 (among all
    approximate codes when none is; ``best_approx_error_ok`` says which), with its median
    error and estimate check; ``approx_over_exact_p90``; ``best_qualified``, the fastest
    approximate code meeting target (a)'s error and estimate conditions, and
    ``qualified_over_exact_p90``; ``auto`` against the best exact
    p50 and p90 and plain's p90; ``auto-e0.02`` against the oracle: per quantile, the
    least of every strategy (auto excluded) whose worst error is <= 0.02. Quantiles in
    seconds (``p50_s``, ``p90_s``)."""
    kinds = {s: parse_strategy(s).kind for s in cell}
    exact = [s for s in cell if kinds[s] in ("plain", "exact", "default")]
    approx = [s for s in cell if kinds[s] == "approx"]
    h: dict[str, Any] = {}
    b50, b90 = _best(cell, exact, "p50_s"), _best(cell, exact, "p90_s")
    if b50 is not None and b90 is not None:
        h.update(
            best_exact_p50=b50,
            best_exact_p50_s=cell[b50]["p50_s"],
            best_exact_p90=b90,
            best_exact_p90_s=cell[b90]["p90_s"],
        )
    good = [s for s in approx if cell[s].get("median_error", math.inf) <= TARGET_ERROR]
    ba = _best(cell, good or approx, "p90_s")
    if ba is not None:
        h.update(
            best_approx=ba,
            best_approx_error_ok=bool(good),
            best_approx_p90_s=cell[ba]["p90_s"],
            best_approx_median_error=cell[ba].get("median_error", math.nan),
            best_approx_estimate_ok=cell[ba].get("estimate_ok", math.nan),
        )
        if b90 is not None:
            h["approx_over_exact_p90"] = cell[ba]["p90_s"] / cell[b90]["p90_s"]
    # target (a)'s candidates: median error <= 2% and the estimate vouching in >= 95% of jobs
    fit = [s for s in good if cell[s].get("estimate_ok", 0) >= TARGET_ESTIMATE]
    bq = _best(cell, fit, "p90_s")
    if bq is not None and b90 is not None:
        h["best_qualified"] = bq
        h["qualified_over_exact_p90"] = cell[bq]["p90_s"] / cell[b90]["p90_s"]
    if "auto" in cell and b50 is not None and b90 is not None:
        a = cell["auto"]
        h["auto"] = {
            "p50_over_best": a["p50_s"] / cell[b50]["p50_s"],
            "p90_over_best": a["p90_s"] / cell[b90]["p90_s"],
            "p90_over_plain": a["p90_s"] / cell["plain"]["p90_s"] if "plain" in cell else None,
        }
    budgeted = [s for s in cell if kinds[s] == "auto" and parse_strategy(s).error is not None]
    for s in budgeted:
        e = parse_strategy(s).error
        assert e is not None
        fit = [t for t in cell if kinds[t] != "auto" and cell[t].get("max_error", 0) <= e]
        o50, o90 = _best(cell, fit, "p50_s"), _best(cell, fit, "p90_s")
        if o50 is None or o90 is None:
            continue
        a = cell[s]
        h[s] = {
            "oracle_p50": o50,
            "oracle_p90": o90,
            "p50_over_oracle": a["p50_s"] / cell[o50]["p50_s"],
            "p90_over_oracle": a["p90_s"] / cell[o90]["p90_s"],
            "mean_error": a.get("mean_error", a.get("max_error", math.nan)),
            "budget": e,
        }
    return h


def targets(h: Mapping[str, Any], data: str, concurrent: int) -> dict[str, bool | None]:
    """The issue's targets in one cell (None: not applicable there).

    (a) smooth rows, J = 3: an approximate code whose p90 is <= 0.5x the best exact p90,
    whose median error is <= 2% and whose estimate is >= 0.5x the true error in >= 95% of
    jobs (the fastest such code: hindsight's ``best_qualified``);
    (b) auto within 1.2x of the best exact p50 and p90, and never above plain's p90;
    (c) ``auto-e0.02`` within 1.2x of the oracle's p50 and p90, mean error <= 0.02."""
    out: dict[str, bool | None] = {"a": None, "b": None, "c": None}
    if data == "smooth" and concurrent == 3 and "best_approx" in h:
        # some approximate code meets all three (hindsight's best_qualified)
        out["a"] = h.get("qualified_over_exact_p90", math.inf) <= TARGET_APPROX_P90
    a = h.get("auto")
    if a is not None:
        out["b"] = bool(
            a["p50_over_best"] <= TARGET_AUTO
            and a["p90_over_best"] <= TARGET_AUTO
            and (a["p90_over_plain"] is None or a["p90_over_plain"] <= 1.0)
        )
    c = h.get("auto-e0.02")
    if c is not None:
        out["c"] = bool(
            c["p50_over_oracle"] <= TARGET_AUTO
            and c["p90_over_oracle"] <= TARGET_AUTO
            and c["mean_error"] <= c["budget"]
        )
    return out


# -- output --


def show(name: str, cell: dict[str, Any]) -> None:
    figures = {
        s: {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items() if _scalar(k, v)}
        for s, r in cell.items()
    }
    print(name, json.dumps(figures), flush=True)


def _scalar(key: str, value: Any) -> bool:
    return key not in ("times", "job_times", "records") and not isinstance(value, list)


def _f(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.{digits}f}"


def _err(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return "0" if x == 0 else f"{x:.2g}"


def _mark(ok: bool | None) -> str:
    return "" if ok is None else ("**pass**" if ok else "fail")


def _qualified(h: Mapping[str, Any]) -> str:
    if "best_qualified" not in h:
        return " (no code within 2% with its estimate)"
    return f" ({h['best_qualified']} {_f(h['qualified_over_exact_p90'])})"


def render(results: Mapping[str, Any]) -> str:
    """Markdown tables of the issue-42 cells of a result file (the cells with per-job
    figures), then the hindsight summary with the targets."""
    lines: list[str] = []
    meta = results.get("meta", {})
    cells = results.get("cells", {})
    for name in [*cells, *(c for c in meta if c not in cells)]:
        cell, m = cells.get(name, {}), meta.get(name, {})
        if "skipped" in m:
            lines += [f"**{name}**: skipped ({m['skipped']})", ""]
            continue
        if not m.get("per_job"):
            continue
        plain = cell.get("plain", {})
        lines += [
            f"**{name}** ({m.get('data')} rows, J = {m.get('concurrent')}, p = {m.get('p')}"
            + (f", wait `until(deadline={m['deadline']:g})`" if m.get("deadline") else "")
            + f"; {m.get('rounds_done', '?')} rounds, plain's p50 {_f(plain.get('p50_s'))} s,"
            f" p90 {_f(plain.get('p90_s'))} s)",
            "",
            "| strategy | p50 / p90 / p99 vs plain | thread time | error median / mean / worst"
            " | estimate >= 0.5x error | K, N / auto chose | failed |",
            "|---|---|---|---|---|---|---|",
        ]
        for s, r in cell.items():
            est = (
                f"{r['estimate_ok']:.0%} of {r.get('approximate_jobs', '?')}"
                + (f" ({r['no_estimate']} none)" if r.get("no_estimate") else "")
                if "estimate_ok" in r
                else ""
            )
            chose = ", ".join(f"{k} x{v}" for k, v in r.get("chosen", {}).items())
            ks = sorted({(x.get("K"), x.get("N")) for x in r.get("records", []) if "K" in x})
            shape = chose or "; ".join(f"{k}, {n}" for k, n in ks[:3])
            lines.append(
                f"| {s} | {_f(r['p50'])} / {_f(r['p90'])} / {_f(r['p99'])} "
                f"| {_f(r['thread_seconds'])}x | {_err(r.get('median_error'))} / "
                f"{_err(r.get('mean_error'))} / {_err(r.get('max_error'))} | {est} | {shape} "
                f"| {r.get('failed', 0) or ''} |"
            )
        extra = m.get("units")
        if extra:
            lines.append("")
            lines.append(extra)
        lines.append("")
    # recomputed from the cells' figures (a file written before a change of these rules
    # renders with today's)
    hs, ts = {}, {}
    for name, h in results.get("hindsight", {}).items():
        m = meta.get(name, {})
        hs[name] = hindsight(cells[name]) if name in cells else h
        ts[name] = targets(hs[name], m.get("data", ""), m.get("concurrent", 1))
    if hs:
        lines += [
            "Hindsight per cell (quantiles in seconds; best exact: hedged included, auto "
            "excluded; best approximate: least p90 among the codes with median error <= 2%, "
            "marked * where none is; oracle: every strategy with worst error <= 0.02):",
            "",
            "| cell | best exact p50 | best exact p90 | best approx p90 (median error, "
            "estimate ok) | approx / exact p90 | auto p50 / p90 vs best exact (p90 vs plain)"
            " | auto-e0.02 p50 / p90 vs oracle (mean error) | (a) (fastest code meeting its "
            "error and estimate conditions, p90 / best exact) | (b) | (c) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, h in hs.items():
            t = ts[name]
            a, c = h.get("auto"), h.get("auto-e0.02")
            approx = (
                f"{_f(h['best_approx_p90_s'])} {h['best_approx']}"
                + ("" if h["best_approx_error_ok"] else "*")
                + f" ({_err(h['best_approx_median_error'])}, "
                f"{_f(100 * h['best_approx_estimate_ok'], 0)}%)"
                if "best_approx" in h
                else ""
            )
            lines.append(
                f"| {name} | {_f(h.get('best_exact_p50_s'))} {h.get('best_exact_p50', '')} "
                f"| {_f(h.get('best_exact_p90_s'))} {h.get('best_exact_p90', '')} | {approx} "
                f"| {_f(h.get('approx_over_exact_p90'))} | "
                + (
                    f"{_f(a['p50_over_best'])} / {_f(a['p90_over_best'])} "
                    f"({_f(a['p90_over_plain'])})"
                    if a
                    else ""
                )
                + " | "
                + (
                    f"{_f(c['p50_over_oracle'])} / {_f(c['p90_over_oracle'])} "
                    f"({_err(c['mean_error'])}; oracle {c['oracle_p50']}, {c['oracle_p90']})"
                    if c
                    else ""
                )
                + f" | {_mark(t.get('a'))}{_qualified(h) if t.get('a') is not None else ''}"
                f" | {_mark(t.get('b'))} | {_mark(t.get('c'))} |"
            )
        lines += ["", overall(ts), ""]
    return "\n".join(lines)


def overall(per_cell: Mapping[str, Mapping[str, bool | None]]) -> str:
    """One line: each target over the cells where it applies ((b) and (c): every cell)."""
    parts = []
    for key in ("a", "b", "c"):
        got = {c: t[key] for c, t in per_cell.items() if t.get(key) is not None}
        if not got:
            parts.append(f"({key}) not measured")
            continue
        failed = [c for c, ok in got.items() if not ok]
        parts.append(
            f"({key}) passes in {len(got) - len(failed)} of {len(got)} cells"
            + (f" (fails in {', '.join(failed)})" if failed else "")
        )
    return "Targets overall: " + "; ".join(parts) + "."


def _commit() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return ""


def _sweep_api() -> tuple[Any, Any, Any] | None:
    """``(PricerTask, sweep_grid, price_error)`` of ``dask_bacc.bench.workloads``, None
    while they are missing."""
    try:
        from dask_bacc.bench import workloads
    except ImportError:
        return None
    got = [getattr(workloads, n, None) for n in ("PricerTask", "sweep_grid", "price_error")]
    return None if any(g is None for g in got) else (got[0], got[1], got[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=None, help="W (16; 64 with --big)")
    ap.add_argument("--rows", type=int, default=None, help="3840 (240 per worker with --big)")
    ap.add_argument("--task", type=float, default=0.2, help="seconds per task at --rows")
    ap.add_argument("--rounds", type=int, default=None, help="10 (4 with --big)")
    ap.add_argument("--warmup", type=int, default=None, help="unrecorded auto rounds (4; 2)")
    ap.add_argument("--n-parts", type=int, default=1000, help="partitions of the waves cell")
    ap.add_argument("--wave-task", type=float, default=0.02)
    ap.add_argument(
        "--cells",
        default=None,
        help=f"comma-separated (default {DEFAULT_CELLS}; 'issue42': {ISSUE42_CELLS}; "
        f"--big: {BIG_CELLS})",
    )
    ap.add_argument(
        "--strategies", default=None, help="comma-separated: only these (plain always runs)"
    )
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="stop starting rounds past this many seconds in all (default: none; 450 with "
        "--big), shared among the cells by their number of variants",
    )
    ap.add_argument(
        "--big", action="store_true", help="16 cores, W = 64: the decisive cells in < 8 min"
    )
    ap.add_argument("--paths", type=int, default=256, help="Monte Carlo paths (sweep cell)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/equal_resources.json")
    ap.add_argument(
        "--from-json", default=None, help="print the tables of a result file, run nothing"
    )
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json) as f:
            print(render(json.load(f)))
        return
    W = args.workers if args.workers is not None else (64 if args.big else 16)
    args.workers = W
    if args.rows is None:
        args.rows = 240 * W if args.big else 3840
    if args.rounds is None:
        args.rounds = 4 if args.big else 10
    if args.warmup is None:
        args.warmup = 2 if args.big else 4
    if args.budget_s is None and args.big:
        args.budget_s = 450.0
    if args.cells is None:
        args.cells = BIG_CELLS if args.big else DEFAULT_CELLS
    args.cells = args.cells.replace("issue42", ISSUE42_CELLS)
    run(args)


def run(args: argparse.Namespace) -> None:
    import dask
    import dask.array as da
    from distributed import Client, LocalCluster

    import dask_bacc

    warnings.simplefilter("ignore", dask_bacc.ApproximationWarning)
    warnings.simplefilter("ignore", dask_bacc.SuspectResultsWarning)
    t_start = time.perf_counter()
    W = args.workers
    cells = parse_cells(args.cells)
    results: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "platform": platform.platform()},
        "args": vars(args),
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cells": {},
        "meta": {},
        "hindsight": {},
        "targets": {},
    }
    with (
        dask.config.set({"distributed.worker.daemon": False}),
        LocalCluster(n_workers=W, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(W)
        print(f"cluster of {W} workers up in {time.perf_counter() - t_start:.0f} s", flush=True)
        rng = np.random.default_rng(args.seed)
        iid = rng.standard_normal((args.rows, 8))
        # smooth rows: each column a slow function of the row (what interpolation can use)
        t = np.linspace(0, 1, args.rows)[:, None]
        smooth = np.sin(2 * np.pi * t * np.arange(1, 9) / 4) + 0.5 * t
        data = {"iid": iid, "smooth": smooth}
        unit = args.task / (args.rows / W)
        one = list(STRATEGIES)
        # name: (straggler probability, rows factor, burn, data, strategies, concurrent)
        table: dict[str, tuple[float, int, bool, np.ndarray, list[str], int]] = {
            "one": (0.0, 1, False, iid, one, 1),
            "stragglers": (0.1, 1, False, iid, one, 1),
            "burn": (0.1, 1, True, iid, one, 1),
            "smooth": (0.1, 1, False, smooth, ["plain", "hedged", "repetition", *SPLINE], 1),
            "iid-approx": (0.1, 1, False, iid, ["plain", "hedged", *SPLINE], 1),
            "large": (0.1, 4, False, iid, one, 1),
            "concurrent": (0.0, 1, False, iid, ["plain", "hedged", "repetition", "default"], 3),
            "concurrent-stragglers": (
                0.1, 1, False, iid, ["plain", "hedged", "repetition", "default"], 3,
            ),
        }  # fmt: skip
        only = None if args.strategies is None else {"plain", *args.strategies.split(",")}
        for name in only or ():
            parse_strategy(name)  # a typo fails before the cluster's time is spent
        # issue 42: name -> (data, concurrent, strategies, deadline)
        exact_approx = ["plain", "hedged", "repetition", *APPROX]
        issue42: dict[str, tuple[str, int, list[str], bool]] = {
            "stragglers-J1": ("iid", 1, [*STRATEGIES, *AUTO], False),
            **{
                f"sat-{d}-J{j}": (d, j, list(SATURATION), False)
                for j in (3, 6)
                for d in ("smooth", "iid")
            },
            "deadline-J1": ("smooth", 1, exact_approx, True),
            "deadline-J3": ("smooth", 3, exact_approx, True),
            "sweep-J3": ("sweep", 3, list(SATURATION), False),
        }
        unknown = [c for c in cells if c not in table and c not in issue42 and c != "waves"]
        if unknown:
            raise SystemExit(f"unknown cells {unknown}")
        weights = {
            c: len(keep(issue42[c][2], cells[c])) * (1 + 0.3 * (issue42[c][1] - 1))
            for c in cells
            if c in issue42
        }
        weights.update({c: len(keep(table[c][4], cells[c])) for c in cells if c in table})

        def cell_budget(name: str) -> float | None:
            if args.budget_s is None:
                return None
            left = args.budget_s - (time.perf_counter() - t_start)
            todo = [c for c in cells if c in weights and c not in results["cells"]]
            total = sum(weights[c] for c in todo) or 1.0
            return max(left * weights.get(name, 1.0) / total, 1.0)

        for name, (p, factor, burn, X, strategies, concurrent) in table.items():
            if name not in cells:
                continue
            strategies = keep(strategies, cells[name])
            if only is not None:
                strategies = [s for s in strategies if s in only]
            Xc = np.tile(X, (factor, 1)) if factor > 1 else X  # the same cost per row
            t_cell = time.perf_counter()
            results["cells"][name] = run_cell(
                client,
                strategies,
                args.rounds,
                args.seed,
                lambda s, Xc=Xc, p=p, burn=burn: one_job(client, s, Xc, W, unit, p, burn),
                np.tanh(Xc) * 2.0,
                concurrent=concurrent,
                budget_s=cell_budget(name),
            )
            results["meta"][name] = {"seconds": time.perf_counter() - t_cell}
            show(name, results["cells"][name])
        for name, (dname, concurrent, strategies, deadline) in issue42.items():
            if name not in cells:
                continue
            strategies = keep(strategies, cells[name])
            if only is not None:
                strategies = [s for s in strategies if s in only]
            p = 0.1
            meta: dict[str, Any] = {
                "data": dname,
                "concurrent": concurrent,
                "p": p,
                "per_job": True,
            }
            wait = api = None
            if deadline:
                if not deadline_supported():
                    why = "dask_bacc.until has no deadline parameter yet"
                    print(f"{name} skipped: {why}", flush=True)
                    results["meta"][name] = {**meta, "skipped": why}
                    continue
                meta["deadline"] = 1.5 * args.task
                wait = deadline_wait(meta["deadline"])
            if dname == "sweep":
                api = _sweep_api()
                if api is None:
                    why = "dask_bacc.bench.workloads has no PricerTask / sweep_grid yet"
                    print(f"{name} skipped: {why}", flush=True)
                    results["meta"][name] = {**meta, "skipped": why}
                    continue
                X, pricer = sweep_inputs(api, args.rows, args.paths, args.seed)
                func = Priced(pricer, unit, p)
                reference = np.asarray(pricer.apply(X), dtype=float)

                def exact(x: np.ndarray, pricer: Any = pricer) -> np.ndarray:
                    return np.asarray(pricer.apply(x), dtype=float)

                meta["paths"] = args.paths
                meta["median_price"] = float(np.median(np.abs(reference)))
            else:
                X = data[dname]
                func = _Costly(unit, p)
                exact = None  # type: ignore[assignment]
                reference = np.tanh(X) * 2.0
            t_cell = time.perf_counter()
            price_error = None if api is None else api[2]

            def job(
                s: str,
                X: np.ndarray = X,
                wait: Any = wait,
                func: Any = func,
                exact: Any = exact,
                p: float = p,
            ) -> Any:
                return one_job(client, s, X, W, unit, p, False, wait=wait, func=func, exact=exact)

            cell = run_cell(
                client,
                strategies,
                args.rounds,
                args.seed,
                job,
                reference,
                concurrent=concurrent,
                per_job=True,
                warmup=args.warmup,
                budget_s=cell_budget(name),
                price=price_error if dname == "sweep" else None,
            )
            meta["seconds"] = time.perf_counter() - t_cell
            meta["rounds_done"] = len(cell["plain"]["times"])
            if dname == "sweep":
                meta["units"] = price_units(cell)
            results["cells"][name] = cell
            results["meta"][name] = meta
            h = hindsight(cell)
            results["hindsight"][name] = h
            results["targets"][name] = targets(h, dname, concurrent)
            show(name, cell)
            print(f"{name} hindsight {json.dumps(h, default=str)}", flush=True)
            print(
                f"{name} targets {results['targets'][name]}; {meta['seconds']:.0f} s, "
                f"{time.perf_counter() - t_start:.0f} s so far",
                flush=True,
            )
        if "waves" in cells:
            rows = args.n_parts * 4
            Xw = np.random.default_rng(1).standard_normal((rows, 8))
            x = da.from_array(Xw, chunks=(4, 8)).persist()
            uw = args.wave_task / 4
            for name, p in (("waves", 0.0), ("waves-stragglers", 0.05)):
                results["cells"][name] = run_cell(
                    client,
                    [s for s in ("plain", "hedged", "repetition") if only is None or s in only],
                    args.rounds,
                    args.seed,
                    lambda s, p=p: waves_job(client, s, x, uw, p, False),
                    np.tanh(Xw) * 2.0,
                )
                show(name, results["cells"][name])
    results["elapsed_s"] = time.perf_counter() - t_start
    print(f"elapsed {results['elapsed_s']:.0f} s", flush=True)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1, default=_json_default)
    if results["hindsight"] or any("skipped" in m for m in results["meta"].values()):
        print(render(results))


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


class _Costly:
    """:func:`costly` with its arguments bound (the issue-42 cells call ``func(block)``)."""

    def __init__(self, unit: float, p: float) -> None:
        self.unit, self.p = unit, p
        self.__name__ = "costly"

    def __call__(self, block: np.ndarray) -> np.ndarray:
        return costly(block, self.unit, self.p)


def sweep_inputs(api: tuple[Any, Any, Any], rows: int, paths: int, seed: int) -> tuple[Any, Any]:
    """The sweep cell's parameter rows (``sweep_grid``'s smooth curve, so that every K cuts
    it into neighbouring arcs) and its pricer (``paths`` common-random-number paths)."""
    task_cls, grid, _ = api
    return np.asarray(grid(rows, seed=seed), dtype=float), task_cls(paths=paths, seed=seed)


def price_units(cell: Mapping[str, Any]) -> str:
    """The sweep cell's errors in currency units, per strategy with any error."""
    parts = [
        f"{s} {r['price_median_abs']:.3g} / {r['price_max_abs']:.3g}"
        for s, r in cell.items()
        if r.get("price_max_abs", 0) > 0
    ]
    price = next((r["median_price"] for r in cell.values() if "median_price" in r), math.nan)
    return (
        f"Price errors in currency units (median price {price:.3g}), per strategy the median"
        " over jobs of each job's median absolute error / the largest absolute error of any"
        " price: " + ("; ".join(parts) or "none (every answer exact)")
    )


if __name__ == "__main__":
    main()
