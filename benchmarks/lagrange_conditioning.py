"""How exact is Lagrange decoding in floating point? The measurement behind its decoder.

Run with ``python benchmarks/lagrange_conditioning.py`` (pure NumPy, under a minute on 2
cores). For f(X) = X**d of random data, K in 4..32, N/K in 2..4, degree d in 1..3 and 0 to
N - threshold random or adjacent stragglers, it decodes every returned set two ways and
prints, per (K, N/K), the share of decodes off by more than 1e-6 (relative) and the worst
relative error:

- ``subset``: interpolation through ``degree*(K-1)+1`` returned points spread evenly over
  the returned set (the decoder before this benchmark; the baseline);
- ``lstsq`` (**the implementation**, :meth:`dask_bacc.codes.LagrangeCode.decoding_matrix`):
  a least-squares fit to every returned result in the Chebyshev basis.

It also checks the flag the error estimate uses (:meth:`~dask_bacc.codes.Code.amplification`
against :data:`~dask_bacc.codes.base.AMPLIFICATION_LIMIT`): the worst error of decodes the
flag passes as exact, and how many inexact decodes it misses.
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from dask_bacc.codes import LagrangeCode
from dask_bacc.codes.base import AMPLIFICATION_LIMIT
from dask_bacc.codes.lagrange import lagrange_matrix

BAD = 1e-6  # a decode off by more than this (relative) is not exact


def subset_matrix(code: LagrangeCode, ret: np.ndarray) -> np.ndarray:
    """The earlier decoder: interpolate through evenly spread returned points."""
    need = code.min_results
    chosen = ret[np.round(np.linspace(0, ret.size - 1, need)).astype(int)]
    out = np.zeros((code.K, ret.size))
    cols = np.searchsorted(ret, chosen)
    with np.errstate(all="ignore"):
        out[:, cols] = lagrange_matrix(code.data_points, code.worker_points[chosen])
    return out


def relative_error(decoded: np.ndarray, truth: np.ndarray) -> float:
    with np.errstate(all="ignore"):
        err = float(np.linalg.norm(decoded - truth) / np.linalg.norm(truth))
    return err if np.isfinite(err) else np.inf


def run(trials: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    stats: dict[tuple[int, int], dict[str, list[float]]] = collections.defaultdict(
        lambda: collections.defaultdict(list)
    )
    flags: list[tuple[float, float]] = []  # (amplification, relative error) per decode
    for K in (4, 8, 16, 32):
        for ratio in (2, 3, 4):
            N = ratio * K
            for degree in (1, 2, 3):
                if degree * (K - 1) + 1 > N:
                    continue
                code = LagrangeCode(K, N, degree=degree)
                X = rng.standard_normal((K, 40))
                Y = (code.encoding_matrix() @ X) ** degree
                truth = X**degree
                spare = N - code.min_results
                for trial in range(trials):
                    for S in range(0, spare + 1, max(1, spare // 6)):
                        if trial % 2:
                            out = rng.choice(N, S, replace=False)
                        else:  # adjacent: a run of S stragglers, wrapping around
                            out = (rng.integers(0, N) + np.arange(S)) % N
                        ret = np.setdiff1d(np.arange(N), out)
                        cell = stats[(K, ratio)]
                        subset = subset_matrix(code, ret)
                        with np.errstate(all="ignore"):
                            cell["subset"].append(relative_error(subset @ Y[ret], truth))
                        err = relative_error(code.decoding_matrix(ret) @ Y[ret], truth)
                        cell["lstsq"].append(err)
                        flags.append((code.amplification(ret), err))
    print(
        f"| K | N/K | decodes | subset: share > {BAD:g} | subset: worst | "
        f"lstsq: share > {BAD:g} | lstsq: worst |"
    )
    print("|---|---|---|---|---|---|---|")
    for (K, ratio), cell in sorted(stats.items()):
        sub, lsq = np.array(cell["subset"]), np.array(cell["lstsq"])
        print(
            f"| {K} | {ratio} | {sub.size} | {np.mean(sub > BAD):.2f} | {sub.max():.2g} | "
            f"{np.mean(lsq > BAD):.2f} | {lsq.max():.2g} |"
        )
    amp, err = np.array(flags).T
    print(
        f"\n| amplification limit | reported exact | worst error of those | reported "
        f"ill-conditioned | of those off by > {BAD:g} |"
    )
    print("|---|---|---|---|---|")
    for limit in sorted({1e3, 1e4, 1e5, 1e6, 1e7, AMPLIFICATION_LIMIT}):
        ok = amp <= limit
        mark = " (the default)" if limit == AMPLIFICATION_LIMIT else ""
        print(
            f"| {limit:g}{mark} | {ok.sum()} | {err[ok].max():.2g} | {(~ok).sum()} | "
            f"{np.sum(err[~ok] > BAD)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    run(args.trials, args.seed)


if __name__ == "__main__":
    main()
