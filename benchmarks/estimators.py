"""Which a-posteriori error estimate for Berrut decoding? The measurement behind the choice.

Run with ``python benchmarks/estimators.py`` (pure NumPy, about a minute on 2 cores). For
tanh, exp and sigmoid of a linear map of smooth and of i.i.d. random data, K in 4..32,
N/K in 1.25..4, 0 to N-K random or adjacent stragglers, it compares candidate estimates of
the relative decoding error with the true one and prints the share of cells (median over
4 trials) and of single decodes within a factor of 2:

- ``loo``: root mean square of the leave-one-out residuals at the returned points;
- ``split``: difference of the decodes from the even- and odd-ranked halves of the points;
- ``vario``: kriging variance of the Berrut weights under a power-law variogram fitted to
  the results;
- ``fh1``/``fh2``/``fh3``: difference between the Floater-Hormann interpolant of degree d
  and Berrut's (degree 0) at the data points (an embedded pair);
- ``fh1+cap``: ``fh1`` capped by the root mean square distance of the decoded block from
  the returned results;
- ``fh1+cap+loo`` (**the implementation**, :func:`dask_bacc.codes.estimate_error`): the
  same, scaled by the leave-one-out self-calibration factor.
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from dask_bacc.codes import BerrutCode, estimate_error
from dask_bacc.codes.estimate import barycentric_matrix, floater_hormann_weights
from dask_bacc.testing import smooth_blocks


def decode_matrix(code: BerrutCode, ret: np.ndarray, d: int) -> np.ndarray:
    z = code.worker_points[ret]
    return barycentric_matrix(code.data_points, z, floater_hormann_weights(z, d))


def variogram(code: BerrutCode, ret: np.ndarray, Y: np.ndarray, D0: np.ndarray) -> np.ndarray:
    z = code.worker_points[ret]
    lags, vals = [], []
    for k in range(1, min(3, z.size - 1) + 1):
        lags.append(np.abs(z[k:] - z[:-k]))
        vals.append(0.5 * np.sum((Y[k:] - Y[:-k]) ** 2, axis=1))
    lags, vals = np.concatenate(lags), np.concatenate(vals)
    ok = vals > 0
    if ok.sum() < 2:
        return np.zeros(code.K)
    A = np.stack([np.ones(ok.sum()), np.log(lags[ok])], 1)
    coef = np.linalg.lstsq(A, np.log(vals[ok]), rcond=None)[0]
    beta = float(np.clip(coef[1], 0.2, 2.0))
    c = np.exp(np.mean(np.log(vals[ok]) - beta * np.log(lags[ok])))

    def gamma(h):
        return c * np.abs(h) ** beta

    x = code.data_points
    G = gamma(z[:, None] - z[None, :])
    var = 2 * (D0 * gamma(x[:, None] - z[None, :])).sum(1) - np.einsum("jl,lm,jm->j", D0, G, D0)
    return np.sqrt(np.maximum(var, 0))


def candidates(code: BerrutCode, ret: np.ndarray, Y: np.ndarray) -> dict[str, float]:
    """Every candidate's estimate of the overall relative error (``ret`` sorted)."""
    D0 = decode_matrix(code, ret, 0)
    est = D0 @ Y
    norm = np.linalg.norm(est)
    out = {}
    z = code.worker_points[ret]
    res = []
    for k in range(ret.size):
        o = np.delete(np.arange(ret.size), k)
        m = barycentric_matrix(z[k], z[o], floater_hormann_weights(z[o], 0))
        res.append(np.sum((m @ Y[o] - Y[k]) ** 2))
    out["loo"] = np.sqrt(np.mean(res) * code.K) / norm
    De, Do = decode_matrix(code, ret[0::2], 0), decode_matrix(code, ret[1::2], 0)
    out["split"] = np.linalg.norm(De @ Y[0::2] - Do @ Y[1::2]) / norm
    out["vario"] = np.linalg.norm(variogram(code, ret, Y, D0)) / norm
    diffs = {d: np.linalg.norm((decode_matrix(code, ret, d) - D0) @ Y, axis=1) for d in (1, 2, 3)}
    for d, e in diffs.items():
        out[f"fh{d}"] = np.linalg.norm(e) / norm
    cap = np.sqrt(np.mean(np.sum((Y[None] - est[:, None]) ** 2, axis=2), axis=1))
    out["fh1+cap"] = np.linalg.norm(np.minimum(diffs[1], cap)) / norm
    out["fh1+cap+loo"] = estimate_error(code, Y, ret).overall
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    funcs = {
        "tanh": np.tanh,
        "exp": lambda x: np.exp(0.5 * x),
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    }
    cells: dict[tuple, list[dict[str, float]]] = collections.defaultdict(list)
    for kind in ("smooth", "random"):
        for fname, phi in funcs.items():
            for K in (4, 8, 16, 32):
                for r in (1.25, 1.5, 2, 4):
                    N = round(r * K)
                    code = BerrutCode(K, N)
                    for S in sorted({0, round(0.25 * (N - K)), round(0.5 * (N - K)), N - K}):
                        for pattern in ("random", "adjacent") if S else ("none",):
                            for _ in range(args.trials):
                                X = (
                                    smooth_blocks(K, 16, 8, rng)
                                    if kind == "smooth"
                                    else rng.standard_normal((K, 16, 8))
                                )
                                W = 1.5 * rng.standard_normal((8, 8)) / np.sqrt(8)
                                exact = phi(X @ W).reshape(K, -1)
                                R = phi(code.encode(X) @ W).reshape(N, -1)
                                if pattern == "adjacent":
                                    s0 = rng.integers(0, N - S + 1)
                                    lost = np.arange(s0, s0 + S)
                                else:
                                    lost = rng.choice(N, S, replace=False)
                                ret = np.setdiff1d(np.arange(N), lost)
                                true = np.linalg.norm(
                                    decode_matrix(code, ret, 0) @ R[ret] - exact
                                ) / np.linalg.norm(exact)
                                ratios = {
                                    k: v / true for k, v in candidates(code, ret, R[ret]).items()
                                }
                                cells[(kind, fname, K, r, S, pattern)].append(ratios)
    names = list(next(iter(cells.values()))[0])
    print(f"{len(cells)} cells x {args.trials} trials\n")
    print(
        "| estimate | cells within 2x | decodes within 2x | median ratio "
        "| random data, adjacent stragglers: cells within 2x |"
    )
    print("|---|---|---|---|---|")
    for n in names:
        per_cell = np.array([np.median([t[n] for t in ts]) for ts in cells.values()])
        trials = np.array([t[n] for ts in cells.values() for t in ts])
        hard = np.array(
            [
                np.median([t[n] for t in ts])
                for k, ts in cells.items()
                if k[0] == "random" and k[5] == "adjacent"
            ]
        )

        def within(a):
            return np.mean((a >= 0.5) & (a <= 2.0))

        print(
            f"| {n} | {within(per_cell):.2f} | {within(trials):.2f} | "
            f"{np.exp(np.median(np.log(np.maximum(trials, 1e-300)))):.2f} | {within(hard):.2f} |"
        )


if __name__ == "__main__":
    main()
