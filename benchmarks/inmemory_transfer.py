"""How in-memory input reaches the cluster: ``map_coded`` on a NumPy array against plain
``client.scatter`` + ``client.map`` (issue 28 item 5).

Run it with::

    python benchmarks/inmemory_transfer.py                        # 64 and 256 MB, 5 rounds
    python benchmarks/inmemory_transfer.py --sizes 64 --rounds 10
    python benchmarks/inmemory_transfer.py --before /tmp/before   # also an older checkout

One ``LocalCluster(processes=True)`` (``--workers`` x 1 thread) serves every run. Each run
is its own client process (so that its peak RSS is its own), started with the data already
made: ``(rows, 1000)`` float64, ``--sizes`` MB, split into ``--blocks`` row blocks. It
connects, warms up (a small job of its variant: imports, the worker plugin, the function),
then times from the call to the output in hand on the client. Variants, run in an order
shuffled per round (seeded), each size in turn:

- ``plain``: ``client.scatter(blocks)``, ``client.map(f, futures)``, ``client.gather``,
  concatenated;
- ``bacc``: ``dask_bacc.map_coded(f, X, n_blocks=K, client=client, code=--code)`` (the
  default N);
- ``bacc-before`` with ``--before PATH``: the same with the ``dask_bacc`` of PATH (e.g. a
  ``git worktree`` of an earlier commit) on the client; the workers run this checkout's
  (the task functions the earlier client names must still exist in it).

``f`` keeps a block's rows and returns one column (``2 * b[:, :1]``): the output is small,
so what is timed is getting the input there, not the answer back. Reported per size and
variant: the median (and min, max) wall time in seconds, the client process's peak RSS in
MB (``ru_maxrss`` from ``wait4``: over its life, interpreter, libraries, the data and the
warm-up included; the table's figure), ``VmRSS`` sampled every 2 ms by a thread during the
timed call (per run; it can miss short peaks), and the ratios of the medians to plain's
and to ``bacc-before``'s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

COLS = 1000


def f(b: np.ndarray) -> np.ndarray:
    return 2.0 * b[:, :1]


def make_data(mb: int, blocks: int) -> np.ndarray:
    rows = max(blocks, int(mb * 1e6 / (8 * COLS)) // blocks * blocks)
    return np.random.default_rng(0).standard_normal((rows, COLS))


def run_once(variant: str, address: str, mb: int, blocks: int, code: str) -> dict[str, Any]:
    """One timed run in this process (the child): returns wall time and peak RSS."""
    import warnings

    from distributed import Client

    import dask_bacc

    X = make_data(mb, blocks)
    with Client(address) as client:
        base_mb = rss_mb("VmRSS")
        small = X[: blocks * 2]

        def call(data: np.ndarray) -> np.ndarray:
            if variant == "plain":
                futures = client.scatter(np.split(data, blocks))
                out = client.gather(client.map(f, futures))
                return np.concatenate(out)
            return dask_bacc.map_coded(f, data, n_blocks=blocks, client=client, code=code)

        call(small)  # warm-up: imports, the worker plugin, the function's pickle
        peak = [rss_mb("VmRSS")]
        stop = threading.Event()

        def sample() -> None:  # VmHWM cannot be reset everywhere (clear_refs): sampled
            while not stop.wait(0.002):
                peak.append(rss_mb("VmRSS"))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            out = call(X)
            seconds = time.perf_counter() - start
        stop.set()
        sampler.join()
        large_graph = any("large graph" in str(w.message) for w in caught)
        err = float(np.abs(out - f(X)).max())
        del out
        peak_mb = max(peak)
    return {
        "seconds": seconds,
        "peak_mb": peak_mb,
        "base_mb": base_mb,
        "large_graph": large_graph,
        "max_err": err,
    }


def rss_mb(field: str) -> float:
    """``field`` of this process's ``/proc/self/status`` (``VmRSS``: its RSS now), MB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status (Linux only)")


def child(
    variant: str, address: str, mb: int, blocks: int, code: str, path: str | None
) -> dict[str, Any]:
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = os.pathsep.join([path, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, __file__, "--child", variant, address, str(mb), str(blocks), code]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err)
        assert proc.stdout is not None
        text = proc.stdout.read().decode()
        # this child's own rusage: its peak RSS over its life (data, warm-up and call)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise RuntimeError(f"{variant} failed:\n{err.read().decode()[-3000:]}")
    out: dict[str, Any] = json.loads(text.strip().splitlines()[-1])
    out["maxrss_mb"] = usage.ru_maxrss / 1024
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 256], help="MB of data")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--blocks", type=int, default=2, help="K (default N: the workers)")
    p.add_argument("--before", help="a checkout whose dask_bacc runs as 'bacc-before'")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the raw runs here")
    p.add_argument("--code", default="repetition", help="map_coded's code= (the default's)")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        variant, address, mb, blocks, code = a.child
        print(json.dumps(run_once(variant, address, int(mb), int(blocks), code)))
        return

    from distributed import LocalCluster

    variants = ["plain", "bacc"] + (["bacc-before"] if a.before else [])
    rng = np.random.default_rng(a.seed)
    runs: list[dict[str, Any]] = []
    with LocalCluster(
        n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        for mb in a.sizes:
            for r in range(a.rounds):
                for v in rng.permutation(variants):
                    path = a.before if v == "bacc-before" else None
                    res = child(str(v), cluster.scheduler_address, mb, a.blocks, a.code, path)
                    runs.append({"mb": mb, "round": r, "variant": str(v), **res})
                    print(
                        f"{mb:4d} MB round {r} {v:12s} {res['seconds']:6.2f} s "
                        f"peak {res['peak_mb']:6.0f} MB (from {res['base_mb']:.0f}) "
                        f"maxrss {res['maxrss_mb']:6.0f} MB "
                        f"large-graph={res['large_graph']}",
                        flush=True,
                    )
    print(
        f"\n{platform.node()} {os.cpu_count()} cores, {a.workers} workers x 1 thread "
        f"(processes), K={a.blocks}, code={a.code}, {a.rounds} rounds, "
        f"python {platform.python_version()}"
    )
    print(f"{'MB':>4} {'variant':12s} {'median s':>9} {'min':>6} {'max':>6} {'maxrss':>8}  ratios")
    for mb in a.sizes:
        med: dict[str, tuple[float, float]] = {}
        spread: dict[str, tuple[float, float]] = {}
        for v in variants:
            mine = [x for x in runs if x["mb"] == mb and x["variant"] == v]
            secs = [x["seconds"] for x in mine]
            med[v] = (float(np.median(secs)), float(np.median([x["maxrss_mb"] for x in mine])))
            spread[v] = (min(secs), max(secs))
        for v in variants:
            t, peak = med[v]
            line = f"{mb:4d} {v:12s} {t:9.2f} {spread[v][0]:6.2f} {spread[v][1]:6.2f} {peak:8.0f}"
            for base in ("plain", "bacc-before"):
                if base in med and base != v:
                    line += (
                        f"  /{base}: time {t / med[base][0]:.2f}x rss {peak / med[base][1]:.2f}x"
                    )
            print(line)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(runs, fh, indent=1)


if __name__ == "__main__":
    main()
