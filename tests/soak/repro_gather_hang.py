"""Reproducer (open bug, found by the soak): a coded job hangs past its ``timeout=`` when a
worker holding a landed result dies before the client-side decode gathers it.

``CodedJob.gather_values`` awaits ``client.gather`` on the result's future; the key is
strictly pinned to the dead worker, so the scheduler puts it in ``no-worker`` and the
gather never returns. The race (a kill between landing and gather) is made deterministic
by killing the worker from inside ``gather_values``.

Run: ``.venv/bin/python tests/soak/repro_gather_hang.py`` (prints HANG while the bug is open).
"""

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from distributed import Client

import dask_bacc
from dask_bacc.runtime.job import CodedJob

sys.path.insert(0, os.path.dirname(__file__))
from cluster import ProcessCluster


def main() -> None:
    cl = ProcessCluster(Path(tempfile.mkdtemp()), 4)
    cl.start_scheduler()
    cl.start_workers()
    c = Client(cl.address, timeout=30)
    try:
        c.wait_for_workers(4, timeout=60)
        names = {a: w["name"] for a, w in c.scheduler_info()["workers"].items()}
        original = CodedJob.gather_values

        async def gather_after_a_kill(self, indices):
            cl.kill_worker(names[self.workers[indices[0]]])  # holds a used result
            time.sleep(1.0)
            return await original(self, indices)

        CodedJob.gather_values = gather_after_a_kill
        X = np.random.default_rng(0).standard_normal((24, 3))
        job = dask_bacc.submit_coded(
            np.tanh, X, code="repetition", n_blocks=2, n_coded=4, timeout=5, client=c
        )
        t = time.monotonic()
        try:
            job.result(timeout=30)
            print(f"OK: decoded after {time.monotonic() - t:.1f}s")
        except TimeoutError:
            states = c.run_on_scheduler(
                lambda dask_scheduler: {str(k): ts.state for k, ts in dask_scheduler.tasks.items()}
            )
            print(f"HANG: a timeout=5 job has no result after 30s; scheduler tasks: {states}")
        finally:
            CodedJob.gather_values = original
    finally:
        c.close()
        cl.close()


if __name__ == "__main__":
    main()
