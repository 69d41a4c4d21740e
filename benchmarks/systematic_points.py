"""Where should systematic Berrut put its N-K non-systematic worker points?

Run with ``python benchmarks/systematic_points.py`` (pure NumPy, a few seconds).

Systematic Berrut's worker points are the K data points alpha_j plus N-K further points.
This compares placements of those further points by the relative error of the decoded
output, for random straggler sets (the first N-S of N results, S stragglers drawn
uniformly), against plain (non-systematic) Berrut at the same N:

- ``interior-first``: fill the K-1 gaps between data points first, from the middle
  outwards, then the two outer gaps, which start at +-1;
- ``outer-first``: the two outer gaps first, then the interior ones;
- ``snapped-chebyshev`` (what ``systematic_points`` does): Chebyshev points of the second
  kind for N, with the point nearest each alpha_j moved onto alpha_j.

f is ``tanh(X W)`` of i.i.d. normal rows (a one-layer network), ``X`` (K*32, 16).
"""

from __future__ import annotations

import argparse

import numpy as np

from dask_bacc.codes import chebyshev_first, chebyshev_second
from dask_bacc.codes.berrut import berrut_matrix
from dask_bacc.codes.points import systematic_points


def gap_filling(k: int, n: int, outer_first: bool) -> np.ndarray:
    """Data points plus N-K points spread evenly over the gaps they leave in [-1, 1]."""
    alpha = chebyshev_first(k)
    edges = np.concatenate([[1.0], alpha, [-1.0]])
    counts = np.zeros(k + 1, dtype=int)
    interior = sorted(range(1, k), key=lambda g: (abs(g - k / 2), g))
    order = [0, k, *interior] if outer_first else [*interior, 0, k]
    for extra in range(n - k):
        counts[order[extra % len(order)]] += 1
    pts = []
    for g in range(k + 1):
        hi, lo, m = edges[g], edges[g + 1], counts[g]
        if g == 0:
            pts += list(np.linspace(hi, lo, m, endpoint=False))
        elif g == k:
            pts += list(np.linspace(hi, lo, m + 1)[1:])
        else:
            pts += list(np.linspace(hi, lo, m + 2)[1:-1])
        if g < k:
            pts.append(alpha[g])
    return np.asarray(pts)


PLACEMENTS = {
    "plain-berrut": lambda k, n: chebyshev_second(n),
    "interior-first": lambda k, n: gap_filling(k, n, outer_first=False),
    "outer-first": lambda k, n: gap_filling(k, n, outer_first=True),
    "snapped-chebyshev": lambda k, n: systematic_points(k, n)[0],
}


def rel_error(z, alpha, X, f, returned):
    E = berrut_matrix(z, alpha)
    coded = np.tensordot(E, X, axes=1)
    ret = np.sort(returned)
    D = berrut_matrix(alpha, z[ret])
    est = np.tensordot(D, f(coded[ret]), axes=1)
    exact = f(X)
    return np.linalg.norm(est - exact) / np.linalg.norm(exact)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    print("median relative error over random straggler sets (lower is better)\n")
    names = list(PLACEMENTS)
    print("| K | N | stragglers | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    scores: dict[str, list[float]] = {name: [] for name in names}
    for K in (4, 8, 16):
        W = rng.standard_normal((16, 8)) / 4

        def f(x, W=W):
            return np.tanh(x @ W)

        X = rng.standard_normal((K, 32, 16))
        for ratio in (1.5, 2.0):
            N = int(ratio * K)
            alpha = chebyshev_first(K)
            for S in sorted({0, 1, max(1, (N - K) // 2), N - K}):
                draws = [rng.permutation(N)[: N - S] for _ in range(args.trials)]
                row = []
                for name in names:
                    z = PLACEMENTS[name](K, N)
                    row.append(np.median([rel_error(z, alpha, X, f, r) for r in draws]))
                if S > 0:
                    for name, v in zip(names, row, strict=True):
                        scores[name].append(v)
                best = min(row[1:])
                cells = [
                    f"**{v:.3g}**" if (i > 0 and v == best) else f"{v:.3g}"
                    for i, v in enumerate(row)
                ]
                print(f"| {K} | {N} | {S} | " + " | ".join(cells) + " |")
    means = [float(np.mean(scores[n])) for n in names]
    print("| all | | mean over S > 0 | " + " | ".join(f"{m:.3g}" for m in means) + " |")


if __name__ == "__main__":
    main()
