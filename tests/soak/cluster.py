"""A hand-started multi-process cluster for the soak suite: one ``dask scheduler`` process
and several ``dask worker`` processes on loopback, each a subprocess of the test.

Workers run ``--nthreads 1 --no-nanny``, so SIGKILL really kills the worker (no nanny
brings it back) and :meth:`ProcessCluster.replace_dead` starts a new ``dask worker``
process in its place; SIGSTOP (:meth:`ProcessCluster.freeze`) freezes the worker itself.
The scheduler listens on a fixed port with ``--preload dask_bacc.diagnostics``;
:meth:`ProcessCluster.restart_scheduler` stops it (SIGTERM, then SIGKILL) and starts a
new one on the same port, so clients and surviving workers can reconnect to the same
address.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

#: The scheduler's buffers are bounded by a count or an age, but distributed's defaults
#: take hours or ~10^5 tasks to fill (a task stream of 100 000 tasks, events of departed
#: workers kept 1 h, 10 000 log records, 7 200 system-monitor samples). The soak shrinks
#: those bounds so that they fill during its warm-up: the memory slope it measures after
#: warm-up is then growth that no bound stops. Set for the scheduler process only.
SMALL_BOUNDS = {
    "DASK_DISTRIBUTED__SCHEDULER__DASHBOARD__TASKS__TASK_STREAM_LENGTH": "1000",
    "DASK_DISTRIBUTED__SCHEDULER__EVENTS_CLEANUP_DELAY": "5s",
    "DASK_DISTRIBUTED__ADMIN__LOG_LENGTH": "200",
    "DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH": "100",
    "DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__LOG_LENGTH": "60",
    "DASK_DISTRIBUTED__DIAGNOSTICS__COMPUTATIONS__MAX_HISTORY": "10",
    "DASK_DISTRIBUTED__DIAGNOSTICS__ERRED_TASKS__MAX_HISTORY": "10",
    "DASK_BACC__DIAGNOSTICS__HISTORY": "20",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class ProcessCluster:
    """Start, kill, replace and tear down scheduler and worker processes."""

    def __init__(self, logdir: Path, n_workers: int):
        self.logdir = Path(logdir)
        self.n_workers = n_workers
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        self.scheduler: subprocess.Popen | None = None
        self.scheduler_incarnation = 0
        self.workers: dict[str, subprocess.Popen] = {}  # name -> process
        self._next_worker = 0
        self.kills = 0
        self.replaced = 0
        self.all_procs: list[subprocess.Popen] = []
        self.frozen: set[str] = set()

    # -- processes ---------------------------------------------------------------------
    def _dask(self, *args: str, log: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        with open(self.logdir / log, "w") as out:
            p = subprocess.Popen(
                [sys.executable, "-m", "dask", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.all_procs.append(p)
        return p

    def start_scheduler(self, timeout: float = 60) -> None:
        self.scheduler_incarnation += 1
        # the port may linger a moment after the previous scheduler exited
        end = time.monotonic() + timeout
        while port_open(self.port) and time.monotonic() < end:
            time.sleep(0.1)
        self.scheduler = self._dask(
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dashboard-address",
            "127.0.0.1:0",
            "--preload",
            "dask_bacc.diagnostics",
            log=f"scheduler-{self.scheduler_incarnation}.log",
            env=SMALL_BOUNDS,
        )
        while not port_open(self.port):
            if self.scheduler.poll() is not None:
                raise RuntimeError(f"the scheduler exited with {self.scheduler.returncode}")
            if time.monotonic() > end:
                raise TimeoutError("the scheduler did not open its port")
            time.sleep(0.1)

    def stop_scheduler(self, timeout: float = 20) -> None:
        p = self.scheduler
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def restart_scheduler(self) -> float:
        """Stop the scheduler and start a new one on the same port; seconds it was down."""
        t0 = time.monotonic()
        self.stop_scheduler()
        self.start_scheduler()
        return time.monotonic() - t0

    def start_worker(self) -> str:
        name = f"soak-w{self._next_worker}"
        self._next_worker += 1
        self.workers[name] = self._dask(
            "worker",
            self.address,
            "--nthreads",
            "1",
            "--no-nanny",
            "--host",
            "127.0.0.1",
            "--name",
            name,
            "--death-timeout",
            "60",
            log=f"worker-{name}.log",
        )
        return name

    def start_workers(self) -> None:
        while len(self.live_workers()) < self.n_workers:
            self.start_worker()

    def live_workers(self) -> list[str]:
        return [n for n, p in self.workers.items() if p.poll() is None]

    def kill_worker(self, name: str) -> None:
        """SIGKILL worker ``name`` (no clean-up, no goodbye to the scheduler)."""
        p = self.workers[name]
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        self.kills += 1

    def freeze(self, name: str) -> None:
        """SIGSTOP worker ``name``: it still counts as running on the scheduler (until
        ``worker-ttl``), but answers nothing and sends no heartbeat."""
        os.kill(self.workers[name].pid, signal.SIGSTOP)
        self.frozen.add(name)

    def resume(self, name: str) -> None:
        """SIGCONT worker ``name`` (harmless if it is not frozen or has exited)."""
        p = self.workers.get(name)
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
        self.frozen.discard(name)

    def replace_dead(self) -> int:
        """Start a new worker process for each one that exited; how many were started."""
        started = 0
        for name, p in list(self.workers.items()):
            if p.poll() is not None:
                del self.workers[name]
                self.start_worker()
                started += 1
        self.replaced += started
        return started

    # -- measurements ------------------------------------------------------------------
    def scheduler_rss(self) -> int | None:
        p = self.scheduler
        if p is None or p.poll() is not None:
            return None
        try:
            return psutil.Process(p.pid).memory_info().rss
        except psutil.Error:
            return None

    # -- tear-down ---------------------------------------------------------------------
    def close(self) -> None:
        for name in list(self.frozen):  # a stopped process would not act on SIGTERM
            self.resume(name)
        # workers first: a worker whose scheduler is gone keeps retrying to connect
        workers = [p for p in self.all_procs if p is not self.scheduler]
        for group in (workers, [self.scheduler] if self.scheduler else []):
            for p in group:
                if p.poll() is None:
                    p.terminate()
            for p in group:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def bacc_tasks(dask_scheduler=None) -> list[str]:
    """On the scheduler (``client.run_on_scheduler(bacc_tasks)``): its ``bacc-`` tasks,
    with their state and whether the worker they are pinned to is still there."""
    out = []
    for key, ts in dask_scheduler.tasks.items():
        if "bacc-" in str(key):
            pinned = sorted(ts.worker_restrictions or ())
            alive = all(w in dask_scheduler.workers for w in pinned)
            out.append(f"{key} state={ts.state} pinned-worker-alive={alive}")
    return out


# pickled by value: the scheduler cannot import this file
bacc_tasks.__module__ = "__main__"
