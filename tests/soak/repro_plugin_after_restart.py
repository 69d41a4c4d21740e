"""Reproducer (open bug, found by the soak): after the scheduler restarts on the same
address, a reconnected client never registers dask-bacc's worker plugin on the new
scheduler: ``ensure_worker_plugin`` caches ``client -> scheduler address`` and the address
did not change. Jobs still decode, but the new workers have no ``bacc-worker`` plugin, so
``bacc-done`` is never sent: stragglers of finished jobs are not interrupted and evals of
finished jobs still run f.

Run: ``.venv/bin/python tests/soak/repro_plugin_after_restart.py`` (prints MISSING while
the bug is open).
"""

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from distributed import Client

import dask_bacc

sys.path.insert(0, os.path.dirname(__file__))
from cluster import ProcessCluster


def plugins(dask_scheduler=None):
    return sorted(dask_scheduler.worker_plugins)


def main() -> None:
    cl = ProcessCluster(Path(tempfile.mkdtemp()), 3)
    cl.start_scheduler()
    cl.start_workers()
    c = Client(cl.address, timeout=30)
    try:
        c.wait_for_workers(3, timeout=60)
        X = np.ones((12, 2))
        dask_bacc.map_coded(np.tanh, X, n_blocks=1, code="repetition", client=c, timeout=20)
        before = c.run_on_scheduler(plugins)
        cl.restart_scheduler()  # same port; the old workers exit, the client reconnects
        cl.replace_dead()
        c.wait_for_workers(3, timeout=120)
        dask_bacc.map_coded(np.tanh, X, n_blocks=1, code="repetition", client=c, timeout=20)
        after = c.run_on_scheduler(plugins)
        print(("OK" if "bacc-worker" in after else "MISSING") + f": before {before}, after {after}")
    finally:
        c.close()
        cl.close()


if __name__ == "__main__":
    main()
