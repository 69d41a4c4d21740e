"""Data-heavy coded maps against plain Dask: time and peak memory (issue 11, item 7).

Run it with::

    python benchmarks/dataframe_heavy.py                            # dask DataFrame, 10 reps
    python benchmarks/dataframe_heavy.py --case xarray --reps 12
    python benchmarks/dataframe_heavy.py --case all --out benchmarks/results/heavy.md
    PYTHONPATH=/tmp/clone python benchmarks/dataframe_heavy.py      # another checkout

(from a checkout whose ``dask_bacc`` is installed in the interpreter, e.g. ``.venv/bin/python``;
with ``PYTHONPATH`` pointing at another clone, that clone's ``dask_bacc`` is measured: the
header prints which one). A dask DataFrame case with 10 reps takes about 1-2 min once
dask-bacc is fast, much longer when it is not (each slow coded job is timed in full).

The workload
------------
One embedded ``LocalCluster(n_workers=16, threads_per_worker=1, processes=False)``.

- ``--case dataframe``: a dask DataFrame of 2M rows x 8 float64 columns with a datetime
  index (1 s apart), 8 partitions, persisted on the workers before anything is timed.
  ``f`` (:func:`features`) is per-partition feature engineering without windows: a ratio,
  a log of abs + 1, a z-score within the block, a product and a norm (5 new columns).
  Plain Dask is ``ddf.map_partitions(f).compute()``.
- ``--case xarray``: an xarray Dataset of 3 float64 variables ``(time, y, x)`` =
  (8064, 32, 32), 198 MB, chunked into 8 time chunks and persisted. ``f``
  (:func:`xr_features`) returns wind speed, log(|t| + 1) and the z-score of t along time
  within the block. Plain Dask is ``xr.map_blocks(f, ds).compute()``.
- ``--case pandas``: the 2M x 8 frame in memory, ``map_coded(f, df, n_blocks=8)``; plain
  Dask is ``client.submit(f, block)`` for each of the 8 row blocks, ``gather`` and
  ``pd.concat`` (the data goes from the client to the cluster on every call in both).
  ``dd.from_pandas(df, npartitions=8).map_partitions(f).compute()`` is not the baseline:
  it took about 20 s per call here (a 128 MB frame embedded in the graph).

Variants (``--variants``), run in an order shuffled per rep (seeded): ``plain``,
``berrut`` (``dask_bacc.map_coded(f, data, progress=False)``: K = 8, N = 16, the default
wait), ``repetition`` (the same with ``code="repetition"``, 2 copies of each block) and
``bspline`` (the local-support code: each share reads at most 4 partitions). The table
also gives each code's ``report.bytes_moved`` over the data's size (median). The time is
from the call to the output in hand on the client (``.compute()`` of the lazy output for
dask input). Each variant runs ``--reps`` times without stragglers and ``--reps`` times with.

Stragglers
----------
``inject_stragglers(Bimodal(p=0.1, delay=2.0), seed=...)``: each coded eval task is 2 s late
with probability 0.1 (the delay ends early once its job has decoded). That plugin delays
only dask-bacc's eval tasks, so plain tasks are not touched by it: the plain variant runs
``f`` through a wrapper that, after ``f``, sleeps the delay :func:`dask_bacc.testing.draw_delay`
gives for the same model and seed, with ``seq = PLAIN_SEQ_BASE + rep`` and ``index`` = the
partition number (``partition_info`` for dataframes, the position of the block's first
time label for xarray), so plain's draws are seeded per (rep, partition) and independent
of the coded jobs'. A plain task cannot be cancelled: it sleeps the full 2 s. With 8
partitions, (0.9)^8 = 43% of plain runs have no late task: plain's median with stragglers
sits near that edge (the table gives the number of plain runs that met one).

Memory
------
The cluster runs in this process, so one process's RSS covers the client and every
worker. A thread samples it (psutil) every 5 ms while a variant runs; the table gives the
peak minus the RSS just before the call (after ``gc.collect()`` and glibc's ``malloc_trim``,
with the cluster idle), median over reps. In-process workers share that RSS but each
compares it with its own limit (a 16th of the RAM by default), so they would all pause at
once well before the machine is short of memory; ``--memory-limit`` defaults to ``0``
(no limit) for that reason (``--memory-limit auto`` restores Dask's default).

Also reported: Berrut's median relative error ``||out - plain|| / ||plain||`` (Frobenius,
over every output column/variable); repetition is checked exact. Ratios are to plain's
median in the same run and scenario (below 1: faster / less memory than plain).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import platform
import subprocess
import sys
import threading
import time
from typing import Any

import dask
import dask.dataframe as dd
import numpy as np
import pandas as pd
import psutil
import xarray as xr
from distributed import Client, LocalCluster, wait

import dask_bacc
from dask_bacc.testing import Bimodal, clear_stragglers, draw_delay, inject_stragglers

PLAIN_SEQ_BASE = 1_000_000_000  # plain runs' straggler seq numbers, far above dask-bacc's
VARIANTS = ("plain", "berrut", "repetition", "bspline")
CASES = ("dataframe", "xarray", "pandas")


# -- the workloads ---------------------------------------------------------------------------
def features(part: pd.DataFrame) -> pd.DataFrame:
    """Per-block feature engineering, no windows: 5 new columns from 8."""
    return pd.DataFrame(
        {
            "ratio01": part["c0"] / (part["c1"].abs() + 1.0),
            "log2": np.log(part["c2"].abs() + 1.0),
            "z3": (part["c3"] - part["c3"].mean()) / (part["c3"].std() + 1e-9),
            "prod45": part["c4"] * part["c5"],
            "norm67": np.sqrt(part["c6"] ** 2 + part["c7"] ** 2),
        },
        index=part.index,
    )


def xr_features(block: xr.Dataset) -> xr.Dataset:
    """Per-block features of a (time, y, x) Dataset: 3 new variables along time."""
    t = block["t2m"]
    return xr.Dataset(
        {
            "speed": np.sqrt(block["u10"] ** 2 + block["v10"] ** 2),
            "logt": np.log(abs(t) + 1.0),
            "zt": (t - t.mean("time")) / (t.std("time") + 1e-9),
        }
    )


def late_features(part, model, seed, seq, partition_info=None):
    """``features`` then the injected delay of partition ``number`` of plain run ``seq``."""
    out = features(part)
    if partition_info is not None and seq is not None:
        delay = draw_delay(model, seed, seq, int(partition_info["number"]))
        if delay > 0:
            time.sleep(delay)
    return out


def late_xr_features(block, model, seed, seq, starts):
    """``xr_features`` then the injected delay of the block (found by its first time)."""
    out = xr_features(block)
    if seq is not None and block.sizes["time"] > 0:  # not xarray's template call
        index = int(np.searchsorted(starts, block["time"].values[0]))
        delay = draw_delay(model, seed, seq, index)
        if delay > 0:
            time.sleep(delay)
    return out


def make_frame(rows: int, cols: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        rng.standard_normal((rows, cols)),
        columns=[f"c{i}" for i in range(cols)],
        index=pd.date_range("2020-01-01", periods=rows, freq="s", name="time"),
    )


def make_dataset(times: int, side: int, seed: int) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    dims = ("time", "y", "x")
    coords = {
        "time": pd.date_range("2020-01-01", periods=times, freq="h"),
        "y": np.arange(side, dtype=float),
        "x": np.arange(side, dtype=float),
    }
    data = {
        name: (dims, rng.standard_normal((times, side, side)) * scale + shift)
        for name, scale, shift in (("t2m", 5.0, 280.0), ("u10", 3.0, 0.0), ("v10", 3.0, 0.0))
    }
    return xr.Dataset(data, coords=coords)


class Case:
    """One workload: its data on the cluster, its plain run and its coded run."""

    def __init__(self, name: str, client: Client, args: argparse.Namespace):
        self.name, self.client, self.args = name, client, args
        self.model = Bimodal(p=args.p, delay=args.delay)
        K = args.partitions
        if name == "xarray":
            ds = make_dataset(args.times, args.side, args.seed)
            self.data = ds.chunk({"time": args.times // K}).persist()
            wait([v.data for v in self.data.data_vars.values()])
            self.starts = ds["time"].values[:: args.times // K]
            self.nbytes = ds.nbytes
        else:
            df = make_frame(args.rows, args.cols, args.seed)
            self.nbytes = int(df.memory_usage(index=True).sum())
            if name == "dataframe":
                self.data = dd.from_pandas(df, npartitions=K).persist()
                wait(self.data)
            else:
                self.data = df
        self.reference = self.plain(None)  # also warms every code path up
        for variant in args.variants:
            if variant != "plain":
                self.coded(variant)

    def plain(self, seq: int | None) -> Any:
        seed = self.args.seed
        if self.name == "xarray":
            kwargs = {"model": self.model, "seed": seed, "seq": seq, "starts": self.starts}
            return xr.map_blocks(late_xr_features, self.data, kwargs=kwargs).compute()
        if self.name == "pandas":
            K = self.args.partitions
            bounds = np.linspace(0, len(self.data), K + 1).astype(int)
            futures = [
                self.client.submit(
                    late_features,
                    self.data.iloc[bounds[j] : bounds[j + 1]],
                    self.model,
                    seed,
                    seq,
                    partition_info={"number": j},
                    pure=False,
                )
                for j in range(K)
            ]
            return pd.concat(self.client.gather(futures))
        return self.data.map_partitions(late_features, self.model, seed, seq).compute()

    def coded(self, code: str) -> Any:
        options: dict[str, Any] = {"progress": False, "code": code}
        if self.name == "pandas":
            options["n_blocks"] = self.args.partitions
        if self.name == "xarray":
            options["dim"] = "time"
        self.job = dask_bacc.submit_coded(
            xr_features if self.name == "xarray" else features, self.data, **options
        )
        out = self.job.result()
        return out if self.name == "pandas" else out.compute()

    def bytes_moved(self) -> int | None:
        """The last coded job's ``report.bytes_moved`` (filled in by its clean-up round
        trip just after the output is handed over; None for jobs that do not count it,
        e.g. repetition of a DataFrame, which copies the map's own tasks)."""
        report = getattr(self.job, "report", None)
        end = time.monotonic() + 2.0
        while report is not None and getattr(report, "bytes_moved", None) is None:
            if time.monotonic() > end or type(self.job).__name__ != "CodedJob":
                return None
            time.sleep(0.01)
        return None if report is None else report.bytes_moved

    def error(self, out: Any) -> float:
        ref = self.reference
        if self.name == "xarray":
            num = sum(float(((out[k] - ref[k]) ** 2).sum()) for k in ref.data_vars)
            den = sum(float((ref[k] ** 2).sum()) for k in ref.data_vars)
            return float(np.sqrt(num / den))
        a, b = np.asarray(out, dtype=float), np.asarray(ref, dtype=float)
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# -- measuring ---------------------------------------------------------------------------
_libc = None


def trim_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS (glibc), for a clean baseline."""
    global _libc
    gc.collect()
    if _libc is None:
        try:
            _libc = ctypes.CDLL("libc.so.6")
        except OSError:
            _libc = False
    if _libc:
        _libc.malloc_trim(0)


class PeakRSS:
    """Peak RSS of this process while the block runs, sampled every ``interval`` s."""

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.proc = psutil.Process()

    def __enter__(self) -> PeakRSS:
        self.baseline = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(self.interval)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)

    @property
    def delta_mb(self) -> float:
        return (self.peak - self.baseline) / 2**20


def wait_idle(client: Client, timeout: float = 30.0) -> None:
    """Until no task is processing on the cluster (a cancelled straggler may still run)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not any(client.processing().values()):
            return
        time.sleep(0.02)


def run_one(case: Case, variant: str, seq: int | None) -> dict[str, Any]:
    wait_idle(case.client)
    trim_memory()
    with PeakRSS() as mem:
        start = time.perf_counter()
        out = case.plain(seq) if variant == "plain" else case.coded(variant)
        seconds = time.perf_counter() - start
    row = {"variant": variant, "seconds": seconds, "peak_mb": mem.delta_mb}
    if variant != "plain":
        row["error"] = case.error(out)
        moved = case.bytes_moved()
        row["moved_x_data"] = None if moved is None else moved / case.nbytes
    del out
    return row


def run_case(name: str, client: Client, args: argparse.Namespace) -> list[dict[str, Any]]:
    case = Case(name, client, args)
    rows: list[dict[str, Any]] = []
    order_rng = np.random.default_rng(args.seed)
    for scenario in ("none", "stragglers"):
        if scenario == "stragglers":
            inject_stragglers(case.model, seed=args.seed, client=client)
        try:
            for rep in range(args.reps):
                seq = PLAIN_SEQ_BASE + rep if scenario == "stragglers" else None
                late = 0
                if seq is not None:
                    late = sum(
                        draw_delay(case.model, args.seed, seq, j) > 0
                        for j in range(args.partitions)
                    )
                for variant in order_rng.permutation(args.variants):
                    row = run_one(case, str(variant), seq)
                    row.update(case=name, scenario=scenario, rep=rep)
                    if variant == "plain":
                        row["plain_late"] = late
                    rows.append(row)
                    if args.verbose:
                        print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            if scenario == "stragglers":
                clear_stragglers(client)
    wait_idle(client)
    return rows


# -- the report ------------------------------------------------------------------------------
def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = sorted(
        {(r["case"], r["scenario"]) for r in rows}, key=lambda k: (CASES.index(k[0]), k[1])
    )
    for case, scenario in keys:
        sel = [r for r in rows if r["case"] == case and r["scenario"] == scenario]
        base = {}
        variants = ["plain", *sorted({r["variant"] for r in sel} - {"plain"})]
        for variant in variants:
            vs = [r for r in sel if r["variant"] == variant]
            if not vs:
                continue
            t = np.array([r["seconds"] for r in vs])
            m = np.array([r["peak_mb"] for r in vs])
            s = {
                "case": case,
                "scenario": scenario,
                "variant": variant,
                "n": len(vs),
                "median_s": float(np.median(t)),
                "p90_s": float(np.quantile(t, 0.9)),
                "mean_s": float(t.mean()),
                "peak_mb": float(np.median(m)),
                "peak_max_mb": float(m.max()),
            }
            if variant == "plain":
                base = s
                s["late_runs"] = sum(1 for r in vs if r.get("plain_late", 0) > 0)
            else:
                s["error"] = float(np.median([r["error"] for r in vs]))
                moved = [r["moved_x_data"] for r in vs if r.get("moved_x_data") is not None]
                s["moved_x_data"] = float(np.median(moved)) if moved else None
            s["time_ratio"] = s["median_s"] / base["median_s"] if base else float("nan")
            s["mem_ratio"] = (
                s["peak_mb"] / base["peak_mb"] if base and base["peak_mb"] > 0 else float("nan")
            )
            out.append(s)
    return out


def table(summary: list[dict[str, Any]]) -> str:
    lines = [
        "| case | stragglers | variant | median s | p90 s | mean s | x plain (median) "
        "| peak MB (median) | max MB | x plain (peak) | rel. error (median) "
        "| bytes moved / data |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summary:
        if s["variant"] == "plain":
            err = "0"
            if s["scenario"] != "none":
                err = f"0 ({s['late_runs']}/{s['n']} runs with a late task)"
        else:
            err = f"{s['error']:.3g}"
        moved = s.get("moved_x_data")
        moved_text = "-" if moved is None else f"{moved:.2f}"
        lines.append(
            f"| {s['case']} | {'10% 2 s' if s['scenario'] != 'none' else 'none'} | {s['variant']} "
            f"| {s['median_s']:.2f} | {s['p90_s']:.2f} | {s['mean_s']:.2f} | {s['time_ratio']:.2f} "
            f"| {s['peak_mb']:.0f} | {s['peak_max_mb']:.0f} | {s['mem_ratio']:.2f} | {err} "
            f"| {moved_text} |"
        )
    return "\n".join(lines)


def describe_tree() -> str:
    where = os.path.dirname(os.path.dirname(os.path.abspath(dask_bacc.__file__)))
    try:
        head = subprocess.run(
            ["git", "-C", where, "log", "-1", "--format=%h %s"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", where, "status", "--short", "dask_bacc"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        head, dirty = "", ""
    if not head:
        return f"dask_bacc from {dask_bacc.__file__} (not a git checkout)"
    state = f"{len(dirty.splitlines())} file(s) modified under dask_bacc/" if dirty else "clean"
    return f"dask_bacc from {dask_bacc.__file__} (commit {head[:72]}; {state})"


def blas_threads() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    info = [f"{i['internal_api']}={i['num_threads']}" for i in threadpool_info()]
    return ", ".join(info) or "none found"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", choices=[*CASES, "all"], default="dataframe")
    parser.add_argument("--reps", type=int, default=10, help="runs of each variant per scenario")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--partitions", type=int, default=8, help="K")
    parser.add_argument("--rows", type=int, default=2_000_000, help="dataframe/pandas rows")
    parser.add_argument("--cols", type=int, default=8, help="dataframe/pandas columns")
    parser.add_argument("--times", type=int, default=8064, help="xarray time steps")
    parser.add_argument("--side", type=int, default=32, help="xarray y and x sizes")
    parser.add_argument("--p", type=float, default=0.1, help="straggler probability")
    parser.add_argument("--delay", type=float, default=2.0, help="straggler delay (s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--variants",
        nargs="+",
        default=list(VARIANTS),
        help="plain and any codes map_coded takes (default: %(default)s)",
    )
    parser.add_argument(
        "--memory-limit", default="0", help="per-worker memory limit (default 0: none; 'auto')"
    )
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=None,
        help="limit BLAS threads with threadpoolctl (default: leave them as they are)",
    )
    parser.add_argument("--out", help="write the Markdown report here")
    parser.add_argument("--json", help="write every run and the summary here")
    parser.add_argument("--verbose", action="store_true", help="print every run to stderr")
    args = parser.parse_args(argv)
    if args.blas_threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.blas_threads)

    cases = list(CASES) if args.case == "all" else [args.case]
    header = [
        f"# dataframe_heavy: {', '.join(cases)}",
        "",
        f"- {describe_tree()}",
        f"- python {platform.python_version()}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
        f"pandas {pd.__version__}, dask {dask.__version__}, xarray {xr.__version__}; BLAS "
        f"threads: {blas_threads()}",
        f"- LocalCluster(n_workers={args.workers}, threads_per_worker=1, processes=False, "
        f"memory_limit={args.memory_limit!r}); K={args.partitions} partitions; {args.reps} reps "
        f"per variant and scenario; stragglers Bimodal(p={args.p}, delay={args.delay}) seed "
        f"{args.seed}",
        f"- command: `{' '.join([os.path.basename(sys.executable), *sys.argv])}`",
    ]
    print("\n".join(header), flush=True)
    rows: list[dict[str, Any]] = []
    sizes = []
    with contextlib.ExitStack() as stack:
        cluster = stack.enter_context(
            LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=False,
                memory_limit=args.memory_limit,
                dashboard_address=None,
            )
        )
        client = stack.enter_context(Client(cluster))
        for name in cases:
            started = time.perf_counter()
            case_rows = run_case(name, client, args)
            rows.extend(case_rows)
            took = time.perf_counter() - started
            sizes.append(f"{name}: input {input_mb(name, args):.0f} MB, {took:.0f} s")
    summary = summarize(rows)
    report = "\n".join([*header, f"- {'; '.join(sizes)}", "", table(summary), ""])
    print("\n" + table(summary), flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as fh:
            fh.write(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "runs": rows, "summary": summary}, fh, indent=1)
    return 0


def input_mb(name: str, args: argparse.Namespace) -> float:
    """Input size in MB (values and index)."""
    if name == "xarray":
        return (3 * args.times * args.side**2 * 8 + args.times * 8 + 2 * args.side * 8) / 2**20
    return args.rows * (args.cols + 1) * 8 / 2**20


if __name__ == "__main__":
    sys.exit(main())
