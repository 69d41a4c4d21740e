"""What planning K costs auto mode on the client (issue 42, item 3): the planner alone.

``code="auto"`` on a NumPy array with no ``n_blocks=`` plans at up to four K (W, W / 1.25,
W / 1.5, W / 2) instead of one. This times :func:`dask_bacc.runtime.submit.plan_job` on a
synthetic straggler model (i.i.d. 10% of draws 20x slow), uncached (a fresh function name
per call: the first plan of a function, the cost a changed model pays), for one K against
the four, with the exact strategies (no budget) and with every code (``error=0.02``),
interleaved, medians over ``--rounds``::

    python benchmarks/auto_plan_k.py --workers 16 64 --rounds 20
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import time

import numpy as np

from dask_bacc.runtime.auto import ModelView
from dask_bacc.runtime.submit import _block_counts, plan_job, weighed_codes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--rows", type=int, default=3840)
    ap.add_argument("--out", default="benchmarks/results/auto_plan_k/plan_k.json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    counter = itertools.count()
    out: dict[str, object] = {"machine": {"cores": os.cpu_count(), "platform": platform.platform()}}
    for W in args.workers:
        workers = [f"tcp://10.0.0.{j}:1" for j in range(W)]
        D = rng.lognormal(0.0, 0.05, (256, W))
        D[rng.random(D.shape) < 0.1] = 20.0
        view = ModelView(workers, D, jobs=10)
        ks = _block_counts(np.zeros((args.rows, 1)), W)
        variants = {
            f"{budget}-{label}": (budget, kk)
            for budget in ("exact", "budget-0.02")
            for label, kk in (("one K", [ks[-1]]), (f"{len(ks)} K", ks))
        }
        times: dict[str, list[float]] = {v: [] for v in variants}
        order = list(variants)
        for _ in range(args.rounds):
            random.shuffle(order)
            for v in order:
                budget, kk = variants[v]
                error = None if budget == "exact" else 0.02
                codes = [(c, {}) for c in weighed_codes(error)]
                t0 = time.perf_counter()
                for k in kk:
                    plan_job(view, k, codes, error, f"f{next(counter)}", wait="auto")
                times[v].append(time.perf_counter() - t0)
        med = {v: round(1e3 * float(np.median(t)), 2) for v, t in times.items()}
        print(f"W={W} K weighed {ks}: median ms per job {med}", flush=True)
        out[f"W={W}"] = {"ks": ks, "median_ms": med}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
