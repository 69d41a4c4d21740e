"""Which points suit the spline code: equispaced (cell midpoints / span) or Chebyshev.

Pure NumPy, a few seconds: for K=8, N in (16, 32, 64), s random stragglers (1, 2, 4, 7)
and 30 trials per cell, the mean relative error of the spline decode of ``tanh(1.5 X W)``
on i.i.d. normal rows and on smooth rows (``dask_bacc.testing.smooth_blocks``), for three
point families, with Berrut at the same N as the reference. docs/codes.md has the table.

    python benchmarks/spline_points.py
"""

from __future__ import annotations

import numpy as np

from dask_bacc.codes import BerrutCode, SplineCode
from dask_bacc.codes.points import chebyshev_first, chebyshev_second, equispaced
from dask_bacc.testing import smooth_blocks

K, ROWS, FEAT = 8, 16, 8


def families(N: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {
        "equispaced (midpoints, span)": equispaced(K, N),
        "equispaced (both span)": (np.linspace(1, -1, K), np.linspace(1, -1, N)),
        "chebyshev (1st, 2nd kind)": (chebyshev_first(K), chebyshev_second(N)),
    }


def main(trials: int = 30) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for data in ("iid", "smooth"):
        for N in (16, 32, 64):
            for s in (1, 2, 4, 7):
                errs: dict[str, list[float]] = {}
                for _ in range(trials):
                    X = (
                        rng.standard_normal((K, ROWS, FEAT))
                        if data == "iid"
                        else smooth_blocks(K, ROWS, FEAT, rng)
                    )
                    W = 1.5 * rng.standard_normal((FEAT, FEAT)) / np.sqrt(FEAT)
                    truth = np.tanh(X @ W)
                    returned = np.sort(rng.permutation(N)[: N - s])
                    codes = {"berrut": BerrutCode(K, N)}
                    for name, (alpha, z) in families(N).items():
                        code = SplineCode(K, N)
                        code._alpha, code._z = alpha, z
                        codes[name] = code
                    for name, code in codes.items():
                        Y = np.tanh(code.encode(X) @ W)
                        est = code.decode(Y[returned], returned)
                        err = np.linalg.norm(est - truth) / np.linalg.norm(truth)
                        errs.setdefault(name, []).append(err)
                rows.append((data, N, s, {k: float(np.mean(v)) for k, v in errs.items()}))
    names = list(rows[0][3])
    print("| data | N | s | " + " | ".join(names) + " |")
    print("|---|---|---|" + "---|" * len(names))
    for data, N, s, m in rows:
        print(f"| {data} | {N} | {s} | " + " | ".join(f"{m[n]:.4f}" for n in names) + " |")


if __name__ == "__main__":
    main()
