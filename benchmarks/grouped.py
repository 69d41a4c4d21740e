"""Many partitions on few workers: grouped coding against plain Dask and repetition (issue 29).

Run it with::

    python benchmarks/grouped.py                                   # 200 chunks, 20 processes
    python benchmarks/grouped.py --rows 2000 8000 --reps 10 --out benchmarks/results/grouped.md

The workload: a dask array of ``--partitions`` chunks (200) of ``rows x 8`` float64,
persisted on ``--workers`` worker processes (20; ``LocalCluster(processes=True,
threads_per_worker=1)``), smooth across chunks (``dask_bacc.testing.smooth_blocks``) or
i.i.d. normal rows. ``f`` is real compute: ``--work`` rounds of ``tanh(X @ W)`` (8 x 8).

Variants, interleaved in an order shuffled per rep (seeded), the time from the call to the
output in hand on the client:

- ``plain``: one task per chunk where the chunk is (``client.map`` of
  :func:`dask_bacc.testing.plain_task` over the chunks' futures, then ``gather`` and
  concatenate): what ``x.map_blocks(f).compute()`` runs, meeting the same injected
  straggler as the coded tasks;
- ``bspline``: ``dask_bacc.coded(x.map_blocks(f), code="bspline").compute()``: 200 blocks
  are too many for one code on 19 workers (the driver's worker takes none), so they are
  coded in groups (``report.code``, docs/codes.md);
- ``repetition``: ``code="repetition"`` (exact copies of the map's tasks).

Scenarios: no straggler, and one worker 10x slow (``SlowWorkers(names=("7",),
factor=10)``: each of its tasks, coded or plain, sleeps 9 times ``f``'s own time after it).
Each row gives the median and p90 over ``--reps``, the ratio of medians to plain's in the
same run and scenario, the median relative error ``||out - f(X)|| / ||f(X)||``, the
median of the job's own estimate and ``report.bytes_moved`` over the data's size.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any

import dask.array as da
import numpy as np
from distributed import Client, LocalCluster, wait

import dask_bacc
from dask_bacc.testing import SlowWorkers, clear_stragglers, inject_stragglers, plain_task
from dask_bacc.testing.data import smooth_blocks

PLAIN_SEQ_BASE = 1_000_000_000
VARIANTS = ("plain", "bspline", "repetition")
WEIGHTS = np.random.default_rng(42).standard_normal((8, 8)) / np.sqrt(8)


def work(block: np.ndarray, rounds: int) -> np.ndarray:
    """``rounds`` of ``tanh(X @ W)``: real compute, smooth in X."""
    out = block
    for _ in range(rounds):
        out = np.tanh(out @ WEIGHTS)
    return out


def run_plain(client: Client, chunks: list[Any], rounds: int, seq: int) -> np.ndarray:
    K = len(chunks)
    futures = client.map(
        plain_task, chunks, [seq] * K, range(K), [work] * K, [rounds] * K, pure=False
    )
    out = np.concatenate(client.gather(futures))
    del futures
    return out


def run_coded(x: da.Array, code: str, rounds: int) -> tuple[np.ndarray, Any]:
    """``x.map_blocks(work)`` through ``dask_bacc.coded`` (what a Dask user writes; exact
    codes copy the map's tasks, approximate ones are coded in groups): the output and
    the job's report."""
    y = dask_bacc.coded(x.map_blocks(work, rounds, dtype=float), code=code)
    out = y.compute()
    return np.asarray(out), dask_bacc.report_of(y)


def bytes_moved(report: Any) -> int | None:
    """``report.bytes_moved`` (None for exact copies of the map's tasks, which do not
    count it)."""
    return getattr(report, "bytes_moved", None)


def wait_idle(client: Client, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(client.processing().values()):
        time.sleep(0.02)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=20)
    p.add_argument("--partitions", type=int, default=200)
    p.add_argument("--rows", type=int, nargs="+", default=[2000], help="rows per chunk")
    p.add_argument("--work", type=int, default=20, help="rounds of tanh(X @ W) in f")
    p.add_argument("--kinds", nargs="+", default=["smooth", "iid"])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS))
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--factor", type=float, default=10.0, help="the slow worker's slowdown")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out")
    p.add_argument("--json")
    args = p.parse_args()

    rows_out: list[dict[str, Any]] = []
    cluster = LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = Client(cluster)
    slow = SlowWorkers(names=("7",), delay=0.0, factor=args.factor)
    order_rng = np.random.default_rng(args.seed)
    try:
        for rows in args.rows:
            for kind in args.kinds:
                rng = np.random.default_rng(args.seed)
                K = args.partitions
                if kind == "smooth":
                    X = smooth_blocks(K, rows, 8, rng).reshape(K * rows, 8)
                else:
                    X = rng.standard_normal((K * rows, 8))
                x = da.from_array(X, chunks=(rows, 8)).persist()
                wait(x)
                chunks = client.futures_of(x)
                chunks.sort(key=lambda f: f.key[1])
                truth = work(X, args.work)
                for variant in args.variants:  # warm up every path
                    if variant == "plain":
                        run_plain(client, chunks, args.work, PLAIN_SEQ_BASE - 1)
                    else:
                        run_coded(x, variant, args.work)
                for scenario in ("none", "slow worker"):
                    if scenario != "none":
                        inject_stragglers(slow, seed=args.seed, client=client)
                    try:
                        for rep in range(args.reps):
                            for variant in order_rng.permutation(args.variants):
                                wait_idle(client)
                                row: dict[str, Any] = {
                                    "rows": rows,
                                    "kind": kind,
                                    "scenario": scenario,
                                    "variant": str(variant),
                                    "rep": rep,
                                }
                                start = time.perf_counter()
                                if variant == "plain":
                                    out = run_plain(client, chunks, args.work, PLAIN_SEQ_BASE + rep)
                                    row["seconds"] = time.perf_counter() - start
                                else:
                                    out, report = run_coded(x, str(variant), args.work)
                                    row["seconds"] = time.perf_counter() - start
                                    row["estimate"] = getattr(report, "error_estimate", None)
                                    moved = bytes_moved(report)
                                    row["moved_x_data"] = moved and moved / X.nbytes
                                    code = getattr(report, "code", None) or {}
                                    row["groups"] = len(code.get("sizes") or [])
                                row["error"] = float(
                                    np.linalg.norm(out - truth) / np.linalg.norm(truth)
                                )
                                rows_out.append(row)
                                print(json.dumps(row), file=sys.stderr, flush=True)
                    finally:
                        if scenario != "none":
                            clear_stragglers(client)
                del x, chunks
    finally:
        client.close()
        cluster.close()
    text = markdown(rows_out, args)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows_out, fh, indent=1)
    return 0


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"# grouped: {args.partitions} chunks on {args.workers} worker processes",
        "",
        f"`python benchmarks/grouped.py {' '.join(sys.argv[1:])}`; {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}), f = {args.work} rounds of "
        f"tanh(X @ W); one worker {args.factor:g}x slow in the second scenario; medians of "
        f"{args.reps}.",
        "",
        "| rows/chunk | data | scenario | variant | median s | p90 s | x plain | "
        "rel. error | estimate | moved / data | groups |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    keys = sorted({(r["rows"], r["kind"], r["scenario"]) for r in rows})
    for rows_n, kind, scenario in keys:
        sel = [r for r in rows if (r["rows"], r["kind"], r["scenario"]) == (rows_n, kind, scenario)]
        base = float(np.median([r["seconds"] for r in sel if r["variant"] == "plain"] or [np.nan]))
        for variant in args.variants:
            vs = [r for r in sel if r["variant"] == variant]
            if not vs:
                continue
            t = np.array([r["seconds"] for r in vs])
            est = [r["estimate"] for r in vs if r.get("estimate") is not None]
            moved = [r["moved_x_data"] for r in vs if r.get("moved_x_data") is not None]
            cells = [
                str(rows_n),
                kind,
                scenario,
                variant,
                f"{np.median(t):.2f}",
                f"{np.quantile(t, 0.9):.2f}",
                f"{np.median(t) / base:.2f}",
                f"{np.median([r['error'] for r in vs]):.3g}",
                f"{np.median(est):.3g}" if est else "-",
                f"{np.median(moved):.2f}" if moved else "-",
                str(vs[0].get("groups") or "-"),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
