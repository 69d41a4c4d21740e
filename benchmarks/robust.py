"""Byzantine-robust decoding: how often corrupted results are found, and what it saves.

Run with ``python benchmarks/robust.py`` (pure NumPy, about a minute). For seeded random
cases (K in 2..10, A in 1..2 corrupted results, 0-4 stragglers, 0-6 spare tasks beyond
2K + S + 2A - 1, plain and systematic Berrut, f = tanh of a linear map of smooth data, and
of i.i.d. random data), it corrupts A of the returned results in one of three ways
(``garbage``: random values 10x the results' scale; ``noise``: plus noise 3x the scale;
``flip``: the sign flipped) and reports for :func:`dask_bacc.codes.locate_corrupted` the
share of cases where exactly the corrupted results were excluded, the share with a clean
result excluded, and the median decoded error without corruption, with corruption and no
protection, and with robust decoding; for :func:`dask_bacc.codes.detect_inconsistent`
(report only) the share where a corrupted result was flagged. The "none" row has no
corruption: anything excluded or flagged there is a false alarm.
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from dask_bacc.codes import BerrutCode, detect_inconsistent, locate_corrupted
from dask_bacc.codes.robust import required_results
from dask_bacc.testing import smooth_blocks


def workload(K: int, N: int, S: int, data: str, systematic: bool, rng: np.random.Generator):
    if data == "smooth":
        X = smooth_blocks(K, 12, 6, rng)
    else:
        X = rng.standard_normal((K, 12, 6))
    W = 0.6 * rng.standard_normal((6, 5))
    code = BerrutCode(K, N, systematic=systematic)
    results = np.tanh(code.encode(X) @ W)
    returned = np.sort(rng.permutation(N)[: N - S])
    return code, results[returned], returned, np.tanh(X @ W)


def corrupt(results: np.ndarray, cols, kind: str, rng: np.random.Generator) -> np.ndarray:
    out = results.copy()
    scale = float(np.sqrt(np.mean(results**2)))
    for c in cols:
        if kind == "garbage":
            out[c] = 10 * scale * rng.standard_normal(out[c].shape)
        elif kind == "flip":
            out[c] = -out[c]
        elif kind == "noise":
            out[c] = out[c] + 3 * scale * rng.standard_normal(out[c].shape)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=150, help="per data kind")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = collections.defaultdict(list)
    for data in ("smooth", "random"):
        for _ in range(args.cases):
            K, A = int(rng.integers(2, 11)), int(rng.integers(1, 3))
            S, spare = int(rng.integers(0, 5)), int(rng.integers(0, 7))
            N = required_results(K, A) + S + spare
            code, res, ret, exact = workload(K, N, S, data, bool(rng.integers(2)), rng)
            norm = np.linalg.norm(exact)
            clean = np.linalg.norm(code.decode(res, ret) - exact) / norm
            for kind in ("none", "garbage", "noise", "flip"):
                cols = [] if kind == "none" else rng.choice(ret.size, A, replace=False).tolist()
                bad = corrupt(res, cols, kind, rng)
                found = locate_corrupted(code, bad, ret, A).flagged
                keep = [c for c in range(ret.size) if int(ret[c]) not in found]
                robust = np.linalg.norm(code.decode(bad[keep], ret[keep]) - exact) / norm
                plain = np.linalg.norm(code.decode(bad, ret) - exact) / norm
                flagged = set(detect_inconsistent(code, bad, ret).flagged)
                truth = set(ret[cols].tolist())
                rows[(data, kind)].append(
                    (
                        set(found) == truth,
                        bool(set(found) - truth),
                        bool(flagged & truth) if truth else not flagged,
                        clean,
                        plain,
                        robust,
                    )
                )
    print(
        "| data | corruption | cases | excluded exactly the corrupted | a clean one excluded "
        "| detector flagged one (none: flagged nothing) | error, no corruption "
        "| error, corrupted, unprotected | error, robust decoding |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (data, kind), r in rows.items():
        a = np.array(r, dtype=float)
        print(
            f"| {data} | {kind} | {len(r)} | {a[:, 0].mean():.2f} | {a[:, 1].mean():.2f} | "
            f"{a[:, 2].mean():.2f} | {np.median(a[:, 3]):.3g} | {np.median(a[:, 4]):.3g} | "
            f"{np.median(a[:, 5]):.3g} |"
        )


if __name__ == "__main__":
    main()
