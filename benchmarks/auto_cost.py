"""Auto mode's per-job cost in the client: CPU, scheduler round trips, wall (issue 27).

A measurement child starts ``LocalCluster(n_workers=W, threads_per_worker=1,
processes=True)`` in a process of its own (the cluster host: the scheduler and the
nannies; BLAS threads set to 1 in the workers), connects a ``Client`` to it, and maps a
cheap ``f`` (20 ms sleep, then ``tanh``) over K NumPy blocks. The scheduler is kept out of
the client's process on purpose: in a ``LocalCluster`` built in the client's process the
scheduler shares the client's event loop, and the client's CPU time would count it.

After warm-up jobs (auto jobs until ``report.auto["chosen"]`` is set, the straggler
model's ``bacc.auto.min-jobs``, then a few more), each round runs, in a seeded shuffled
order, three variants:

``auto``
    ``code``, ``n_coded`` and ``wait`` all ``"auto"`` (``error=0.05``).
``auto-n``
    ``code="systematic-spline"``, ``n_coded="auto"``, ``wait="auto"``.
``fixed``
    the code, N and wait of the latest ``auto`` choice, given explicitly (exact codes:
    the code and N only).

Per job: the wall time from submit to result; the client process's CPU time
(``time.process_time``: every thread, the client's event loop included) to the result, and
over the job plus a settle pause (``--settle``, the job's clean-up after the result) less
the CPU of an idle pause as long (measured once per round); the same for the loop thread
alone and for the cluster host process (scheduler and nannies); the scheduler RPC round
trips the client made (``distributed.core.send_recv``, per op; ``run_function`` split by
the function run on the scheduler) and the messages it sent on its batched stream (per op,
no reply awaited). Reported per variant: medians, and auto - fixed.

Commands (``--label`` names the revision measured; ``PYTHONPATH`` chooses it)::

    # one revision (the one on PYTHONPATH, else the installed checkout)
    PYTHONPATH=/tmp/auto_before python benchmarks/auto_cost.py --label before \\
        --workers 64 --blocks 16 --rounds 20 --profile 30 --first-plan
    # two revisions, interleaved: REV's git worktree against this checkout
    python benchmarks/auto_cost.py --before cf6ae79 --rounds-outer 2 --first-plan
    # only the cold cost of the first plan in a fresh process
    python benchmarks/auto_cost.py first-plan --workers 64 --blocks 16

Results go to ``benchmarks/results/auto_cost/``: ``auto_cost_<label>_W<W>.json`` and
``.md`` for one revision, ``auto_cost.json`` and ``auto_cost.md`` for ``--before``;
``profile_<label>.txt`` with ``--profile``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "auto_cost"
VARIANTS = ("auto", "auto-n", "fixed")
BLAS_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "VECLIB_MAXIMUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}


def f(block: Any) -> Any:
    """The mapped function: 20 ms of waiting, then a cheap elementwise map."""
    import numpy as np

    time.sleep(0.02)
    return np.tanh(block)


# -- the cluster host -------------------------------------------------------------------


def host_cluster(workers: int, start_timeout: float) -> None:
    """Run ``LocalCluster`` here; print its address, then wait until stdin closes."""
    os.environ.update(BLAS_ENV)
    import dask
    from distributed import LocalCluster

    dask.config.set(
        {
            "distributed.comm.timeouts.connect": f"{start_timeout}s",
            "distributed.nanny.pre-spawn-environ": BLAS_ENV,
        }
    )
    with LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        memory_limit=0,
        timeout=start_timeout,
    ) as cluster:
        print(cluster.scheduler_address, flush=True)
        sys.stdin.read()


class ClusterHost:
    """The cluster host process, started from the measurement child."""

    def __init__(self, workers: int, start_timeout: float):
        cmd = [sys.executable, __file__, "cluster", "--workers", str(workers)]
        cmd += ["--start-timeout", str(start_timeout)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=os.environ
        )
        assert self.proc.stdout is not None
        self.address = self.proc.stdout.readline().strip()
        if not self.address:
            raise RuntimeError("the cluster host exited before printing its address")
        import psutil

        self.ps = psutil.Process(self.proc.pid)

    def cpu(self) -> float:
        """Seconds on CPU of the host's threads (ns resolution, from schedstat)."""
        total = 0
        try:
            for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
                try:
                    total += int((task / "schedstat").read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    pass  # a thread that just ended
            return total / 1e9
        except OSError:  # no /proc: clock ticks (10 ms)
            t = self.ps.cpu_times()
            return t.user + t.system

    def background(self, seconds: float = 5.0) -> dict[str, float]:
        """Cores the idle cluster uses: the worker processes, and the host (scheduler and
        nannies), over ``seconds`` with no job running."""

        def workers_cpu() -> float:
            total = 0.0
            for c in self.ps.children(recursive=True):
                try:
                    t = c.cpu_times()
                    total += t.user + t.system
                except Exception:  # a process that just ended
                    pass
            return total

        w0, h0, t0 = workers_cpu(), self.cpu(), time.perf_counter()
        time.sleep(seconds)
        w1, h1, t1 = workers_cpu(), self.cpu(), time.perf_counter()
        return {"workers_cores": (w1 - w0) / (t1 - t0), "host_cores": (h1 - h0) / (t1 - t0)}

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# -- counting the client's traffic --------------------------------------------------------


class Traffic:
    """Counts the client's RPCs (per op, to the scheduler or elsewhere) and the messages
    it puts on its batched stream to the scheduler (per op)."""

    def __init__(self) -> None:
        self.rpc: Counter[str] = Counter()
        self.other: Counter[str] = Counter()
        self.stream: Counter[str] = Counter()
        self._pending_fn: list[str] = []
        self.scheduler_address = ""

    def install(self, client: Any) -> None:
        import distributed.core as core

        self.scheduler_address = client.scheduler.address
        original = core.send_recv
        traffic = self

        async def send_recv(*args: Any, **kwargs: Any) -> Any:
            comm = kwargs.get("comm", args[0] if args else None)
            op = str(kwargs.get("op"))
            if op == "identity":  # dask-bacc asks for every worker, the client for 5
                op = f"identity(n_workers={kwargs.get('n_workers')})"
            if op == "run_function" and traffic._pending_fn:
                op = f"run_function:{traffic._pending_fn.pop(0)}"
            peer = getattr(comm, "peer_address", "")
            if peer == traffic.scheduler_address:
                traffic.rpc[op] += 1
            else:
                traffic.other[op] += 1
            return await original(*args, **kwargs)

        core.send_recv = send_recv  # PooledRPCCall looks send_recv up at each call

        run = client._run_on_scheduler

        async def run_on_scheduler(function: Any, *args: Any, **kwargs: Any) -> Any:
            traffic._pending_fn.append(getattr(function, "__name__", repr(function)))
            return await run(function, *args, **kwargs)

        client._run_on_scheduler = run_on_scheduler

        send = client._send_to_scheduler

        def send_to_scheduler(msg: Any) -> Any:
            traffic.stream[str(msg.get("op")) if isinstance(msg, dict) else "?"] += 1
            return send(msg)

        client._send_to_scheduler = send_to_scheduler

    def snapshot(self) -> tuple[Counter[str], Counter[str], Counter[str]]:
        return Counter(self.rpc), Counter(self.other), Counter(self.stream)


def _delta(after: Counter[str], before: Counter[str]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if after[k] - before[k]}


class Clocks:
    """The client process's CPU, its event-loop thread's CPU and the cluster host's CPU."""

    def __init__(self, client: Any, host: ClusterHost):
        async def ident() -> int:
            return threading.get_ident()

        self.loop_clock = time.pthread_getcpuclockid(client.sync(ident))
        self.host = host

    def start(self) -> tuple[float, float, float]:
        """Read at a window's start: the host first (reading /proc costs the client CPU
        time, which the window must not count)."""
        host = self.host.cpu()
        return time.process_time(), time.clock_gettime(self.loop_clock), host

    def end(self) -> tuple[float, float, float]:
        """Read at a window's end: the client's clocks first."""
        cpu, loop = time.process_time(), time.clock_gettime(self.loop_clock)
        return cpu, loop, self.host.cpu()


# -- the measurement child ----------------------------------------------------------------


def child(args: argparse.Namespace) -> dict[str, Any]:
    """Run warm-up, the interleaved rounds and (optionally) the profile; return JSON."""
    os.environ.update(BLAS_ENV)
    import numpy as np

    load_start = os.getloadavg()
    t0 = time.perf_counter()
    host = ClusterHost(args.workers, args.start_timeout)
    started = time.perf_counter() - t0
    log(f"cluster of {args.workers} workers up in {started:.0f}s at {host.address}")
    from distributed import Client

    import dask_bacc
    from dask_bacc.codes import get_code

    client = Client(host.address, timeout=args.start_timeout)
    try:
        client.wait_for_workers(args.workers, timeout=args.start_timeout)
        n_workers = len(client.scheduler_info(n_workers=-1)["workers"])
        traffic = Traffic()
        traffic.install(client)
        clocks = Clocks(client, host)
        K = args.blocks
        X = np.random.default_rng(0).standard_normal((K * args.rows, 8))
        state: dict[str, Any] = {"chosen": None}

        def kwargs_of(variant: str) -> dict[str, Any]:
            common = {"n_blocks": K, "progress": False, "client": client}
            if variant == "auto":
                return {**common, "code": "auto", "n_coded": "auto", "wait": "auto", "error": 0.05}
            if variant == "auto-n":
                return {
                    **common,
                    "code": "systematic-spline",
                    "n_coded": "auto",
                    "wait": "auto",
                    "error": 0.05,
                }
            c = state["chosen"]
            out = {**common, "code": c["code"], "n_coded": c["N"]}
            if not get_code(c["code"], K, c["N"]).exact:
                out["wait"] = c["k"]
            return out

        def run(variant: str, settle: float) -> dict[str, Any]:
            kw = kwargs_of(variant)
            rpc0, oth0, st0 = traffic.snapshot()
            cpu0, loop0, host0 = clocks.start()
            w0 = time.perf_counter()
            job = dask_bacc.submit_coded(f, X, **kw)
            job.result()
            wall = time.perf_counter() - w0
            cpu1, loop1, _ = clocks.end()
            time.sleep(settle)
            cpu2, loop2, host2 = clocks.end()
            rpc2, oth2, st2 = traffic.snapshot()
            auto = job.report.auto
            rec = {
                "variant": variant,
                "wall_ms": 1e3 * wall,
                "cpu_ms": 1e3 * (cpu1 - cpu0),
                "loop_cpu_ms": 1e3 * (loop1 - loop0),
                "cpu_settled_ms": 1e3 * (cpu2 - cpu0),
                "loop_cpu_settled_ms": 1e3 * (loop2 - loop0),
                "host_cpu_settled_ms": 1e3 * (host2 - host0),
                "rpc": _delta(rpc2, rpc0),
                "rpc_other": _delta(oth2, oth0),
                "stream": _delta(st2, st0),
                "code": job.code.name,
                "N": job.code.N,
                "status": job.report.status,
                "chosen": None if auto is None else auto.get("chosen"),
            }
            if variant == "auto" and rec["chosen"] is not None:
                state["chosen"] = rec["chosen"]
            return rec

        def idle(settle: float) -> dict[str, Any]:
            rpc0, _, st0 = traffic.snapshot()
            cpu0, loop0, host0 = clocks.start()
            time.sleep(settle)
            cpu1, loop1, host1 = clocks.end()
            rpc1, _, st1 = traffic.snapshot()
            return {
                "cpu_ms": 1e3 * (cpu1 - cpu0),
                "loop_cpu_ms": 1e3 * (loop1 - loop0),
                "host_cpu_ms": 1e3 * (host1 - host0),
                "rpc": _delta(rpc1, rpc0),
                "stream": _delta(st1, st0),
            }

        warmup: list[dict[str, Any]] = []
        first_chosen = None
        while state["chosen"] is None:
            if len(warmup) >= args.max_warmup:
                raise RuntimeError(f"auto chose nothing in {len(warmup)} jobs: {warmup[-1]}")
            rec = run("auto", args.settle)
            warmup.append(rec)
            if rec["chosen"] is not None:
                first_chosen = rec
            log(f"warm-up {len(warmup)}: {rec['code']} N={rec['N']} chosen={rec['chosen']}")
        for _ in range(args.extra_warmup):
            warmup.append(run("auto", args.settle))
        warmup += [run("auto-n", args.settle), run("fixed", args.settle)]

        jobs: list[dict[str, Any]] = []
        idles: list[dict[str, Any]] = []
        for r in range(args.rounds):
            order = list(VARIANTS)
            random.Random(args.seed * 1000 + r).shuffle(order)
            for variant in order:
                jobs.append({"round": r, **run(variant, args.settle)})
            idles.append(idle(args.settle))
            if (r + 1) % 5 == 0:
                log(f"round {r + 1}/{args.rounds}")

        time.sleep(1.0)  # the last job's clean-up
        background = host.background()
        log(f"idle cluster: {background}")
        out: dict[str, Any] = {
            "label": args.label,
            "idle_cluster_cores": background,
            "dask_bacc": dask_bacc.__file__,
            "revision": revision_of(Path(dask_bacc.__file__).parent.parent),
            "workers": n_workers,
            "blocks": K,
            "rows_per_block": args.rows,
            "rounds": args.rounds,
            "settle_s": args.settle,
            "cpu_count": os.cpu_count(),
            "cluster_start_s": started,
            "loadavg_start": load_start,
            "loadavg_end": os.getloadavg(),
            "warmup": warmup,
            "first_chosen": first_chosen,
            "jobs": jobs,
            "idle": idles,
            "summary": summarize(jobs, idles),
        }
        if args.profile:

            def plain_auto() -> None:  # no clocks read, no traffic snapshots
                dask_bacc.submit_coded(f, X, **kwargs_of("auto")).result()

            out["profile"] = profile(client, plain_auto, args.profile, args.settle)
        return out
    finally:
        client.close()
        host.close()


def revision_of(path: Path) -> dict[str, Any]:
    def git(*cmd: str) -> str:
        p = subprocess.run(["git", "-C", str(path), *cmd], capture_output=True, text=True)
        return p.stdout.strip()

    return {
        "path": str(path),
        "commit": git("rev-parse", "--short", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--", "dask_bacc")),
    }


def profile(client: Any, job: Any, n: int, settle: float) -> dict[str, Any]:
    """cProfile over ``n`` auto jobs, in the calling thread and in the client's
    event-loop thread (one profiler each, merged)."""
    import cProfile
    import io
    import pstats

    # a CPU clock per thread: each profiler hooks only the thread that enabled it, so
    # waiting (for the loop, for the scheduler, for a core on a loaded machine) is not
    # counted, only the thread's own CPU time
    main, loop = cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)

    async def switch(on: bool) -> None:
        loop.enable() if on else loop.disable()

    client.sync(switch, True)
    w0, c0 = time.perf_counter(), time.process_time()
    main.enable()
    for _ in range(n):
        job()
    main.disable()
    time.sleep(settle)  # the last job's clean-up
    client.sync(switch, False)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    text = []
    for title, key, restrict in (
        ("dask_bacc functions, by cumulative time", "cumulative", "dask_bacc"),
        ("all functions, by own time", "tottime", ""),
    ):
        buf = io.StringIO()
        s = pstats.Stats(main, stream=buf)
        s.add(loop)
        s.sort_stats(key)
        s.print_stats(restrict, 30) if restrict else s.print_stats(30)
        text.append(
            f"== {title} (top 30; {n} auto jobs, main and event-loop threads; times are "
            f"thread CPU seconds; wall {wall:.2f} s, process CPU {cpu:.2f} s, profiled) "
            f"==\n{buf.getvalue()}"
        )
    buf = io.StringIO()
    s = pstats.Stats(main, stream=buf)
    s.add(loop)
    s.sort_stats("cumulative").print_callers(r"\((quantile|unique|_mean|expected_error)\)")
    text.append(
        f"== who calls numpy's quantile, unique, mean and expected_error ==\n{buf.getvalue()}"
    )
    return {"jobs": n, "wall_s": wall, "cpu_s": cpu, "text": "\n".join(text)}


# -- summaries ---------------------------------------------------------------------------

NUMBERS = ("wall_ms", "cpu_ms", "loop_cpu_ms", "cpu_settled_ms", "loop_cpu_settled_ms")
JOB_KEYS = {
    "cpu_job_ms": "cpu_settled_ms",
    "loop_cpu_job_ms": "loop_cpu_settled_ms",
    "host_cpu_job_ms": "host_cpu_settled_ms",
}


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summarize(jobs: list[dict[str, Any]], idles: list[dict[str, Any]]) -> dict[str, Any]:
    """Per variant: medians, the settled CPU less the idle pause's, counts per op."""
    idle_cpu = _median([i["cpu_ms"] for i in idles])
    idle_loop = _median([i["loop_cpu_ms"] for i in idles])
    idle_host = _median([i["host_cpu_ms"] for i in idles])
    out: dict[str, Any] = {
        "idle": {
            "cpu_ms": idle_cpu,
            "loop_cpu_ms": idle_loop,
            "host_cpu_ms": idle_host,
            "rpc_mean": _mean_counts([i["rpc"] for i in idles]),
        }
    }
    for v in VARIANTS:
        js = [j for j in jobs if j["variant"] == v]
        s: dict[str, Any] = {"jobs": len(js)}
        for key in NUMBERS:
            s[key] = _median([j[key] for j in js])
        s["cpu_job_ms"] = s["cpu_settled_ms"] - idle_cpu
        s["loop_cpu_job_ms"] = s["loop_cpu_settled_ms"] - idle_loop
        s["host_cpu_job_ms"] = _median([j["host_cpu_settled_ms"] for j in js]) - idle_host
        s["rpc_total"] = _median([sum(j["rpc"].values()) for j in js])
        s["rpc_median"] = _median_counts([j["rpc"] for j in js])
        s["rpc_mean"] = _mean_counts([j["rpc"] for j in js])
        s["rpc_other_mean"] = _mean_counts([j["rpc_other"] for j in js])
        s["stream_mean"] = _mean_counts([j["stream"] for j in js])
        s["settings"] = dict(Counter(f"{j['code']} N={j['N']}" for j in js))
        out[v] = s
    paired: dict[str, list[float]] = {}
    for r in sorted({j["round"] for j in jobs}):
        a = [j for j in jobs if j["round"] == r and j["variant"] == "auto"]
        b = [j for j in jobs if j["round"] == r and j["variant"] == "fixed"]
        if a and b:
            for key in (*NUMBERS, "host_cpu_settled_ms"):
                paired.setdefault(key, []).append(a[0][key] - b[0][key])
            for job_key, key in JOB_KEYS.items():  # the idle pause cancels out
                paired.setdefault(job_key, []).append(a[0][key] - b[0][key])
            n = sum(a[0]["rpc"].values()) - sum(b[0]["rpc"].values())
            paired.setdefault("rpc_total", []).append(n)
    out["auto_minus_fixed"] = {
        "median_of_paired": {k: _median(v) for k, v in paired.items()},
        "difference_of_medians": {
            k: out["auto"][k] - out["fixed"][k] for k in (*NUMBERS, *JOB_KEYS, "rpc_total")
        },
    }
    return out


def _mean_counts(cs: list[dict[str, int]]) -> dict[str, float]:
    ops = sorted({op for c in cs for op in c})
    return {op: round(sum(c.get(op, 0) for c in cs) / len(cs), 2) for op in ops} if cs else {}


def _median_counts(cs: list[dict[str, int]]) -> dict[str, float]:
    ops = sorted({op for c in cs for op in c})
    return {op: _median([c.get(op, 0) for c in cs]) for op in ops}


# -- the first plan in a fresh process -----------------------------------------------------


def first_plan(args: argparse.Namespace) -> dict[str, Any]:
    """In this (fresh) process: import, then time the first and later plans."""
    t0 = time.perf_counter()
    import numpy as np

    t_numpy = time.perf_counter() - t0
    c_import = time.process_time()
    import dask_bacc
    from dask_bacc.runtime import auto

    try:
        from dask_bacc.runtime.submit import plan_job
    except ImportError:
        plan_job = None
    t_import = time.perf_counter() - t0
    c_import = time.process_time() - c_import
    W, K = args.workers, args.blocks

    def make_view(seed: int) -> Any:
        """A view as the scheduler sends one: fresh draws for every job."""
        rng = np.random.default_rng(seed)
        draws = rng.lognormal(0.0, 0.25, (args.draws, W))
        draws[rng.random(draws.shape) < 0.05] *= 6.0  # 5% of draws late
        return auto.ModelView(
            workers=[f"tcp://127.0.0.1:{40000 + i}" for i in range(W)],
            draws=draws,
            jobs=10,
            hosts=["127.0.0.1"] * W,
        )

    views = [make_view(seed) for seed in range(args.repeat + 1)]
    codes = [(c, {}) for c in auto.AUTO_CODES]

    def call(view: Any) -> Any:
        if plan_job is not None:
            try:
                return plan_job(view, K, codes, 0.05, "__main__.f", wait="auto"), "plan_job"
            except TypeError:
                pass
        return auto.plan(view, K, codes, error=0.05, max_n=2 * K), "auto.plan"

    prof = None
    if args.cprofile:
        import cProfile
        import io
        import pstats

        pr = cProfile.Profile(time.process_time)  # CPU: robust to a loaded machine
        pr.enable()
    t1, c1 = time.perf_counter(), time.process_time()
    p, how = call(views[0])
    cold, cold_cpu = time.perf_counter() - t1, time.process_time() - c1
    if args.cprofile:
        pr.disable()
        buf = io.StringIO()
        pstats.Stats(pr, stream=buf).sort_stats("cumulative").print_stats(25)
        prof = buf.getvalue()
    warm, warm_cpu = [], []
    for view in views[1:]:  # new draws each time, as each job gets
        t, c = time.perf_counter(), time.process_time()
        call(view)
        warm.append(time.perf_counter() - t)
        warm_cpu.append(time.process_time() - c)
    return {
        "dask_bacc": dask_bacc.__file__,
        "revision": revision_of(Path(dask_bacc.__file__).parent.parent),
        "workers": W,
        "blocks": K,
        "draws": args.draws,
        "codes": list(auto.AUTO_CODES),
        "call": how,
        "import_numpy_ms": 1e3 * t_numpy,
        "import_dask_bacc_ms": 1e3 * (t_import - t_numpy),
        "import_dask_bacc_cpu_ms": 1e3 * c_import,
        "first_plan_ms": 1e3 * cold,
        "first_plan_cpu_ms": 1e3 * cold_cpu,
        "later_plan_cpu_ms_median": 1e3 * statistics.median(warm_cpu),
        "loadavg": os.getloadavg(),
        "later_plan_ms_median": 1e3 * statistics.median(warm),
        "later_plan_ms_min": 1e3 * min(warm),
        "chosen": p.chosen.as_dict(),
        "cprofile": prof,
    }


# -- the parent ---------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[auto_cost {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run_child(argv: list[str], pythonpath: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    p = subprocess.run(
        [sys.executable, __file__, *argv], env=env, stdout=subprocess.PIPE, text=True
    )
    if p.returncode != 0:
        raise RuntimeError(f"child {argv} failed with {p.returncode}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def child_argv(args: argparse.Namespace, label: str) -> list[str]:
    argv = ["child", "--label", label, "--workers", str(args.workers)]
    argv += ["--blocks", str(args.blocks), "--rounds", str(args.rounds)]
    argv += ["--rows", str(args.rows), "--settle", str(args.settle), "--seed", str(args.seed)]
    argv += ["--start-timeout", str(args.start_timeout)]
    argv += ["--extra-warmup", str(args.extra_warmup), "--profile", str(args.profile)]
    return argv


def first_plan_argv(args: argparse.Namespace, cprofile: bool) -> list[str]:
    argv = ["first-plan", "--workers", str(args.workers), "--blocks", str(args.blocks)]
    return argv + (["--cprofile"] if cprofile else [])


def measure(args: argparse.Namespace, label: str, pythonpath: str | None) -> dict[str, Any]:
    log(f"{label}: measurement child (PYTHONPATH={pythonpath})")
    out: dict[str, Any] = {"run": run_child(child_argv(args, label), pythonpath)}
    if args.first_plan:
        out["first_plan"] = [
            run_child(first_plan_argv(args, False), pythonpath) for _ in range(args.first_plan)
        ]
        out["first_plan_profile"] = run_child(first_plan_argv(args, True), pythonpath)
    return out


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs' jobs and idle pauses together, summarized."""
    jobs, idles = [], []
    for i, r in enumerate(runs):
        jobs += [{**j, "round": (i, j["round"])} for j in r["run"]["jobs"]]
        idles += r["run"]["idle"]
    s = summarize(jobs, idles)
    fp = [x for r in runs for x in r.get("first_plan", [])]
    if fp:
        s["first_plan_ms"] = _median([x["first_plan_ms"] for x in fp])
        s["later_plan_ms"] = _median([x["later_plan_ms_median"] for x in fp])
        s["import_dask_bacc_ms"] = _median([x["import_dask_bacc_ms"] for x in fp])
        s["first_plan_cpu_ms"] = _median([x["first_plan_cpu_ms"] for x in fp])
        s["later_plan_cpu_ms"] = _median([x["later_plan_cpu_ms_median"] for x in fp])
        s["import_dask_bacc_cpu_ms"] = _median([x["import_dask_bacc_cpu_ms"] for x in fp])
        s["first_plan_loadavg"] = [x["loadavg"][0] for x in fp]
        s["first_plan_call"] = fp[0]["call"]
    fc = [r["run"]["first_chosen"] for r in runs if r["run"].get("first_chosen")]
    if fc:
        s["first_chosen_job"] = {k: _median([x[k] for x in fc]) for k in NUMBERS}
    return s


def _fmt(x: Any, digits: int = 1) -> str:
    return "n/a" if x is None or x != x else f"{x:.{digits}f}"


def _ops(counts: dict[str, float]) -> str:
    return ", ".join(f"{op} {n:g}" for op, n in sorted(counts.items())) or "none"


def markdown(labels: list[str], summaries: dict[str, Any], meta: dict[str, Any]) -> str:
    lines = [
        f"# auto mode's per-job cost ({', '.join(labels)})",
        "",
        f"Machine: {meta['cpu_count']} cores; W = {meta['workers']} worker processes "
        f"(`LocalCluster(n_workers={meta['workers']}, threads_per_worker=1, processes=True)` "
        "in a process of its own), K = "
        f"{meta['blocks']} blocks of {meta['rows']} x 8, f = 20 ms sleep + tanh; "
        f"{meta['rounds']} interleaved rounds per measurement child"
        f"{', ' + str(meta['outer']) + ' children per revision' if meta['outer'] > 1 else ''}; "
        f"settle pause {meta['settle']} s. The idle cluster alone used "
        f"{meta['idle_cluster']} cores (worker processes, host) of {meta['cpu_count']}; "
        f"1-min load average at start/end of each child: {meta['loadavg']}.",
        "",
        f"Command: `{meta['command']}`",
        "",
        "Client CPU = `time.process_time()` of the client process (all threads: the "
        "event loop's too) per job; 'to result' is submit to result, 'per job' is job + "
        "settle pause less an idle pause as long (the clean-up after the result "
        "included). Round trips = the client's RPCs to the scheduler per job (median "
        "total; per op the mean). Cluster host CPU = scheduler + nannies, per job, less "
        "idle. Medians.",
        "",
    ]
    head = "| | " + " | ".join(f"{lab}: {v}" for lab in labels for v in VARIANTS) + " |"
    lines += [head, "|---|" + "--:|" * (len(labels) * len(VARIANTS))]
    rows = [
        ("wall ms", "wall_ms"),
        ("client CPU ms, to result", "cpu_ms"),
        ("client CPU ms, per job", "cpu_job_ms"),
        ("loop-thread CPU ms, per job", "loop_cpu_job_ms"),
        ("cluster host CPU ms, per job", "host_cpu_job_ms"),
        ("scheduler round trips", "rpc_total"),
    ]
    for name, key in rows:
        cells = [_fmt(summaries[lab][v][key]) for lab in labels for v in VARIANTS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "auto - fixed (difference of medians; median of per-round paired differences):",
        "",
    ]
    lines += ["| | " + " | ".join(labels) + " |", "|---|" + "--:|" * len(labels)]
    for name, key in rows:
        cells = []
        for lab in labels:
            d = summaries[lab]["auto_minus_fixed"]
            paired = d["median_of_paired"].get(key)
            cells.append(
                _fmt(d["difference_of_medians"].get(key))
                + ("" if paired is None else f" ({_fmt(paired)})")
            )
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Round trips per job to the scheduler, by op (mean over jobs):", ""]
    for lab in labels:
        for v in VARIANTS:
            s = summaries[lab][v]
            lines.append(f"- {lab}, {v}: {_ops(s['rpc_mean'])}")
            lines.append(f"  - batched-stream messages (no reply): {_ops(s['stream_mean'])}")
            if s["rpc_other_mean"]:
                lines.append(f"  - RPCs elsewhere: {_ops(s['rpc_other_mean'])}")
            lines.append(f"  - settings run: {s['settings']}")
        lines.append(f"- {lab}, idle pause: {_ops(summaries[lab]['idle']['rpc_mean'])}")
    lines += ["", "First plan in a process (`--first-plan`, a fresh process each):", ""]
    for lab in labels:
        s = summaries[lab]
        if "first_plan_ms" in s:
            lines.append(
                f"- {lab}: first {s['first_plan_call']} {_fmt(s['first_plan_ms'])} ms wall, "
                f"{_fmt(s['first_plan_cpu_ms'])} ms CPU; later ones "
                f"{_fmt(s['later_plan_ms'], 2)} ms wall, {_fmt(s['later_plan_cpu_ms'], 2)} ms "
                f"CPU; import dask_bacc {_fmt(s['import_dask_bacc_ms'])} ms wall, "
                f"{_fmt(s['import_dask_bacc_cpu_ms'])} ms CPU (not counted); 1-min load "
                f"average {s['first_plan_loadavg']}"
            )
        if "first_chosen_job" in s:
            fc = s["first_chosen_job"]
            lines.append(
                f"- {lab}: the first auto job that planned (after the default warm-up jobs): "
                f"wall {_fmt(fc['wall_ms'])} ms, client CPU to result {_fmt(fc['cpu_ms'])} ms"
            )
    return "\n".join(lines) + "\n"


def parent(args: argparse.Namespace) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/auto_cost.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if os.environ.get("PYTHONPATH") and not args.before:
        command = f"PYTHONPATH={os.environ['PYTHONPATH']} {command}"
    runs: dict[str, list[dict[str, Any]]] = {}
    tmp = None
    if args.before:
        from floor_revisions import worktree

        tmp = Path(tempfile.mkdtemp(prefix="auto-cost-"))
        trees = {"before": str(worktree(args.before, tmp))}
        trees["after"] = str(worktree(args.after, tmp)) if args.after else str(ROOT)
        labels = ["before", "after"]
    else:
        trees = {args.label: os.environ.get("PYTHONPATH")}  # type: ignore[dict-item]
        labels = [args.label]
    try:
        for r in range(args.rounds_outer if args.before else 1):
            order = labels if r % 2 == 0 else labels[::-1]
            for lab in order:
                runs.setdefault(lab, []).append(measure(args, lab, trees[lab]))
    finally:
        if tmp is not None:
            for lab in labels:
                if trees[lab] != str(ROOT):
                    subprocess.run(
                        ["git", "-C", str(ROOT), "worktree", "remove", "--force", trees[lab]],
                        capture_output=True,
                    )
    summaries = {lab: pooled(runs[lab]) for lab in labels}
    first = runs[labels[0]][0]["run"]
    meta = {
        "cpu_count": os.cpu_count(),
        "workers": first["workers"],
        "blocks": args.blocks,
        "rows": args.rows,
        "rounds": args.rounds,
        "outer": args.rounds_outer if args.before else 1,
        "settle": args.settle,
        "command": command,
        "revisions": {lab: runs[lab][0]["run"]["revision"] for lab in labels},
        "idle_cluster": [
            f"{r['run']['idle_cluster_cores']['workers_cores']:.2f}, "
            f"{r['run']['idle_cluster_cores']['host_cores']:.2f}"
            for lab in labels
            for r in runs[lab]
        ],
        "loadavg": [
            f"{r['run']['loadavg_start'][0]:.1f}/{r['run']['loadavg_end'][0]:.1f}"
            for lab in labels
            for r in runs[lab]
        ],
    }
    stem = args.out_stem or (
        "auto_cost" if args.before else f"auto_cost_{args.label}_W{args.workers}"
    )
    (OUT / f"{stem}.json").write_text(
        json.dumps({"meta": meta, "summary": summaries, "runs": runs}, indent=1, default=str)
    )
    md = markdown(labels, summaries, meta)
    (OUT / f"{stem}.md").write_text(md)
    for lab in labels:
        prof = runs[lab][0]["run"].get("profile")
        if prof:
            fp = runs[lab][0].get("first_plan_profile", {}).get("cprofile")
            text = prof["text"] + (
                f"\n== the first plan in a fresh process (cProfile, cumulative) ==\n{fp}"
                if fp
                else ""
            )
            (OUT / f"profile_{lab}{'' if args.before else f'_W{args.workers}'}.txt").write_text(
                text
            )
    print(md)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "mode", nargs="?", default="parent", choices=("parent", "child", "first-plan", "cluster")
    )
    p.add_argument("--workers", type=int, default=64, help="worker processes W")
    p.add_argument("--blocks", type=int, default=16, help="data blocks K")
    p.add_argument("--rows", type=int, default=64, help="rows per block")
    p.add_argument("--rounds", type=int, default=10, help="interleaved rounds per child")
    p.add_argument("--rounds-outer", type=int, default=2, help="children per revision (--before)")
    p.add_argument("--settle", type=float, default=0.3, help="pause after each job, seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label", default="current", help="name of the revision measured")
    p.add_argument("--before", default=None, help="a git revision to compare against")
    p.add_argument("--after", default=None, help="a git revision (default: this checkout)")
    p.add_argument("--profile", type=int, default=0, help="cProfile this many auto jobs")
    p.add_argument(
        "--first-plan",
        nargs="?",
        type=int,
        const=3,
        default=0,
        help="fresh processes timing the first plan",
    )
    p.add_argument("--start-timeout", type=float, default=900.0)
    p.add_argument("--extra-warmup", type=int, default=3)
    p.add_argument("--max-warmup", type=int, default=20)
    p.add_argument("--draws", type=int, default=256, help="first-plan: draws per worker")
    p.add_argument("--repeat", type=int, default=20, help="first-plan: later plans timed")
    p.add_argument("--cprofile", action="store_true", help="first-plan: profile the first plan")
    p.add_argument("--out-stem", default=None, help="results file name, without extension")
    args = p.parse_args()
    if args.mode == "cluster":
        host_cluster(args.workers, args.start_timeout)
    elif args.mode == "child":
        print(json.dumps(child(args), default=str))
    elif args.mode == "first-plan":
        print(json.dumps(first_plan(args), default=str))
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        parent(args)


if __name__ == "__main__":
    main()
