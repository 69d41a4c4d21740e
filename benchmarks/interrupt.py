"""Ctrl-C in the middle of a coded computation: what is left on the cluster after it.

Starts a real ``dask scheduler`` and W ``dask worker`` processes (one thread each), then,
for each entry point, a client process that computes a 1,000-partition map (20 ms a
partition, so it runs in waves for seconds) and is sent SIGINT ``--after`` seconds in,
as Ctrl-C would. Once that process has exited, this script counts the scheduler's tasks
at once and ``--wait`` seconds later (plain Dask's own, for the baseline, and the coded
job's copies). Prints one line per entry point::

    python benchmarks/interrupt.py --workers 4

The entry points: plain Dask, ``coded()`` and ``coding()`` (the layer job driven by a
task on a worker) and ``map_coded`` (the same kind of job driven from the client, in
waves). ``--signal KILL`` kills the client process instead (a caller that dies without
closing its client: the scheduler sees its connection drop)::

    python benchmarks/interrupt.py --workers 4 --signal KILL
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLIENT = """
import sys, time
import numpy as np
import dask.array as da
from distributed import Client
import dask_bacc

def work(block):
    time.sleep(0.02)
    return block + 1

client = Client(scheduler_file=sys.argv[1])
how, n = sys.argv[2], int(sys.argv[3])
y = da.ones((n, 4), chunks=(1, 4)).map_blocks(work)
print("started", flush=True)
if how == "plain":
    y.compute()
elif how == "coded":
    dask_bacc.coded(y, code=sys.argv[4]).compute()
elif how == "map_coded":
    x = da.ones((n, 4), chunks=(1, 4))
    dask_bacc.map_coded(work, x, code=sys.argv[4]).compute()
else:
    with dask_bacc.coding(code=sys.argv[4], only=work):
        y.compute()
"""


def tasks(scheduler_file: str) -> int:
    from distributed import Client

    with Client(scheduler_file=scheduler_file, timeout=30) as client:
        return int(client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)))


def _driver_threads() -> int:
    """On a worker: its threads inside dask-bacc's driver (a seceded driver task cannot be
    stopped, only told to end: one still alive holds a thread of the worker)."""
    import sys

    count = 0
    for frame in sys._current_frames().values():
        while frame is not None:
            if frame.f_code.co_filename.endswith("dask_bacc/runtime/driver.py"):
                count += 1
                break
            frame = frame.f_back
    return count


def drivers(scheduler_file: str) -> int:
    """Driver threads still alive on the workers."""
    from distributed import Client

    with Client(scheduler_file=scheduler_file, timeout=30) as client:
        return int(sum(client.run(_driver_threads).values()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--n-parts", type=int, default=1000)
    ap.add_argument("--after", type=float, default=3.0, help="seconds before the SIGINT")
    ap.add_argument("--wait", type=float, default=2.0)
    ap.add_argument("--code", default="hedged")
    ap.add_argument("--json", default=None)
    ap.add_argument("--signal", choices=("INT", "KILL"), default="INT")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bacc-interrupt-"))
    sched_file = str(tmp / "scheduler.json")
    script = tmp / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), *sys.path])}
    python = [sys.executable, "-m"]
    procs = [
        subprocess.Popen(
            [*python, "distributed.cli.dask_scheduler", "--scheduler-file", sched_file,
             "--port", "0", "--dashboard-address", ":0"],
            env=env, stderr=subprocess.DEVNULL,
        )
    ]  # fmt: skip
    try:
        while not os.path.exists(sched_file):
            time.sleep(0.1)
        for _ in range(args.workers):
            procs.append(
                subprocess.Popen(
                    [*python, "distributed.cli.dask_worker", "--scheduler-file", sched_file,
                     "--nthreads", "1", "--nworkers", "1", "--no-nanny"],
                    env=env, stderr=subprocess.DEVNULL,
                )
            )  # fmt: skip
        from distributed import Client

        with Client(scheduler_file=sched_file, timeout=30) as c:
            c.wait_for_workers(args.workers, timeout=60)
        results = {}
        for how in ("plain", "coded", "coding", "map_coded"):
            client = subprocess.Popen(
                [sys.executable, str(script), sched_file, how, str(args.n_parts), args.code],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            )  # fmt: skip
            assert client.stdout is not None
            client.stdout.readline()  # "started": the graph is next
            time.sleep(args.after)
            client.send_signal(getattr(signal, f"SIG{args.signal}"))
            client.wait(timeout=60)
            at_exit = tasks(sched_file)
            time.sleep(args.wait)
            later = tasks(sched_file)
            alive = drivers(sched_file)
            results[how] = {"at_exit": at_exit, "later": later, "driver_threads": alive}
            print(
                f"{how}: {at_exit} tasks on the scheduler as the client exited, {later} "
                f"{args.wait:g} s later; {alive} driver thread(s) alive on the workers",
                flush=True,
            )
            deadline = time.time() + 60  # the next case starts on an empty scheduler
            while tasks(sched_file) and time.time() < deadline:
                time.sleep(0.5)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


if __name__ == "__main__":
    main()
