"""Exact copies of a map layer (issue 25): repetition and speculative against plain Dask.

Run it with::

    python benchmarks/exact_layer.py --out benchmarks/results/exact_layer.md   # ~15 min, 2 cores
    python benchmarks/exact_layer.py --part a --modes processes --proc-rows 500000,2000000
    python benchmarks/exact_layer.py --part b --partitions 200 --b-kinds cpu

(from a checkout whose ``dask_bacc`` is installed in the interpreter, e.g. ``.venv/bin/python``).

Part A: 8 partitions, 16 workers, a real per-row compute
---------------------------------------------------------
A dask DataFrame of ``--rows`` rows x 8 float64 columns in 8 partitions, built on the
workers (``dd.from_map``) and persisted before anything is timed. ``f`` (:func:`rowwise`)
is ``tanh(x) * sqrt(|x|) + sin(x)`` over every value of the partition, returned as a
DataFrame of the same shape and labels (about 30-40 ms per 250k-row partition on this
machine, one thread). Variants, in an order shuffled per round (seeded):

- ``plain persist``: ``ddf.map_partitions(f).persist()`` then ``distributed.wait``;
- ``map_coded repetition`` / ``map_coded speculative``:
  ``dask_bacc.submit_coded(f, ddf, code=...).result()`` (what ``map_coded`` runs; the job is
  kept for its report), then ``wait(futures_of(out))``: ratios against ``plain persist``;
- ``plain compute``: ``ddf.map_partitions(f).compute()``;
- ``coded repetition``: ``dask_bacc.coded(ddf.map_partitions(f), code="repetition")
  .compute()`` (one driver task on the cluster): ratios against ``plain compute``.
  ``--coded-speculative`` adds ``coded(..., code="speculative")``;
- ``coding() repetition`` (``--coding``): the plain compute, unchanged, inside
  ``with dask_bacc.coding(code="repetition", only=f):`` (issue 30). ``--compute-only``
  leaves out the three persist variants.

Regimes: no stragglers, and every call of ``f`` sleeping 2 s more with probability 0.1
(``--p``, ``--delay``). The draw is made inside ``f`` by ``np.random.default_rng()``
(fresh OS entropy per call, no fixed seed), so each copy of a block, primary or backup, is
late independently: a run is not reproducible draw for draw, only in distribution. Each
late call logs an event (topic ``exact-layer-late``) tagged with its job, so the table
gives the late calls each variant met. With 8 partitions plain meets a late call in
1 - 0.9^8 = 57% of its runs: its p50 sits on the 2 s side of the knife edge, read p90 too.

With in-process workers (``LocalCluster(processes=False, n_workers=16,
threads_per_worker=1, memory_limit=0)``) at each of ``--rows`` (500k and 2M), and with
worker processes (``processes=True``, ``--proc-workers``, 16 by default, Dask's default
memory limit) at each of ``--proc-rows`` (2M by default: 16 processes on 2 cores make each
run slower, and the whole script is kept near 15 minutes).

Part B: many small tasks
------------------------
A dask DataFrame of ``--partitions`` (1000 and 200) partitions of 100 rows, persisted on a
fresh in-process cluster per size (16 workers x 1 thread; one that ran 1000-task jobs for
minutes had become slower at everything); ``f`` sleeps 20 ms. Regimes: none, and every
call 10x slow (200 ms) with probability 0.05, independently per call. ``--b-kinds cpu``
runs f as ~20 ms of numpy on one thread instead (calibrated at start; 10x the work when
slow), at the smallest size only. Variants: ``plain persist``, ``map_coded speculative``
(Spark's rule, the default), ``speculative (cubed)`` (``code_options={"rule": "cubed"}``),
``map_coded repetition``.

Measuring
---------
Latency: from the call to the output ready (futures finished, or data on the client for
``compute``). Before each run the cluster is drained: the scheduler holds only the
persisted input again and no worker thread is running a task (a cancelled copy still
sleeping or computing keeps its thread: Dask cannot stop a running task); in-process,
garbage is then collected and glibc's ``malloc_trim`` hands freed pages back (worker
processes run with Dask's ``MALLOC_TRIM_THRESHOLD_=65536``, which does that by itself).
``idle after`` is the time from the call until that drain finished: what the cluster was
busy for, cancelled copies included. A warm-up round (not recorded) opens each cluster.

Memory: in-process, one process holds the client and every worker: its RSS, sampled by a
thread every 5 ms. With worker processes, the sum of the workers' RSS (psutil), sampled
every 10 ms (the client's copy of a ``compute`` result is not counted there).
``peak Δ`` is the peak minus the value just before the run (median over rounds; the
job's own memory); ``peak / plain`` compares the absolute peaks.

Every ratio is to the plain variant's figure in the same run and regime (below 1: faster /
less memory than plain). p90 over 10 rounds interpolates between the 9th and 10th value.
``runs hit``: runs with at least one late call, ``late calls`` their total (every copy
draws: a job with backups makes more calls); ``backups per run``: copies beyond the
primaries the job launched; ``blocks from a backup``: blocks whose winning copy was not
the primary (both from the job's report).

A check on a fixed leak
-----------------------
Before commit 17f8a50 a layer job's start-event handler (a bound method of the job, which
holds its output futures) stayed in ``client._event_handlers`` after the job
(``Client.unsubscribe_topic`` only tells the scheduler), so every speculative call's
output stayed in memory. The script still drops any such handler left after a run and
counts them in its footer (0 expected).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import psutil

# run as a script, benchmarks/ is on sys.path: the helpers dataframe_heavy.py has already
from dataframe_heavy import describe_tree, trim_memory
from distributed import Client, LocalCluster, futures_of, wait

import dask_bacc

LATE_TOPIC = "exact-layer-late"
DRAIN_TIMEOUTS: dict[str, int] = {}  # per cluster: drains that gave up after 30 s
COLS = 8


# -- the workloads ---------------------------------------------------------------------------
def make_part(i: int, rows: int, cols: int = COLS) -> pd.DataFrame:
    rng = np.random.default_rng(i)
    index = pd.RangeIndex(i * rows, (i + 1) * rows)
    return pd.DataFrame(
        rng.standard_normal((rows, cols)), index=index, columns=[f"c{j}" for j in range(cols)]
    )


def _late(tag: int, p: float) -> bool:
    """Draw this call's lateness (fresh entropy per call) and log it for job ``tag``."""
    if p <= 0 or np.random.default_rng().random() >= p:
        return False
    try:
        from distributed import get_worker

        get_worker().log_event(LATE_TOPIC, tag)
    except ValueError:  # not on a worker
        pass
    return True


def rowwise(part: pd.DataFrame, tag: int, p: float, delay: float) -> pd.DataFrame:
    """Part A's f: a per-value compute, same shape out; ``delay`` s more with probability p."""
    x = part.to_numpy()
    y = np.tanh(x) * np.sqrt(np.abs(x)) + np.sin(x)
    out = pd.DataFrame(y, index=part.index, columns=part.columns)
    if _late(tag, p):
        time.sleep(delay)
    return out


def sleepy(part: pd.DataFrame, tag: int, p: float, base: float, factor: float) -> pd.DataFrame:
    """Part B's f: sleep ``base`` s, ``factor`` times longer with probability p."""
    time.sleep(base * factor if _late(tag, p) else base)
    return part


def _spin(n: int) -> float:
    a = np.linspace(0.0, 1.0, 4096)
    s = 0.0
    for _ in range(n):
        s += float(np.sin(a).sum())
    return s


def busy(part: pd.DataFrame, tag: int, p: float, n: int, factor: float) -> pd.DataFrame:
    """Part B's CPU f: ``n`` rounds of numpy work, ``factor`` times more with probability p."""
    _spin(int(n * factor) if _late(tag, p) else n)
    return part


def calibrate(seconds: float) -> int:
    """Rounds of :func:`_spin` that take ``seconds`` on one idle thread here."""
    _spin(50)
    t0 = time.perf_counter()
    _spin(500)
    per = (time.perf_counter() - t0) / 500
    return max(1, round(seconds / per))


# -- measuring ---------------------------------------------------------------------------
_libc: Any = None


class PeakRSS:
    """Peak of ``measure()`` (bytes) while the block runs, sampled every ``interval`` s."""

    def __init__(self, measure: Callable[[], int], interval: float):
        self.measure, self.interval = measure, interval

    def __enter__(self) -> PeakRSS:
        self.baseline = self.peak = self.measure()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.measure())
            self._stop.wait(self.interval)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(psutil.Error):
            self.peak = max(self.peak, self.measure())


def _n_tasks(dask_scheduler: Any) -> int:
    return len(dask_scheduler.tasks)


def _running(dask_worker: Any) -> int:
    return len(dask_worker.active_threads)


@dataclass
class Bench:
    """One cluster: its client, how its memory is read, the state it drains back to."""

    client: Client
    processes: bool
    measure_memory: bool = True
    base_tasks: int = 0
    stale_dropped: int = 0
    drain_timeouts: int = 0
    procs: list[psutil.Process] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.processes:
            pids = self.client.run(os.getpid)
            self.procs = [psutil.Process(pid) for pid in pids.values()]

    def rss(self) -> int:
        if self.processes:
            return sum(p.memory_info().rss for p in self.procs)
        return psutil.Process().memory_info().rss

    def drop_stale_handlers(self) -> int:
        """The leak in the module docstring: a layer job's own start-event handler (a bound
        method: it holds the job and its output) left behind after the job ended. Other
        handlers (dask-bacc's event dropper for late events) are left alone."""
        handlers = getattr(self.client, "_event_handlers", {})
        stale = []
        for t, h in list(handlers.items()):
            report = getattr(getattr(h, "__self__", None), "report", None)
            if t.startswith("bacc-start-") and report is not None and report.status != "running":
                stale.append(t)
        for t in stale:
            handlers.pop(t, None)
        self.stale_dropped += len(stale)
        return len(stale)

    def drain(self, timeout: float = 30.0) -> None:
        """Until the scheduler holds only the input and no worker thread runs a task."""
        start = time.monotonic()
        collected = False
        while time.monotonic() < start + timeout:
            if self.client.run_on_scheduler(_n_tasks) <= self.base_tasks:
                if not any(self.client.run(_running).values()):
                    return
            elif not collected and time.monotonic() > start + 0.3:
                gc.collect()  # outputs a reference cycle still holds
                collected = True
            time.sleep(0.01)
        self.drain_timeouts += 1

    def trim(self) -> None:
        """A clean memory baseline: in-process, collect and ``malloc_trim`` here. Worker
        processes run with Dask's ``MALLOC_TRIM_THRESHOLD_=65536`` (glibc hands freed
        memory back by itself); a ``Client.run`` of ``malloc_trim`` on 16 processes took
        0.7 s per run here, so it is not done."""
        if self.measure_memory and not self.processes:
            trim_memory()

    def late_calls(self, tag: int) -> int:
        """Late calls of job ``tag`` (read after each run: the scheduler keeps the last
        1000 events of a topic)."""
        return sum(int(t) == tag for _, t in self.client.get_events(LATE_TOPIC))


@dataclass
class Variant:
    name: str
    ref: str  # the plain variant its ratios are against
    run: Callable[[int, dict[str, Any]], Any]  # (tag, info) -> something that holds the output


def plain_persist(ddf: dd.DataFrame, f: Callable[..., Any], args: tuple, meta: Any) -> Callable:
    def run(tag: int, info: dict[str, Any]) -> Any:
        y = ddf.map_partitions(f, tag, *args, meta=meta).persist()
        wait(y)
        return y

    return run


def plain_compute(ddf: dd.DataFrame, f: Callable[..., Any], args: tuple, meta: Any) -> Callable:
    def run(tag: int, info: dict[str, Any]) -> Any:
        return ddf.map_partitions(f, tag, *args, meta=meta).compute()

    return run


def layer_job(
    ddf: dd.DataFrame,
    f: Callable[..., Any],
    args: tuple,
    meta: Any,
    code: str,
    options: dict[str, Any] | None = None,
) -> Callable:
    def run(tag: int, info: dict[str, Any]) -> Any:
        job = dask_bacc.submit_coded(
            f, ddf, tag, *args, meta=meta, code=code, code_options=options, progress=False
        )
        out = job.result()
        wait(futures_of(out))
        info["report"] = job.report
        return out

    return run


def rewritten(
    client: Client, ddf: dd.DataFrame, f: Callable[..., Any], args: tuple, meta: Any, code: str
) -> Callable:
    def run(tag: int, info: dict[str, Any]) -> Any:
        y = dask_bacc.coded(ddf.map_partitions(f, tag, *args, meta=meta), code=code)
        out = y.compute()
        info["collection"] = y
        return out

    return run


def in_block(
    ddf: dd.DataFrame, f: Callable[..., Any], args: tuple, meta: Any, code: str
) -> Callable:
    """The plain ``compute`` inside ``with dask_bacc.coding(code=..., only=f)``: the code
    unchanged (issue 30)."""

    def run(tag: int, info: dict[str, Any]) -> Any:
        with dask_bacc.coding(code=code, only=f) as block:
            out = ddf.map_partitions(f, tag, *args, meta=meta).compute()
        info["block"] = block
        return out

    return run


def report_counts(bench: Bench, info: dict[str, Any]) -> tuple[int | None, int | None]:
    """Backups launched by the job and blocks a backup gave, from its report."""
    report = info.get("report")
    if report is None and "block" in info:
        reports = info["block"].reports
        report = reports[0] if reports else None
    if report is None and "collection" in info:
        try:
            report = dask_bacc.report_of(info["collection"], client=bench.client)
        except (LookupError, ValueError):
            report = None
    if report is None:
        return None, None
    return len(report.backups), sum(int(i) >= report.K for i in report.returned)


def run_rounds(
    bench: Bench,
    variants: list[Variant],
    rounds: int,
    seed: int,
    tags: itertools.count,
    label: dict[str, Any],
    verbose: bool,
) -> list[dict[str, Any]]:
    """``rounds`` rounds, every variant once per round in a shuffled order."""
    order_rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        for k in order_rng.permutation(len(variants)):
            v = variants[k]
            tag = next(tags)
            bench.drain()
            bench.trim()
            info: dict[str, Any] = {}
            with contextlib.ExitStack() as stack:
                mem = None
                if bench.measure_memory:
                    interval = 0.01 if bench.processes else 0.005
                    mem = stack.enter_context(PeakRSS(bench.rss, interval))
                t0 = time.perf_counter()
                out = v.run(tag, info)
                seconds = time.perf_counter() - t0
            backups, backup_wins = report_counts(bench, info)
            del out
            info.clear()
            stale = bench.drop_stale_handlers()
            bench.drain()
            idle = time.perf_counter() - t0
            late = bench.late_calls(tag)
            row = {
                **label,
                "round": r,
                "order": int(k),
                "variant": v.name,
                "ref": v.ref,
                "tag": tag,
                "seconds": seconds,
                "idle_after": idle,
                "peak_delta_mb": None if mem is None else (mem.peak - mem.baseline) / 2**20,
                "peak_mb": None if mem is None else mem.peak / 2**20,
                "backups": backups,
                "backup_wins": backup_wins,
                "stale_handlers": stale,
                "late_calls": late,
            }
            rows.append(row)
            if verbose:
                print(json.dumps(row, default=str), file=sys.stderr, flush=True)
    return rows


# -- the two parts ---------------------------------------------------------------------------
def make_cluster(workers: int, processes: bool) -> tuple[LocalCluster, Client]:
    options: dict[str, Any] = {} if processes else {"memory_limit": 0}
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=processes,
        dashboard_address=None,
        **options,
    )
    return cluster, Client(cluster)


def persisted(client: Client, n: int, rows: int) -> tuple[dd.DataFrame, pd.DataFrame, int]:
    meta = make_part(0, 0)
    ddf = dd.from_map(make_part, range(n), rows=rows, meta=meta, divisions=None).persist()
    wait(ddf)
    time.sleep(0.2)
    return ddf, meta, client.run_on_scheduler(_n_tasks)


def run_config(
    bench: Bench,
    variants: list[Variant],
    label: dict[str, Any],
    args: argparse.Namespace,
    tags: itertools.count,
    warm_up: bool,
) -> list[dict[str, Any]]:
    """One configuration: a warm-up round if asked (imports, connections, first pickles;
    not recorded), then the rounds; prints its table at once."""
    t0 = time.perf_counter()
    if warm_up:
        run_rounds(bench, variants, 1, args.seed + 99, tags, label, False)
    got = run_rounds(bench, variants, args.rounds, args.seed, tags, label, args.verbose)
    took = time.perf_counter() - t0
    for g in got:
        g["config_seconds"] = took
    print(
        f"[{' '.join(str(v) for v in label.values())}: {took:.0f} s, load {load()}]",
        file=sys.stderr,
        flush=True,
    )
    print(tables(summarize(got), args), flush=True)
    return got


def part_a(args: argparse.Namespace, tags: itertools.count) -> list[dict[str, Any]]:
    rows_out: list[dict[str, Any]] = []
    for mode in args.modes:
        processes = mode == "processes"
        workers = args.proc_workers if processes else args.workers
        cluster, client = make_cluster(workers, processes)
        with cluster, client:
            client.wait_for_workers(workers)
            bench = Bench(client, processes)
            warm_up = True
            for rows in args.proc_rows if processes else args.rows:
                ddf, meta, bench.base_tasks = persisted(client, 8, rows // 8)
                for regime, p in (("none", 0.0), ("late", args.p)):
                    fargs = (p, args.delay)
                    persists = [
                        Variant(
                            "plain persist",
                            "plain persist",
                            plain_persist(ddf, rowwise, fargs, meta),
                        ),
                        Variant(
                            "map_coded repetition",
                            "plain persist",
                            layer_job(ddf, rowwise, fargs, meta, "repetition"),
                        ),
                        Variant(
                            "map_coded speculative",
                            "plain persist",
                            layer_job(ddf, rowwise, fargs, meta, "speculative"),
                        ),
                    ]
                    variants = [] if args.compute_only else persists
                    variants += [
                        Variant(
                            "plain compute",
                            "plain compute",
                            plain_compute(ddf, rowwise, fargs, meta),
                        ),
                        Variant(
                            "coded repetition",
                            "plain compute",
                            rewritten(client, ddf, rowwise, fargs, meta, "repetition"),
                        ),
                    ]
                    if args.coding:
                        variants.append(
                            Variant(
                                "coding() repetition",
                                "plain compute",
                                in_block(ddf, rowwise, fargs, meta, "repetition"),
                            )
                        )
                    if args.coded_speculative:
                        variants.append(
                            Variant(
                                "coded speculative",
                                "plain compute",
                                rewritten(client, ddf, rowwise, fargs, meta, "speculative"),
                            )
                        )
                    label = {
                        "part": "A",
                        "mode": mode,
                        "workers": workers,
                        "size": rows,
                        "regime": regime,
                    }
                    rows_out += run_config(bench, variants, label, args, tags, warm_up)
                    warm_up = False
                del variants, ddf
                bench.base_tasks = 0
                bench.drain()
            DRAIN_TIMEOUTS[mode] = DRAIN_TIMEOUTS.get(mode, 0) + bench.drain_timeouts
    return rows_out


def part_b(args: argparse.Namespace, tags: itertools.count) -> list[dict[str, Any]]:
    rows_out: list[dict[str, Any]] = []
    kinds = args.b_kinds
    n_spin = calibrate(args.task) if "cpu" in kinds else 0
    for n in args.partitions:
        # a fresh cluster per size: an in-process cluster slows down as it ages
        cluster, client = make_cluster(args.workers, False)
        with cluster, client:
            client.wait_for_workers(args.workers)
            bench = Bench(client, False, measure_memory=False)
            warm_up = True
            ddf, meta, bench.base_tasks = persisted(client, n, 100)
            for kind in kinds:
                if kind == "cpu" and n != min(args.partitions):
                    continue  # the CPU run only at the smaller size (time)
                for regime, p in (("none", 0.0), ("slow", args.b_p)):
                    if kind == "sleep":
                        f, fargs = sleepy, (p, args.task, args.b_factor)
                    else:
                        f, fargs = busy, (p, n_spin, args.b_factor)
                    variants = [
                        Variant(
                            "plain persist", "plain persist", plain_persist(ddf, f, fargs, meta)
                        ),
                        Variant(
                            "speculative (spark)",
                            "plain persist",
                            layer_job(ddf, f, fargs, meta, "speculative"),
                        ),
                        Variant(
                            "speculative (cubed)",
                            "plain persist",
                            layer_job(ddf, f, fargs, meta, "speculative", {"rule": "cubed"}),
                        ),
                        Variant(
                            "repetition",
                            "plain persist",
                            layer_job(ddf, f, fargs, meta, "repetition"),
                        ),
                    ]
                    label = {
                        "part": "B",
                        "mode": "threads",
                        "workers": args.workers,
                        "size": n,
                        "kind": kind,
                        "regime": regime,
                    }
                    rows_out += run_config(bench, variants, label, args, tags, warm_up)
                    warm_up = False
            DRAIN_TIMEOUTS["B"] = DRAIN_TIMEOUTS.get("B", 0) + bench.drain_timeouts
    return rows_out


# -- the report ------------------------------------------------------------------------------
def q(values: list[float], p: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=float), p))


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        key = (r["part"], r["mode"], r["workers"], r["size"], r.get("kind", ""), r["regime"])
        groups.setdefault(key, []).append(r)
    out = []
    for key, sel in groups.items():
        names = list(dict.fromkeys(r["variant"] for r in sorted(sel, key=lambda r: r["order"])))
        stats: dict[str, dict[str, Any]] = {}
        for name in names:
            vs = [r for r in sel if r["variant"] == name]
            t = [r["seconds"] for r in vs]
            stats[name] = {
                "part": key[0],
                "mode": key[1],
                "workers": key[2],
                "size": key[3],
                "kind": key[4],
                "regime": key[5],
                "variant": name,
                "ref": vs[0]["ref"],
                "n": len(vs),
                "p50": q(t, 0.5),
                "p90": q(t, 0.9),
                "mean": float(np.mean(t)),
                "idle_p50": q([r["idle_after"] for r in vs], 0.5),
                "delta_mb": q([r["peak_delta_mb"] or 0.0 for r in vs], 0.5),
                "peak_mb": q([r["peak_mb"] or 0.0 for r in vs], 0.5),
                "late_calls": sum(r["late_calls"] for r in vs),
                "runs_hit": sum(r["late_calls"] > 0 for r in vs),
                "backups": None
                if any(r["backups"] is None for r in vs)
                else float(np.mean([r["backups"] for r in vs])),
                "backup_wins": None
                if any(r["backup_wins"] is None for r in vs)
                else float(np.mean([r["backup_wins"] for r in vs])),
                "stale": sum(r["stale_handlers"] for r in vs),
                "config_seconds": vs[0].get("config_seconds", float("nan")),
            }
        for s in stats.values():
            base = stats[s["ref"]]
            s["p50_ratio"] = s["p50"] / base["p50"]
            s["p90_ratio"] = s["p90"] / base["p90"]
            s["mean_ratio"] = s["mean"] / base["mean"]
            s["delta_ratio"] = (
                s["delta_mb"] / base["delta_mb"] if base["delta_mb"] > 0 else float("nan")
            )
            s["peak_ratio"] = s["peak_mb"] / base["peak_mb"] if base["peak_mb"] else float("nan")
            out.append(s)
    return out


def regime_name(s: dict[str, Any], args: argparse.Namespace) -> str:
    if s["regime"] == "none":
        return "none"
    if s["part"] == "A":
        return f"{args.p:.0%} of calls {args.delay:g} s late"
    return f"{args.b_p:.0%} of calls {args.b_factor:g}x slow"


def tables(summary: list[dict[str, Any]], args: argparse.Namespace) -> str:
    parts: list[str] = []
    configs = list(
        dict.fromkeys((s["part"], s["mode"], s["workers"], s["size"], s["kind"]) for s in summary)
    )
    for part, mode, workers, size, kind in configs:
        sel = [
            s
            for s in summary
            if (s["part"], s["mode"], s["workers"], s["size"], s["kind"])
            == (part, mode, workers, size, kind)
        ]
        took = sum({s["regime"]: s["config_seconds"] for s in sel}.values())
        where = "in-process workers" if mode == "threads" else "worker processes"
        if part == "A":
            title = (
                f"A: {size:,} rows x 8 float64 columns, 8 partitions, {workers} {where} "
                f"x 1 thread, 2 cores"
            )
            mem = "RSS of the one process" if mode == "threads" else "sum of the workers' RSS"
        else:
            what = "f sleeps 20 ms" if kind == "sleep" else "f computes ~20 ms (numpy)"
            title = f"B: {size} partitions, {workers} {where} x 1 thread, {what}, 2 cores"
            mem = "not measured"
        parts.append(f"#### {title}\n")
        parts.append(
            f"{sel[0]['n']} rounds per variant and regime, interleaved; memory: {mem}; "
            f"this configuration ran {took:.0f} s.\n"
        )
        memory = part == "A"
        head = (
            "| regime | variant | p50 (s) | p90 (s) | mean (s) | p50 / plain | p90 / plain "
            "| mean / plain | idle after, p50 (s) "
        )
        if memory:
            head += "| peak Δ (MB) | peak Δ / plain | peak / plain "
        head += "| runs hit | late calls | backups per run | blocks from a backup |"
        parts.append(head)
        parts.append("|---|---|" + "--:|" * (head.count("|") - 3))
        for s in sel:
            plain = s["variant"] == s["ref"]
            backups = "-" if s["backups"] is None else f"{s['backups']:.1f}"
            wins = "-" if s["backup_wins"] is None else f"{s['backup_wins']:.1f}"
            line = (
                f"| {regime_name(s, args)} | {s['variant']}{' (ref)' if plain else ''} "
                f"| {s['p50']:.3f} | {s['p90']:.3f} | {s['mean']:.3f} | {s['p50_ratio']:.2f} "
                f"| {s['p90_ratio']:.2f} | {s['mean_ratio']:.2f} | {s['idle_p50']:.3f} "
            )
            if memory:
                line += f"| {s['delta_mb']:.0f} | {s['delta_ratio']:.2f} | {s['peak_ratio']:.2f} "
            line += f"| {s['runs_hit']}/{s['n']} | {s['late_calls']} | {backups} | {wins} |"
            parts.append(line)
        parts.append("")
    return "\n".join(parts)


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["a", "b", "all"], default="all")
    parser.add_argument("--rounds", type=int, default=10, help="runs per variant and regime")
    parser.add_argument("--workers", type=int, default=16, help="in-process workers")
    parser.add_argument("--proc-workers", type=int, default=16, help="worker processes (A)")
    parser.add_argument(
        "--modes", type=lambda s: s.split(","), default=["threads", "processes"], help="A"
    )
    parser.add_argument(
        "--rows", type=ints, default=[500_000, 2_000_000], help="A: sizes, in-process workers"
    )
    parser.add_argument(
        "--proc-rows", type=ints, default=[2_000_000], help="A: sizes, worker processes"
    )
    parser.add_argument("--p", type=float, default=0.1, help="A: late probability per call")
    parser.add_argument("--delay", type=float, default=2.0, help="A: delay of a late call (s)")
    parser.add_argument("--coded-speculative", action="store_true", help="A: add coded(spec.)")
    parser.add_argument(
        "--coding", action="store_true", help="A: add the compute inside coding() (issue 30)"
    )
    parser.add_argument(
        "--compute-only", action="store_true", help="A: leave out the persist variants"
    )
    parser.add_argument("--partitions", type=ints, default=[1000, 200], help="B: sizes")
    parser.add_argument("--task", type=float, default=0.02, help="B: task seconds")
    parser.add_argument("--b-p", type=float, default=0.05, help="B: slow probability per call")
    parser.add_argument("--b-factor", type=float, default=10.0, help="B: slowdown of a slow call")
    parser.add_argument(
        "--b-kinds",
        type=lambda s: s.split(","),
        default=["sleep"],
        help="B: sleep and/or cpu (a CPU-bound f, at the smallest size only)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the variants' order per round")
    parser.add_argument("--out", help="write the Markdown report here")
    parser.add_argument("--json", help="write every run and the summary here")
    parser.add_argument("--verbose", action="store_true", help="every run to stderr")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    for mode in args.modes:
        if mode not in ("threads", "processes"):
            parser.error(f"--modes takes threads and/or processes, got {mode!r}")
    for kind in args.b_kinds:
        if kind not in ("sleep", "cpu"):
            parser.error(f"--b-kinds takes sleep and/or cpu, got {kind!r}")

    mem = psutil.virtual_memory()
    header = [
        "# exact_layer: exact copies of a map layer against plain Dask (issue 25)",
        "",
        f"- {describe_tree()}",
        f"- machine: {os.cpu_count()} cores, "
        f"{mem.total / 2**30:.0f} GiB RAM; python {platform.python_version()}, "
        f"numpy {np.__version__}, pandas {pd.__version__}, dask {dask.__version__}",
        f"- command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`",
        f"- load average at start (1, 5, 15 min): {load()}",
    ]
    print("\n".join(header), flush=True)
    tags = itertools.count(1)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    if args.part in ("a", "all"):
        rows += part_a(args, tags)
    if args.part in ("b", "all"):
        rows += part_b(args, tags)
    wall = time.perf_counter() - started
    summary = summarize(rows)
    stale = sum(r["stale_handlers"] for r in rows)
    timeouts = sum(DRAIN_TIMEOUTS.values())
    footer = (
        f"Wall time {wall:.0f} s. Stale speculative handlers dropped (see the script's "
        f"docstring): {stale}. Drains that timed out (30 s): {timeouts}. Load average at "
        f"the end: {load()}."
    )
    body = tables(summary, args)
    print("\n" + footer, flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            fh.write("\n".join([*header, "", body, footer, ""]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {"args": vars(args), "runs": rows, "summary": summary}, fh, indent=1, default=str
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
