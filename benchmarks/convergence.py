"""Berrut's error against N at a fixed number of stragglers (pure NumPy, a few seconds).

Run with ``python benchmarks/convergence.py``. For K = 8 blocks of i.i.d. normal rows and
f = tanh (elementwise, smooth), it decodes from all but S randomly chosen coded results
and reports the median relative error ``||est - f(X)|| / ||f(X)||`` over random straggler
sets, for N = 16 ... 256. docs/design.md ("The formulas") expects first-order convergence:
error ~ 1/N, so the column "error x N" should level off.
"""

from __future__ import annotations

import argparse

import numpy as np

from dask_bacc.codes import BerrutCode


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--K", type=int, default=8)
    p.add_argument("--trials", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    X = rng.standard_normal((args.K, 16, 8))
    exact = np.tanh(X)
    print(f"K={args.K}, f=tanh, median relative error over {args.trials} straggler sets\n")
    print("| N | S=0 | S=1 | S=2 | S=1: error x N |")
    print("|---|---|---|---|---|")
    for N in (16, 32, 64, 128, 256):
        code = BerrutCode(args.K, N)
        results = np.tanh(code.encode(X))
        row = []
        for S in (0, 1, 2):
            errs = []
            for _ in range(args.trials if S else 1):
                ret = np.sort(rng.permutation(N)[: N - S])
                est = code.decode(results[ret], ret)
                errs.append(np.linalg.norm(est - exact) / np.linalg.norm(exact))
            row.append(float(np.median(errs)))
        print(f"| {N} | {row[0]:.3g} | {row[1]:.3g} | {row[2]:.3g} | {row[1] * N:.3g} |")


if __name__ == "__main__":
    main()
