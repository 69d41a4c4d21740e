"""The regime map's equal-resources axis (issue 39): a fixed cluster, a fixed dataset.

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

Per cell and strategy: p50 / p90 / p99 of the time to answer, the thread-seconds of ``f``
per answer (every call, stragglers to their end, backups included) and the error against
plain Dask's answer (0: exact)::

    python benchmarks/equal_resources.py                    # W = 16, 10 rounds
    python benchmarks/equal_resources.py --workers 64 --rounds 20 --out result.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

#: one-job strategies; "spline-r1.25" / "spline-r1.5": the systematic spline with K = W / r
#: blocks (rounded down) and N = W
STRATEGIES = ("plain", "hedged", "speculative", "repetition", "default")
APPROX = ("spline-r1.25", "spline-r1.5")


def costly(block: np.ndarray, unit: float, p: float, burn: bool = False) -> np.ndarray:
    """``unit`` seconds per row of work (a sleep), 10x with probability ``p``; with
    ``burn`` the straggler's extra 9x is a busy loop (it holds a core, as a slow task on a
    real cluster does). The thread-seconds are added to the worker's tally."""
    from distributed import get_worker

    t0 = time.perf_counter()
    seconds = unit * len(block)
    time.sleep(seconds)
    if np.random.default_rng().random() < p:  # fresh entropy: i.i.d. in every process
        if burn:
            end = time.perf_counter() + 9 * seconds
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(9 * seconds)
    w = get_worker()
    w._bench_busy = getattr(w, "_bench_busy", 0.0) + time.perf_counter() - t0
    return np.tanh(block) * 2.0


def _busy(dask_worker: Any) -> tuple[int, float]:
    return dask_worker.state.executing_count, getattr(dask_worker, "_bench_busy", 0.0)


def wait_idle(client: Any) -> float:
    """Wait until no worker runs a task; the thread-seconds of f so far."""
    while True:
        got = client.run(_busy)
        if all(n == 0 for n, _ in got.values()):
            return sum(s for _, s in got.values())
        time.sleep(0.02)


def one_job(
    client: Any, strategy: str, X: np.ndarray, W: int, unit: float, p: float, burn: bool
) -> Any:
    import dask_bacc

    args = (unit, p, burn)
    if strategy == "plain":
        blocks = np.array_split(X, W)
        futs = client.map(costly, blocks, *[[a] * W for a in args], pure=False)
        return np.concatenate(client.gather(futs))
    if strategy == "default":  # what a user gets: no code=, no n_blocks=
        return dask_bacc.map_coded(costly, X, *args, client=client)
    if strategy in APPROX:  # the rows that do not divide into K blocks are dropped
        K = int(W / float(strategy.split("-r")[1]))
        rows = X.shape[0] // K * K
        out = dask_bacc.map_coded(
            costly, X[:rows], *args, code="systematic-spline", n_blocks=K, n_coded=W,
            client=client,
        )  # fmt: skip
        return np.concatenate([out, np.tanh(X[rows:]) * 2.0])
    K = W // 2 if strategy == "repetition" else W
    return dask_bacc.map_coded(costly, X, *args, code=strategy, n_blocks=K, client=client)


def waves_job(client: Any, strategy: str, x: Any, unit: float, p: float, burn: bool) -> Any:
    import dask_bacc

    y = x.map_blocks(costly, unit, p, burn, dtype=float)
    if strategy == "plain":
        return y.compute()
    with dask_bacc.coding(code=strategy, only=costly):
        return y.compute()


def summarise(times: list[float], base: list[float]) -> dict[str, float]:
    q = lambda v, f: float(np.quantile(v, f))  # noqa: E731
    return {
        "p50": q(times, 0.5) / q(base, 0.5),
        "p90": q(times, 0.9) / q(base, 0.9),
        "p99": q(times, 0.99) / q(base, 0.99),
        "p50_s": q(times, 0.5),
        "p90_s": q(times, 0.9),
    }


def run_cell(
    client: Any,
    strategies: list[str],
    rounds: int,
    seed: int,
    job: Callable[[str], Any],
    reference: np.ndarray,
    concurrent: int = 1,
) -> dict[str, Any]:
    rng = random.Random(seed)
    times: dict[str, list[float]] = {s: [] for s in strategies}
    busy: dict[str, list[float]] = {s: [] for s in strategies}
    errors: dict[str, float] = dict.fromkeys(strategies, 0.0)
    for _ in range(rounds):
        order = list(strategies)
        rng.shuffle(order)
        for s in order:
            before = wait_idle(client)
            out: list[Any] = [None] * concurrent
            t0 = time.perf_counter()
            if concurrent == 1:
                out[0] = job(s)
            else:

                def run(i: int, s: str = s, out: list[Any] = out) -> None:
                    out[i] = job(s)

                threads = [threading.Thread(target=run, args=(i,)) for i in range(concurrent)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            times[s].append(time.perf_counter() - t0)
            busy[s].append((wait_idle(client) - before) / concurrent)
            for o in out:  # relative error of the whole answer (0: identical)
                diff = np.linalg.norm(np.asarray(o) - reference) / np.linalg.norm(reference)
                errors[s] = max(errors[s], float(diff))
    base = times["plain"]
    result = {}
    for s in strategies:
        result[s] = {
            **summarise(times[s], base),
            "thread_seconds": float(np.median(busy[s])) / float(np.median(busy["plain"])),
            "max_error": errors[s],
            "times": times[s],
        }
        if concurrent > 1:
            result[s]["answers_per_minute"] = concurrent * 60 / float(np.median(times[s]))
    return result


def show(name: str, cell: dict[str, Any]) -> None:
    figures = {s: {k: round(v, 3) for k, v in r.items() if k != "times"} for s, r in cell.items()}
    print(name, json.dumps(figures), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--rows", type=int, default=3840)
    ap.add_argument("--task", type=float, default=0.2, help="seconds per task at --rows")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--n-parts", type=int, default=1000, help="partitions of the waves cell")
    ap.add_argument("--wave-task", type=float, default=0.02)
    ap.add_argument(
        "--cells",
        default="one,stragglers,burn,smooth,iid-approx,large,concurrent,concurrent-stragglers,waves",
    )
    ap.add_argument(
        "--strategies", default=None, help="comma-separated: only these (plain always runs)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/equal_resources.json")
    args = ap.parse_args()

    import dask
    import dask.array as da
    from distributed import Client, LocalCluster

    W = args.workers
    cells = args.cells.split(",")
    results: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "platform": platform.platform()},
        "args": vars(args),
        "cells": {},
    }
    with (
        dask.config.set({"distributed.worker.daemon": False}),
        LocalCluster(n_workers=W, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(W)
        rng = np.random.default_rng(args.seed)
        iid = rng.standard_normal((args.rows, 8))
        # smooth rows: each column a slow function of the row (what interpolation can use)
        t = np.linspace(0, 1, args.rows)[:, None]
        smooth = np.sin(2 * np.pi * t * np.arange(1, 9) / 4) + 0.5 * t
        unit = args.task / (args.rows / W)
        one = list(STRATEGIES)
        # name: (straggler probability, rows factor, burn, data, strategies, concurrent)
        table: dict[str, tuple[float, int, bool, np.ndarray, list[str], int]] = {
            "one": (0.0, 1, False, iid, one, 1),
            "stragglers": (0.1, 1, False, iid, one, 1),
            "burn": (0.1, 1, True, iid, one, 1),
            "smooth": (0.1, 1, False, smooth, ["plain", "hedged", "repetition", *APPROX], 1),
            "iid-approx": (0.1, 1, False, iid, ["plain", "hedged", *APPROX], 1),
            "large": (0.1, 4, False, iid, one, 1),
            "concurrent": (0.0, 1, False, iid, ["plain", "hedged", "repetition", "default"], 3),
            "concurrent-stragglers": (
                0.1, 1, False, iid, ["plain", "hedged", "repetition", "default"], 3,
            ),
        }  # fmt: skip
        only = None if args.strategies is None else {"plain", *args.strategies.split(",")}
        for name, (p, factor, burn, X, strategies, concurrent) in table.items():
            if name not in cells:
                continue
            if only is not None:
                strategies = [s for s in strategies if s in only]
            Xc = np.tile(X, (factor, 1)) if factor > 1 else X  # the same cost per row
            results["cells"][name] = run_cell(
                client,
                strategies,
                args.rounds,
                args.seed,
                lambda s, Xc=Xc, p=p, burn=burn: one_job(client, s, Xc, W, unit, p, burn),
                np.tanh(Xc) * 2.0,
                concurrent=concurrent,
            )
            show(name, results["cells"][name])
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
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
