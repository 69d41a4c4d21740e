"""What ``with dask_bacc.coding():`` costs a computation with no layer to code (issue 30).

Run it with::

    python benchmarks/coding_overhead.py --out benchmarks/results/coding_overhead.md  # ~10 min

(from a checkout whose ``dask_bacc`` is installed in the interpreter, e.g. ``.venv/bin/python``).

Workloads (real compute, built on the workers, nothing persisted, so every run computes
the whole graph; each run's collection is built anew with keys of its own, so that no
run reuses results the scheduler still holds from the one before):

- ``array``: ``da.random.default_rng(0).standard_normal((rows, 16))`` in ``--chunks``
  row chunks; ``(tanh(x) * x).sum(axis=0)`` and ``x.std(axis=0)`` in one ``dask.compute``;
- ``frame``: a DataFrame of ``rows`` rows x 8 float64 columns and an int key, made by
  ``dd.from_map`` in ``--chunks`` partitions; ``df.assign(z=x0 * x1).groupby("k").mean()``.

Variants, interleaved (an order shuffled per round, seeded), ``--rounds`` rounds:

- ``plain``: ``.compute()``; ``plain again (A/A)``: the same, a second time in each round,
  whose ratio to ``plain`` shows how far two identical variants differ in this run (the
  noise any ratio here carries);
- ``coding (default)``: the same inside ``with dask_bacc.coding():`` with no function
  marked ``codeable`` in the process: the hook finds nothing to select without reading
  the graph (the common case: the block around code that has no marked map);
- ``coding (graph read)``: inside ``with dask_bacc.coding(only=absent):``, a function the
  graph does not call: the hook materialises the optimized graph on the client, scans
  every group of tasks and sends dask's own expression (what a block costs when some
  function is marked but this computation calls none).

Also, per configuration, the time of the hook's rewrite alone (``coding.rewrite`` on the
optimized expression, median of 10): what the client adds before the graph is sent.

Sizes: ``--rows`` (2M and 8M) with ``--chunks`` (32 and 128). Clusters: in-process
(``--workers`` workers x 1 thread) and worker processes (``--proc-workers``), one cluster
per mode, every size on it. Ratios are to ``plain`` in the same configuration.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
from dask.base import collections_to_expr
from distributed import Client, LocalCluster

import dask_bacc


def absent(b: Any) -> Any:  # selected by name in one variant; no graph here calls it
    return b


def make_part(i: int, rows: int, run: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng([run, i])
    cols = {f"x{j}": rng.standard_normal(rows) for j in range(8)}
    return pd.DataFrame({**cols, "k": rng.integers(0, 50, rows)})


def workload(kind: str, rows: int, chunks: int, run: int) -> tuple[Any, ...]:
    """The computation of run ``run``: its keys are its own (the scheduler may still hold
    the results of a computation with the same keys, released a moment before)."""
    if kind == "array":
        x = da.random.default_rng(run).standard_normal((rows, 16), chunks=(rows // chunks, 16))
        return ((np.tanh(x) * x).sum(axis=0), x.std(axis=0))
    meta = make_part(0, 0)
    df = dd.from_map(make_part, range(chunks), rows=rows // chunks, run=run, meta=meta)
    # (split_out=1: a tree reduction; with more output partitions dask-expr shuffles)
    return (df.assign(z=df.x0 * df.x1).groupby("k").mean(split_out=1),)


def variants() -> dict[str, Callable[[tuple[Any, ...]], Any]]:
    def plain(colls: tuple[Any, ...]) -> Any:
        return dask.compute(*colls)

    def default(colls: tuple[Any, ...]) -> Any:
        with dask_bacc.coding():
            return dask.compute(*colls)

    def read(colls: tuple[Any, ...]) -> Any:
        with dask_bacc.coding(only=absent):
            return dask.compute(*colls)

    return {
        "plain": plain,
        "plain again (A/A)": plain,
        "coding (default)": default,
        "coding (graph read)": read,
    }


def rewrite_seconds(colls: tuple[Any, ...], only: Any) -> float:
    from dask._expr import FinalizeCompute

    expr = FinalizeCompute(collections_to_expr(list(colls), True)).optimize()
    keys = expr.__dask_keys__()
    times = []
    for _ in range(10):
        block = dask_bacc.coding(only=only)
        t0 = time.perf_counter()
        assert block.rewrite(expr, keys) is None
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows_out = []
    rng = np.random.default_rng(args.seed)
    for mode in args.modes:
        processes = mode == "processes"
        n = args.proc_workers if processes else args.workers
        with (
            LocalCluster(
                n_workers=n, threads_per_worker=1, processes=processes, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            client.wait_for_workers(n)
            for kind in args.kinds:
                for rows, chunks in zip(args.rows, args.chunks, strict=True):
                    runs = itertools.count()
                    colls = workload(kind, rows, chunks, next(runs))
                    ntasks = len(
                        dict(collections_to_expr(list(colls), True).optimize().__dask_graph__())
                    )
                    found: dict[str, list[float]] = {name: [] for name in variants()}
                    run_once = variants()
                    for name in run_once:  # warm-up, not recorded
                        run_once[name](workload(kind, rows, chunks, next(runs)))
                    for _ in range(args.rounds):
                        for name in rng.permutation(list(run_once)):
                            fresh = workload(kind, rows, chunks, next(runs))
                            t0 = time.perf_counter()
                            run_once[name](fresh)
                            found[name].append(time.perf_counter() - t0)
                    base = statistics.median(found["plain"])
                    rewrite = {
                        "coding (default)": rewrite_seconds(colls, None),
                        "coding (graph read)": rewrite_seconds(colls, absent),
                    }
                    for name, times in found.items():
                        med = statistics.median(times)
                        row = {
                            "mode": f"{mode} ({n} workers)",
                            "kind": kind,
                            "rows": rows,
                            "chunks": chunks,
                            "tasks": ntasks,
                            "variant": name,
                            "p50": med,
                            "ratio": med / base,
                            "rewrite_ms": 1000 * rewrite.get(name, 0.0),
                            "rewrite_share": rewrite.get(name, 0.0) / base,
                        }
                        rows_out.append(row)
                        print(row, file=sys.stderr, flush=True)
    return rows_out


def table(rows: list[dict[str, Any]]) -> str:
    out = [
        "| cluster | workload | rows | chunks | tasks | variant | p50 (s) | p50 / plain | "
        "rewrite alone (ms) | rewrite / plain p50 |",
        "|---|---|--:|--:|--:|---|--:|--:|--:|--:|",
    ]
    for r in rows:
        plain = r["variant"].startswith("plain")
        rewrite = "-" if plain else f"{r['rewrite_ms']:.2f}"
        share = "-" if plain else f"{100 * r['rewrite_share']:.3f}%"
        out.append(
            f"| {r['mode']} | {r['kind']} | {r['rows']:,} | {r['chunks']} | {r['tasks']} | "
            f"{r['variant']} | {r['p50']:.3f} | {r['ratio']:.3f} | {rewrite} | {share} |"
        )
    return "\n".join(out)


def ints(text: str) -> list[int]:
    return [int(float(t)) for t in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--rows", type=ints, default=[2_000_000, 8_000_000])
    parser.add_argument("--chunks", type=ints, default=[32, 128])
    parser.add_argument("--kinds", type=lambda s: s.split(","), default=["array", "frame"])
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["threads", "processes"])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--proc-workers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if len(args.rows) != len(args.chunks):
        parser.error("--rows and --chunks need as many values")
    header = [
        "# coding_overhead: `with dask_bacc.coding():` around computations with no layer "
        "to code (issue 30)",
        "",
        f"- machine: {os.cpu_count()} cores; python {platform.python_version()}, "
        f"dask {dask.__version__}",
        f"- command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`",
        f"- {args.rounds} rounds, variants interleaved in a shuffled order per round; "
        "medians; ratios to plain in the same configuration",
        "",
    ]
    t0 = time.perf_counter()
    rows = run(args)
    text = "\n".join([*header, table(rows), "", f"Wall time {time.perf_counter() - t0:.0f} s.", ""])
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
