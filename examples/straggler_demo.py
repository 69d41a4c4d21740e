"""dask-bacc against plain Dask when 10% of the tasks straggle.

Run it with::

    python examples/straggler_demo.py                 # 10 workers, K=5 blocks, N=10 coded tasks
    python examples/straggler_demo.py --rounds 10 --straggler-delay 1

It starts an embedded ``LocalCluster`` (no outside services), makes every task straggle
with probability 10% (``Bimodal(p=0.1, delay=...)``), and maps a small two-layer MLP
forward pass (fixed random weights, passed as ``*args``) over a NumPy array split into K
row blocks, in four ways:

- ``plain``: ``client.map(func, blocks)`` + ``client.gather``: waits for every block;
- ``berrut``: ``dask_bacc.submit_coded(..., code="berrut")``: N coded tasks, decodes from
  the first 75% of them and cancels the rest (approximate);
- ``systematic-berrut``: Berrut with the K blocks themselves among the worker inputs;
- ``repetition``: every block computed N/K times, exact once a copy of each returned.

How the plain baseline meets the same stragglers
------------------------------------------------
The straggler plugin only delays dask-bacc's own eval tasks, so the plain tasks run
through :func:`dask_bacc.stragglers.plain_task`, a wrapper that asks the same worker plugin
(``get_worker().plugins["bacc-stragglers"].delay(...)``) for a delay after ``func``
returns and sleeps for it. The draw for a task depends only on ``(seed, seq, index)``;
plain jobs use their own ``seq`` numbers (from ``PLAIN_SEQ_BASE`` on), disjoint from
dask-bacc's per-process job counter, so every task of every strategy straggles
independently with the same probability and the same delay. A plain task cannot be
cancelled, so its delay is a plain ``sleep``; a dask-bacc straggler's delay ends early
once its job has decoded.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time

import numpy as np
from distributed import Client, LocalCluster

import dask_bacc
from dask_bacc.stragglers import Bimodal, clear_stragglers, inject_stragglers, plain_task

# Plain jobs draw their stragglers with seq = PLAIN_SEQ_BASE + job number, far above the
# seq numbers dask-bacc's coded jobs use (0, 1, 2, ... per client process).
PLAIN_SEQ_BASE = 1_000_000_000
CODED = ("berrut", "systematic-berrut", "repetition")


def mlp(x: np.ndarray, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray, b2: np.ndarray):
    """A two-layer perceptron forward pass, row by row: ``tanh(x W1 + b1) W2 + b2``."""
    return np.tanh(x @ w1 + b1) @ w2 + b2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=10, help="workers, 1 thread each")
    parser.add_argument("--blocks", type=int, default=5, help="K, data blocks")
    parser.add_argument("--coded", type=int, default=None, help="N, coded tasks (default 2K)")
    parser.add_argument("--rows", type=int, default=6000, help="rows of the input array")
    parser.add_argument("--rounds", type=int, default=5, help="jobs per strategy")
    parser.add_argument("--p", type=float, default=0.1, help="straggler probability per task")
    parser.add_argument("--straggler-delay", type=float, default=2.0, help="seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--processes", action="store_true", help="one process per worker (default: threads)"
    )
    args = parser.parse_args(argv)
    K = args.blocks
    N = args.coded if args.coded is not None else min(2 * K, args.workers)
    if not 1 <= K < N <= args.workers:
        parser.error(f"need 1 <= K < N <= workers, got K={K}, N={N}, workers={args.workers}")
    if args.rows % K:
        parser.error(f"--rows {args.rows} is not divisible by --blocks {K}")

    rng = np.random.default_rng(args.seed)
    d_in, d_hidden, d_out = 32, 128, 16
    X = rng.standard_normal((args.rows, d_in))
    params = (
        rng.standard_normal((d_in, d_hidden)) / np.sqrt(d_in),
        0.1 * rng.standard_normal(d_hidden),
        rng.standard_normal((d_hidden, d_out)) / np.sqrt(d_hidden),
        0.1 * rng.standard_normal(d_out),
    )
    exact = mlp(X, *params)
    blocks = np.split(X, K)
    model = Bimodal(p=args.p, delay=args.straggler_delay)

    def stragglers_drawn(seq: int, n: int) -> int:
        # the same draw the plugin makes (Bimodal's is independent of worker and runtime)
        return sum(
            model.draw(np.random.default_rng([args.seed, seq, i]), "", 0.0) > 0 for i in range(n)
        )

    def rel_err(out: np.ndarray) -> float:
        return float(np.linalg.norm(out - exact) / np.linalg.norm(exact))

    print(
        f"LocalCluster: {args.workers} workers x 1 thread "
        f"({'processes' if args.processes else 'threads'}); f = 2-layer MLP on X "
        f"{X.shape}, K={K} blocks, N={N} coded tasks; stragglers: each task with "
        f"p={args.p} waits {args.straggler_delay:g}s more; {args.rounds} round(s)"
    )
    with (
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=args.processes,
            dashboard_address=":0",
        ) as cluster,
        Client(cluster) as client,
    ):
        plain_seq = itertools.count(PLAIN_SEQ_BASE)

        def plain(seq: int) -> np.ndarray:
            futures = client.map(
                plain_task,
                blocks,
                [seq] * K,
                range(K),
                [mlp] * K,
                *[[p] * K for p in params],
                pure=False,  # a fresh computation every round, never a cached result
            )
            return np.concatenate(client.gather(futures), axis=0)

        def coded(code: str):
            job = dask_bacc.submit_coded(
                mlp, X, *params, code=code, n_coded=N, n_blocks=K, client=client
            )
            return job.result(), job

        # warm up (imports, connections, first serialisations) before any straggler
        plain(next(plain_seq))
        for code in CODED:
            coded(code)
        inject_stragglers(model, seed=args.seed, client=client)

        rows: dict[str, dict[str, list]] = {
            s: {"time": [], "drawn": [], "cancelled": [], "err": []} for s in ("plain", *CODED)
        }
        for _ in range(args.rounds):
            seq = next(plain_seq)
            t0 = time.perf_counter()
            out = plain(seq)
            rows["plain"]["time"].append(time.perf_counter() - t0)
            rows["plain"]["drawn"].append(stragglers_drawn(seq, K))
            rows["plain"]["cancelled"].append(0)
            rows["plain"]["err"].append(rel_err(out))
            for code in CODED:
                t0 = time.perf_counter()
                out, job = coded(code)
                rows[code]["time"].append(time.perf_counter() - t0)
                rows[code]["drawn"].append(stragglers_drawn(job.seq, N))
                rows[code]["cancelled"].append(job.report.cancelled)
                rows[code]["err"].append(rel_err(out))
        clear_stragglers(client)

    plain_mean = statistics.fmean(rows["plain"]["time"])
    header = (
        "| strategy | tasks | time to answer, mean (s) | worst (s) | stragglers drawn "
        "| tasks cancelled | rel. error (median) | speed-up vs plain (mean) |"
    )
    print()
    print(header)
    print("|" + "---|" * header.count(" | ") + "---|")
    for name, r in rows.items():
        mean = statistics.fmean(r["time"])
        print(
            f"| {name} | {K if name == 'plain' else N} | {mean:.3f} | {max(r['time']):.3f} "
            f"| {sum(r['drawn'])} | {'-' if name == 'plain' else sum(r['cancelled'])} "
            f"| {statistics.median(r['err']):.2e} | {plain_mean / mean:.2f}x |"
        )
    print(
        "\nSummed over rounds: 'stragglers drawn' = tasks that drew a delay; 'tasks "
        "cancelled' = coded tasks still pending\nwhen the job decoded (stragglers, and "
        "non-stragglers not yet back); a cancelled straggler's delay ends early.\n"
        "Relative error = ||out - f(X)||_F / ||f(X)||_F.\n"
        "Note: Berrut coded computing is APPROXIMATE for a nonlinear f: the decoded blocks "
        "are rational interpolants of f\nat the data points, not f(X_j). The error above "
        f"is for this MLP on i.i.d. random rows with K={K}, N={N}; it\ndepends on f, the "
        "data and which results arrive first, and shrinks as N grows and as fewer tasks "
        "straggle.\nPlain Dask and repetition are exact; systematic Berrut is exact only "
        "when all K systematic tasks are among\nthe results it decodes from."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
