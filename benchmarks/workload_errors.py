"""Accuracy of the approximate codes on the home-regime workloads (issue 42, item 1), codec only.

Median and worst relative error of the whole output, K = 12, N = 16, decoding from 12 of
16 results (the default wait) over 200 random sets of 4 stragglers, for the Monte Carlo
pricer over sweep_grid (the blocks=K layout and the one-curve layout) and the smooth
xarray field under FieldModel; a code that cannot decode a set counts as failed::

    python benchmarks/workload_errors.py
"""

import numpy as np

from dask_bacc.bench import workloads as wl
from dask_bacc.codes import get_code

K, N, W = 12, 16, 12
rng = np.random.default_rng(0)
sets = [np.sort(rng.choice(N, W, replace=False)) for _ in range(200)]


def run(name, f, blocks, exact):
    code = get_code(name, K, N)
    coded = code.encode(blocks)
    res = np.stack([f(c) for c in coded])
    worst, fails = [], 0
    for ret in sets:
        try:
            dec = code.decode(res[ret], ret)
        except Exception:
            fails += 1
            continue
        worst.append(np.linalg.norm(dec - exact) / np.linalg.norm(exact))
    return fails, np.median(worst), np.max(worst)


task = wl.PricerTask(paths=1000)
for layout in ("tensor", "curve"):
    grid = wl.sweep_grid(K * 64, blocks=K if layout == "tensor" else None)
    blocks = grid.reshape(K, 64, 4)
    exact = np.stack([task(b) for b in blocks])
    for name in ("systematic-spline", "bspline", "berrut"):
        m, n, w = run(name, task, blocks, exact)
        print(
            f"sweep[{layout}] {name:18s} undecodable sets {m}/200; "
            f"||e||/||x|| median {n:.2e}, worst {w:.2e}"
        )
field = wl.smooth_field(K * 8, 48, 48, 8).values
model = wl.FieldModel()
blocks = field.reshape(K, 8, 48, 48)
exact = np.stack([model(b) for b in blocks])
for name in ("systematic-spline", "bspline", "berrut"):
    m, n, w = run(name, model, blocks, exact)
    print(f"field {name:18s} undecodable sets {m}/200; ||e||/||x|| median {n:.2e}, worst {w:.2e}")
