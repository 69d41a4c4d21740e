"""Locating corrupted results with the spline codes against the Berrut codes.

Pure NumPy, under a minute: ``tanh`` of a linear map of smooth data (the workload of
tests/test_robust.py), one corrupted result (garbage, sign flip or noise, in turn) among
the returned, 200 seeds per (K, N, S), plain and systematic codes alternating. Reports the
share of clean runs with a false flag (``detect_inconsistent``) and the share of corrupted
runs where ``detect_inconsistent`` and ``locate_corrupted(A=1)`` name exactly the
corrupted result.

    python benchmarks/robust_spline.py
"""

from __future__ import annotations

import numpy as np

from dask_bacc.codes import BerrutCode, SplineCode, detect_inconsistent, locate_corrupted
from dask_bacc.testing import smooth_blocks

KINDS = ("garbage", "flip", "noise")


def run(cls, K: int, N: int, S: int, seeds: int = 200) -> tuple[float, float, float]:
    false = detected = located = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        X = smooth_blocks(K, 12, 6, rng)
        W = rng.standard_normal((6, 5)) * 0.6
        code = cls(K, N, systematic=seed % 2 == 1)
        results = np.tanh(code.encode(X) @ W)
        returned = np.sort(rng.permutation(N)[: N - S])
        clean = results[returned]
        false += bool(detect_inconsistent(code, clean, returned).flagged)
        c = int(rng.integers(len(returned)))
        bad = clean.copy()
        scale = float(np.sqrt(np.mean(clean**2)))
        kind = KINDS[seed % 3]
        if kind == "garbage":
            bad[c] = 10 * scale * rng.standard_normal(bad[c].shape)
        elif kind == "flip":
            bad[c] = -bad[c]
        else:
            bad[c] = bad[c] + 3 * scale * rng.standard_normal(bad[c].shape)
        want = [int(returned[c])]
        detected += detect_inconsistent(code, bad, returned).flagged == want
        located += locate_corrupted(code, bad, returned, 1).flagged == want
    return false / seeds, detected / seeds, located / seeds


def main() -> None:
    print("| K | N | S | code | false flags | detected | located |")
    print("|---|---|---|---|---|---|---|")
    for K, N, S in ((4, 13, 2), (8, 20, 3), (16, 40, 5)):
        for cls in (BerrutCode, SplineCode):
            f, d, lo = run(cls, K, N, S)
            print(f"| {K} | {N} | {S} | {cls.name} | {f:.3f} | {d:.3f} | {lo:.3f} |")


if __name__ == "__main__":
    main()
