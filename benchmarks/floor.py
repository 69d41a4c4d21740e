"""What a coded job costs against the floor: a bare futures loop (docs/design.md, "Design rules").

Run it with::

    python benchmarks/floor.py                                  # both parts, ~5-10 min on 2 cores
    python benchmarks/floor.py --part job --json job.json       # N = 8, 16, 32, 64, threads
    python benchmarks/floor.py --part job --processes --N 8,16  # one process per worker
    python benchmarks/floor.py --part stragglers --reps 30

To measure another checkout of dask-bacc with this script, put it first on the path
(``PYTHONPATH=/path/to/checkout python benchmarks/floor.py ...``): the module that was
imported is printed and written to the JSON file.

Every figure is a median over ``--reps`` repetitions (default 15), and the variants of a
part run interleaved, in an order shuffled per repetition with a seeded generator, so that
drift in the machine's speed hits all of them alike. Between two runs the script waits
until the scheduler holds no task, then for one more task duration (a cancelled task still
runs out its ``sleep`` in its thread), and collects garbage. Ratios compare figures
measured in the same run.

The task is ``work(block, seconds, slow_factor=1)``: ``time.sleep(seconds * slow_factor)``
then ``np.tanh(block)``, so the work itself costs no CPU and the time over ``seconds`` is
what the client, the scheduler and the workers spend moving tasks and results.

Part ``job``: no stragglers
---------------------------
A ``LocalCluster`` of W = N workers with one thread each (in-process, ``processes=False``,
unless ``--processes``), K = N/2 data blocks of ``rows x cols`` float64 (100 x 8) and a
wait of k = ceil(0.75 N) results. Variants:

- ``bare loop``, the floor: the N Berrut shares are encoded on the client
  (``BerrutCode(K, N).encode``) before the timer starts; then one ``client.map`` of the N
  tasks (nothing pinned), ``as_completed`` until k of them finished, one ``client.gather``
  of those k, one matrix product on the client (``code.decode``). The timer stops with the
  decoded array in hand; the other N - k futures are then cancelled.
- ``map_coded``: ``dask_bacc.map_coded(work, X, seconds=..., n_blocks=K, n_coded=N,
  wait=k, progress=False)``; an explicit ``wait`` has no grace period.
- ``map_coded default wait``: the same with ``wait=None`` (the first 75% of the results,
  plus the grace period of ``bacc.wait.grace``).

Reported per N: the median seconds of each, the ratio to the bare loop and the extra time
per coded task, ``(map_coded - bare) / N`` in ms, with the ratio of that extra at the
largest N to the smallest (a runtime whose per-job cost is flat per task gives 1). After
the timed repetitions of each N, one more job of each variant runs with a scheduler plugin
that counts its ``update-graph`` messages (graph submissions) and the distinct task keys
they carry (tasks per job), the task transitions, the messages the client sent
(batched-stream ops and RPC calls, e.g. ``broadcast`` for ``Client.run``, ``identity``,
``cancel``; any client's, so a background call of the client can show up) and the time the
scheduler spent in the handlers of those messages and of the workers' messages (an
approximation: an ``async`` handler counts its wall time, worker heartbeats are left out).
The counts are read 0.5 s after the job returned, so its clean-up messages are included.

Part ``stragglers``
-------------------
An in-process ``LocalCluster`` of 32 workers x 1 thread, K = 16, N = 32, 50 ms tasks, and
10% of the tasks 10x slow. Variants:

- ``plain``: ``client.map(work, blocks, seconds, slow_factors)`` over the K uncoded blocks
  and ``client.gather`` (plain Dask; a slow task sleeps 10 x 50 ms and cannot be stopped);
- ``map_coded``: Berrut, N = 32, the default wait;
- ``repetition``: ``map_coded(..., code="repetition", n_coded=32)`` (exact: every block's
  first copy);
- ``uncoded``: ``map_coded(..., code="uncoded")``, N = K through the coded runtime.

The stragglers are dask-bacc's own injection, ``Bimodal(p=0.1, delay=0, factor=10)``: a
slow task waits ``(factor - 1) x`` the time ``func`` took after it returned (10x in total),
and the wait ends as soon as its job has decoded. The draw for task ``i`` is
:func:`dask_bacc.testing.draw_delay` with the repetition's own seed and ``seq = 0``:
the plugin installed for a repetition replaces the job counter by 0, so task ``i`` is slow
in every variant of the repetition or in none (``plain`` replays the same draws on the
client into per-task ``slow_factor`` values). A fresh seed is drawn per repetition.
Reported: p50, p90 and p99 (linear interpolation: with 15 repetitions p99 is about the
maximum) of the job time per variant, and the ratios ``map_coded p50 / plain p50`` (target
<= 0.5) and ``map_coded p99 / uncoded p99`` (target <= 0.25).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import logging
import math
import os
import platform
import subprocess
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from distributed import Client, LocalCluster, as_completed
from distributed.diagnostics.plugin import SchedulerPlugin

import dask_bacc
from dask_bacc.codes import BerrutCode

try:
    from dask_bacc.testing import Bimodal, StragglerPlugin, clear_stragglers, draw_delay
except ImportError:  # a revision before dask_bacc.testing (floor_revisions.py runs old trees)
    from dask_bacc.stragglers import (  # type: ignore[no-redef]
        Bimodal,
        StragglerPlugin,
        clear_stragglers,
        draw_delay,
    )

JOB_VARIANTS = ("bare loop", "map_coded", "map_coded default wait")
STRAGGLER_VARIANTS = ("plain", "map_coded", "repetition", "uncoded")
COUNTER_NAME = "floor-counter"


def work(block: np.ndarray, seconds: float = 0.05, slow_factor: float = 1.0) -> np.ndarray:
    """The benchmark task: sleep ``seconds * slow_factor``, then ``np.tanh(block)``."""
    time.sleep(seconds * slow_factor)
    return np.tanh(block)


# -- scheduler-side counting ----------------------------------------------------------------
class MessageCounter(SchedulerPlugin):
    """Counts graph submissions, tasks, transitions and messages on the scheduler.

    ``start`` wraps the scheduler's message handlers to count and time them; the counts
    are read and reset with ``Client.run_on_scheduler`` (:func:`read_counts`).
    """

    name = COUNTER_NAME

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.graphs = 0
        self.tasks = 0
        self.keys: set = set()
        self.transitions = 0
        self.client_ops: Counter = Counter()
        self.handler_seconds = 0.0
        self.op_seconds: Counter = Counter()

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        for table, stream in ((scheduler.stream_handlers, True), (scheduler.handlers, False)):
            for op, handler in list(table.items()):
                if not getattr(handler, "_floor_wrapped", False):
                    table[op] = self._wrap(op, handler, stream)

    def _wrap(self, op: str, handler: Any, stream: bool) -> Any:
        plugin = self
        skip = op.startswith("heartbeat")

        def note(kwargs: dict, elapsed: float) -> None:
            if skip:
                return
            plugin.handler_seconds += elapsed
            plugin.op_seconds[op] += elapsed
            if not stream or "client" in kwargs:  # RPC calls and the clients' stream ops
                plugin.client_ops[op] += 1

        if asyncio.iscoroutinefunction(handler):

            @functools.wraps(handler)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return await handler(*args, **kwargs)
                finally:
                    note(kwargs, time.perf_counter() - start)

        else:

            @functools.wraps(handler)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                try:
                    return handler(*args, **kwargs)
                finally:
                    note(kwargs, time.perf_counter() - start)

        wrapper._floor_wrapped = True  # type: ignore[attr-defined]
        return wrapper

    def update_graph(self, scheduler: Any, *, keys: Any, tasks: Any, **kwargs: Any) -> None:
        self.graphs += 1
        self.tasks += len(tasks)
        self.keys.update(tasks)

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        self.transitions += 1


def _reset_counts(dask_scheduler: Any) -> None:
    plugin = dask_scheduler.plugins[COUNTER_NAME]
    plugin.reset()
    plugin.client_ops["run_function"] -= 1  # this call, counted once it returns


def _read_counts(dask_scheduler: Any) -> dict[str, Any]:
    p = dask_scheduler.plugins[COUNTER_NAME]
    return {
        "graph_submissions": p.graphs,
        "tasks": len(p.keys),
        "task_keys_in_update_graph": p.tasks,
        "transitions": p.transitions,
        "client_messages": int(sum(p.client_ops.values())),
        "client_ops": {op: n for op, n in p.client_ops.most_common() if n},
        "scheduler_handler_ms": 1e3 * p.handler_seconds,
        "handler_ms_by_op": {op: 1e3 * x for op, x in p.op_seconds.most_common()},
    }


def _scheduler_state(dask_scheduler: Any) -> tuple[int, int]:
    """Tasks waiting or running, and all tasks the scheduler holds."""
    tasks = dask_scheduler.tasks
    busy = sum(1 for ts in tasks.values() if ts.state in ("waiting", "queued", "processing"))
    return busy, len(tasks)


LEFTOVERS: list[tuple[str, int]] = []  # (what ran before, tasks left on the scheduler)


def worker_rss(client: Client) -> float:
    """Resident memory (MiB) of the client's process plus the distinct worker processes."""
    per_pid = client.run(lambda: (os.getpid(), _rss_mib()))
    pids = {pid: rss for pid, rss in per_pid.values()}
    pids[os.getpid()] = _rss_mib()
    return round(sum(pids.values()), 1)


def settle(client: Client, seconds: float, after: str = "", limit: float = 30.0) -> None:
    """Wait until no task waits or runs, then for one task duration; collect garbage.

    Tasks still held by the scheduler one second after that are noted in ``LEFTOVERS``.
    """
    end = time.perf_counter() + limit
    while client.run_on_scheduler(_scheduler_state)[0] and time.perf_counter() < end:
        time.sleep(0.01)
    time.sleep(seconds + 0.02)
    gc.collect()
    held = client.run_on_scheduler(_scheduler_state)[1]
    if held:
        time.sleep(1.0)
        held = client.run_on_scheduler(_scheduler_state)[1]
        if held:
            LEFTOVERS.append((after, held))


def progress(what: str, times: dict[str, list[float]]) -> None:
    last = ", ".join(f"{v} {1e3 * t[-1]:.0f} ms" for v, t in times.items() if t)
    print(f"  [{time.strftime('%H:%M:%S')}] {what}: {last}", file=sys.stderr, flush=True)


# -- the variants ----------------------------------------------------------------------------
def bare_loop(client: Client, code: BerrutCode, shares: list, k: int, seconds: float) -> tuple:
    """The floor: one map, first k, one gather, decode on the client. Returns (seconds, out)."""
    start = time.perf_counter()
    futures = client.map(work, shares, seconds=seconds, pure=False)
    index = {f.key: i for i, f in enumerate(futures)}
    ac = as_completed(futures)
    first = []
    for fut in ac:
        if fut.status == "finished":
            first.append(fut)
            if len(first) == k:
                break
    results = client.gather(first)
    out = code.decode(results, [index[f.key] for f in first])
    elapsed = time.perf_counter() - start
    ac.clear()
    client.cancel([f for f in futures if f.key not in {g.key for g in first}])
    return elapsed, out


def coded(client: Client, X: np.ndarray, **options: Any) -> tuple:
    start = time.perf_counter()
    out = dask_bacc.map_coded(work, X, client=client, progress=False, **options)
    return time.perf_counter() - start, out


def rel_error(out: np.ndarray, exact: np.ndarray) -> float:
    out = np.asarray(out).reshape(exact.shape)
    return float(np.linalg.norm(out - exact) / np.linalg.norm(exact))


def make_cluster(n_workers: int, processes: bool) -> LocalCluster:
    return LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=processes,
        dashboard_address=None,
        # no memory limit: in-process workers all see the one process's memory, and with a
        # limit of total/W each (376 MiB for W=64 here) they pause and strand pinned tasks
        memory_limit=0,
        silence_logs=logging.getLogger("distributed").level,
    )


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _where_bacc() -> str:
    import dask_bacc as mod

    return mod.__file__


# -- part job ----------------------------------------------------------------------------------
def job_at(args: argparse.Namespace, N: int, rng: np.random.Generator) -> dict[str, Any]:
    """Part job at one N: timed repetitions, then one counted job per variant."""
    K, k, s = N // 2, math.ceil(0.75 * N), args.seconds
    X = np.random.default_rng(N).standard_normal((K * args.rows, args.cols))
    exact = np.tanh(X)
    code = BerrutCode(K, N)
    shares = list(code.encode(X.reshape(K, args.rows, args.cols)))
    t_cluster = time.perf_counter()
    with make_cluster(N, args.processes) as cluster, Client(cluster) as client:
        client.wait_for_workers(N)
        where = set(client.run(_where_bacc).values())
        startup = time.perf_counter() - t_cluster
        options = {"seconds": s, "n_blocks": K, "n_coded": N}
        variants = {
            "bare loop": functools.partial(bare_loop, client, code, shares, k, s),
            "map_coded": functools.partial(coded, client, X, wait=k, **options),
            "map_coded default wait": functools.partial(coded, client, X, wait=None, **options),
        }
        for v, fn in variants.items():  # warm-up: imports, connections, plugins
            fn()
            settle(client, s, f"job N={N} {v} (warm-up)")
        times: dict[str, list[float]] = {v: [] for v in variants}
        errors: dict[str, list[float]] = {v: [] for v in variants}
        rss_before = worker_rss(client)
        for rep in range(args.reps):
            for v in rng.permutation(list(variants)):
                elapsed, out = variants[v]()
                times[v].append(elapsed)
                errors[v].append(rel_error(out, exact))
                del out
                settle(client, s, f"job N={N} {v}")
            progress(f"N={N} rep {rep + 1}/{args.reps}", times)
        rss_after = worker_rss(client)
        # one counted job per variant, outside the timed repetitions
        client.register_plugin(MessageCounter(), name=COUNTER_NAME)
        counts = {}
        for v, fn in variants.items():
            client.run_on_scheduler(_reset_counts)
            fn()
            time.sleep(0.5)
            counts[v] = client.run_on_scheduler(_read_counts)
            settle(client, s, f"job N={N} {v} (counted)")
    med = {v: float(np.median(t)) for v, t in times.items()}
    print(
        f"  N={N}: " + ", ".join(f"{v} {1e3 * m:.0f} ms" for v, m in med.items()),
        file=sys.stderr,
        flush=True,
    )
    return {
        "N": N,
        "K": K,
        "k": k,
        "workers": N,
        "cluster_startup_s": startup,
        "dask_bacc_on_workers": sorted(where),
        "times": times,
        "median": med,
        "ratio_to_bare": {v: med[v] / med["bare loop"] for v in med},
        "extra_ms_per_task": {
            v: 1e3 * (med[v] - med["bare loop"]) / N for v in med if v != "bare loop"
        },
        "median_rel_error": {v: float(np.median(e)) for v, e in errors.items()},
        "counts": counts,
        "rss_mib_before_after_reps": [rss_before, rss_after],
    }


def run_job(args: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    results = {str(N): job_at(args, N, rng) for N in args.N}
    Ns = sorted(int(n) for n in results)
    scaling = {}
    if len(Ns) > 1:
        lo, hi = results[str(Ns[0])], results[str(Ns[-1])]
        for v in ("map_coded", "map_coded default wait"):
            a, b = lo["extra_ms_per_task"][v], hi["extra_ms_per_task"][v]
            scaling[v] = b / a if a > 0 else float("nan")
    return {"per_N": results, "extra_per_task_scaling": scaling, "scaling_N": [Ns[0], Ns[-1]]}


def job_tables(res: dict[str, Any], args: argparse.Namespace) -> str:
    mode = "multi-process" if args.processes else "in-process"
    per = res["per_N"]
    lines = [
        f"### Part job: no stragglers ({mode}, W = N workers x 1 thread, "
        f"{1e3 * args.seconds:.0f} ms tasks, median of {args.reps})",
        "",
        "| N | K | k | bare loop (s) | map_coded (s) | map_coded / bare | extra ms per coded "
        "task | map_coded default wait (s) | default wait / bare | extra ms per task "
        "(default wait) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in per.values():
        m, q, x = r["median"], r["ratio_to_bare"], r["extra_ms_per_task"]
        d = "map_coded default wait"
        lines.append(
            f"| {r['N']} | {r['K']} | {r['k']} | {m['bare loop']:.3f} | {m['map_coded']:.3f} | "
            f"{q['map_coded']:.2f} | {x['map_coded']:.1f} | {m[d]:.3f} | {q[d]:.2f} | "
            f"{x[d]:.1f} |"
        )
    if res["extra_per_task_scaling"]:
        lo, hi = res["scaling_N"]
        sc = res["extra_per_task_scaling"]
        lines += [
            "",
            f"Extra client+scheduler time per coded task at N={hi} / at N={lo}: "
            f"map_coded {sc['map_coded']:.2f}, default wait "
            f"{sc['map_coded default wait']:.2f} (target <= 1.3).",
        ]
    lines += [
        "",
        "One counted job per variant (scheduler plugin; client messages = batched-stream ops "
        "+ RPC calls; scheduler handler ms = time in the handlers of the client's and the "
        "workers' messages, wall time for async ones such as update-graph, which offloads "
        "to a thread and is awaited one message after the other on the client's stream):",
        "",
        "| N | variant | graph submissions per job | tasks per job | transitions | client "
        "messages | scheduler handler ms | of which update-graph | client ops |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in per.values():
        for v in JOB_VARIANTS:
            c = r["counts"][v]
            ops = ", ".join(f"{op} {n}" for op, n in c["client_ops"].items())
            lines.append(
                f"| {r['N']} | {v} | {c['graph_submissions']} | {c['tasks']} | "
                f"{c['transitions']} | {c['client_messages']} | "
                f"{c['scheduler_handler_ms']:.1f} | "
                f"{c['handler_ms_by_op'].get('update-graph', 0.0):.1f} | {ops} |"
            )
    lines += [
        "",
        "Resident memory of the client and worker processes (MiB) before / after the timed "
        "repetitions: "
        + "; ".join(
            f"N={r['N']}: {r['rss_mib_before_after_reps'][0]:.0f} / "
            f"{r['rss_mib_before_after_reps'][1]:.0f}"
            for r in per.values()
        )
        + ".",
    ]
    lines += [
        "",
        "Median relative error of the decoded output against `np.tanh(X)` (Berrut is "
        "approximate; the same code and wait in all three):",
        "",
        "| N | " + " | ".join(JOB_VARIANTS) + " |",
        "|---:|" + "---:|" * len(JOB_VARIANTS),
    ]
    for r in per.values():
        e = r["median_rel_error"]
        lines.append(f"| {r['N']} | " + " | ".join(f"{e[v]:.2e}" for v in JOB_VARIANTS) + " |")
    return "\n".join(lines)


# -- part stragglers -----------------------------------------------------------------------
class RepStragglers(StragglerPlugin):
    """The library's straggler plugin with the job number fixed at 0: task ``i`` draws
    ``draw_delay(model, seed, 0, i)`` in every job, so all variants of a repetition (one
    seed) meet the same slow set."""

    def delay(self, **kwargs: Any) -> float:
        kwargs["seq"] = 0
        return super().delay(**kwargs)


def _take_straggler_log(dask_worker: Any) -> list:
    plugin = dask_worker.plugins.get(StragglerPlugin.name)
    if plugin is None:
        return []
    entries = list(plugin.log)
    plugin.log.clear()
    return entries


def injected(client: Client) -> list[int]:
    """Indices of the coded tasks the straggler plugin delayed since the last call."""
    logs = client.run(_take_straggler_log)
    return sorted({int(e[1]) for entries in logs.values() for e in entries if e[3] > 0})


def run_stragglers(args: argparse.Namespace, rng: np.random.Generator) -> dict[str, Any]:
    W, K, N, s = 32, 16, 32, args.seconds
    p, factor = 0.1, 10.0
    model = Bimodal(p=p, delay=0.0, factor=factor)
    X = np.random.default_rng(1).standard_normal((K * args.rows, args.cols))
    exact = np.tanh(X)
    blocks = list(X.reshape(K, args.rows, args.cols))
    seeds = [int(x) for x in rng.integers(0, 2**31, size=args.reps)]

    with make_cluster(W, False) as cluster, Client(cluster) as client:
        client.wait_for_workers(W)

        def plain(seed: int) -> tuple:
            slow = [factor if draw_delay(model, seed, 0, i, "", s) > 0 else 1.0 for i in range(K)]
            start = time.perf_counter()
            futures = client.map(work, blocks, [s] * K, slow, pure=False)
            out = np.concatenate(client.gather(futures))
            elapsed = time.perf_counter() - start
            del futures
            return elapsed, out

        variants = {
            "plain": plain,
            "map_coded": lambda seed: coded(client, X, seconds=s, n_blocks=K, n_coded=N),
            "repetition": lambda seed: coded(
                client, X, seconds=s, n_blocks=K, n_coded=N, code="repetition"
            ),
            "uncoded": lambda seed: coded(client, X, seconds=s, n_blocks=K, code="uncoded"),
        }
        for v, fn in variants.items():  # warm-up, no stragglers
            fn(0)
            settle(client, s, f"stragglers {v} (warm-up)")
        times: dict[str, list[float]] = {v: [] for v in variants}
        errors: dict[str, list[float]] = {v: [] for v in variants}
        slow_counts = []
        mismatches: list[tuple[int, str, list[int]]] = []  # delayed tasks outside the draw
        seen_by: dict[str, list[list[int]]] = {v: [] for v in variants}
        for seed in seeds:
            client.register_plugin(RepStragglers(model, seed), name=StragglerPlugin.name)
            slow = [i for i in range(N) if draw_delay(model, seed, 0, i, "", s) > 0]
            slow_counts.append(slow)
            for v in rng.permutation(list(variants)):
                elapsed, out = variants[v](seed)
                times[v].append(elapsed)
                errors[v].append(rel_error(out, exact))
                del out
                settle(client, s * factor, f"stragglers {v}")
                seen = injected(client)  # a slow task skipped after the decode is not seen
                seen_by[v].append(seen)
                if not set(seen) <= set(slow):
                    mismatches.append((seed, str(v), seen))
            progress(f"stragglers rep {len(slow_counts)}/{args.reps}", times)
        clear_stragglers(client)

    pct = {
        v: {q: float(np.percentile(t, int(q[1:]))) for q in ("p50", "p90", "p99")}
        for v, t in times.items()
    }
    return {
        "W": W,
        "K": K,
        "N": N,
        "p": p,
        "factor": factor,
        "seeds": seeds,
        "slow_tasks": slow_counts,
        "injection_mismatches": mismatches,
        "injected_delays_seen": seen_by,
        "times": times,
        "percentiles": pct,
        "median_rel_error": {v: float(np.median(e)) for v, e in errors.items()},
        "map_coded_p50_over_plain_p50": pct["map_coded"]["p50"] / pct["plain"]["p50"],
        "map_coded_p99_over_uncoded_p99": pct["map_coded"]["p99"] / pct["uncoded"]["p99"],
    }


def straggler_tables(res: dict[str, Any], args: argparse.Namespace) -> str:
    n_slow_plain = [sum(1 for i in rep if i < res["K"]) for rep in res["slow_tasks"]]
    lines = [
        f"### Part stragglers (in-process, {res['W']} workers x 1 thread, K={res['K']}, "
        f"N={res['N']}, {1e3 * args.seconds:.0f} ms tasks, {100 * res['p']:.0f}% of tasks "
        f"{res['factor']:.0f}x slow, {args.reps} repetitions)",
        "",
        "| variant | p50 (s) | p90 (s) | p99 (s) | median rel. error |",
        "|---|---:|---:|---:|---:|",
    ]
    for v in STRAGGLER_VARIANTS:
        q = res["percentiles"][v]
        lines.append(
            f"| {v} | {q['p50']:.3f} | {q['p90']:.3f} | {q['p99']:.3f} | "
            f"{res['median_rel_error'][v]:.2e} |"
        )
    lines += [
        "",
        f"map_coded p50 / plain p50 = {res['map_coded_p50_over_plain_p50']:.2f} (target <= 0.5); "
        f"map_coded p99 / uncoded p99 = {res['map_coded_p99_over_uncoded_p99']:.2f} "
        "(target <= 0.25).",
        "",
        f"Repetitions in which some of the first K tasks straggled (plain, uncoded hit): "
        f"{sum(1 for n in n_slow_plain if n)} of {len(n_slow_plain)}; slow tasks drawn per "
        f"repetition (of N={res['N']}): {[len(r) for r in res['slow_tasks']]}. Injected delays "
        f"outside the drawn set: {len(res['injection_mismatches'])} runs.",
    ]
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------
def environment() -> dict[str, Any]:
    import dask
    import distributed

    root = Path(dask_bacc.__file__).resolve().parent.parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--", "dask_bacc"],
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
    except OSError:
        rev, dirty = "", False
    return {
        "dask_bacc_file": dask_bacc.__file__,
        "dask_bacc_git_rev": rev,
        "dask_bacc_dirty": dirty,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "numpy": np.__version__,
        "loadavg_at_start": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("job", "stragglers", "all"), default="all")
    parser.add_argument("--N", type=str, default=None, help="comma-separated N (part job)")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--processes", action="store_true", help="part job: worker processes")
    parser.add_argument("--seconds", type=float, default=0.05, help="task duration")
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--cols", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=str, default=None)
    parser.add_argument("--log-level", default="ERROR", help="of the distributed loggers")
    args = parser.parse_args()
    if args.N is None:
        args.N = [8, 16] if args.processes else [8, 16, 32, 64]
    else:
        args.N = [int(n) for n in args.N.split(",") if n.strip()]
    if any(n < 2 or n % 2 for n in args.N):
        parser.error("--N must be even numbers >= 2 (K = N/2)")

    warnings.simplefilter("ignore")
    logging.getLogger("distributed").setLevel(args.log_level)
    env = environment()
    print(
        f"dask_bacc from {env['dask_bacc_file']} (rev {env['dask_bacc_git_rev'][:10]}"
        f"{', modified' if env['dask_bacc_dirty'] else ''})",
        file=sys.stderr,
    )
    rng = np.random.default_rng(args.seed)
    out: dict[str, Any] = {"config": {**vars(args)}, "environment": env}
    tables = []
    t0 = time.perf_counter()
    if args.part in ("job", "all"):
        out["job"] = run_job(args, rng)
        tables.append(job_tables(out["job"], args))
    if args.part in ("stragglers", "all"):
        out["stragglers"] = run_stragglers(args, rng)
        tables.append(straggler_tables(out["stragglers"], args))
    out["wall_seconds"] = time.perf_counter() - t0
    out["environment"]["loadavg_at_end"] = os.getloadavg()
    out["leftover_tasks"] = LEFTOVERS
    if LEFTOVERS:
        tables.append(
            "Tasks still on the scheduler after a run had settled (leak?): "
            + "; ".join(f"{n} after {what}" for what, n in LEFTOVERS)
        )
    print("\n\n".join(tables))
    load = ", ".join(f"{x:.1f}" for x in env["loadavg_at_start"] + env["loadavg_at_end"][:1])
    print(
        f"\n(wall time {out['wall_seconds']:.0f} s; dask_bacc from {env['dask_bacc_file']}; "
        f"load average 1/5/15 min at start, 1 min at end: {load})"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
