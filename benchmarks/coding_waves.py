"""``coding(code=...)`` (or ``map_coded``) on a layer of many short tasks in waves, against
plain Dask.

1,000 partitions of a persisted dask array on W one-thread worker processes
(``LocalCluster(processes=True)``, its dashboard on), ``f`` a 20 ms sleep per partition,
10x slow with probability 0 and ``--p``; plain ``y.compute()`` and the same inside
``dask_bacc.coding(code=..., only=f)``, interleaved in a shuffled order each round, the
cluster idle before each. Prints the median and 90th percentile of each, and their
ratios (the layer's cost over plain Dask's)::

    python benchmarks/coding_waves.py --rounds 10

``--entry map_coded`` runs ``dask_bacc.map_coded(costly, x, ..., code=...)`` instead: the
1,000 chunks are more blocks than the workers, so the exact codes run them in waves
(``runtime/waves.py``)::

    python benchmarks/coding_waves.py --entry map_coded --code repetition --rounds 10

``--entry coding map_coded`` interleaves both with plain Dask in one run: the layer job
driven from a task on a worker (``coding()``'s driver) and from the client
(``map_coded``), the two places a driver can run::

    python benchmarks/coding_waves.py --entry coding map_coded --rounds 10

To compare two versions of dask-bacc in one sitting, run it from a worktree of each,
alternating (each run's ratios are against its own plain Dask)::

    git worktree add /tmp/before <commit>
    for i in 1 2; do
        PYTHONPATH=/tmp/before python benchmarks/coding_waves.py --tag before
        python benchmarks/coding_waves.py --tag after
    done
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from typing import Any

import numpy as np
from equal_resources import costly, wait_idle


def compute(x: Any, strategy: str, unit: float, p: float, entry: str = "coding") -> Any:
    import dask_bacc

    y = x.map_blocks(costly, unit, p, False, dtype=float)
    if strategy == "plain":
        return y.compute()
    if entry == "map_coded":
        return dask_bacc.map_coded(costly, x, unit, p, False, code=strategy).compute()
    with dask_bacc.coding(code=strategy, only=costly):
        return y.compute()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--n-parts", type=int, default=1000)
    ap.add_argument("--task", type=float, default=0.02, help="seconds per partition")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--p", type=float, default=0.05, help="straggler probability (10x)")
    ap.add_argument("--code", default="hedged")
    ap.add_argument("--entry", nargs="+", choices=("coding", "map_coded"), default=["coding"])
    ap.add_argument("--tag", default="")
    ap.add_argument("--json", default=None, help="write the times here too")
    args = ap.parse_args()

    import dask
    import dask.array as da
    from distributed import Client, LocalCluster

    with (
        dask.config.set({"distributed.worker.daemon": False}),
        LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True) as cluster,
        Client(cluster) as client,
    ):
        client.wait_for_workers(args.workers)
        X = np.random.default_rng(1).standard_normal((args.n_parts * 4, 8))
        x = da.from_array(X, chunks=(4, 8)).persist()
        unit = args.task / 4
        # (strategy, entry): plain Dask once, the code through each entry point
        variants = [("plain", "plain"), *((args.code, e) for e in args.entry)]
        for s, e in variants:  # warm-up: imports, the plugins
            compute(x, s, unit, 0.0, e)
        rng = random.Random(0)
        out: dict[str, Any] = {"cores": os.cpu_count(), "args": vars(args), "cells": {}}
        for p in (0.0, args.p):
            times: dict[str, list[float]] = {e: [] for _, e in variants}
            for _ in range(args.rounds):
                rng.shuffle(variants)
                for s, e in variants:
                    wait_idle(client)
                    t0 = time.perf_counter()
                    got = compute(x, s, unit, p, e)
                    times[e].append(time.perf_counter() - t0)
                    np.testing.assert_array_equal(got, np.tanh(X) * 2.0)
            q = {e: (np.median(v), np.quantile(v, 0.9)) for e, v in times.items()}
            b50, b90 = q["plain"]
            for e in args.entry:
                c50, c90 = q[e]
                print(
                    f"{args.tag} {e} p={p:g}: plain {b50:.2f} s (p90 {b90:.2f}), "
                    f"{args.code} {c50:.2f} s (p90 {c90:.2f}): {c50 / b50:.2f}x p50, "
                    f"{c90 / b90:.2f}x p90",
                    flush=True,
                )
            out["cells"][str(p)] = times
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
