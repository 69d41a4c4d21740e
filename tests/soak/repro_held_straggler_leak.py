"""Reproducer (open bug, found by the soak): a straggler still running when its job
decodes is held by the client until it ends (``_drop_when_done``); if its worker dies
meanwhile, the strictly pinned task goes ``no-worker`` on the scheduler for good, and its
future, the scheduler task and the holding asyncio task are never released.

Run: ``.venv/bin/python tests/soak/repro_held_straggler_leak.py`` (prints LEAK while the
bug is open).
"""

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from distributed import Client

import dask_bacc
from dask_bacc.runtime import job as job_module

sys.path.insert(0, os.path.dirname(__file__))
from cluster import ProcessCluster


def slow_on_w3(block):
    import time

    from distributed import get_worker

    if get_worker().name == "soak-w3":
        time.sleep(10)  # a straggler in f itself, so it is running (held) at decode
    return np.tanh(block)


def main() -> None:
    cl = ProcessCluster(Path(tempfile.mkdtemp()), 4)
    cl.start_scheduler()
    cl.start_workers()
    c = Client(cl.address, timeout=30)
    try:
        c.wait_for_workers(4, timeout=60)
        X = np.random.default_rng(0).standard_normal((24, 3))
        job = dask_bacc.submit_coded(
            slow_on_w3, X, code="berrut", n_blocks=2, n_coded=4, wait=3, timeout=20, client=c
        )
        job.result(timeout=60)
        time.sleep(1)
        cl.kill_worker("soak-w3")  # the held straggler's worker
        time.sleep(15)  # f would have ended long ago
        left = c.run_on_scheduler(
            lambda dask_scheduler: {
                str(k): ts.state for k, ts in dask_scheduler.tasks.items() if "bacc-" in str(k)
            }
        )
        futures = [str(k) for k in c.futures if "bacc-" in str(k)]
        print(
            ("LEAK" if left or futures else "OK")
            + f": scheduler {left}, client futures {futures}, "
            f"job loops/holders running {len(job_module._running)}"
        )
    finally:
        c.close()
        cl.close()


if __name__ == "__main__":
    main()
