"""What the transform's result check costs per coded result (issue 24 item 1).

Every eval of a job with ``transform=`` checks that the transform gives f's result back
(``Transform.checked_forward``) before decoding it. For the presets the check is in closed
form (log: no negative value; log-probabilities: no negative value, every row summing to
1); a custom ``(forward, inverse)`` pair computes the round trip ``inverse(forward(y))``.
This times, on one core of this machine, ``forward`` alone against ``checked_forward``
and against the generic round trip, interleaved, medians of ``--repeats``, at two result
sizes (10k and 1M rows of 10 columns, float64).

Run: ``python benchmarks/transform_check.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dask_bacc.codes.transform import Transform, get_transform


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("transform          rows       forward   checked  round-trip  checked/forward")
    for rows in (10_000, 1_000_000):
        y = rng.random((rows, 10)) + 1e-3
        values = {"log": y, "log-probabilities": y / y.sum(axis=1, keepdims=True)}
        for name, val in values.items():
            preset = get_transform(name)
            assert preset is not None
            generic = Transform(preset._forward, preset._inverse, "round-trip")
            times: dict[str, list[float]] = {"forward": [], "checked": [], "round": []}
            for _ in range(args.repeats):  # interleaved
                for key, call in (
                    ("forward", preset.forward),
                    ("checked", preset.checked_forward),
                    ("round", generic.checked_forward),
                ):
                    start = time.perf_counter()
                    call(val)
                    times[key].append(time.perf_counter() - start)
            med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
            print(
                f"{name:18s} {rows:>9,d} {med['forward']:8.2f}ms {med['checked']:8.2f}ms "
                f"{med['round']:9.2f}ms  {med['checked'] / med['forward']:6.2f}"
            )


if __name__ == "__main__":
    main()
