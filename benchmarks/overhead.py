"""What dask-bacc itself costs: per job, per encode/decode byte, and per coded task on the client.

Run it with::

    python benchmarks/overhead.py                          # all three parts, ~4 min on 2 cores
    python benchmarks/overhead.py --part job --reps 31     # one part, more repetitions
    python benchmarks/overhead.py --json overhead.json
    OPENBLAS_NUM_THREADS=1 python benchmarks/overhead.py --part codec   # steadier BLAS timings

Three parts, each printed as a Markdown table (``codec`` runs first: the threads a
``LocalCluster`` leaves behind disturb multi-threaded BLAS timings):

``job``: per-job overhead against a bare loop
    One ``LocalCluster`` (W = N workers x 1 thread; threads unless ``--processes``). Every
    job runs the same N tasks, ``work(block, seconds)`` = sleep ``seconds`` then ``tanh``
    of a small block, with no stragglers:

    - ``bare``: ``client.submit(work, block_i, ...)`` for the N blocks, then an
      ``as_completed`` loop that fetches every result: what a user would write by hand;
    - ``bacc, wait=N``: ``dask_bacc.submit_coded(work, X, ..., n_blocks=K, n_coded=N,
      wait=N).result()``: waits for the same N tasks, then decodes K outputs;
    - ``bacc, default wait``: the same with the default wait (``ceil(0.75 N)`` results);
    - ``reference: client-side codec``: not dask-bacc, a lower bound for NumPy input: the
      client encodes with ``BerrutCode.encode``, submits the N shares pinned one per
      worker (as dask-bacc pins), waits for all N with ``as_completed`` and decodes with
      ``BerrutCode.decode``: no chunk, encode, inspect or decode tasks on the cluster.

    The three run in an order shuffled per repetition; reported are medians of the time
    from the first submit to the output in hand, the ratio to ``bare`` and the difference
    in milliseconds, for a 0.2 s task (the default bench's base task) and a 10 ms task
    (where the fixed cost dominates). For the coded jobs, the medians of the job's own
    timestamps split the time into phases (see the table notes).

``codec``: encode / decode throughput against ``numpy.tensordot``
    ``BerrutCode(K=16, N=32)``; blocks of 1 KB ... 64 MB (float64, flattened).
    ``code.encode(blocks)`` (K blocks in an ndarray -> N) against
    ``np.tensordot(E, blocks, axes=1)`` with the same E; ``code.decode(results, returned)``
    from the first ``ceil(0.75 N)`` = 24 worker indices against
    ``np.tensordot(D, results, axes=1)`` with the same D (the code builds E and D inside
    the call; the baseline gets them for free). Throughput is input bytes per second.
    A second table times the worker-side tasks the runtime actually runs for one coded
    share / one decoded block (:func:`dask_bacc.runtime.worker.encode_task` and
    ``decode_task``, whose inputs arrive as separate arrays) against ``np.tensordot`` of
    the same weight row with the inputs already stacked.

``client``: client-side time per coded task, N = 8 ... 256
    A scheduler and W worker processes started as separate processes (``dask scheduler``,
    ``dask worker``, on 127.0.0.1 only), so that the CPU time of this process is the
    client's alone. With N > W, ``bacc.oversubscribe`` is set to ``warn``: coded tasks are
    placed round-robin, several per worker (placement itself costs the same). K = N/2,
    f = ``np.tanh`` on (10, 4) blocks. Reported: wall time until ``submit_coded`` returns,
    the client's CPU time for the whole job (``time.process_time`` from the submit to the
    result in hand, which includes the job loop on the client's event loop, the decode
    submission and the cleanup), both per coded task in microseconds, and the same CPU
    figure for a bare ``client.submit`` + ``as_completed`` loop over N tasks.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import dask
import distributed
import numpy as np
from distributed import Client, LocalCluster, as_completed

import dask_bacc
from dask_bacc.codes import BerrutCode
from dask_bacc.runtime.worker import decode_task, encode_task, stack_decode_task

# codec first: a cluster's leftover threads disturb multi-threaded BLAS timings
PARTS = ("codec", "job", "client")
KB = 1024
MB = 1024 * KB


# --------------------------------------------------------------------------- helpers
def work(block: np.ndarray, seconds: float) -> np.ndarray:
    """The benchmark task: sleep ``seconds`` (the work), then ``tanh`` of the block.

    Parameters
    ----------
    block : numpy.ndarray
        A data block or coded share.
    seconds : float
        Simulated compute time.

    Returns
    -------
    numpy.ndarray
        ``np.tanh(block)``.
    """
    time.sleep(seconds)
    return np.tanh(block)


def median(values: list[float]) -> float:
    """The median of ``values`` as a float."""
    return float(statistics.median(values))


def _git_state() -> str | None:
    """The short commit of the dask-bacc checkout, ``+ local changes`` if tracked files differ."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(dask_bacc.__file__)))
    try:
        head = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", "dask_bacc"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + (" + local changes to dask_bacc/" if dirty else "")


def environment() -> dict[str, Any]:
    """Versions, BLAS kernel and the OpenBLAS environment variables this run saw."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "dask": dask.__version__,
        "distributed": distributed.__version__,
        "cpus": os.cpu_count(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
        "git": _git_state(),
    }
    try:
        from threadpoolctl import threadpool_info

        blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        if blas:
            env["blas"] = (
                f"{blas[0].get('internal_api')} {blas[0].get('version')}, "
                f"{blas[0].get('architecture')} kernel, {blas[0].get('num_threads')} threads"
            )
    except ImportError:  # optional: only used to name the BLAS kernel
        env["blas"] = "unknown (install threadpoolctl to see the kernel)"
    return env


# --------------------------------------------------------------------------- part 1: job
def bench_job(args: argparse.Namespace) -> dict[str, Any]:
    """Per-job time of a bare submit + as_completed loop against dask-bacc, no stragglers."""
    K, N = args.blocks, args.coded
    W = args.workers if args.workers is not None else N
    rng = np.random.default_rng(0)
    X = rng.standard_normal((K * args.rows, 16))
    code = BerrutCode(K, N)
    shares = list(code.encode(np.stack(np.split(X, K))))  # the bare loop's N blocks
    out: dict[str, Any] = {"K": K, "N": N, "workers": W, "processes": args.processes, "rows": []}

    with (
        LocalCluster(
            n_workers=W, threads_per_worker=1, processes=args.processes, dashboard_address=":0"
        ) as cluster,
        Client(cluster) as client,
    ):

        def bare(seconds: float) -> dict[str, float]:
            t0 = time.perf_counter()
            futures = [client.submit(work, s, seconds, pure=False) for s in shares]
            first = None
            results = {}
            for fut in as_completed(futures):
                results[fut.key] = fut.result()
                if first is None:
                    first = time.perf_counter() - t0
            return {"total": time.perf_counter() - t0, "first": first}

        def coded(seconds: float, wait: int | None) -> dict[str, float]:
            t0 = time.perf_counter()
            job = dask_bacc.submit_coded(
                work, X, seconds, n_blocks=K, n_coded=N, wait=wait, client=client
            )
            t_submit = time.perf_counter() - t0
            job.result()
            total = time.perf_counter() - t0
            rep = job.report
            # the report's times count from the job object's creation, inside submit_coded
            return {
                "total": total,
                "submit": t_submit,
                "first": min(rep.arrival.values()),
                "slowest_used": rep.slowest_used,
                "decoded": rep.time_to_decode,
            }

        addrs = sorted(client.scheduler_info(n_workers=-1)["workers"])

        def local_codec(seconds: float) -> dict[str, float]:
            # a reference, not dask-bacc: encode and decode on the client, N pinned tasks
            t0 = time.perf_counter()
            coded_blocks = code.encode(np.stack(np.split(X, K)))
            futures = [
                client.submit(
                    work, b, seconds, pure=False, workers=[addrs[i % W]], allow_other_workers=False
                )
                for i, b in enumerate(coded_blocks)
            ]
            index = {f.key: i for i, f in enumerate(futures)}
            results: dict[int, np.ndarray] = {}
            first = None
            for fut in as_completed(futures):
                results[index[fut.key]] = fut.result()
                if first is None:
                    first = time.perf_counter() - t0
            code.decode(np.stack([results[i] for i in range(N)]), list(range(N)))
            return {"total": time.perf_counter() - t0, "first": first}

        variants: dict[str, Callable[[float], dict[str, float]]] = {
            "bare": bare,
            "bacc, wait=N": lambda s: coded(s, N),
            "bacc, default wait": lambda s: coded(s, None),
            "reference: client-side codec, pinned, wait=N": local_codec,
        }
        order_rng = np.random.default_rng(1)
        for seconds in args.task_seconds:
            for fn in variants.values():  # warm-up: imports, connections, serialisation
                fn(seconds)
            samples: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
            for _ in range(args.reps):
                names = list(variants)
                for k in order_rng.permutation(len(names)):
                    samples[names[k]].append(variants[names[k]](seconds))
            bare_median = median([s["total"] for s in samples["bare"]])
            for name, recs in samples.items():
                row: dict[str, Any] = {"variant": name, "task_seconds": seconds}
                for key in recs[0]:
                    row[key] = median([r[key] for r in recs])
                row["p90"] = float(np.quantile([r["total"] for r in recs], 0.9))
                row["ratio"] = row["total"] / bare_median
                row["overhead_ms"] = 1e3 * (row["total"] - bare_median)
                out["rows"].append(row)
    return out


def print_job(res: dict[str, Any], reps: int) -> None:
    """Markdown table for the ``job`` part."""
    print(
        f"### (a) Per-job overhead against a bare `client.submit` + `as_completed` loop\n\n"
        f"{res['workers']} workers x 1 thread ({'processes' if res['processes'] else 'threads'}),"
        f" K={res['K']}, N={res['N']}, no stragglers; median of {reps} interleaved jobs each.\n"
    )
    print(
        "| task | variant | median (s) | p90 (s) | vs bare | overhead (ms) "
        "| submit returns (s) | first result (s) | last result used (s) | decoded (s) |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|")

    def f(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for r in res["rows"]:
        print(
            f"| {r['task_seconds'] * 1e3:g} ms | {r['variant']} | {r['total']:.3f} "
            f"| {r['p90']:.3f} | {r['ratio']:.2f} | {r['overhead_ms']:+.0f} "
            f"| {f(r.get('submit'))} | {f(r.get('first'))} | {f(r.get('slowest_used'))} "
            f"| {f(r.get('decoded'))} |"
        )
    print(
        "\n'first result', 'last result used' and 'decoded' are the coded job's own "
        "timestamps (JobReport.arrival,\nslowest_used, time_to_decode; bare: its first "
        "result); 'median' minus 'decoded' is the hand-over\nof the decoded output to the "
        "caller. 'reference' is not dask-bacc: encode and decode on the client, N pinned tasks."
    )


# --------------------------------------------------------------------------- part 2: codec
def _time_pair(
    a: Callable[[], Any], b: Callable[[], Any], budget: float, max_reps: int = 200
) -> dict[str, float]:
    """Best and median seconds of ``a`` and ``b``, called alternately until ``budget`` is spent.

    The order within a pair alternates, so a slow phase of the machine hits both alike.
    """
    ta: list[float] = []
    tb: list[float] = []
    spent = 0.0
    while len(ta) < 3 or (spent < budget and len(ta) < max_reps):
        pair = ((a, ta), (b, tb)) if len(ta) % 2 == 0 else ((b, tb), (a, ta))
        for fn, acc in pair:
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            acc.append(dt)
            spent += dt
    return {
        "best": min(ta),
        "median": median(ta),
        "tensordot_best": min(tb),
        "tensordot_median": median(tb),
        "reps": len(ta),
    }


def bench_codec(args: argparse.Namespace) -> dict[str, Any]:
    """Encode/decode throughput of BerrutCode and the worker tasks against np.tensordot."""
    K, N = args.codec_k, args.codec_n
    code = BerrutCode(K, N)
    returned = list(range(math.ceil(0.75 * N)))
    E, D = code.encoding_matrix(), code.decoding_matrix(returned)
    i_share = N // 2 + 1  # a share with every weight nonzero
    sizes = [KB * 4**e for e in range(20) if KB * 4**e <= args.max_mb * MB]
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(0)
    for size in sizes:
        blocks = rng.standard_normal((K, size // 8))
        results = code.encode(blocks)[returned]
        budget = args.codec_budget
        cases = [
            # the code's NumPy API on stacked ndarrays vs tensordot with the same matrix
            (
                "encode",
                "BerrutCode.encode",
                K,
                partial(code.encode, blocks),
                partial(np.tensordot, E, blocks, axes=1),
            ),
            (
                "decode",
                "BerrutCode.decode",
                len(returned),
                partial(code.decode, results, returned),
                partial(np.tensordot, D, results, axes=1),
            ),
        ]
        cases += [
            # the cluster decode: one task, all K blocks, inputs as separate arrays (as
            # they arrive on a worker) against tensordot on inputs already stacked; with
            # and without the sketches it makes for the error estimate
            (
                "decode",
                "stack_decode_task (all K blocks)",
                len(returned),
                partial(stack_decode_task, D, None, *results),
                partial(np.tensordot, D, results, axes=1),
            ),
            (
                "decode",
                "stack_decode_task + sketches",
                len(returned),
                partial(stack_decode_task, D, (256, 0), *results),
                partial(np.tensordot, D, results, axes=1),
            ),
        ]
        if size <= args.task_max_mb * MB:
            # the worker tasks: K (or |F|) separate input arrays, one output block per task
            cases += [
                (
                    "encode",
                    "encode_task (1 share)",
                    K,
                    partial(encode_task, E[i_share], *blocks),
                    partial(np.tensordot, E[i_share], blocks, axes=1),
                ),
                (
                    "decode",
                    "decode_task (1 block)",
                    len(returned),
                    partial(decode_task, D[0], *results),
                    partial(np.tensordot, D[0], results, axes=1),
                ),
            ]
        for op, impl, n_in, f_code, f_td in cases:
            t = _time_pair(f_code, f_td, budget)
            gbytes = n_in * size / 1e9
            rows.append(
                {
                    "op": op,
                    "impl": impl,
                    "block_bytes": size,
                    "inputs": n_in,
                    **t,
                    "gbps": gbytes / t["best"],
                    "tensordot_gbps": gbytes / t["tensordot_best"],
                    "ratio_best": t["tensordot_best"] / t["best"],
                    "ratio_median": t["tensordot_median"] / t["median"],
                }
            )
        del blocks, results, cases
        gc.collect()
    return {"K": K, "N": N, "returned": len(returned), "rows": rows}


def _size(n: int) -> str:
    return f"{n // MB} MB" if n >= MB else f"{n // KB} KB"


def print_codec(res: dict[str, Any]) -> None:
    """Markdown tables for the ``codec`` part."""
    print(
        f"### (b) Encode / decode throughput against `numpy.tensordot`\n\n"
        f"BerrutCode(K={res['K']}, N={res['N']}), float64 blocks; decode from "
        f"{res['returned']} results. GB/s = input bytes / best time; ratio = tensordot time / "
        "code time (1 = as fast as tensordot), from the best and the median of the "
        "interleaved repetitions.\n"
    )
    for title, prefix in (("the code (NumPy API)", "Berrut"), ("the worker tasks", "")):
        rows = [r for r in res["rows"] if r["impl"].startswith(prefix)]
        if prefix == "":
            rows = [r for r in res["rows"] if not r["impl"].startswith("Berrut")]
        if not rows:
            continue
        print(f"\n{title}:\n")
        print(
            "| block | op | implementation | GB/s | tensordot GB/s | ratio (best) "
            "| ratio (median) | ms (best) | tensordot ms (best) | reps |"
        )
        print("|--:|---|---|--:|--:|--:|--:|--:|--:|--:|")
        for r in rows:
            print(
                f"| {_size(r['block_bytes'])} | {r['op']} | {r['impl']} | {r['gbps']:.2f} "
                f"| {r['tensordot_gbps']:.2f} | {r['ratio_best']:.2f} | {r['ratio_median']:.2f} "
                f"| {r['best'] * 1e3:.3f} | {r['tensordot_best'] * 1e3:.3f} | {r['reps']} |"
            )


# --------------------------------------------------------------------------- part 3: client
class _OutsideCluster:
    """A scheduler and worker processes started with ``dask scheduler`` / ``dask worker``."""

    def __init__(self, n_workers: int):
        self.n_workers = n_workers
        self.tmp = tempfile.TemporaryDirectory(prefix="bacc-overhead-")
        self.file = os.path.join(self.tmp.name, "scheduler.json")
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> str:
        cli = [sys.executable, "-m"]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.procs.append(
            subprocess.Popen(
                [
                    *cli,
                    "distributed.cli.dask_scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--no-dashboard",
                    "--scheduler-file",
                    self.file,
                ],
                **quiet,
            )
        )
        deadline = time.monotonic() + 60
        while not os.path.exists(self.file):
            if time.monotonic() > deadline or self.procs[0].poll() is not None:
                self.__exit__()
                raise RuntimeError("the scheduler process did not start")
            time.sleep(0.1)
        self.procs.append(
            subprocess.Popen(
                [
                    *cli,
                    "distributed.cli.dask_worker",
                    "--scheduler-file",
                    self.file,
                    "--nworkers",
                    str(self.n_workers),
                    "--nthreads",
                    "1",
                    "--host",
                    "127.0.0.1",
                    "--no-dashboard",
                    "--memory-limit",
                    "1GB",
                ],
                **quiet,
            )
        )
        return self.file

    def __exit__(self, *exc: object) -> None:
        for p in reversed(self.procs):  # workers first, then the scheduler
            p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.tmp.cleanup()


def _client_coded(client: Client, X: np.ndarray, K: int, N: int) -> tuple[float, float, float]:
    """One coded job: (submit_coded wall, client CPU for the whole job, job wall), seconds."""
    c0, t0 = time.process_time(), time.perf_counter()
    job = dask_bacc.submit_coded(np.tanh, X, n_blocks=K, n_coded=N, client=client)
    t_submit = time.perf_counter() - t0
    job.result()
    return t_submit, time.process_time() - c0, time.perf_counter() - t0


def _client_bare(client: Client, shares: list[np.ndarray]) -> tuple[float, float, float]:
    """The same for a bare submit + as_completed loop over ``shares``."""
    c0, t0 = time.process_time(), time.perf_counter()
    futures = [client.submit(np.tanh, s, pure=False) for s in shares]
    t_submit = time.perf_counter() - t0
    for fut in as_completed(futures):
        fut.result()
    return t_submit, time.process_time() - c0, time.perf_counter() - t0


def bench_client(args: argparse.Namespace) -> dict[str, Any]:
    """Client wall/CPU time per coded task for N = 8 ... 256 (scheduler in another process)."""
    rows: list[dict[str, Any]] = []
    with _OutsideCluster(args.client_workers) as scheduler_file:
        with Client(scheduler_file=scheduler_file) as client:
            client.wait_for_workers(args.client_workers, timeout=120)
            with (
                dask.config.set({"bacc.oversubscribe": "warn"}),
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("ignore", RuntimeWarning)  # the oversubscribe warning
                for N in args.ns:
                    K = N // 2
                    X = np.random.default_rng(N).standard_normal((K * 10, 4))
                    shares = list(BerrutCode(K, N).encode(np.stack(np.split(X, K))))
                    _client_coded(client, X, K, N), _client_bare(client, shares)  # warm-up
                    cs, bs = [], []
                    for _ in range(args.client_reps):
                        cs.append(_client_coded(client, X, K, N))
                        bs.append(_client_bare(client, shares))
                    row = {"N": N, "K": K, "workers": args.client_workers}
                    for name, samples in (("bacc", cs), ("bare", bs)):
                        row[f"{name}_submit_s"] = median([s[0] for s in samples])
                        row[f"{name}_cpu_s"] = median([s[1] for s in samples])
                        row[f"{name}_wall_s"] = median([s[2] for s in samples])
                    rows.append(row)
                    print(f"  client part: N={N} done", file=sys.stderr)
    return {"workers": args.client_workers, "reps": args.client_reps, "rows": rows}


def print_client(res: dict[str, Any]) -> None:
    """Markdown table for the ``client`` part."""
    print(
        f"### (c) Client-side time per coded task\n\n"
        f"Scheduler and {res['workers']} single-thread worker processes outside this process "
        f"(`bacc.oversubscribe: warn` for N > {res['workers']}); K = N/2, f = np.tanh on "
        f"(10, 4) blocks; median of {res['reps']} jobs. 'bare' = `client.submit` of N tasks "
        f"+ `as_completed`.\n"
    )
    print(
        "| N | submit_coded returns (ms) | per task (µs) | client CPU per job (ms) "
        "| client CPU per task (µs) | bare client CPU per task (µs) | job wall (s) "
        "| bare wall (s) |"
    )
    print("|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in res["rows"]:
        N = r["N"]
        print(
            f"| {N} | {r['bacc_submit_s'] * 1e3:.1f} | {r['bacc_submit_s'] / N * 1e6:.0f} "
            f"| {r['bacc_cpu_s'] * 1e3:.1f} | {r['bacc_cpu_s'] / N * 1e6:.0f} "
            f"| {r['bare_cpu_s'] / N * 1e6:.0f} | {r['bacc_wall_s']:.3f} "
            f"| {r['bare_wall_s']:.3f} |"
        )


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the chosen parts, print Markdown (and optionally JSON)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--part", action="append", choices=PARTS, help="run only this part (repeatable)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    g = parser.add_argument_group("job")
    g.add_argument("--blocks", type=int, default=8, help="K (default 8)")
    g.add_argument("--coded", type=int, default=16, help="N (default 16)")
    g.add_argument("--workers", type=int, default=None, help="workers (default N)")
    g.add_argument("--rows", type=int, default=100, help="rows per block (x16 float64)")
    g.add_argument(
        "--task-seconds", type=float, nargs="+", default=[0.2, 0.01], help="task durations"
    )
    g.add_argument("--reps", type=int, default=21, help="jobs per variant and duration")
    g.add_argument("--processes", action="store_true", help="one process per worker")
    g = parser.add_argument_group("codec")
    g.add_argument("--codec-k", type=int, default=16)
    g.add_argument("--codec-n", type=int, default=32)
    g.add_argument("--max-mb", type=int, default=64, help="largest block, MB (default 64)")
    g.add_argument(
        "--task-max-mb", type=int, default=16, help="largest block for the worker-task table"
    )
    g.add_argument("--codec-budget", type=float, default=0.5, help="seconds per measurement")
    g = parser.add_argument_group("client")
    g.add_argument("--ns", type=int, nargs="+", default=[8, 16, 32, 64, 128, 256])
    g.add_argument("--client-workers", type=int, default=16)
    g.add_argument("--client-reps", type=int, default=5)
    args = parser.parse_args(argv)
    parts = args.part or list(PARTS)
    if not 1 <= args.blocks < args.coded:
        parser.error("need 1 <= --blocks < --coded")
    if any(n < 2 or n % 2 for n in args.ns):
        parser.error("--ns must be even numbers >= 2 (K = N/2)")

    env = environment()
    print(
        f"## dask-bacc overhead\n\n`python benchmarks/overhead.py {' '.join(argv or sys.argv[1:])}`"
        f"\n\nPython {env['python']}, NumPy {env['numpy']}, dask {env['dask']}, distributed "
        f"{env['distributed']}, {env['cpus']} CPUs; BLAS: {env.get('blas')}; "
        f"OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']}, "
        f"OPENBLAS_L2_SIZE={env['OPENBLAS_L2_SIZE']}; dask-bacc at {env['git']}.\n"
    )
    payload: dict[str, Any] = {"environment": env, "config": vars(args)}
    t_start = time.perf_counter()
    if "codec" in parts:
        payload["codec"] = bench_codec(args)
        print_codec(payload["codec"])
        print()
    if "job" in parts:
        payload["job"] = bench_job(args)
        print_job(payload["job"], args.reps)
        print()
    if "client" in parts:
        payload["client"] = bench_client(args)
        print_client(payload["client"])
        print()
    payload["wall_seconds"] = time.perf_counter() - t_start
    print(f"wall {payload['wall_seconds']:.0f}s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(payload, fh, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
