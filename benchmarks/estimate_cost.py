"""Client-side cost of the error estimate and the consistency check, spline against Berrut.

Pure NumPy, a few seconds: for N in (16, 64, 128), K = N/2, ``ceil(0.75 N) + 1`` returned
results sketched to 256 numbers, ``estimate_error`` plus ``detect_inconsistent`` for
``BerrutCode(K, N)`` and ``SplineCode(K, N, systematic=True)``, interleaved, median of 15
runs each; prints milliseconds and the ratio spline / Berrut.

    python benchmarks/estimate_cost.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from dask_bacc.codes import BerrutCode, SplineCode, detect_inconsistent, estimate_error


def main(reps: int = 15) -> None:
    rng = np.random.default_rng(0)
    print("| N | berrut (ms) | systematic spline (ms) | spline / berrut |")
    print("|---:|---:|---:|---:|")
    for N in (16, 64, 128):
        K = N // 2
        returned = np.sort(rng.permutation(N)[: int(np.ceil(0.75 * N)) + 1])
        Y = rng.standard_normal((returned.size, 256))
        codes = {"berrut": BerrutCode(K, N), "spline": SplineCode(K, N, systematic=True)}
        times: dict[str, list[float]] = {name: [] for name in codes}
        for _ in range(reps):
            for name, code in codes.items():
                t0 = time.perf_counter()
                estimate_error(code, Y, returned)
                detect_inconsistent(code, Y, returned)
                times[name].append(time.perf_counter() - t0)
        b, sp = (statistics.median(times[n]) * 1000 for n in ("berrut", "spline"))
        print(f"| {N} | {b:.1f} | {sp:.1f} | {sp / b:.2f} |")


if __name__ == "__main__":
    main()
