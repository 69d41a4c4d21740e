"""A per-pixel model over a smooth xarray field, through dask-bacc and through plain Dask.

Run it with::

    python examples/smooth_field.py              # 96 days of 64 x 64, K=12 chunks, N=16
    python examples/smooth_field.py --smoke      # a few seconds
    python examples/smooth_field.py --code berrut --noise 0.5

The field (:func:`dask_bacc.bench.workloads.smooth_field`) is a temperature-like
``DataArray`` (time, y, x), chunked along time and varying slowly over the record; the model
(:class:`~dask_bacc.bench.workloads.FieldModel`) is a small per-pixel network of each value
and its Laplacian. ``dask_bacc.map_coded`` codes the time chunks (K of them) into N coded
chunks, runs the model on each and decodes from the first 3/4 of them: approximate, and
accurate here because at a fixed (time offset, y, x) position the model's output changes
smoothly from chunk to chunk. ``--noise`` adds noise the decode cannot interpolate.

Printed: the time of plain ``xarray.map_blocks`` and of the coded map, and the coded
result's error against the plain one, in degrees and relative, with the job's own
``report.error_estimate``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import numpy as np


def run(
    nt: int, ny: int, nx: int, K: int, N: int, code: str, noise: float, seed: int = 0
) -> dict[str, Any]:
    """Plain and coded once each; return times, errors and the error estimate."""
    import xarray as xr
    from distributed import Client, LocalCluster

    import dask_bacc
    from dask_bacc.bench import workloads as wl

    field = wl.smooth_field(nt, ny, nx, chunks_t=nt // K, seed=seed, noise=noise)
    model = wl.FieldModel(seed=seed)
    with (
        LocalCluster(
            n_workers=N, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster),
    ):
        field = field.persist()  # generated on the cluster once, outside both timings
        t0 = time.perf_counter()
        plain = xr.map_blocks(model, field).compute()
        t_plain = time.perf_counter() - t0
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            # an approximate decode may warn about its error: printed below
            warnings.simplefilter("ignore", dask_bacc.ApproximationWarning)
            job = dask_bacc.submit_coded(model, field, code=code, n_coded=N)
            coded = job.result()
            coded = coded.compute() if hasattr(coded, "compute") else coded
        t_coded = time.perf_counter() - t0
    diff = np.abs(coded.values - plain.values)
    return {
        "plain_time": t_plain,
        "coded_time": t_coded,
        "median_abs": float(np.median(diff)),
        "max_abs": float(diff.max()),
        "rel": float(np.linalg.norm(coded.values - plain.values) / np.linalg.norm(plain.values)),
        "error_estimate": job.report.error_estimate,
        "same_coords": bool(coded.dims == plain.dims and coded.time.equals(plain.time)),
    }


def main(argv: list[str] | None = None) -> int:
    """Command line: run and print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="a few seconds: a small field")
    parser.add_argument("--nt", type=int, default=96, help="time steps")
    parser.add_argument("--size", type=int, default=64, help="grid points per side")
    parser.add_argument("-K", "--blocks", type=int, default=12, help="time chunks")
    parser.add_argument("-N", "--coded", type=int, default=16)
    parser.add_argument("--code", default="spline", help="an approximate code")
    parser.add_argument("--noise", type=float, default=0.0, help="noise, degrees")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.smoke:
        args.nt, args.size, args.blocks, args.coded = 24, 16, 4, 6
    if not 1 <= args.blocks < args.coded or args.nt % args.blocks:
        parser.error("need 1 <= K < N and K dividing --nt")
    r = run(
        args.nt, args.size, args.size, args.blocks, args.coded, args.code, args.noise, args.seed
    )
    est = r["error_estimate"]
    print(
        f"field ({args.nt}, {args.size}, {args.size}) in K={args.blocks} time chunks, "
        f"N={args.coded} coded tasks, code={args.code}, noise={args.noise:g}\n"
        f"  plain map_blocks {r['plain_time']:6.2f} s\n"
        f"  dask_bacc        {r['coded_time']:6.2f} s   error: median {r['median_abs']:.4f}, "
        f"worst {r['max_abs']:.4f} degrees (relative {r['rel']:.1e}); error_estimate "
        + ("-" if est is None else f"{est:.1e}")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
