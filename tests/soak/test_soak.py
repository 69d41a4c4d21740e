"""Soak and chaos: hundreds of coded jobs on a multi-process cluster under churn.

A ``dask scheduler`` process (``--preload dask_bacc.diagnostics``) and single-threaded
``dask worker`` processes on 127.0.0.1, started by the fixture. Two clients, each driven by
several threads, submit coded jobs over every code (systematic spline, spline, Berrut,
systematic Berrut, repetition (the default), Lagrange with f = x**2 and degree 2, uncoded and
speculative) with 10% injected stragglers, while a controller SIGKILLs a worker every few
seconds and starts a new ``dask worker`` process in its place, and once stops the scheduler
and starts a new one on the same port.

Scheduler restart: the clients are kept and reconnect by themselves to the same address
(distributed's ``Client`` retries); the old workers (``--no-nanny``) exit when their
scheduler goes away and are replaced by new processes; the straggler plugin is injected
again on the new scheduler. Jobs in flight while the scheduler is down may fail with any
exception (counted by type); they must not hang.

A further thread runs ``CodedData`` rounds on the same cluster (issue 24 item 7):
``dask_bacc.encode`` (repetition or Berrut, K=2, N=4), three ``map`` calls whose ``f``
blocks on the worker holding share 0 until the round ends (a straggler still running ``f``
after its call decoded: held, then rerouted around), and ``release()``; right after the
release, while that straggler still blocks, no ``bacc-`` task of the round (its shares,
its calls' evals) may be left on the scheduler.

Checks: no job outlives its ``timeout=`` plus a hard bound; exact answers equal NumPy's;
approximate answers are finite with an error estimate; exceptions are documented ones
(``InsufficientResults`` for uncoded and speculative jobs that lost a worker); no
``bacc-`` task is left on the scheduler; scheduler and client memory stop growing after
warm-up (slope of RSS against jobs finished).

Modes: bounded (default; ``pytest -m soak tests/soak``) and full (``DASK_BACC_SOAK=full``).
``DASK_BACC_SOAK_OUT=<dir>`` writes the figures to ``<dir>/soak_<mode>.{json,md}``.
See docs/reliability.md.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import sys
import threading
import time
import uuid
import warnings
from collections import Counter
from pathlib import Path

import dask
import numpy as np
import psutil
import pytest
from distributed import Client, Event, get_worker

import dask_bacc
from dask_bacc.runtime import job as job_module
from dask_bacc.testing import Bimodal, inject_stragglers

sys.path.insert(0, os.path.dirname(__file__))
from cluster import ProcessCluster
from cluster import bacc_tasks as _bacc_tasks

_ENV = os.environ.get("DASK_BACC_SOAK", "").strip().lower()
MODE = "full" if _ENV == "full" else "bounded"

SETTINGS = {
    # >= 300 jobs and >= 10 kills in <= 5 minutes on 2 cores
    "bounded": dict(
        jobs=600,
        min_kills=10,
        kill_every=10.0,
        workers=6,
        threads_per_client=2,
        restart_after=0.15,
        max_seconds=270,
    ),
    "full": dict(
        jobs=1200,
        min_kills=100,
        kill_every=5.0,
        workers=6,
        threads_per_client=2,
        restart_after=0.1,
        max_seconds=1200,
    ),
}[MODE]

TIMEOUT = 20.0  # timeout= of every job
HARD = 30.0  # result() is bounded by TIMEOUT + HARD: beyond that a job counts as hung
STRAGGLERS = Bimodal(p=0.1, delay=2.0)
CODES = (
    "systematic-spline",
    "spline",
    "berrut",
    "systematic-berrut",
    "repetition",  # the default: submitted with code=None
    "lagrange",
    "uncoded",
    "speculative",
)
EXACT = {"repetition", "lagrange", "uncoded", "speculative"}


#: CodedData rounds (a thread of their own): codes, calls per round, how long f may block
#: on the straggler's worker (a safety net: the round sets the event when it ends), and
#: how long after release() the round's tasks may take to leave the scheduler
CODED_CODES = ("repetition", "berrut")
CODED_MAPS = 3
CODED_HOLD_MAX = 120.0
RELEASE_BOUND = 10.0


def held_tanh(block, slow: str, event: str):
    """``np.tanh``; on the worker ``slow`` it first blocks until the distributed Event
    ``event`` is set, as an f that cannot be stopped (it never asks ``cancelled()``)."""
    if get_worker().address == slow:
        Event(event).wait(timeout=CODED_HOLD_MAX)
    return np.tanh(block)


def _tasks_of(tokens, dask_scheduler=None) -> list[str]:
    """On the scheduler: the keys of its tasks named by any of ``tokens``."""
    return [str(k) for k in dask_scheduler.tasks if any(t in str(k) for t in tokens)]


# pickled by value: the workers and the scheduler cannot import this file
held_tanh.__module__ = _tasks_of.__module__ = "__main__"


def allowed(code: str, outcome: str, detail: str) -> bool:
    """The documented exceptions a job may raise outside a scheduler restart.

    ``InsufficientResults``: uncoded and speculative jobs have no redundancy for a block
    whose worker was killed; the other codes only when killed workers took more results
    than the code's redundancy (N is capped by the live workers, so N - K may be small,
    and repetition with N < 2K keeps a single copy of some blocks).
    ``ValueError`` before submitting when fewer workers are alive than the N coded
    tasks need (``bacc.oversubscribe="raise"``).
    """
    if outcome == "InsufficientResults":
        lost = " left " in detail or "lost with worker" in detail
        return code in ("uncoded", "speculative") or lost
    if outcome == "ValueError":  # placement, or the default N beyond the live workers
        return "but the cluster has" in detail and "worker" in detail
    return False


#: memory bounds after warm-up, MB per 1000 jobs. The full mode holds the issue's target
#: (5 MB over 1000 jobs). The bounded mode's window (~400 jobs, ~2 minutes, a 1-2 MB rise)
#: is too short to tell 4 from 6: two bounded runs of the same code measured 4.0 and 5.6.
#: Its bound, 10, still catches every leak this suite found (one span per job: 27 MB per
#: 1000 jobs; the clients' message log: 17).
SCHEDULER_SLOPE_MB = {"bounded": 10.0, "full": 5.0}[MODE]
CLIENT_SLOPE_MB = {"bounded": 10.0, "full": 5.0}[MODE]


def _job_input(n: int) -> tuple[str, int, object, np.ndarray, dict]:
    """Job ``n``: its code, K, f, input and code options (deterministic in n)."""
    rng = np.random.default_rng(n)
    code = CODES[n % len(CODES)]
    K = 2 if code == "lagrange" else int(rng.choice([2, 3]))
    t = np.linspace(0.0, 3.0, 24)[:, None]
    X = np.cos(t * (1.0 + np.arange(4)) + rng.uniform(0, 6, 4))
    if code == "lagrange":
        return code, K, np.square, X, {"degree": 2}
    return code, K, np.tanh, X, {}


class Soak:
    """Submitter threads, the chaos controller and the records of every job."""

    def __init__(self, cluster: ProcessCluster, clients: list[Client]):
        self.cluster = cluster
        self.clients = clients
        self.counter = itertools.count()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        # (n, code, outcome, t_submit, t_end, detail); outcomes: ok, wrong, bad-approx,
        # hang, or the exception's type name
        self.records: list[tuple] = []
        self.active: dict[int, tuple[int, float]] = {}  # thread id -> (job n, started)
        self.finished = 0
        self.answered = 0
        self.windows: list[tuple[float, float]] = []  # scheduler restarts (down .. ready)
        self.samples: list[tuple[float, int, int, int | None, int]] = []
        self.approx_errors: list[tuple[float, float]] = []  # (actual, estimated)
        self.warnings: Counter = Counter()
        self.plugin_after_restart: list[str] = []
        self.me = psutil.Process()
        # CodedData rounds: (n, code, outcome, t_start, t_end, detail), as the records
        self.coded_records: list[tuple] = []
        self.coded_maps = 0
        self.coded_held = 0  # rounds whose straggler was still held when released

    # -- one job -----------------------------------------------------------------------
    def run_one(self, client: Client, n: int) -> None:
        code, K, f, X, opts = _job_input(n)
        t0 = time.monotonic()
        self.active[threading.get_ident()] = (n, t0)
        outcome, detail = "ok", ""
        try:
            job = dask_bacc.submit_coded(
                f,
                X,
                code=None if code == "repetition" else code,
                n_blocks=K,
                timeout=TIMEOUT,
                client=client,
                code_options=opts or None,
                progress=False,
            )
            try:
                out = job.result(timeout=TIMEOUT + HARD)
            except TimeoutError:
                if time.monotonic() - t0 >= TIMEOUT + HARD - 1:
                    outcome = "hang"
                    detail = f"result() still waiting after {TIMEOUT + HARD}s; " + _where(job)
                    with contextlib.suppress(Exception):
                        job.cancel()
                else:
                    raise
            else:
                outcome, detail = self.check(code, f, X, out, job.report)
        except Exception as exc:
            outcome, detail = type(exc).__name__, str(exc)[:300]
        t1 = time.monotonic()
        if t1 - t0 > TIMEOUT + HARD + 5 and outcome != "hang":
            outcome, detail = "hang", f"took {t1 - t0:.1f}s ({outcome}: {detail[:100]})"
        with self.lock:
            self.records.append((n, code, outcome, t0, t1, detail))
            self.finished += 1
            self.answered += outcome == "ok"
        self.active.pop(threading.get_ident(), None)

    def check(self, code, f, X, out, report) -> tuple[str, str]:
        expected = f(X)
        out = np.asarray(out)
        if out.shape != expected.shape:
            return "wrong", f"shape {out.shape} != {expected.shape}"
        if code in EXACT:
            if not np.allclose(out, expected):
                return "wrong", f"max abs error {np.max(np.abs(out - expected)):.3g}"
            return "ok", ""
        est = report.error_estimate
        if not np.all(np.isfinite(out)):
            return "bad-approx", "non-finite values"
        if est is None or not np.isfinite(est):
            if any("could not be estimated" in w for w in report.warnings):
                return "ok", ""  # said so: too few results (or sketches) to estimate
            return "bad-approx", (
                f"error_estimate={est} ({report.estimate_method}; decoded on {report.trigger} "
                f"from {len(report.returned)} results, failed {len(report.failed)})"
            )
        actual = float(np.linalg.norm(out - expected) / np.linalg.norm(expected))
        with self.lock:
            self.approx_errors.append((actual, float(est)))
        return "ok", ""

    def submitter(self, client: Client) -> None:
        while not self.stop.is_set():
            n = next(self.counter)
            before = self.answered
            self.run_one(client, n)
            if self.answered == before:
                time.sleep(1.0)  # back off after a failure (e.g. while the scheduler is down)

    # -- CodedData rounds ----------------------------------------------------------------
    def run_coded(self, client: Client, n: int) -> None:
        """Round ``n``: encode, CODED_MAPS calls with a straggler that keeps running f,
        release, then no task of the round may be left on the scheduler."""
        code = CODED_CODES[n % len(CODED_CODES)]
        rng = np.random.default_rng(10_000 + n)
        X = np.cos(np.linspace(0.0, 3.0, 16)[:, None] * (1.0 + np.arange(3)) + rng.uniform(0, 6, 3))
        event = f"bacc-soak-straggler-{uuid.uuid4().hex}"
        t0 = time.monotonic()
        outcome, detail = "ok", ""
        coded = None
        try:
            coded = dask_bacc.encode(X, code=code, n_blocks=2, n_coded=4, client=client)
            tokens = [coded.token]
            for _ in range(CODED_MAPS):
                job = coded.submit(held_tanh, coded.workers[0], event, wait=3, timeout=TIMEOUT)
                tokens.append(job.token)
                out = np.asarray(job.result(timeout=TIMEOUT + HARD))
                self.coded_maps += 1
                if code in EXACT and not np.allclose(out, np.tanh(X)):
                    outcome, detail = (
                        "wrong",
                        f"max abs error {np.max(np.abs(out - np.tanh(X))):.3g}",
                    )
                elif not np.all(np.isfinite(out)):
                    outcome, detail = "bad-approx", "non-finite values"
            self.coded_held += bool(coded._held)
            coded.release()
            # the check: the held straggler still blocks in f (its event is not set yet)
            left = client.run_on_scheduler(_tasks_of, tokens)
            end = time.monotonic() + RELEASE_BOUND
            while left and time.monotonic() < end:
                time.sleep(0.2)
                left = client.run_on_scheduler(_tasks_of, tokens)
            if left and outcome == "ok":
                outcome, detail = "leak", f"{RELEASE_BOUND}s after release(): {left[:4]}"
        except Exception as exc:
            outcome, detail = type(exc).__name__, str(exc)[:300]
            if coded is not None:  # as a user would: a failed call does not keep the data
                with contextlib.suppress(Exception):
                    coded.release()
        finally:
            with contextlib.suppress(Exception):
                Event(event, client=client).set()  # the straggler's f returns
        with self.lock:
            self.coded_records.append((n, code, outcome, t0, time.monotonic(), detail))

    def coded_submitter(self, client: Client) -> None:
        for n in itertools.count():
            if self.stop.is_set():
                break
            self.run_coded(client, n)
            if self.coded_records[-1][2] != "ok":
                time.sleep(1.0)  # back off after a failure (e.g. while the scheduler is down)

    # -- chaos -------------------------------------------------------------------------
    def sample(self) -> None:
        self.samples.append(
            (
                time.monotonic(),
                self.finished,
                self.cluster.scheduler_incarnation,
                self.cluster.scheduler_rss(),
                self.me.memory_info().rss,
            )
        )

    def restart_scheduler(self) -> None:
        down = time.monotonic()
        self.cluster.restart_scheduler()
        # the old workers (no nanny) exit once their scheduler is gone (one that was still
        # starting may register with the new one instead): replace them as they exit
        end = time.monotonic() + 5
        while time.monotonic() < end:
            self.cluster.replace_dead()
            if not set(self.cluster.live_workers()) & self._before_restart:
                break
            time.sleep(0.2)
        self.cluster.replace_dead()
        client = self.clients[0]
        client.wait_for_workers(self.cluster.n_workers - 1, timeout=120)
        inject_stragglers(STRAGGLERS, seed=1, client=client)
        self.plugin_after_restart = sorted(
            client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins))
        )
        self.windows.append((down, time.monotonic()))

    def controller(self, settings: dict) -> None:
        start = time.monotonic()
        last_kill = start
        restarted = False
        rnd = random.Random(0)
        while True:
            now = time.monotonic()
            self.sample()
            enough = (
                self.answered >= settings["jobs"] and self.cluster.kills >= settings["min_kills"]
            )
            if enough or now - start > settings["max_seconds"]:
                break
            if not restarted and self.answered >= settings["restart_after"] * settings["jobs"]:
                self._before_restart = set(self.cluster.workers)
                self.restart_scheduler()
                restarted = True
                last_kill = time.monotonic()
                continue
            if now - last_kill >= settings["kill_every"]:
                live = self.cluster.live_workers()
                if len(live) >= self.cluster.n_workers:
                    self.cluster.kill_worker(rnd.choice(live))
                    last_kill = now
            self.cluster.replace_dead()
            time.sleep(0.5)
        self.stop.set()


def _where(job) -> str:
    """Where a hung job's loop is waiting, and what its report says."""
    rep, d = job.report, job.decider
    frames = []
    coro = job._task.get_coro() if job._task is not None and not job._task.done() else None
    while coro is not None and len(frames) < 20:  # the chain of awaits, innermost last
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            frames.append(repr(coro)[:80])
            break
        frames.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    stack = " > ".join(frames)
    return (
        f"token={job.token} code={rep.code.get('name')} K={rep.K} N={rep.N} status={rep.status}"
        f" trigger={rep.trigger} usable={sorted(d.usable)} pending={sorted(d.pending)}"
        f" failed={rep.failed} decoding={d.decoding} stack: {stack}"
    )


def _slope(samples: list[tuple[int, int]]) -> float | None:
    """Least-squares slope of RSS against jobs finished, in MB per 1000 jobs."""
    if len(samples) < 5 or samples[-1][0] - samples[0][0] < 20:
        return None
    x = np.array([s[0] for s in samples], float)
    y = np.array([s[1] for s in samples], float)
    return float(np.polyfit(x, y, 1)[0] * 1000 / 2**20)


@pytest.fixture
def soak_cluster(tmp_path):
    cluster = ProcessCluster(tmp_path, SETTINGS["workers"])
    try:
        cluster.start_scheduler()
        cluster.start_workers()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def client_bounds():
    """The clients' bounded buffers fill during warm-up too (as ``cluster.SMALL_BOUNDS``
    for the scheduler): each batched comm keeps its last ``low-level-log-length``
    messages, 1000 by default, graphs with their data included."""
    with dask.config.set({"distributed.admin.low-level-log-length": 50}):
        yield


@pytest.mark.soak
@pytest.mark.timeout(SETTINGS["max_seconds"] + 400)
def test_soak_coded_jobs_under_kills_stragglers_and_a_scheduler_restart(
    soak_cluster, client_bounds, tmp_path
):
    cluster, settings = soak_cluster, SETTINGS
    wall0 = time.monotonic()
    clients = [Client(cluster.address, timeout=60, set_as_default=False) for _ in range(2)]
    try:
        clients[0].wait_for_workers(cluster.n_workers, timeout=120)
        inject_stragglers(STRAGGLERS, seed=0, client=clients[0])
        soak = Soak(cluster, clients)
        with warnings.catch_warnings():
            warnings.simplefilter("always")

            def count(message, category, *args, **kwargs):
                soak.warnings[category.__name__] += 1

            warnings.showwarning = count
            threads = [
                threading.Thread(target=soak.submitter, args=(c,), daemon=True)
                for c in clients
                for _ in range(settings["threads_per_client"])
            ]
            threads.append(
                threading.Thread(target=soak.coded_submitter, args=(clients[1],), daemon=True)
            )
            for t in threads:
                t.start()
            soak.controller(settings)
            deadline = time.monotonic() + TIMEOUT + HARD + 30
            for t in threads:
                t.join(timeout=max(0.1, deadline - time.monotonic()))
            stuck = [soak.active.get(t.ident) for t in threads if t.is_alive()]
        run_seconds = time.monotonic() - wall0

        # nothing left behind: poll the scheduler until the held stragglers end, and the
        # job loops until their clean-ups (a round trip each, after the last job's answer)
        # have run; what is still there after 30 s was left behind
        leaked: list[str] = []
        end = time.monotonic() + 30
        while True:
            leaked = clients[0].run_on_scheduler(_bacc_tasks)
            loops_left = len(job_module._running)
            if (not leaked and not loops_left) or time.monotonic() > end:
                break
            time.sleep(0.5)
        client_futures = [str(k) for c in clients for k in list(c.futures) if "bacc-" in str(k)]
    finally:
        for c in clients:
            with contextlib.suppress(Exception):
                c.close(timeout=30)

    summary = _summarize(soak, cluster, settings, stuck, leaked, client_futures, loops_left)
    summary["wall_seconds"] = round(time.monotonic() - wall0, 1)
    summary["run_seconds"] = round(run_seconds, 1)
    _write(summary)
    print("\n" + json.dumps({k: v for k, v in summary.items() if k != "samples"}, indent=1))

    assert summary["jobs"] >= settings["jobs"], summary["jobs"]
    assert summary["kills"] >= settings["min_kills"], summary["kills"]
    assert summary["hangs"] == 0, summary["hang_details"]
    assert summary["wrong_exact"] == 0, summary["wrong_details"]
    assert summary["bad_approximate"] == 0, summary["bad_approx_details"]
    assert summary["unexpected_errors"] == 0, summary["unexpected_details"]
    assert not leaked and not client_futures and loops_left == 0, (leaked[:5], client_futures[:5])
    coded = summary["coded_data"]
    assert coded["rounds"] >= 5 and coded["held_at_release"] >= 1, coded
    assert coded["leaks_after_release"] == 0, coded["details"]
    assert coded["wrong"] == 0 and coded["unexpected_errors"] == 0, coded["details"]
    for who, bound in (("scheduler", SCHEDULER_SLOPE_MB), ("client", CLIENT_SLOPE_MB)):
        slope = summary[f"{who}_slope_mb_per_1000_jobs"]
        assert slope is not None, f"too few {who} memory samples after warm-up"
        assert slope <= bound, f"{who} RSS grows {slope:.2f} MB per 1000 jobs (bound {bound})"


def _in_window(rec: tuple, windows: list[tuple[float, float]]) -> bool:
    _, _, _, t0, t1, _ = rec
    return any(t0 <= hi + 1.0 and t1 >= lo for lo, hi in windows)


def _summarize(soak, cluster, settings, stuck, leaked, client_futures, loops_left) -> dict:
    recs = soak.records
    by_code: dict[str, Counter] = {code: Counter() for code in CODES}
    unexpected, hangs, wrong, bad = [], [], [], []
    window_outcomes: Counter = Counter()
    for rec in recs:
        _, code, outcome, _, _, detail = rec
        by_code[code][outcome] += 1
        in_window = _in_window(rec, soak.windows)
        if outcome == "hang":
            hangs.append(rec)
        elif outcome == "wrong":
            wrong.append(rec)
        elif outcome == "bad-approx":
            bad.append(rec)
        elif outcome != "ok":
            if in_window:
                window_outcomes[outcome] += 1
            elif not allowed(code, outcome, detail):
                unexpected.append(rec)
    for entry in stuck:
        hangs.append(("stuck thread", entry))
    coded_outcomes: Counter = Counter()
    coded_bad: dict[str, list] = {"leak": [], "wrong": [], "unexpected": []}
    for rec in soak.coded_records:
        _, code, outcome, _, _, detail = rec
        coded_outcomes[outcome] += 1
        if outcome in ("ok", "bad-approx") or _in_window(rec, soak.windows):
            continue  # a restart takes the round's tasks with the scheduler
        if outcome in ("leak", "wrong"):
            coded_bad[outcome].append(rec)
        elif not allowed(code, outcome, detail):
            coded_bad["unexpected"].append(rec)

    # memory: the scheduler over the last incarnation after its warm-up (its first 30% of
    # jobs), the client over everything after the first 25% of jobs
    last = cluster.scheduler_incarnation
    after_restart = [s for s in soak.samples if s[2] == last and s[3] is not None]
    sched, sched_range = [], None
    if after_restart:
        j0, j1 = after_restart[0][1], after_restart[-1][1]
        warm = j0 + 0.3 * (j1 - j0)
        sched = [(s[1], s[3]) for s in after_restart if s[1] >= warm]
        sched_range = [int(warm), j1]
    total = soak.finished
    client = [(s[1], s[4]) for s in soak.samples if s[1] >= 0.25 * total]
    approx = np.array(soak.approx_errors) if soak.approx_errors else np.zeros((0, 2))
    durations = [r[4] - r[3] for r in recs]

    def rows(xs, k=5):
        return [list(x) if isinstance(x, tuple) else x for x in xs[:k]]

    return {
        "mode": MODE,
        "settings": settings,
        "timeout": TIMEOUT,
        "hard_bound": TIMEOUT + HARD,
        "stragglers": repr(STRAGGLERS),
        "workers": cluster.n_workers,
        "clients": len(soak.clients),
        "threads": len(soak.clients) * settings["threads_per_client"],
        "jobs": len(recs),
        "answered": sum(1 for r in recs if r[2] == "ok"),
        "kills": cluster.kills,
        "workers_started": cluster._next_worker,
        "scheduler_restarts": len(soak.windows),
        "restart_windows_s": [round(hi - lo, 1) for lo, hi in soak.windows],
        "worker_plugins_after_restart": soak.plugin_after_restart,
        "by_code": {c: dict(v) for c, v in by_code.items()},
        "hangs": len(hangs),
        "hang_details": rows(hangs),
        "wrong_exact": len(wrong),
        "wrong_details": rows(wrong),
        "bad_approximate": len(bad),
        "bad_approx_details": rows(bad),
        "unexpected_errors": len(unexpected),
        "unexpected_details": rows(unexpected),
        "outcomes_in_restart_window": dict(window_outcomes),
        "insufficient_results": sum(1 for r in recs if r[2] == "InsufficientResults"),
        "leaked_bacc_tasks": len(leaked),
        "leaked_client_futures": len(client_futures),
        "job_loops_left": loops_left,
        "coded_data": {
            "rounds": len(soak.coded_records),
            "maps": soak.coded_maps,
            "held_at_release": soak.coded_held,
            "outcomes": dict(coded_outcomes),
            "leaks_after_release": len(coded_bad["leak"]),
            "wrong": len(coded_bad["wrong"]),
            "unexpected_errors": len(coded_bad["unexpected"]),
            "details": rows(coded_bad["leak"] + coded_bad["wrong"] + coded_bad["unexpected"]),
        },
        "max_job_seconds": round(max(durations), 2) if durations else None,
        "median_job_seconds": round(float(np.median(durations)), 3) if durations else None,
        "approx_actual_error_median": float(np.median(approx[:, 0])) if len(approx) else None,
        "approx_actual_over_3x_estimate": int(np.sum(approx[:, 0] > 3 * approx[:, 1] + 1e-12)),
        "approx_jobs": len(approx),
        "warnings": dict(soak.warnings),
        "scheduler_slope_mb_per_1000_jobs": _slope(sched),
        "scheduler_slope_jobs": sched_range,
        "scheduler_rss_mb": [round(s[1] / 2**20, 1) for s in (sched[0], sched[-1])]
        if sched
        else None,
        "client_slope_mb_per_1000_jobs": _slope(client),
        "client_rss_mb": [round(s[1] / 2**20, 1) for s in (client[0], client[-1])]
        if client
        else None,
        "samples": [
            [round(t - soak.samples[0][0], 1), j, inc, s, c] for t, j, inc, s, c in soak.samples
        ],
    }


def _write(summary: dict) -> None:
    out = os.environ.get("DASK_BACC_SOAK_OUT")
    if not out:
        return
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    stem = path / f"soak_{summary['mode']}"
    stem.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = [
        f"# Soak run ({summary['mode']})",
        "",
        "| figure | value |",
        "|---|---|",
    ]
    for key in (
        "jobs",
        "answered",
        "kills",
        "workers_started",
        "scheduler_restarts",
        "restart_windows_s",
        "hangs",
        "wrong_exact",
        "bad_approximate",
        "unexpected_errors",
        "insufficient_results",
        "outcomes_in_restart_window",
        "leaked_bacc_tasks",
        "leaked_client_futures",
        "coded_data",
        "max_job_seconds",
        "median_job_seconds",
        "scheduler_slope_mb_per_1000_jobs",
        "scheduler_slope_jobs",
        "scheduler_rss_mb",
        "client_slope_mb_per_1000_jobs",
        "client_rss_mb",
        "worker_plugins_after_restart",
        "warnings",
        "run_seconds",
        "wall_seconds",
    ):
        value = summary.get(key)
        if isinstance(value, float):
            value = f"{value:.3g}"
        lines.append(f"| {key} | {value} |")
    lines += ["", "Outcomes by code:", "", "| code | outcomes |", "|---|---|"]
    lines += [f"| {c} | {v} |" for c, v in summary["by_code"].items()]
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
