"""The scheduler's RSS against the number of small coded jobs, on real processes.

A ``dask scheduler`` (``--preload dask_bacc.diagnostics``) and ``--workers`` single-threaded
``dask worker`` processes on 127.0.0.1; one client submits ``--jobs`` small jobs in turn
(``np.tanh`` on a 24 x 4 array in 2 or 3 blocks, the default code) and prints the
scheduler's RSS every ``--every`` jobs, then the slope in MB per 1000 jobs over the first
and the second half. distributed's own logs (``distributed.admin.low-level-log-length``
entries per comm, and the like) are bounded but fill over the first several hundred jobs:
a leak keeps its slope in the second half, a filling log does not.

    python benchmarks/scheduler_rss.py [--jobs 1500] [--every 100] [--workers 4]
        [--inline-limit 0]   # bacc.data-inline-limit: 0 scatters every input
    PYTHONPATH=/path/to/older/checkout python benchmarks/scheduler_rss.py ...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1500)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--inline-limit", help="bacc.data-inline-limit for the jobs")
    args = p.parse_args(argv)

    import dask
    from distributed import Client

    import dask_bacc

    folder = tempfile.mkdtemp()
    scheduler_file = os.path.join(folder, "scheduler.json")
    run = [sys.executable, "-m"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler_cmd = [
        *run,
        "distributed.cli.dask_scheduler",
        *("--host", "127.0.0.1", "--port", "0", "--scheduler-file", scheduler_file),
        *("--preload", "dask_bacc.diagnostics", "--dashboard-address", "127.0.0.1:0"),
    ]
    worker_cmd = [
        *run,
        "distributed.cli.dask_worker",
        *("--scheduler-file", scheduler_file, "--nthreads", "1", "--no-nanny"),
    ]
    scheduler = subprocess.Popen(scheduler_cmd, **quiet)
    workers = []
    try:
        while not os.path.exists(scheduler_file):
            time.sleep(0.1)
        time.sleep(0.5)  # the file is written before the scheduler listens
        workers = [subprocess.Popen(worker_cmd, **quiet) for _ in range(args.workers)]
        settings = {}
        if args.inline_limit is not None:
            settings["bacc.data-inline-limit"] = args.inline_limit
        samples: list[tuple[int, float]] = []
        with dask.config.set(settings), Client(scheduler_file=scheduler_file) as client:
            client.wait_for_workers(args.workers)
            me = psutil.Process(scheduler.pid)
            for n in range(1, args.jobs + 1):
                rng = np.random.default_rng(n)
                t = np.linspace(0.0, 3.0, 24)[:, None]
                X = np.cos(t * (1.0 + np.arange(4)) + rng.uniform(0, 6, 4))
                K = int(rng.choice([2, 3]))
                job = dask_bacc.submit_coded(np.tanh, X, n_blocks=K, client=client, progress=False)
                job.result()
                if n % args.every == 0:
                    samples.append((n, me.memory_info().rss / 1e6))
                    print(f"{n:6d} jobs  scheduler RSS {samples[-1][1]:.1f} MB", flush=True)
    finally:
        for proc in [*workers, scheduler]:
            proc.terminate()
        for proc in [*workers, scheduler]:
            proc.wait(timeout=30)
    half = len(samples) // 2

    def slope(part: list[tuple[int, float]]) -> float:
        (n0, r0), (n1, r1) = part[0], part[-1]
        return (r1 - r0) / (n1 - n0) * 1000

    out = {
        "dask_bacc": dask_bacc.__file__,
        "samples": samples,
        "slope_first_half": slope(samples[: half + 1]),
        "slope_second_half": slope(samples[half:]),
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
