"""Does a local-support code pay on data-heavy maps? Data moved, encode time, accuracy.

Run it with::

    python benchmarks/local_support.py                 # ~1 min on 2 cores, no cluster
    python benchmarks/local_support.py --trials 400 --out benchmarks/results/local_support.md

Offline and pure NumPy (``dask_bacc.codes`` and the runtime's own ``weighted_sum``): no
cluster is started. It measures the implemented codes, Berrut, spline, bspline (support 4,
Catmull-Rom), bspline with ``support=2`` (linear B-spline) and systematic bspline, on the
workload of ``benchmarks/dataframe_heavy.py`` (K = 8 partitions of 250k x 8 float64,
N = 16 shares, the default wait of 12 results):

1. **Data moved.** Partitions read per share: the nonzeros of the share's row of
   ``encoding_matrix()`` (a Berrut share mixes every block: the N encode tasks read N * K
   = 128 partitions; a bspline share at most 4, or 2). Results read per decoded block: the
   nonzeros of its row of ``decoding_matrix(returned)``, mean and max over the blocks and
   the same random sets of 12 returned results as the accuracy table.
2. **Encode time.** ``weighted_sum`` of a share's nonzero blocks, single-threaded (median
   of 5 per share, summed over N; a unit row is a copy of its block, no arithmetic).
3. **Accuracy.** The relative decode error ``||decoded - f(X)||_F / ||f(X)||_F``, median
   and 90th percentile over random sets of 12 of 16 returned results (4 stragglers), ``f``
   = the feature map of the dataframe benchmark on the 8 columns (as a NumPy function) and
   ``tanh``; data smooth across blocks (``dask_bacc.testing.smooth_blocks``) or i.i.d.
   normal rows. Every code decodes the same returned sets. A set that leaves a bspline
   block with no returned share within one block spacing is not decodable (the runtime
   waits for a covering share): it is skipped for that code and counted, so the bspline
   figures are over the decodable sets only.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dask_bacc.codes import get_code
from dask_bacc.runtime.worker import weighted_sum
from dask_bacc.testing import smooth_blocks

#: (label, registry name, options): the codes measured, in the report's order
CODES = (
    ("berrut", "berrut", {}),
    ("spline", "spline", {}),
    ("bspline", "bspline", {}),
    ("bspline support=2", "bspline", {"support": 2}),
    ("systematic-bspline", "systematic-bspline", {}),
)


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


def make_codes(K: int, N: int) -> dict:
    return {label: get_code(name, K, N, **opts) for label, name, opts in CODES}


def returned_sets(args: argparse.Namespace) -> list[np.ndarray]:
    """The random sets of ``wait`` of N returned results, one per trial (shared by every
    code, data kind and function)."""
    return [
        np.sort(np.random.default_rng([args.seed, trial]).choice(args.N, args.wait, replace=False))
        for trial in range(args.trials)
    ]


def accuracy(args: argparse.Namespace, sets: list[np.ndarray]) -> list[dict]:
    """Per data kind and f: each code's errors over the decodable sets, and its skips."""
    K, N = args.K, args.N
    codes = make_codes(K, N)
    rows = []
    for data in ("smooth", "iid"):
        for fname, f in FUNCS.items():
            errs: dict[str, list[float]] = {label: [] for label in codes}
            skipped = dict.fromkeys(codes, 0)
            for trial, returned in enumerate(sets):
                rng = np.random.default_rng([args.seed, 1, trial])
                if data == "smooth":
                    X = smooth_blocks(K, args.rows, 8, rng)
                else:
                    X = rng.standard_normal((K, args.rows, 8))
                truth = np.stack([f(x) for x in X])
                norm = np.linalg.norm(truth)
                for label, code in codes.items():
                    if not code.can_decode(returned):  # a gap: the runtime waits
                        skipped[label] += 1
                        continue
                    shares = code.encode(X)
                    res = np.stack([f(shares[i]) for i in returned])
                    dec = code.decode(res, returned)
                    errs[label].append(float(np.linalg.norm(dec - truth) / norm))
            rows.append({"data": data, "f": fname, "errors": errs, "skipped": skipped})
    return rows


def reads(args: argparse.Namespace, sets: list[np.ndarray]) -> dict[str, dict[str, float]]:
    """Partitions read per share (encoding rows) and results read per decoded block
    (decoding rows, over the decodable sets)."""
    out = {}
    for label, code in make_codes(args.K, args.N).items():
        per_share = np.count_nonzero(code.encoding_matrix(), axis=1)
        per_block = [
            np.count_nonzero(code.decoding_matrix(r), axis=1) for r in sets if code.can_decode(r)
        ]
        pb = np.concatenate(per_block) if per_block else np.zeros(0)
        out[label] = {
            "share_mean": float(per_share.mean()),
            "share_max": int(per_share.max()),
            "total": int(per_share.sum()),
            "block_mean": float(pb.mean()) if pb.size else float("nan"),
            "block_max": int(pb.max()) if pb.size else 0,
        }
    return out


def encode_cost(args: argparse.Namespace) -> dict[str, float]:
    """Single-threaded encode time of one job, summed over the N shares."""
    rng = np.random.default_rng(args.seed)
    chunks = [rng.standard_normal((args.heavy_rows, 8)) for _ in range(args.K)]
    out = {}
    for label, code in make_codes(args.K, args.N).items():
        M = code.encoding_matrix()
        total = 0.0
        for i in range(args.N):
            nz = np.flatnonzero(M[i])
            times = []
            for _ in range(5):
                t = time.perf_counter()
                if nz.size == 1 and M[i, nz[0]] == 1.0:
                    np.asarray(chunks[nz[0]])  # a copy of a block: no arithmetic
                else:
                    weighted_sum(M[i, nz], [chunks[j] for j in nz])
                times.append(time.perf_counter() - t)
            total += float(np.median(times))
        out[label] = total
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

    sets = returned_sets(args)
    cost = encode_cost(args)
    moved = reads(args, sets)
    part_mb = args.heavy_rows * 8 * 8 / 2**20
    lines = [
        f"# local_support: K={args.K}, N={args.N}, decode from {args.wait} results",
        "",
        f"Encode of one job, {args.heavy_rows} x 8 float64 partitions ({part_mb:.0f} MB), "
        "one thread; partitions read per share = nonzeros of its `encoding_matrix()` row, "
        "results read per decoded block = nonzeros of its `decoding_matrix(returned)` row "
        f"(mean / max over the blocks of the decodable sets of {args.wait} of {args.N}):",
        "",
        "| code | partitions per share (mean / max) | partitions read by the N encodes "
        "| MB read | encode time (sum over N) | results per decoded block (mean / max) |",
        "|---|---|---|---|---|---|",
    ]
    for label in moved:
        m = moved[label]
        lines.append(
            f"| {label} | {m['share_mean']:.2f} / {m['share_max']} | {m['total']} | "
            f"{m['total'] * part_mb:.0f} | {cost[label]:.3f} s | "
            f"{m['block_mean']:.2f} / {m['block_max']} |"
        )
    acc = accuracy(args, sets)
    labels = list(moved)
    lines += [
        "",
        f"Relative decode error, median / p90 over {args.trials} random sets of {args.wait} "
        f"of {args.N} results (the same sets for every code), {args.rows} rows per block; "
        "a set a bspline code cannot decode (a block with no returned share within one "
        "block spacing: the runtime waits for more) is skipped for it, and its figures are "
        "over the decodable sets:",
        "",
        "| data | f | " + " | ".join(f"{label} median / p90" for label in labels) + " |",
        "|---|---|" + "---|" * len(labels),
    ]
    for row in acc:
        cells = []
        for label in labels:
            e = np.array(row["errors"][label])
            cells.append(f"{np.median(e):.3g} / {np.quantile(e, 0.9):.3g}" if e.size else "- / -")
        lines.append(f"| {row['data']} | {row['f']} | " + " | ".join(cells) + " |")
    skips = acc[0]["skipped"]  # the same sets for every data kind and f
    lines += [
        "",
        "Undecodable sets skipped, of "
        f"{args.trials}: " + ", ".join(f"{label} {skips[label]}" for label in labels) + ".",
    ]
    # against Berrut on the sets both decode (a paired comparison)
    lines += [
        "",
        "Median of the per-set error ratio code / Berrut, over the sets the code decodes:",
        "",
        "| data | f | " + " | ".join(labels[1:]) + " |",
        "|---|---|" + "---|" * (len(labels) - 1),
    ]
    codes = make_codes(args.K, args.N)
    for row in acc:
        ok = {
            label: np.array([codes[label].can_decode(r) for r in sets], dtype=bool)
            for label in labels
        }
        b = np.array(row["errors"]["berrut"])
        cells = []
        for label in labels[1:]:
            e = np.array(row["errors"][label])
            cells.append(f"{np.median(e / b[ok[label]]):.2f}" if e.size else "-")
        lines.append(f"| {row['data']} | {row['f']} | " + " | ".join(cells) + " |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
