"""What the graph rewrite costs: ``coded(y).compute()`` against ``map_coded`` and the plain map.

The rewrite runs the same coded job from a driver task inside the cluster
(the worker's client, seceded), then the output chunks pick their blocks out of the driver's result.
This measures that extra hop, with no stragglers, as ratios against the plain
``y.compute()`` and the direct ``map_coded(...).compute()`` in the same run, for a dask
array (``map_blocks``), a dask DataFrame (``map_partitions``) and an xarray Dataset
(``xr.map_blocks``).

    python benchmarks/rewrite_overhead.py [--rounds 20] [--workers 8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import xarray as xr
from distributed import Client, LocalCluster

import dask_bacc


def predict(block, weights):
    return np.tanh(np.asarray(block) @ weights)


def frame_predict(part, weights):
    return pd.DataFrame(predict(part.to_numpy(), weights), columns=["p", "q"])


def dataset_predict(block):
    return np.tanh(block)


def cases(K: int, rows: int):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((K * rows, 16))
    W = rng.standard_normal((16, 2))
    x = da.from_array(X, chunks=(rows, 16))
    ddf = dd.from_pandas(pd.DataFrame(X, columns=[f"c{i}" for i in range(16)]), npartitions=K)
    ds = xr.Dataset({"a": (("t", "f"), X)}).chunk({"t": rows})
    return {
        "dask array": (
            x.map_blocks(predict, W, chunks=(rows, 2)),
            lambda: dask_bacc.map_coded(predict, x, W).compute(),
        ),
        "dask DataFrame": (
            ddf.map_partitions(frame_predict, W, meta={"p": float, "q": float}),
            lambda: dask_bacc.map_coded(frame_predict, ddf, W).compute(),
        ),
        "xarray Dataset": (
            xr.map_blocks(dataset_predict, ds),
            lambda: dask_bacc.map_coded(dataset_predict, ds, dim="t").compute(),
        ),
    }


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rows", type=int, default=2000, help="rows per block")
    args = parser.parse_args()
    K = args.workers // 2
    with (
        LocalCluster(
            n_workers=args.workers, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        print(
            f"{args.workers} workers, K={K}, N=2K, {args.rows} rows x 16 per block, "
            f"{args.rounds} interleaved rounds, median seconds\n"
        )
        print("| input | plain map | map_coded | coded(y) | coded / map_coded | coded / plain |")
        print("|---|---|---|---|---|---|")
        for name, (plain, direct) in cases(K, args.rows).items():
            rewritten = dask_bacc.coded(plain)
            times: dict[str, list[float]] = {"plain": [], "direct": [], "coded": []}
            for _ in range(2):  # warm-up
                plain.compute(), direct(), rewritten.compute()
            for _ in range(args.rounds):
                times["plain"].append(timed(plain.compute))
                times["direct"].append(timed(direct))
                times["coded"].append(timed(rewritten.compute))
            med = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"| {name} | {med['plain']:.4f} | {med['direct']:.4f} | {med['coded']:.4f} "
                f"| {med['coded'] / med['direct']:.2f} | {med['coded'] / med['plain']:.2f} |"
            )
        client.close()


if __name__ == "__main__":
    main()
