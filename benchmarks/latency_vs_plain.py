"""Latency of dask-bacc against plain Dask under 10% injected stragglers.

Run it with::

    python benchmarks/latency_vs_plain.py                       # 20 rounds, ~30-60 s on 2 cores
    python benchmarks/latency_vs_plain.py --rounds 40 --json latency.json --systematic

One embedded ``LocalCluster`` (W workers x 1 thread, threads by default) runs R rounds.
Each round runs one job of every strategy, in an order shuffled per round with a seeded
generator (so no strategy always runs first, right after the previous round's stragglers):

- ``plain``: ``client.map(func, blocks)`` + ``client.gather`` over the K blocks;
- ``berrut``: ``dask_bacc.submit_coded(func, X, code="berrut", n_coded=N)`` with the
  default wait (the first 75% of the N coded results), then the decoded output;
- ``repetition``: the same with ``code="repetition"`` at the same N (exact);
- ``systematic-berrut`` with ``--systematic``.

``func`` is a two-layer MLP forward pass (tanh hidden layer, fixed random weights passed as
``*args``) over an ``(rows, 32)`` float64 array split into K row blocks.

Stragglers
----------
``Bimodal(p, delay)``: every task, independently, waits ``delay`` more seconds after
``func`` returns with probability ``p`` (default 10%). The draw for task ``index`` of job
``seq`` is ``default_rng([seed, seq, index])``, so a run is reproducible for a seed. A
per-task model was chosen over "10% slow workers re-drawn per round" because plain Dask
places its K tasks on K of the W workers itself: with slow workers, whether the plain job
is hit would depend on the scheduler's placement rather than on the straggler rate, while
with per-task draws every strategy's tasks straggle at the same rate wherever they run.

The straggler plugin delays only dask-bacc's eval tasks, so plain tasks run through
:func:`dask_bacc.testing.plain_task`, which asks the same worker plugin for the
delay of its task and sleeps it. Plain jobs use their own ``seq`` numbers
(``PLAIN_SEQ_BASE + round``), disjoint from dask-bacc's per-process job counter, so their
draws are independent of the coded jobs'.
A plain task cannot be cancelled: its delay is a ``sleep``. A coded straggler's delay
ends early once its job decoded (dask-bacc broadcasts that the job is done).

Reported per strategy: median, p90 and mean of the time from submission to the output in
hand on the client (seconds), their ratios to plain's in the same run (below 1 is faster),
the median over jobs none of whose tasks straggled (the strategy's own overhead), the
stragglers drawn and the tasks cancelled, and the median and max relative error
``||out - f(X)||_F / ||f(X)||_F`` of the output (Berrut is approximate; the others exact).
Plain's K tasks are all delayed-free in (1-p)^K of its jobs (59% for K=5, p=0.1), so its
median sits near that knife edge: read the p90 and the mean with it.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any

import numpy as np
from distributed import Client, LocalCluster

import dask_bacc
from dask_bacc.bench.demo import mlp, mlp_workload
from dask_bacc.testing import (
    Bimodal,
    clear_stragglers,
    draw_delay,
    inject_stragglers,
    plain_task,
)

PLAIN_SEQ_BASE = 1_000_000_000  # plain jobs' straggler seq numbers, far above dask-bacc's


def quantile(values: list[float], q: float) -> float:
    return float(np.quantile(np.asarray(values, dtype=float), q))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="jobs per strategy (R)")
    parser.add_argument("--workers", type=int, default=10, help="workers, 1 thread each")
    parser.add_argument("--blocks", type=int, default=5, help="K, data blocks")
    parser.add_argument("--coded", type=int, default=None, help="N, coded tasks (default 2K)")
    parser.add_argument("--delay", type=float, default=2.0, help="straggler delay, seconds")
    parser.add_argument("--p", type=float, default=0.1, help="straggler probability per task")
    parser.add_argument("--rows", type=int, default=6000, help="rows of the input array")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--systematic", action="store_true", help="add systematic Berrut")
    parser.add_argument("--processes", action="store_true", help="one process per worker")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    K = args.blocks
    N = args.coded if args.coded is not None else min(2 * K, args.workers)
    if not 1 <= K < N <= args.workers:
        parser.error(f"need 1 <= K < N <= workers, got K={K}, N={N}, workers={args.workers}")
    if args.rows % K:
        parser.error(f"--rows {args.rows} is not divisible by --blocks {K}")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")

    X, params, exact = mlp_workload(args.rows, args.seed)
    blocks = np.split(X, K)
    model = Bimodal(p=args.p, delay=args.delay)
    strategies = ["plain", "berrut", "repetition"]
    if args.systematic:
        strategies.append("systematic-berrut")

    def drawn(seq: int, n: int) -> int:
        """Tasks of job ``seq`` that drew a delay: the plugin's own draw, replayed."""
        return sum(draw_delay(model, args.seed, seq, i) > 0 for i in range(n))

    records: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    with (
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=args.processes,
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):

        def run(strategy: str, plain_seq: int) -> dict[str, Any]:
            t0 = time.perf_counter()
            if strategy == "plain":
                futures = client.map(
                    plain_task,
                    blocks,
                    [plain_seq] * K,
                    range(K),
                    [mlp] * K,
                    *[[p] * K for p in params],
                    pure=False,  # a fresh computation every round, never a cached result
                )
                out = np.concatenate(client.gather(futures), axis=0)
                latency = time.perf_counter() - t0
                rec = {"tasks": K, "seq": plain_seq, "cancelled": 0, "decoded_from": K}
            else:
                job = dask_bacc.submit_coded(
                    mlp, X, *params, code=strategy, n_coded=N, n_blocks=K, client=client
                )
                out = job.result()
                latency = time.perf_counter() - t0
                rep = job.report
                rec = {
                    "tasks": N,
                    "seq": job.seq,
                    "cancelled": rep.cancelled,
                    "decoded_from": len(rep.returned),
                    "trigger": rep.trigger,
                    "time_to_decode": rep.time_to_decode,
                }
            rec.update(
                strategy=strategy,
                latency=latency,
                rel_error=float(np.linalg.norm(out - exact) / np.linalg.norm(exact)),
            )
            return rec

        # warm-up round without stragglers: imports, connections, first serialisations
        for s in strategies:
            run(s, PLAIN_SEQ_BASE - 1)
        inject_stragglers(model, seed=args.seed, client=client)
        order_rng = np.random.default_rng([args.seed, 1])
        for r in range(args.rounds):
            for k in order_rng.permutation(len(strategies)):
                rec = run(strategies[k], PLAIN_SEQ_BASE + r)
                rec["round"] = r
                rec["stragglers"] = drawn(rec["seq"], rec["tasks"])
                records.append(rec)
        clear_stragglers(client)
    wall = time.perf_counter() - t_start

    summary: dict[str, dict[str, Any]] = {}
    for s in strategies:
        rs = [x for x in records if x["strategy"] == s]
        lat = [x["latency"] for x in rs]
        err = [x["rel_error"] for x in rs]
        summary[s] = {
            "tasks": rs[0]["tasks"],
            "median": quantile(lat, 0.5),
            "p90": quantile(lat, 0.9),
            "mean": float(np.mean(lat)),
            # the cost of the strategy itself: jobs none of whose tasks drew a delay
            "median_not_hit": quantile([x["latency"] for x in rs if x["stragglers"] == 0], 0.5)
            if any(x["stragglers"] == 0 for x in rs)
            else None,
            "max": float(np.max(lat)),
            "stragglers": sum(x["stragglers"] for x in rs),
            "jobs_hit": sum(x["stragglers"] > 0 for x in rs),
            "cancelled": sum(x["cancelled"] for x in rs),
            "median_rel_error": quantile(err, 0.5),
            "max_rel_error": float(np.max(err)),
        }
    base = summary["plain"]
    for s in strategies:
        summary[s]["median_vs_plain"] = summary[s]["median"] / base["median"]
        summary[s]["p90_vs_plain"] = summary[s]["p90"] / base["p90"]
        summary[s]["mean_vs_plain"] = summary[s]["mean"] / base["mean"]

    print(
        f"### Latency vs plain Dask: {args.rounds} rounds, {args.workers} workers x 1 thread "
        f"({'processes' if args.processes else 'threads'}), K={K}, N={N}\n\n"
        f"f = 2-layer MLP (32-128-16, tanh) on X {X.shape} float64; stragglers: "
        f"Bimodal(p={args.p}, delay={args.delay:g}s) per task, seed {args.seed}; "
        f"{platform.python_version()}, {sys.platform}, wall {wall:.0f}s.\n"
    )

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    print(
        "| strategy | tasks | median (s) | p90 (s) | mean (s) | median / plain | p90 / plain "
        "| mean / plain | median, no straggler (s) | jobs hit | stragglers drawn | cancelled "
        "| median rel. error | max rel. error |"
    )
    print("|---|" + "--:|" * 13)
    for s, v in summary.items():
        print(
            f"| {s} | {v['tasks']} | {v['median']:.3f} | {v['p90']:.3f} | {v['mean']:.3f} "
            f"| {v['median_vs_plain']:.2f} | {v['p90_vs_plain']:.2f} | {v['mean_vs_plain']:.2f} "
            f"| {fmt(v['median_not_hit'])} | {v['jobs_hit']}/{args.rounds} | {v['stragglers']} "
            f"| {'-' if s == 'plain' else v['cancelled']} "
            f"| {v['median_rel_error']:.2e} | {v['max_rel_error']:.2e} |"
        )
    print(
        "\nLatency: submission to output on the client; ratios below 1 are faster than plain. "
        "'no straggler': jobs none of\nwhose tasks drew a delay (the strategy's own overhead). "
        "'jobs hit': jobs with at least one straggling task.\n'cancelled': coded tasks still "
        "pending when the job decoded (stragglers and slow non-stragglers).\nBerrut is "
        "APPROXIMATE: its error is the decoded output's ||out - f(X)||_F / ||f(X)||_F; plain "
        "and repetition are exact.\nWith K tasks each hit with probability p, plain is "
        "delayed in 1-(1-p)^K of the jobs, so its median flips\nbetween the no-straggler "
        "time and the delay around 1-(1-p)^K = 0.5: compare p90 and mean as well."
    )

    if args.json:
        payload = {
            "config": {**vars(args), "K": K, "N": N, "shape": list(X.shape)},
            "wall_seconds": wall,
            "summary": summary,
            "jobs": records,
        }
        with open(args.json, "w") as fh:
            json.dump(payload, fh, indent=2)
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
