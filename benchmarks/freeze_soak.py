"""Freeze soak: coded jobs on a multi-process cluster whose workers are frozen at random.

Run with ``python benchmarks/freeze_soak.py`` (1000 jobs, 6 workers; about 10-20 minutes
on 2 cores), or ``--jobs 60`` for a quick look. Issue 23's target: no new hang in 1,000
jobs with random frozen workers (SIGSTOP/SIGCONT) in a multi-process cluster.

The script starts a ``dask scheduler`` process and ``--workers`` ``dask worker`` processes
(``--nthreads 1 --nworkers 1 --no-nanny``, so the process signalled is the worker itself),
all on 127.0.0.1, and submits coded jobs one after another (small NumPy inputs, K in
2..4, the codes in turn: the default systematic spline, Berrut, repetition, speculative,
Lagrange with the polynomial ``f = x**2``), while a chaos thread SIGSTOPs a random worker
for a random 0.2-3 s and then SIGCONTs it, at most ``--max-frozen`` at a time.

Every ``--fresh-client-every`` jobs (and at the start) a client's first coded job runs
while a worker is frozen: the chaos pauses, every worker is resumed, dask-bacc's worker
plugin is unregistered (the scheduler then looks like a fresh cluster's, so the new
client's first job registers it again), one worker is frozen and held frozen until that
job ends, a new ``Client`` is created and submits a job with the systematic spline, which
needs no result from the frozen worker. Before the fix of ``ensure_worker_plugin``
(``bacc.plugin-timeout``) that job hung until the worker woke up.

Each job is bounded by ``--timeout`` seconds (``submit_coded`` plus ``job.result``); one
that takes longer is a HANG, reported with where its loop waits and its report. An
exception is counted by type (not a hang). Exact codes' answers are checked against
NumPy, approximate ones for finiteness. A summary table is printed and the figures are
written to ``benchmarks/results/freeze_soak/`` as JSON. All the processes started are
resumed (SIGCONT) and stopped on exit, whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from distributed import Client

import dask_bacc

RESULTS = Path(__file__).resolve().parent / "results" / "freeze_soak"
CODES = ("systematic-spline", "berrut", "repetition", "speculative", "lagrange")
EXACT = {"repetition", "speculative", "lagrange"}
PLUGIN_NAME = "bacc-worker"  # dask_bacc.runtime.worker.PLUGIN_NAME


# -- the cluster ---------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class FreezableCluster:
    """A ``dask scheduler`` and ``dask worker`` processes on loopback that can be frozen.

    Parameters
    ----------
    n_workers : int
        Worker processes, one thread each.
    logdir : Path
        Where each process's output goes.
    """

    def __init__(self, n_workers: int, logdir: Path):
        self.n_workers = n_workers
        self.logdir = Path(logdir)
        self.port = _free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.frozen: dict[str, float] = {}  # name -> monotonic time it is due to resume
        self.lock = threading.Lock()
        self.freezes = 0
        self.frozen_seconds = 0.0
        self._frozen_at: dict[str, float] = {}
        #: workers the scheduler listed at the end of the run (None: not asked)
        self.workers_at_end: int | None = None
        #: worker processes that had exited by themselves when the run ended
        self.exited_before_close: list[str] = []

    def _dask(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.logdir / log, "wb") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "dask", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # a terminal's Ctrl-C reaches only this script
            )

    def start(self, timeout: float = 60.0) -> None:
        """Start the scheduler, then the workers (returns once the port is open)."""
        self.scheduler = self._dask(
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dashboard-address",
            "127.0.0.1:0",
            log="scheduler.log",
        )
        end = time.monotonic() + timeout
        while not _port_open(self.port):
            if self.scheduler.poll() is not None:
                raise RuntimeError(f"the scheduler exited with {self.scheduler.returncode}")
            if time.monotonic() > end:
                raise TimeoutError("the scheduler did not open its port")
            time.sleep(0.1)
        for i in range(self.n_workers):
            name = f"freeze-w{i}"
            self.workers[name] = self._dask(
                "worker",
                self.address,
                "--nthreads",
                "1",
                "--nworkers",
                "1",
                "--no-nanny",
                "--host",
                "127.0.0.1",
                "--name",
                name,
                "--death-timeout",
                "60",
                log=f"worker-{name}.log",
            )

    def freeze(self, name: str, seconds: float) -> None:
        """SIGSTOP worker ``name``; :meth:`resume_due` resumes it ``seconds`` from now."""
        with self.lock:
            p = self.workers[name]
            if name in self.frozen or p.poll() is not None:
                return
            os.kill(p.pid, signal.SIGSTOP)
            now = time.monotonic()
            self.frozen[name] = now + seconds
            self._frozen_at[name] = now
            self.freezes += 1

    def resume(self, name: str) -> None:
        """SIGCONT worker ``name`` (harmless if it is not frozen)."""
        with self.lock:
            p = self.workers[name]
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGCONT)
            if self.frozen.pop(name, None) is not None:
                self.frozen_seconds += time.monotonic() - self._frozen_at.pop(name)

    def resume_due(self) -> None:
        """Resume the workers whose freeze is over."""
        now = time.monotonic()
        for name, until in list(self.frozen.items()):
            if until <= now:
                self.resume(name)

    def resume_all(self) -> None:
        """SIGCONT every worker, frozen or not (so that none is left stopped)."""
        for name in list(self.workers):
            self.resume(name)

    def close(self) -> None:
        """Resume, then stop every process started (SIGTERM, then SIGKILL)."""
        self.resume_all()
        self.exited_before_close = sorted(
            n for n, p in self.workers.items() if p.poll() is not None
        )
        procs = list(self.workers.values())
        groups = [procs, [self.scheduler] if self.scheduler is not None else []]
        for group in groups:  # workers first: a worker without a scheduler keeps retrying
            for p in group:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(p.pid, signal.SIGCONT)
                    p.terminate()
            for p in group:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


class Chaos(threading.Thread):
    """Freeze a random worker for a random time, at most ``max_frozen`` at a time.

    Parameters
    ----------
    cluster : FreezableCluster
        The cluster whose workers it freezes.
    rng : random.Random
        Its source of randomness.
    max_frozen : int
        Most workers frozen at once.
    freeze : tuple of float
        Shortest and longest freeze, in seconds.
    gap : tuple of float
        Shortest and longest time between two freezes, in seconds.
    """

    def __init__(
        self,
        cluster: FreezableCluster,
        rng: random.Random,
        max_frozen: int = 2,
        freeze: tuple[float, float] = (0.2, 3.0),
        gap: tuple[float, float] = (0.1, 1.0),
    ):
        super().__init__(daemon=True, name="freeze-chaos")
        self.cluster = cluster
        self.rng = rng
        self.max_frozen = max_frozen
        self.freeze_range = freeze
        self.gap = gap
        self.stop = threading.Event()
        self.active = threading.Event()  # cleared: paused
        self.idle = threading.Event()  # set while paused and doing nothing
        self.active.set()

    def run(self) -> None:
        cl = self.cluster
        next_freeze = time.monotonic() + self.rng.uniform(*self.gap)
        while not self.stop.is_set():
            cl.resume_due()  # also ends a held freeze at its safety bound
            if not self.active.is_set():
                self.idle.set()
                time.sleep(0.05)
                continue
            self.idle.clear()
            now = time.monotonic()
            if now >= next_freeze:
                candidates = [n for n in cl.workers if n not in cl.frozen]
                if len(cl.frozen) < self.max_frozen and candidates:
                    cl.freeze(self.rng.choice(candidates), self.rng.uniform(*self.freeze_range))
                next_freeze = now + self.rng.uniform(*self.gap)
            time.sleep(0.02)

    @contextlib.contextmanager
    def paused(self) -> Any:
        """No random freeze in the block, and every worker resumed on entry."""
        self.active.clear()
        self.idle.wait(timeout=5)
        self.cluster.resume_all()
        try:
            yield
        finally:
            self.idle.clear()
            self.active.set()


# -- the jobs ------------------------------------------------------------------------------
def job_input(
    n: int, seed: int, workers: int, first: bool = False
) -> tuple[str, int, Any, np.ndarray, dict]:
    """Job ``n``: its code, K, f, input and code options (deterministic in n and seed).

    K is 2 to 4, and below ``workers`` (a code needs at least K + 1 tasks, one per
    worker). A client's first job (``first``) uses the systematic spline, which decodes
    without the result of the worker frozen during it (a code that needs every block's
    own copy, as repetition with N capped below 2K by the workers, or plain Dask, waits for
    that worker as long as it is frozen: the whole job, here).
    """
    rng = np.random.default_rng([seed, n])
    code = "systematic-spline" if first else CODES[n % len(CODES)]
    K = 2 if code == "lagrange" else int(rng.integers(2, max(2, min(4, workers - 1)) + 1))
    t = np.linspace(0.0, 3.0, 12 * K)[:, None]
    X = np.cos(t * (1.0 + np.arange(3)) + rng.uniform(0, 6, 3))
    if code == "lagrange":
        return code, K, np.square, X, {"degree": 2}
    return code, K, np.tanh, X, {}


def where(job: Any) -> str:
    """Where a hung job's loop is waiting, and what its report says."""
    rep, d = job.report, job.decider
    frames = []
    task = getattr(job, "_task", None)
    coro = task.get_coro() if task is not None and not task.done() else None
    while coro is not None and len(frames) < 20:  # the chain of awaits, innermost last
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is None:
            frames.append(repr(coro)[:80])
            break
        frames.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return (
        f"token={job.token} code={rep.code.get('name')} K={rep.K} N={rep.N} "
        f"status={rep.status} trigger={rep.trigger} usable={sorted(d.usable)} "
        f"pending={sorted(d.pending)} failed={rep.failed} decoding={d.decoding} "
        f"workers={rep.workers} stack: {' > '.join(frames) or '(loop not running)'}"
    )


def run_job(client: Client, n: int, args: argparse.Namespace, first: bool) -> dict[str, Any]:
    """Submit job ``n`` and wait for it at most ``args.timeout`` seconds in all; its record."""
    code, K, f, X, opts = job_input(n, args.seed, args.workers, first)
    bound = args.timeout
    rec: dict[str, Any] = {"n": n, "code": code, "K": K, "first_job_of_client": first}
    t0 = time.monotonic()
    job = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            job = dask_bacc.submit_coded(
                f,
                X,
                code=code,
                n_blocks=K,
                timeout=args.job_timeout,
                client=client,
                code_options=opts or None,
                progress=False,
            )
            rec["submit_seconds"] = round(time.monotonic() - t0, 4)
            left = bound - rec["submit_seconds"]
            if left <= 0:
                raise TimeoutError(f"submit_coded alone took {rec['submit_seconds']:.1f} s")
            out = np.asarray(job.result(timeout=left))
        rec["warnings"] = sorted({type(w.message).__name__ for w in caught})
        expected = f(X)
        if out.shape != expected.shape:
            rec["outcome"], rec["detail"] = "wrong", f"shape {out.shape} != {expected.shape}"
        elif code in EXACT and not np.allclose(out, expected):
            rec["outcome"] = "wrong"
            rec["detail"] = f"max abs error {np.max(np.abs(out - expected)):.3g}"
        elif not np.all(np.isfinite(out)):
            rec["outcome"], rec["detail"] = "wrong", "non-finite values"
        else:
            rec["outcome"] = "ok"
            rec["trigger"] = job.report.trigger
    except TimeoutError as exc:
        if time.monotonic() - t0 >= bound - 1:
            rec["outcome"] = "HANG"
            rec["detail"] = f"not done after {bound:.0f} s: " + (
                str(exc) if "submit_coded" in str(exc) or job is None else where(job)
            )
            if job is not None:
                with contextlib.suppress(Exception):
                    job.cancel()
        else:
            rec["outcome"], rec["detail"] = type(exc).__name__, str(exc)[:300]
    except Exception as exc:
        rec["outcome"], rec["detail"] = type(exc).__name__, str(exc)[:300]
    rec["seconds"] = round(time.monotonic() - t0, 4)
    if rec["seconds"] > bound + 5 and rec["outcome"] != "HANG":
        rec["detail"] = f"took {rec['seconds']:.1f} s ({rec['outcome']}: {rec.get('detail', '')})"
        rec["outcome"] = "HANG"
    return rec


def _plugins(dask_scheduler: Any = None) -> list[str]:
    return sorted(dask_scheduler.worker_plugins)


def fresh_client_round(
    cluster: FreezableCluster,
    chaos: Chaos,
    old: Client | None,
    rng: random.Random,
    n: int,
    args: argparse.Namespace,
) -> tuple[Client, dict[str, Any]]:
    """A new client's first coded job while one worker is frozen (see the module doc)."""
    with chaos.paused():
        # the previous job's clean-up (its "bacc-done" messages to the workers) runs after
        # its result was handed over: let it end before the plugin's teardown, or a worker
        # may get the message after its handler is gone and drop its scheduler connection
        time.sleep(1.0)
        if old is not None:
            with contextlib.suppress(Exception):  # as on a fresh cluster: no worker plugin
                if PLUGIN_NAME in old.run_on_scheduler(_plugins):
                    old.unregister_worker_plugin(PLUGIN_NAME)
            with contextlib.suppress(Exception):
                old.close(timeout=30)
        victim = rng.choice(sorted(cluster.workers))
        # held until the job ends; resumed by the chaos thread at this bound at the latest
        cluster.freeze(victim, args.timeout + 10)
        t0 = time.monotonic()
        try:
            client = Client(cluster.address, timeout=60, set_as_default=False)
            rec = run_job(client, n, args, first=True)
        finally:
            cluster.resume(victim)
        rec["frozen_worker"] = victim
        rec["with_client_seconds"] = round(time.monotonic() - t0, 4)
        with contextlib.suppress(Exception):
            rec["plugins_after"] = client.run_on_scheduler(_plugins)
    return client, rec


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The soak: start the cluster, run the jobs under freezes, stop everything; figures."""
    rng = random.Random(args.seed)
    logdir = Path(tempfile.mkdtemp(prefix="freeze-soak-"))
    cluster = FreezableCluster(args.workers, logdir)
    chaos = Chaos(cluster, random.Random(args.seed + 1), max_frozen=args.max_frozen)
    records: list[dict[str, Any]] = []
    client: Client | None = None
    wall0 = time.monotonic()
    try:
        cluster.start()
        with Client(cluster.address, timeout=60, set_as_default=False) as c:
            c.wait_for_workers(args.workers, timeout=120)
        chaos.start()
        for n in range(args.jobs):
            if client is None or (args.fresh_client_every and n % args.fresh_client_every == 0):
                client, rec = fresh_client_round(cluster, chaos, client, rng, n, args)
            else:
                rec = run_job(client, n, args, first=False)
            records.append(rec)
            if rec["outcome"] == "HANG" or (args.verbose and rec["outcome"] != "ok"):
                print(f"job {n} ({rec['code']}): {rec['outcome']}: {rec.get('detail', '')}")
            elif args.progress_every and (n + 1) % args.progress_every == 0:
                hangs = sum(r["outcome"] == "HANG" for r in records)
                print(f"{n + 1} jobs, {hangs} hangs, {time.monotonic() - wall0:.0f} s", flush=True)
    finally:
        chaos.stop.set()
        if chaos.is_alive():
            chaos.join(timeout=5)
        cluster.resume_all()
        if client is not None:
            with contextlib.suppress(Exception):
                cluster.workers_at_end = len(client.scheduler_info()["workers"])
            with contextlib.suppress(Exception):
                client.close(timeout=30)
        cluster.close()
    return summarize(records, cluster, args, time.monotonic() - wall0, logdir)


def summarize(
    records: list[dict[str, Any]],
    cluster: FreezableCluster,
    args: argparse.Namespace,
    wall: float,
    logdir: Path,
) -> dict[str, Any]:
    """The figures of a run, from the records of its jobs."""
    seconds = np.array([r["seconds"] for r in records]) if records else np.zeros(0)
    firsts = [r for r in records if r["first_job_of_client"]]
    outcomes = Counter(r["outcome"] for r in records)
    errors = {k: v for k, v in outcomes.items() if k not in ("ok", "HANG", "wrong")}
    by_code: dict[str, Counter[str]] = {}
    for r in records:
        by_code.setdefault(r["code"], Counter())[r["outcome"]] += 1

    def q(a: np.ndarray, p: float) -> float | None:
        return round(float(np.percentile(a, p)), 3) if len(a) else None

    first_s = np.array([r["seconds"] for r in firsts]) if firsts else np.zeros(0)
    return {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "revision": args.revision,  # of the repository the script is in, at the start
        "dask_bacc": os.path.dirname(dask_bacc.__file__),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "revision")},
        "jobs": len(records),
        "ok": outcomes.get("ok", 0),
        "hangs": outcomes.get("HANG", 0),
        "wrong": outcomes.get("wrong", 0),
        "errors_by_type": errors,
        "by_code": {c: dict(v) for c, v in sorted(by_code.items())},
        "freezes": cluster.freezes,
        "frozen_worker_seconds": round(cluster.frozen_seconds, 1),
        "median_job_seconds": q(seconds, 50),
        "p99_job_seconds": q(seconds, 99),
        "max_job_seconds": round(float(seconds.max()), 3) if len(seconds) else None,
        "fresh_client_first_jobs": len(firsts),
        "fresh_client_first_job_outcomes": dict(Counter(r["outcome"] for r in firsts)),
        "fresh_client_first_job_median_seconds": q(first_s, 50),
        "fresh_client_first_job_max_seconds": (
            round(float(first_s.max()), 3) if len(first_s) else None
        ),
        "worker_processes_exited": cluster.exited_before_close,
        "workers_seen_by_scheduler_at_end": cluster.workers_at_end,
        "hang_details": [r for r in records if r["outcome"] == "HANG"][:20],
        "error_details": [
            {k: r.get(k) for k in ("n", "code", "outcome", "detail")}
            for r in records
            if r["outcome"] not in ("ok", "HANG")
        ][:20],
        "wall_seconds": round(wall, 1),
        "logs": str(logdir),
        "records": records,
    }


def _revision() -> str | None:
    with contextlib.suppress(Exception):
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
        if out.returncode == 0:
            return out.stdout.strip()
    return None


def table(summary: dict[str, Any]) -> str:
    """The summary as a two-column Markdown table."""
    rows = [
        "jobs",
        "ok",
        "hangs",
        "wrong",
        "errors_by_type",
        "freezes",
        "frozen_worker_seconds",
        "worker_processes_exited",
        "workers_seen_by_scheduler_at_end",
        "median_job_seconds",
        "p99_job_seconds",
        "max_job_seconds",
        "fresh_client_first_jobs",
        "fresh_client_first_job_outcomes",
        "fresh_client_first_job_median_seconds",
        "fresh_client_first_job_max_seconds",
        "wall_seconds",
    ]
    lines = ["| figure | value |", "|---|---|"]
    lines += [f"| {k} | {summary[k]} |" for k in rows]
    lines += ["", "| code | outcomes |", "|---|---|"]
    lines += [f"| {c} | {v} |" for c, v in summary["by_code"].items()]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=1000, help="coded jobs to run (default 1000)")
    p.add_argument("--workers", type=int, default=6, help="worker processes (default 6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds a job may take (submit and result) before it counts as a hang",
    )
    p.add_argument(
        "--job-timeout",
        type=float,
        default=None,
        help="the jobs' own timeout= (default none: the test is that they end without one)",
    )
    p.add_argument("--max-frozen", type=int, default=2, help="most workers frozen at once")
    p.add_argument(
        "--fresh-client-every",
        type=int,
        default=100,
        help="a new client's first job with a worker frozen every this many jobs (0: once)",
    )
    p.add_argument("--progress-every", type=int, default=50)
    p.add_argument("--verbose", action="store_true", help="print every job that failed")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="the JSON file (default: results/freeze_soak/freeze_soak_<jobs>_<seed>.json)",
    )
    return p


def _terminated(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # runs the clean-up: no worker is left stopped


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser()
    args = p.parse_args(argv)
    if args.workers < 4:
        # 3 workers: N = 3 for K = 2, and the default wait (0.75 of N) rounds up to all 3,
        # so a job waits for a frozen worker that holds a systematic share (by design)
        p.error("--workers must be at least 4 (with 3, the default code waits for all N)")
    args.revision = _revision()
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        summary = run(args)
    finally:
        if main_thread and previous is not None:
            signal.signal(signal.SIGTERM, previous)
    out = args.out or RESULTS / f"freeze_soak_{args.jobs}_{args.seed}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1, default=str) + "\n")
    print(table(summary))
    for rec in summary["hang_details"][:5]:
        print(f"HANG job {rec['n']} ({rec['code']}): {rec['detail']}")
    print(f"written to {out}")
    return summary


if __name__ == "__main__":
    main()
