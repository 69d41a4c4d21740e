"""The regime map: where coded computing wins, on real worker processes (issue 26).

Run it with::

    python benchmarks/regimes.py                  # quick map, < 10 min on 2 cores
    python benchmarks/regimes.py --full           # the whole grid (a 16-core machine)
    python benchmarks/regimes.py --emulate-hosts --bandwidth 1gbit   # as root: hosts in
                                                  # network namespaces, bytes per link
    python benchmarks/regimes.py --from-json benchmarks/results/regimes/quick.json

Each cluster is a :class:`dask_bacc.bench.testbed.Testbed`: a ``dask scheduler`` process
and W ``dask worker`` processes of one thread each, spread over 4 hosts (named
``h0-w0``...; with ``--emulate-hosts`` each host is a network namespace with its own
link). Cells that need the same W share one cluster, started once.

A cell is a workload, a straggler model, the spare capacity W / N (N = 2K coded tasks),
K, the task's duration, the data and the number of concurrent jobs. In a cell, one round
runs one job (or J concurrent jobs) of every strategy in a seeded-shuffled order, so drift
on the shared machine hits all alike; after each job the harness waits until no worker
thread is busy (a cancelled straggler runs to its end, as on a real cluster), so every
job starts on an idle cluster. Stragglers are :class:`dask_bacc.bench.workloads.Straggling`
delays from :mod:`dask_bacc.testing` models, drawn per task on plain Dask's tasks and the
coded ones alike.

Strategies: ``plain`` (``client.map`` + ``gather``; for DataFrames ``map_partitions`` +
``persist``), ``default`` (dask-bacc with no ``code=`` / ``n_coded=`` / ``wait=``: what a
user gets), ``speculative``, ``repetition``, ``systematic-spline``, ``spline``, ``berrut``,
``systematic-berrut`` (N = 2K, default wait) and ``auto`` (``code``, ``n_coded`` and
``wait`` ``"auto"``). Per cell and strategy: p50 / p90 / p99 of the time to answer, the
median and worst relative error (inference: class agreement with the uncoded model), the
thread-seconds of ``f`` per answer (every task that ran, cancelled stragglers to their
end) and the bytes moved between workers per answer.

Outputs: ``benchmarks/results/regimes/<mode>.json`` (every job), ``docs/regimes/<mode>.md``
(tables) and ``docs/regimes/<mode>-<workload>.png`` (the heat maps).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import dask_bacc
from dask_bacc.bench import workloads as wl
from dask_bacc.testing import (
    Bimodal,
    CorrelatedHosts,
    MovingSlowSet,
    Pareto,
    SlowHosts,
    smooth_blocks,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "regimes"
DOCS = ROOT / "docs" / "regimes"

STRATEGIES = (
    "plain",
    "default",
    "speculative",
    "repetition",
    "systematic-spline",
    "spline",
    "berrut",
    "systematic-berrut",
    "auto",
)
#: The quick map leaves out the two codes the accuracy benchmark found dominated (the
#: spline code by the systematic spline, systematic Berrut by Berrut or the systematic
#: spline); the full map runs every strategy.
QUICK_STRATEGIES = tuple(s for s in STRATEGIES if s not in ("spline", "systematic-berrut"))
EXACT = frozenset({"plain", "speculative", "repetition"})
HOSTS = 4
FACTOR = 10.0  # a straggling task takes 10x its own time
FRAME_DELAY = 1.0  # ... but a DataFrame task on the slow host takes 1 s more
JOB_TIMEOUT = 120.0  # a job not answered by then is recorded as failed ("timeout")


@dataclass(frozen=True)
class Cell:
    """One cell of the map.

    Attributes
    ----------
    workload : {"sleep", "inference", "dataframe"}
        Sleep-based tasks (scheduling cost alone), the digits MLP on one BLAS thread, or a
        per-row transform of a DataFrame of ``rows`` rows held on the workers.
    model : {"bimodal", "pareto", "slow-host", "correlated", "moving"}
        Independent per task with probability ``p`` (10x slower), heavy-tailed (Pareto
        of shape ``p``, delay ``duration * (X - 1)``), one of the 4 hosts always 10x slower
        (DataFrame tasks: 1 s slower),
        each host 10x slower in a job with probability ``p``, or one slow host that moves
        every 3 jobs.
    p : float
        The model's probability (Pareto: its shape).
    spare : float
        W / N with N = 2K: 1 (no spare worker beyond the coded tasks), 1.5, 2.
    K : int
        Blocks.
    duration : float
        Seconds of one task (sleep workload; the others take what their compute takes).
    data : {"iid", "smooth", "digits", "frame"}
        I.i.d. rows, rows varying smoothly across blocks, digit images, the DataFrame.
    jobs : int
        Concurrent jobs, submitted at once from one client.
    rows : int
        Rows per block (the DataFrame's rows in all, for ``dataframe``).
    """

    workload: str
    model: str
    p: float
    spare: float
    K: int = 8
    duration: float = 0.05
    data: str = "iid"
    jobs: int = 1
    rows: int = 64

    @property
    def N(self) -> int:
        return 2 * self.K

    @property
    def workers(self) -> int:
        return round(self.spare * self.N)

    @property
    def label(self) -> str:
        m = {
            "bimodal": f"iid p={self.p:g}",
            "pareto": f"pareto a={self.p:g}",
            "slow-host": "slow host",
            "correlated": f"host-corr p={self.p:g}",
            "moving": "moving slow host",
        }[self.model]
        extra = f" {self.data}" if self.data not in ("iid", "digits", "frame") else ""
        conc = f" J={self.jobs}" if self.jobs > 1 else ""
        dur = f" {self.duration:g}s" if self.workload == "sleep" else ""
        return f"{m}{extra}, W/N={self.spare:g}, K={self.K}{dur}{conc}"


def quick_cells() -> list[Cell]:
    """The quick map: the issue's regimes at K = 8, 50 ms tasks, the DataFrame at 2M rows
    (< 10 min on 2 cores; ``--emulate-hosts --cells`` of :func:`frame_cells` runs 8M)."""
    return [
        Cell("sleep", "bimodal", 0.05, 2.0),
        Cell("sleep", "bimodal", 0.2, 2.0),
        Cell("sleep", "bimodal", 0.2, 2.0, data="smooth"),
        Cell("sleep", "moving", 0.0, 2.0),
        Cell("sleep", "bimodal", 0.1, 2.0, jobs=4),
        Cell("inference", "bimodal", 0.1, 2.0, data="digits", rows=2000),
        Cell("dataframe", "slow-host", 0.0, 2.0, data="frame", rows=2_000_000),
        Cell("sleep", "bimodal", 0.1, 1.0),
    ]


def frame_cells() -> list[Cell]:
    """The data-heavy workload at 8M rows, for ``--frames`` (with ``--emulate-hosts``:
    the bytes each code moves over the hosts' links)."""
    return [Cell("dataframe", "slow-host", 0.0, 2.0, data="frame", rows=8_000_000)]


def full_cells() -> list[Cell]:
    """The full grid (a 16-core machine or larger)."""
    cells: list[Cell] = []
    for K in (8, 16, 32):
        for spare in (1.0, 1.5, 2.0):
            for duration in (0.05, 2.0):
                for model, p in (
                    ("bimodal", 0.05),
                    ("bimodal", 0.2),
                    ("bimodal", 0.4),
                    ("pareto", 1.5),
                    ("slow-host", 0.0),
                    ("correlated", 0.2),
                    ("moving", 0.0),
                ):
                    for data in ("iid", "smooth") if model == "bimodal" else ("iid",):
                        for jobs in (1, 4) if (model, p) == ("bimodal", 0.05) else (1,):
                            cells.append(Cell("sleep", model, p, spare, K, duration, data, jobs))
            cells.append(Cell("inference", "bimodal", 0.1, spare, K, data="digits", rows=6000))
            cells.append(
                Cell("dataframe", "slow-host", 0.0, spare, K, data="frame", rows=16_000_000)
            )
    return cells


# -- one cell ------------------------------------------------------------------------------
def straggler_model(cell: Cell, hosts: list[str]) -> Any:
    """The :mod:`dask_bacc.testing` model of ``cell``."""
    if cell.model == "bimodal":
        return Bimodal(p=cell.p, delay=0.0, factor=FACTOR)
    if cell.model == "pareto":
        return Pareto(alpha=cell.p, scale=cell.duration)
    if cell.model == "slow-host" and cell.workload == "dataframe":
        # 10x a task that time-slices 2 cores with 15 others would be minutes per job
        return SlowHosts(hosts=(hosts[-1],), delay=FRAME_DELAY, factor=1.0)
    if cell.model == "slow-host":
        return SlowHosts(hosts=(hosts[-1],), factor=FACTOR)
    if cell.model == "correlated":
        return CorrelatedHosts(p=cell.p, factor=FACTOR)
    if cell.model == "moving":
        return MovingSlowSet(hosts=tuple(hosts), count=1, period=3, factor=FACTOR)
    raise ValueError(f"unknown straggler model {cell.model!r}")


def _poll(dask_worker: Any, since: float) -> tuple[int, float, int]:
    """Busy threads, thread-seconds of wrapped tasks so far, bytes fetched since ``since``."""
    moved = sum(
        int(e.get("total", 0)) for e in dask_worker.transfer_incoming_log if e["start"] >= since
    )
    return int(dask_worker.state.executing_count), wl.thread_seconds(), moved


@dataclass
class Job:
    """One measured job."""

    cell: int
    strategy: str
    round: int
    latency: float | None = None
    error: float | None = None  # relative error (inference: 1 - class agreement)
    cpu: float = 0.0  # thread-seconds of f per answer
    moved: float = 0.0  # bytes moved between workers per answer
    link: float | None = None  # bytes over the emulated hosts' links per answer
    failure: str | None = None
    chosen: str | None = None  # auto: what it chose


class _Runner:
    """Jobs of one cell on one cluster."""

    def __init__(
        self,
        client: Any,
        bed: Any,
        cell: Cell,
        index: int,
        seed: int,
        auto_error: float | None = None,
    ):
        self.client, self.bed, self.cell, self.index, self.seed = client, bed, cell, index, seed
        self.auto_error = auto_error  # auto's error= (None: bacc.auto.error)
        self.hosts = sorted({bed.host_of(n) for n in bed.worker_names})
        self.model = straggler_model(cell, self.hosts)
        self.K = cell.K
        rng = np.random.default_rng([seed, index])
        self.frame: Any = None
        if cell.workload == "sleep":
            self.func: Any = wl.SleepTask(cell.duration, seed=seed)
            if cell.data == "smooth":
                X = smooth_blocks(self.K, cell.rows, 8, rng).reshape(self.K * cell.rows, 8)
            else:
                X = rng.standard_normal((self.K * cell.rows, 8))
            self.X = X
        elif cell.workload == "inference":
            self.func = wl.InferenceTask(seed=seed)
            self.X = wl.digits_rows(self.K * cell.rows, seed + index)
        else:
            import dask.dataframe as dd

            per = cell.rows // self.K
            self.func = wl.FrameTask(work=4, seed=seed)
            ddf = dd.from_map(wl.frame_partition, range(self.K), rows=per, seed=seed)
            self.frame = client.persist(ddf)
            from distributed import wait

            wait(self.frame)
            self.meta = self.func(self.frame._meta)
            self.exact = client.persist(self.frame.map_partitions(self.func, meta=self.meta))
            wait(self.exact)
            self.exact_norm = float(np.sqrt((self.exact**2).sum().sum().compute()))
        if self.frame is None:
            blocks = np.split(self.X, self.K)
            self.blocks = blocks
            self.exact_out = np.concatenate([self.func.apply(b) for b in blocks])
        self.since = time.time()
        self.cpu0, _ = self.settle()
        self.link0 = bed.link_bytes()

    # -- accounting ------------------------------------------------------------------------
    def settle(self, timeout: float = 120.0) -> tuple[float, int]:
        """Wait until no worker thread is busy; the thread-seconds and bytes so far.

        The first poll asks every worker; later ones only those still busy (asking 32
        worker processes 20 times a second would load the 2-core machine it measures).
        """
        deadline = time.perf_counter() + timeout
        last: dict[str, tuple[int, float, int]] = {}
        ask: list[str] | None = None  # None: every worker
        while True:
            res = self.client.run(_poll, since=self.since, workers=ask, on_error="return")
            last.update({a: r for a, r in res.items() if isinstance(r, tuple)})
            ask = [a for a, r in last.items() if r[0] > 0]
            if not ask or time.perf_counter() > deadline:
                return sum(r[1] for r in last.values()), sum(r[2] for r in last.values())
            time.sleep(0.05)

    # -- jobs --------------------------------------------------------------------------------
    def run(self, strategy: str, rnd: int, job_no: int) -> list[Job]:
        J = self.cell.jobs
        func = wl.Straggling(self.func, self.model, self.seed, job_no)
        jobs = [Job(self.index, strategy, rnd) for _ in range(J)]
        self.since = time.time()
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the map measures the error itself
                if self.frame is not None:
                    outs = self._frame_jobs(strategy, func, jobs, t0)
                else:
                    outs = self._array_jobs(strategy, func, jobs, t0)
            for job, out in zip(jobs, outs, strict=True):
                job.error = self._error(out)
        except Exception as exc:  # a strategy that cannot run here: recorded, never fatal
            for job in jobs:
                job.latency = None
                job.failure = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        cpu, moved = self.settle()
        link = self.bed.link_bytes()
        for job in jobs:
            job.cpu = (cpu - self.cpu0) / J
            job.moved = moved / J
            if link is not None and self.link0 is not None:
                job.link = sum(tx for tx, _ in link.values()) - sum(
                    tx for tx, _ in self.link0.values()
                )
                job.link /= J
        self.cpu0, self.link0 = cpu, link
        return jobs

    def _kwargs(self, strategy: str) -> dict[str, Any]:
        if strategy == "default":
            return {}
        if strategy == "auto":
            kw: dict[str, Any] = {"code": "auto", "n_coded": "auto", "wait": "auto"}
            if self.auto_error is not None:
                kw["error"] = self.auto_error
            return kw
        if strategy == "speculative":
            return {"code": "speculative"}
        return {"code": strategy, "n_coded": self.cell.N}

    def _array_jobs(self, strategy: str, func: Any, jobs: list[Job], t0: float) -> list[Any]:
        from distributed import as_completed

        client = self.client
        if strategy == "plain":
            sets = [client.map(func, self.blocks, pure=False) for _ in jobs]
            outs: list[Any] = [None] * len(jobs)
            owner = {f.key: j for j, fs in enumerate(sets) for f in fs}
            left = [len(fs) for fs in sets]
            for fut in as_completed([f for fs in sets for f in fs], timeout=JOB_TIMEOUT):
                j = owner[fut.key]
                left[j] -= 1
                if left[j] == 0:
                    jobs[j].latency = time.perf_counter() - t0
                    outs[j] = np.concatenate(client.gather(sets[j]))
            return outs
        handles = [
            dask_bacc.submit_coded(
                func,
                self.X,
                n_blocks=self.K,
                client=client,
                progress=False,
                **self._kwargs(strategy),
            )
            for _ in jobs
        ]
        outs = []
        for job, h in zip(jobs, handles, strict=True):
            outs.append(h.result(timeout=JOB_TIMEOUT))
            job.latency = time.perf_counter() - t0
            if strategy == "auto":
                job.chosen = _chosen(h.report)
        # results of concurrent jobs land in any order: each job's time is its own result
        return outs

    def _frame_jobs(self, strategy: str, func: Any, jobs: list[Job], t0: float) -> list[Any]:
        from distributed import wait

        client = self.client
        lazy = [self.frame.map_partitions(func, meta=self.meta) for _ in jobs]
        if strategy == "plain":
            outs = [client.persist(y) for y in lazy]
        elif strategy == "auto":
            outs = []
            for job in jobs:  # one after another, as map_coded (submit_coded + result) runs
                h = dask_bacc.submit_coded(
                    func, self.frame, client=client, progress=False, **self._kwargs(strategy)
                )
                outs.append(h.result())
                job.chosen = _chosen(h.report)
        else:
            kw = self._kwargs(strategy)
            if strategy in ("repetition", "speculative"):
                kw.pop("n_coded", None)  # the exact copies of the layer as it is
            outs = [client.persist(dask_bacc.coded(y, **kw)) for y in lazy]
        for job, out in zip(jobs, outs, strict=True):
            wait(out, timeout=JOB_TIMEOUT)
            job.latency = time.perf_counter() - t0
        return outs

    def _error(self, out: Any) -> float:
        if self.frame is not None:
            diff = (out[["u", "v"]] - self.exact) ** 2
            return float(np.sqrt(diff.sum().sum().compute())) / self.exact_norm
        out = np.asarray(out)
        if self.cell.workload == "inference":
            return float(1.0 - wl.class_agreement(out, self.exact_out))
        return float(np.linalg.norm(out - self.exact_out) / np.linalg.norm(self.exact_out))


def _chosen(report: Any) -> str | None:
    """What auto chose for a job, from its report (None: it ran the defaults)."""
    c = (report.auto or {}).get("chosen")
    return f"{c.get('code')} N={c.get('N')} k={c.get('k')}" if c else None


def run_cell(
    client: Any,
    bed: Any,
    cell: Cell,
    index: int,
    rounds: int,
    seed: int,
    strategies: tuple[str, ...],
    warmup: bool,
    progress: Any,
    auto_error: float | None = None,
) -> list[Job]:
    runner = _Runner(client, bed, cell, index, seed, auto_error=auto_error)
    order = np.random.default_rng([seed, 7, index])
    out: list[Job] = []
    job_no = 1000 * index
    for rnd in range(-1 if warmup else 0, rounds):
        job_no += 1
        for s in [strategies[i] for i in order.permutation(len(strategies))]:
            jobs = runner.run(s, rnd, job_no)
            if rnd >= 0:
                out += jobs
            progress.update(1)
    return out


def map_jobs(cells: list[Cell], rounds: int, strategies: tuple[str, ...]) -> int:
    """Progress steps of :func:`run_map`: one per strategy and round, a warm-up round per
    cluster included."""
    return (len(cells) * rounds + len({c.workers for c in cells})) * len(strategies)


def run_map(
    cells: list[Cell],
    rounds: int,
    seed: int,
    strategies: tuple[str, ...],
    args: argparse.Namespace,
    progress: Any,
    jobs: list[Job],
    after_cell: Any = None,
    auto_error: float | None = None,
) -> list[Job]:
    """Run ``cells`` (cell i's jobs numbered i), cells that need the same W on one cluster,
    started once (``args``: ``emulate_hosts``, ``bandwidth``); the jobs are appended to
    ``jobs``, and ``after_cell()`` is called after every cell."""
    by_w: dict[int, list[int]] = {}
    for i, c in enumerate(cells):
        by_w.setdefault(c.workers, []).append(i)
    for W, idx in sorted(by_w.items()):
        with _cluster(W, args) as (client, bed):
            for n, i in enumerate(idx):
                progress.set_postfix_str(cells[i].label)
                jobs += run_cell(
                    client,
                    bed,
                    cells[i],
                    i,
                    rounds,
                    seed,
                    strategies,
                    warmup=n == 0,  # imports and connections, once per cluster
                    progress=progress,
                    auto_error=auto_error,
                )
                if after_cell is not None:
                    after_cell()
    return jobs


# -- summary -------------------------------------------------------------------------------
def _q(values: list[float], q: float) -> float | None:
    return float(np.quantile(values, q)) if values else None


def summarize(
    cells: list[Cell], jobs: list[Job], strategies: tuple[str, ...]
) -> list[dict[str, Any]]:
    """Per cell and strategy: quantiles, errors, cost; ratios against plain Dask."""
    rows: list[dict[str, Any]] = []
    for i, cell in enumerate(cells):
        here = [j for j in jobs if j.cell == i]
        per: dict[str, dict[str, Any]] = {}
        for s in strategies:
            js = [j for j in here if j.strategy == s]
            ok = [j for j in js if j.latency is not None]
            lat = [j.latency for j in ok if j.latency is not None]
            err = [j.error for j in ok if j.error is not None]
            per[s] = {
                "jobs": len(js),
                "failed": len(js) - len(ok),
                "failure": next((j.failure for j in js if j.failure), None),
                "p50": _q(lat, 0.5),
                "p90": _q(lat, 0.9),
                "p99": _q(lat, 0.99),
                "err_median": _q(err, 0.5),
                "err_worst": max(err) if err else None,
                "cpu": _q([j.cpu for j in ok], 0.5),
                "moved": _q([j.moved for j in ok], 0.5),
                "link": _q([j.link for j in ok if j.link is not None], 0.5),
                "chosen": sorted({j.chosen for j in ok if j.chosen}),
            }
        plain = per.get("plain", {})
        for r in per.values():
            for key in ("p50", "p90", "p99", "cpu"):
                base = plain.get(key)
                r[f"{key}_vs_plain"] = r[key] / base if r.get(key) is not None and base else None
        rows.append({"cell": asdict(cell), "label": cell.label, "strategies": per})
    return rows


def best_of(row: dict[str, Any], budget: float, key: str) -> str | None:
    """The fastest strategy of a cell by ``key`` among those whose worst error is within
    ``budget`` (exact ones always are)."""
    ok = {
        s: r
        for s, r in row["strategies"].items()
        if r[key] is not None
        and not r["failed"]
        and (s in EXACT or (r["err_worst"] is not None and r["err_worst"] <= budget))
    }
    return min(ok, key=lambda s: ok[s][key]) if ok else None


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if x is None else fmt.format(x)


def tables(summary: list[dict[str, Any]], strategies: tuple[str, ...], budget: float) -> str:
    """Markdown: one table per workload, then the per-cell winners."""
    lines: list[str] = []
    for workload in dict.fromkeys(r["cell"]["workload"] for r in summary):
        lines += [f"### {workload}", ""]
        metric = "class disagreement" if workload == "inference" else "relative error"
        lines += [
            f"p50 / p90 as a fraction of plain Dask's; {metric} median (worst); thread-seconds "
            "of f per answer as a fraction of plain's; MB moved between workers per answer.",
            "",
        ]
        for r in (x for x in summary if x["cell"]["workload"] == workload):
            lines += [
                f"**{r['label']}** (plain p50 {_f(r['strategies']['plain']['p50'], '{:.3f}')} s)",
                "",
            ]
            lines += [
                "| strategy | p50 | p90 | p99 | error | CPU | MB moved |",
                "|---|---|---|---|---|---|---|",
            ]
            b50, b90 = best_of(r, budget, "p50"), best_of(r, budget, "p90")
            for s in strategies:
                x = r["strategies"][s]
                if x["failed"] == x["jobs"]:
                    lines.append(f"| {s} | failed: {x['failure']} | | | | | |")
                    continue
                err = (
                    "exact"
                    if s in EXACT
                    else f"{_f(x['err_median'], '{:.2g}')} ({_f(x['err_worst'], '{:.2g}')})"
                )
                p50 = _f(x["p50_vs_plain"]) + (" **best**" if s == b50 else "")
                p90 = _f(x["p90_vs_plain"]) + (" **best**" if s == b90 else "")
                moved = _f(x["moved"] / 1e6 if x["moved"] is not None else None, "{:.1f}")
                if x.get("link") is not None:
                    moved += f" (links {x['link'] / 1e6:.1f})"
                name = s + (f" ({', '.join(x['chosen'])})" if x["chosen"] else "")
                lines.append(
                    f"| {name} | {p50} | {p90} | {_f(x['p99_vs_plain'])} | {err} | "
                    f"{_f(x['cpu_vs_plain'])} | {moved} |"
                )
            lines.append("")
    return "\n".join(lines)


def default_check(summary: list[dict[str, Any]], budget: float) -> list[dict[str, Any]]:
    """Per cell: the default against the best strategy (p50, p90) and plain's p90."""
    out = []
    for r in summary:
        d = r["strategies"]["default"]
        row: dict[str, Any] = {"label": r["label"]}
        for key in ("p50", "p90"):
            best = best_of(r, budget, key)
            bv = r["strategies"][best][key] if best else None
            row[f"{key}_best"] = best
            row[f"{key}_vs_best"] = d[key] / bv if d[key] is not None and bv else None
        plain90 = r["strategies"]["plain"]["p90"]
        row["p90_vs_plain"] = d["p90"] / plain90 if d["p90"] is not None and plain90 else None
        row["err_worst"] = d["err_worst"]
        row["ok"] = (
            row["p50_vs_best"] is not None
            and row["p50_vs_best"] <= 1.25
            and row["p90_vs_best"] is not None
            and row["p90_vs_best"] <= 1.25
            and row["p90_vs_plain"] is not None
            and row["p90_vs_plain"] <= 1.0
            and (d["err_worst"] or 0.0) <= budget
        )
        out.append(row)
    return out


def candidates(summary: list[dict[str, Any]], budget: float) -> list[dict[str, Any]]:
    """Every strategy as a fixed default: its worst p50 and p90 against each cell's best,
    its worst p90 against plain's, its worst error, and the cells where it meets the
    targets (1.25x the best's p50 and p90, plain's p90, the error budget). Sorted by the
    worst of its two ratios: the first is the strategy that falls short least."""
    out = []
    for s in summary[0]["strategies"]:
        if s == "default":
            continue
        w50 = w90 = wplain = werr = 0.0
        met = 0
        for r in summary:
            x = r["strategies"][s]
            ratios = []
            for key in ("p50", "p90"):
                best = best_of(r, budget, key)
                bv = r["strategies"][best][key] if best else None
                ratios.append(x[key] / bv if x[key] is not None and bv else math.inf)
            plain90 = r["strategies"]["plain"]["p90"]
            vs_plain = x["p90"] / plain90 if x["p90"] is not None and plain90 else math.inf
            err = (
                0.0 if s in EXACT else (x["err_worst"] if x["err_worst"] is not None else math.inf)
            )
            w50, w90 = max(w50, ratios[0]), max(w90, ratios[1])
            wplain, werr = max(wplain, vs_plain), max(werr, err)
            met += ratios[0] <= 1.25 and ratios[1] <= 1.25 and vs_plain <= 1.0 and err <= budget
        out.append(
            {
                "strategy": s,
                "worst_p50": w50,
                "worst_p90": w90,
                "worst_vs_plain": wplain,
                "worst_error": werr,
                "cells_met": met,
                "cells": len(summary),
            }
        )
    return sorted(
        out, key=lambda c: (c["worst_error"] > budget, max(c["worst_p50"], c["worst_p90"]))
    )


def candidates_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| strategy as the default | worst p50 / best | worst p90 / best | worst p90 / plain | "
        "worst error | cells within all targets |",
        "|---|---|---|---|---|---|",
    ]
    for c in rows:
        lines.append(
            f"| {c['strategy']} | {_f(c['worst_p50'])} | {_f(c['worst_p90'])} | "
            f"{_f(c['worst_vs_plain'])} | "
            f"{'exact' if c['strategy'] in EXACT else _f(c['worst_error'], '{:.2g}')} | "
            f"{c['cells_met']} of {c['cells']} |"
        )
    return "\n".join(lines)


def default_table(check: list[dict[str, Any]]) -> str:
    lines = [
        "| cell | default p50 / best (best) | default p90 / best (best) | default p90 / plain | "
        "worst error | within targets |",
        "|---|---|---|---|---|---|",
    ]
    for r in check:
        lines.append(
            f"| {r['label']} | {_f(r['p50_vs_best'])} ({r['p50_best']}) | "
            f"{_f(r['p90_vs_best'])} ({r['p90_best']}) | {_f(r['p90_vs_plain'])} | "
            f"{_f(r['err_worst'], '{:.2g}')} | {'yes' if r['ok'] else '**no**'} |"
        )
    return "\n".join(lines)


def heatmaps(summary: list[dict[str, Any]], budget: float, stem: str) -> list[Path]:
    """One figure per workload: the winning strategy (by p90) per cell, coloured by its p90
    against plain Dask's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for workload in dict.fromkeys(r["cell"]["workload"] for r in summary):
        rows = [r for r in summary if r["cell"]["workload"] == workload]
        strategies = [s for s in STRATEGIES if s in rows[0]["strategies"]]
        grid = np.full((len(rows), len(strategies)), np.nan)
        for i, r in enumerate(rows):
            for j, s in enumerate(strategies):
                x = r["strategies"][s]
                within = s in EXACT or (x["err_worst"] is not None and x["err_worst"] <= budget)
                if x["p90_vs_plain"] is not None and within:
                    grid[i, j] = x["p90_vs_plain"]
        fig, ax = plt.subplots(figsize=(1.0 * len(strategies) + 3, 0.45 * len(rows) + 1.8))
        im = ax.imshow(np.log2(grid), cmap="RdYlGn_r", vmin=-3, vmax=3, aspect="auto")
        for i, r in enumerate(rows):
            best = best_of(r, budget, "p90")
            for j, s in enumerate(strategies):
                if np.isnan(grid[i, j]):
                    ax.text(
                        j,
                        i,
                        "err" if r["strategies"][s]["p90"] else "-",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="grey",
                    )
                    continue
                ax.text(
                    j,
                    i,
                    f"{grid[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    fontweight="bold" if s == best else "normal",
                )
                if s == best:
                    ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=2))
        ax.set_xticks(range(len(strategies)), strategies, rotation=35, ha="right", fontsize=8)
        ax.set_yticks(range(len(rows)), [r["label"] for r in rows], fontsize=8)
        ax.set_title(
            f"{workload}: p90 / plain Dask's p90 "
            f"(boxed: the best; 'err': worst error > {budget:g})",
            fontsize=9,
        )
        cb = fig.colorbar(im, ax=ax, shrink=0.8)
        cb.set_label("log2(p90 / plain)", fontsize=8)
        fig.tight_layout()
        path = DOCS / f"{stem}-{workload}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


# -- driver --------------------------------------------------------------------------------
def _git() -> str:
    with contextlib.suppress(Exception):
        return subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    return "?"


@contextlib.contextmanager
def _cluster(workers: int, args: argparse.Namespace) -> Iterator[tuple[Any, Any]]:
    from dask_bacc.bench.testbed import Testbed

    with (
        Testbed(
            workers, hosts=HOSTS, emulate_hosts=args.emulate_hosts, bandwidth=args.bandwidth
        ) as bed,
        bed.client() as client,
    ):
        yield client, bed


def main(argv: list[str] | None = None) -> int:
    # a SIGTERM (timeout, kill) unwinds like Ctrl-C, so the test bed's processes go too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help="the whole grid (16+ cores)")
    ap.add_argument("--frames", action="store_true", help="the DataFrame at 8M rows only")
    ap.add_argument("--rounds", type=int, default=10, help="jobs per strategy and cell (>= 10)")
    ap.add_argument("--cells", default=None, help="comma-separated cell numbers to run")
    ap.add_argument("--strategies", default=None, help="comma-separated (default: the mode's)")
    ap.add_argument("--emulate-hosts", action="store_true", help="hosts in network namespaces")
    ap.add_argument("--bandwidth", default=None, help="per-host link rate, e.g. 1gbit")
    ap.add_argument("--budget", type=float, default=None, help="error budget (bacc.warn-error)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="name of the outputs (default quick / full)")
    ap.add_argument("--from-json", default=None, help="re-make the tables and figures")
    args = ap.parse_args(argv)
    import dask.config

    budget = args.budget if args.budget is not None else dask.config.get("bacc.warn-error")
    stem = args.out or ("full" if args.full else "frames" if args.frames else "quick")
    RESULTS.mkdir(parents=True, exist_ok=True)
    DOCS.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text())
        cells = [Cell(**c) for c in data["cells"]]
        jobs = [Job(**j) for j in data["jobs"]]
        strategies = tuple(data["strategies"])
        meta = data["meta"]
    else:
        from tqdm.auto import tqdm

        chosen = args.strategies or ",".join(STRATEGIES if args.full else QUICK_STRATEGIES)
        strategies = tuple(s for s in chosen.split(",") if s)
        unknown = set(strategies) - set(STRATEGIES)
        if unknown or "plain" not in strategies or "default" not in strategies:
            ap.error(
                f"strategies from {STRATEGIES}, with plain and default; got {unknown or strategies}"
            )
        cells = full_cells() if args.full else frame_cells() if args.frames else quick_cells()
        if args.cells:
            cells = [cells[int(i)] for i in args.cells.split(",")]
        t_start = time.perf_counter()
        jobs = []
        meta = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": _git(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "dask_bacc": dask_bacc.__version__,
            "rounds": args.rounds,
            "emulated_hosts": bool(args.emulate_hosts),
            "bandwidth": args.bandwidth,
            "wall_seconds": None,
            "command": "python benchmarks/regimes.py "
            + " ".join(sys.argv[1:] if argv is None else argv),
            "default": {
                "code": dask.config.get("bacc.code"),
                "redundancy": dask.config.get("bacc.redundancy"),
            },
        }

        def save() -> None:  # after every cell: an interrupted run keeps what it measured
            meta["wall_seconds"] = round(time.perf_counter() - t_start, 1)
            record = {
                "meta": meta,
                "cells": [asdict(c) for c in cells],
                "strategies": list(strategies),
                "jobs": [asdict(j) for j in jobs],
            }
            (RESULTS / f"{stem}.json").write_text(json.dumps(record, indent=1))

        bar = tqdm(total=map_jobs(cells, args.rounds, strategies), desc="regimes", unit="job")
        run_map(cells, args.rounds, args.seed, strategies, args, bar, jobs, after_cell=save)
        bar.close()
    ran = sorted({j.cell for j in jobs})  # an interrupted run: the cells it finished
    cells = [cells[i] for i in ran]
    jobs = [replace(j, cell=ran.index(j.cell)) for j in jobs]
    summary = summarize(cells, jobs, strategies)
    check = default_check(summary, budget)
    figs = heatmaps(summary, budget, stem)
    text = [
        f"# Regime map ({stem})",
        "",
        f"Made by `{meta['command']}` at commit {meta['commit']} on {meta['date']}: "
        f"{meta['cpus']} cores, a `dask scheduler` and `dask worker` processes (one thread "
        f"each) over {HOSTS} hosts{' in network namespaces' if meta['emulated_hosts'] else ''}, "
        f"{meta['rounds']} rounds per cell (variants interleaved), "
        f"{meta['wall_seconds']} s in all. "
        f"Error budget {budget:g}. The default was `{meta['default']['code']}`.",
        "",
        "## The default against the best strategy of each cell",
        "",
        default_table(check),
        "",
        "## Every strategy as a fixed default",
        "",
        "Across the cells of this map (exact strategies first in ties; an approximate one "
        "whose worst error exceeds the budget sorts last):",
        "",
        candidates_table(candidates(summary, budget)),
        "",
        "## Every strategy, per cell",
        "",
        tables(summary, strategies, budget),
        "",
    ]
    for p in figs:
        text += [f"![{p.stem}]({p.name})", ""]
    (DOCS / f"{stem}.md").write_text("\n".join(text))
    (RESULTS / f"{stem}-summary.json").write_text(
        json.dumps({"summary": summary, "default": check}, indent=1)
    )
    print("\n".join(text[: 12 + len(check)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
