"""Would a local-support code pay on data-heavy maps? Data moved, encode time, accuracy.

Run it with::

    python benchmarks/local_support.py                 # ~1 min on 2 cores, no cluster
    python benchmarks/local_support.py --trials 400 --out benchmarks/results/local_support.md

Offline and pure NumPy (``dask_bacc.codes`` and the runtime's own ``weighted_sum``): no
cluster is started. Three questions, for the workload of ``benchmarks/dataframe_heavy.py``
(K = 8 partitions of 250k x 8 float64, N = 16 shares, the default wait of 12 results):

1. **Data moved to encode.** A Berrut share mixes every block (its encoding row has K
   nonzero weights), so the N encode tasks read N * K = 128 partitions (2 GB for 16 MB
   partitions), minus the ones already on their worker. A code whose share i mixes only the
   2 blocks around its point reads at most 2N = 32.
2. **Encode time.** ``weighted_sum`` of a share's nonzero blocks, single-threaded, for the
   Berrut rows against the 2-nonzero rows (median of 5 per share, summed over N).
3. **Accuracy cost.** The relative decode error ``||decoded - f(X)||_F / ||f(X)||_F`` of
   Berrut (``dask_bacc.codes``) against a simple local-support scheme on the same points:
   encode with piecewise-linear "hat" weights in the data points (share i = the linear
   interpolant of the two blocks whose points bracket z_i; the end points clamp), decode
   block j by linear interpolation between the two returned points that bracket alpha_j
   (nearest returned point outside their range). Random sets of 12 of 16 returned results
   (4 stragglers), ``f`` = the feature map of the dataframe benchmark on the 8 columns
   (as a NumPy function) and ``tanh``; data smooth across blocks
   (``dask_bacc.testing.smooth_blocks``) or i.i.d. normal rows.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dask_bacc.codes import get_code
from dask_bacc.runtime.worker import weighted_sum
from dask_bacc.testing import smooth_blocks


def hat_matrix(targets: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation in ``nodes`` (any order) evaluated at ``targets``:
    at most 2 nonzeros per row; targets outside the nodes' range take the nearest node."""
    order = np.argsort(nodes)
    x = nodes[order]
    M = np.zeros((targets.size, nodes.size))
    for r, t in enumerate(targets):
        if t <= x[0]:
            M[r, order[0]] = 1.0
        elif t >= x[-1]:
            M[r, order[-1]] = 1.0
        else:
            k = int(np.searchsorted(x, t)) - 1
            w = (t - x[k]) / (x[k + 1] - x[k])
            M[r, order[k]] += 1.0 - w
            M[r, order[k + 1]] += w
    return M


def features_np(block: np.ndarray) -> np.ndarray:
    """``benchmarks/dataframe_heavy.features`` on a NumPy (rows, 8) block."""
    c = block
    z = (c[:, 3] - c[:, 3].mean()) / (c[:, 3].std(ddof=1) + 1e-9)
    return np.stack(
        [
            c[:, 0] / (np.abs(c[:, 1]) + 1.0),
            np.log(np.abs(c[:, 2]) + 1.0),
            z,
            c[:, 4] * c[:, 5],
            np.sqrt(c[:, 6] ** 2 + c[:, 7] ** 2),
        ],
        axis=1,
    )


FUNCS = {"features": features_np, "tanh": np.tanh}


def accuracy(args: argparse.Namespace) -> list[tuple[str, str, float, float, float, float]]:
    K, N, keep = args.K, args.N, args.wait
    berrut = get_code("berrut", K, N)
    alpha, z = berrut._alpha, berrut._z  # the data and worker points (same for both)
    E_local = hat_matrix(z, alpha)
    rows = []
    for data in ("smooth", "iid"):
        for fname, f in FUNCS.items():
            errs = {"berrut": [], "local": []}
            for trial in range(args.trials):
                rng = np.random.default_rng([args.seed, trial])
                if data == "smooth":
                    X = smooth_blocks(K, args.rows, 8, rng)
                else:
                    X = rng.standard_normal((K, args.rows, 8))
                truth = np.stack([f(x) for x in X])
                returned = np.sort(rng.choice(N, keep, replace=False))
                # Berrut
                shares = berrut.encode(X)
                res = np.stack([f(shares[i]) for i in returned])
                dec = berrut.decode(res, returned)
                errs["berrut"].append(np.linalg.norm(dec - truth) / np.linalg.norm(truth))
                # local support: hat encode, linear decode through the returned points
                shares = np.tensordot(E_local, X, 1)
                res = np.stack([f(shares[i]) for i in returned])
                D = hat_matrix(alpha, z[returned])
                dec = np.tensordot(D, res, 1)
                errs["local"].append(np.linalg.norm(dec - truth) / np.linalg.norm(truth))
            b, loc = np.array(errs["berrut"]), np.array(errs["local"])
            rows.append(
                (
                    data,
                    fname,
                    np.median(b),
                    np.quantile(b, 0.9),
                    np.median(loc),
                    np.quantile(loc, 0.9),
                )
            )
    return rows


def encode_cost(args: argparse.Namespace) -> dict[str, float]:
    K, N = args.K, args.N
    berrut = get_code("berrut", K, N)
    E = {"berrut": berrut.encoding_matrix(), "local": hat_matrix(berrut._z, berrut._alpha)}
    rng = np.random.default_rng(args.seed)
    chunks = [rng.standard_normal((args.heavy_rows, 8)) for _ in range(K)]
    out = {}
    for name, M in E.items():
        total, nnz = 0.0, 0
        for i in range(N):
            nz = np.flatnonzero(M[i])
            nnz += nz.size
            times = []
            for _ in range(5):
                t = time.perf_counter()
                if nz.size == 1 and M[i, nz[0]] == 1.0:
                    np.asarray(chunks[nz[0]])  # a copy of a block: no arithmetic
                else:
                    weighted_sum(M[i, nz], [chunks[j] for j in nz])
                times.append(time.perf_counter() - t)
            total += float(np.median(times))
        out[f"{name}_seconds"] = total
        out[f"{name}_reads"] = nnz
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-K", type=int, default=8)
    parser.add_argument("-N", type=int, default=16)
    parser.add_argument("--wait", type=int, default=12, help="results decoded from")
    parser.add_argument("--rows", type=int, default=2000, help="rows per block (accuracy)")
    parser.add_argument("--heavy-rows", type=int, default=250_000, help="rows (encode time)")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the Markdown report here")
    args = parser.parse_args(argv)
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(1)  # one thread, as on a worker of a multi-process cluster
    except ImportError:
        pass

    cost = encode_cost(args)
    part_mb = args.heavy_rows * 8 * 8 / 2**20
    lines = [
        f"# local_support: K={args.K}, N={args.N}, decode from {args.wait} results",
        "",
        f"Encode of one job, {args.heavy_rows} x 8 float64 partitions ({part_mb:.0f} MB), "
        "one thread:",
        "",
        "| code | partitions read by the N encodes | MB read | encode time (sum over N) |",
        "|---|---|---|---|",
    ]
    for name in ("berrut", "local"):
        reads = cost[f"{name}_reads"]
        lines.append(
            f"| {name} | {reads} | {reads * part_mb:.0f} | {cost[f'{name}_seconds']:.3f} s |"
        )
    lines += [
        "",
        f"Relative decode error, {args.trials} random sets of {args.wait} of {args.N} results, "
        f"{args.rows} rows per block:",
        "",
        "| data | f | Berrut median | Berrut p90 | local median | local p90 | local / Berrut |",
        "|---|---|---|---|---|---|---|",
    ]
    for data, fname, bm, b9, lm, l9 in accuracy(args):
        lines.append(
            f"| {data} | {fname} | {bm:.3g} | {b9:.3g} | {lm:.3g} | {l9:.3g} | {lm / bm:.2f} |"
        )
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
