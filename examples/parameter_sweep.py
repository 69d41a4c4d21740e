"""A Monte Carlo option-pricing sweep through dask-bacc, against plain ``client.map``.

Run it with::

    python examples/parameter_sweep.py            # K=12 blocks, N=16 coded tasks, ~15 s
    python examples/parameter_sweep.py --smoke    # a few seconds
    python examples/parameter_sweep.py --p 0       # no stragglers

The sweep (:func:`dask_bacc.bench.workloads.sweep_grid`) prices European and Asian calls
over a grid of volatilities and maturities (one per block) times a ladder of spots and
strikes (the same in every block), with a fixed-seed Monte Carlo pricer
(:class:`~dask_bacc.bench.workloads.PricerTask`): the prices at a fixed row position change
smoothly from block to block, the regime where an approximate code's interpolation is
accurate. Each block straggles with probability ``--p`` by ``--delay`` seconds (the same
:class:`~dask_bacc.bench.workloads.Straggling` wrapper on every strategy's tasks).

Three ways to run the K blocks on an embedded in-process cluster of N workers:

* ``plain``: ``client.map`` + ``gather`` (waits for its stragglers);
* ``hedged``: ``dask_bacc.submit_coded(..., code="hedged")``, exact: backs up a late task;
* ``systematic-spline``: N coded tasks, decoded from the first 3/4 of them (approximate).

Per strategy, over ``--rounds`` interleaved rounds: the median time to the answer, the
worst round's error against the exact prices in currency units ("0.003 on a median price of
12") and the largest of the jobs' own ``report.error_estimate``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np

STRATEGIES = ("plain", "hedged", "systematic-spline")


def wait_idle(cluster: Any, timeout: float = 60.0) -> None:
    """Wait until no worker thread runs a task: a straggler whose job no longer wants it
    still holds its thread until its delay is over (as a real straggler would), and the
    next job should start on an idle cluster."""
    end = time.monotonic() + timeout
    while any(w.state.executing_count for w in cluster.workers.values()):
        if time.monotonic() > end:
            raise TimeoutError("the workers did not go idle")
        time.sleep(0.01)


def run(
    K: int, N: int, rows: int, paths: int, p: float, delay: float, rounds: int, seed: int = 0
) -> dict[str, list[dict[str, Any]]]:
    """Run every strategy ``rounds`` times (interleaved); return per strategy one record
    per round: ``time``, ``error`` (from :func:`~dask_bacc.bench.workloads.price_error`)
    and ``error_estimate``."""
    from distributed import Client, LocalCluster

    import dask_bacc
    from dask_bacc.bench import workloads as wl
    from dask_bacc.testing import Bimodal

    grid = wl.sweep_grid(K * rows, seed=seed, blocks=K)
    task = wl.PricerTask(paths=paths, seed=seed)
    exact = task(grid)  # here, for the errors
    stragglers = Bimodal(p=p, delay=delay)
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in STRATEGIES}
    with (
        LocalCluster(
            n_workers=N, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        # warm up (the common random numbers are drawn once per process), outside the timings
        client.gather(client.map(task, np.array_split(grid[:N], N), pure=False))
        job_no = 0
        for _ in range(rounds):
            for name in STRATEGIES:
                # a fresh job number per job: each draws its own stragglers
                f = wl.Straggling(task, stragglers, seed=seed, job=job_no)
                job_no += 1
                t0 = time.perf_counter()
                estimate = None
                if name == "plain":
                    futures = client.map(f, np.split(grid, K), pure=False)
                    prices = np.concatenate(client.gather(futures))
                else:
                    with warnings.catch_warnings():
                        # an approximate decode may warn about its error: printed below
                        warnings.simplefilter("ignore", dask_bacc.ApproximationWarning)
                        # hedged runs K tasks and its own backups: no n_coded
                        kw = {} if name == "hedged" else {"n_coded": N}
                        job = dask_bacc.submit_coded(
                            f, grid, code=name, n_blocks=K, client=client, **kw
                        )
                        prices = job.result()
                    estimate = job.report.error_estimate
                elapsed = time.perf_counter() - t0
                wait_idle(cluster)
                out[name].append(
                    {
                        "time": elapsed,
                        "error": wl.price_error(prices, exact),
                        "error_estimate": estimate,
                    }
                )
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: run and print one line per strategy."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a few seconds: K=4, N=6")
    parser.add_argument("-K", "--blocks", type=int, default=12)
    parser.add_argument("-N", "--coded", type=int, default=16)
    parser.add_argument("--rows", type=int, default=128, help="parameter points per block")
    parser.add_argument("--paths", type=int, default=2000, help="Monte Carlo paths (cost)")
    parser.add_argument("--p", type=float, default=0.15, help="straggler probability")
    parser.add_argument("--delay", type=float, default=1.0, help="straggler delay (s)")
    parser.add_argument("--rounds", type=int, default=3, help="jobs per strategy")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.smoke:
        args.blocks, args.coded, args.rows, args.paths = 4, 6, 32, 500
        args.delay, args.rounds = 0.3, 2
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if not 1 <= args.blocks < args.coded:
        parser.error(f"need 1 <= K < N, got K={args.blocks}, N={args.coded}")
    results = run(
        args.blocks, args.coded, args.rows, args.paths, args.p, args.delay, args.rounds, args.seed
    )
    print(
        f"{args.blocks * args.rows} option prices in K={args.blocks} blocks, N={args.coded} "
        f"coded tasks, {args.paths} paths; stragglers: p={args.p}, +{args.delay:g} s"
    )
    print(f"  per strategy, over {args.rounds} rounds: median time, and the worst round's error")
    for name, recs in results.items():
        t = float(np.median([r["time"] for r in recs]))
        worst = max(recs, key=lambda r: r["error"]["max_abs"])
        e = worst["error"]
        ests = [r["error_estimate"] for r in recs if r["error_estimate"] is not None]
        print(
            f"  {name:18s} {t:6.2f} s   error: median {e['median_abs']:.4f}, "
            f"worst {e['max_abs']:.4f} on a median price of {e['median_price']:.2f} "
            f"(relative {e['rel']:.1e}); error_estimate "
            + (f"up to {max(ests):.1e}" if ests else "-")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
