"""A real multi-process cluster: ``dask scheduler`` and ``dask worker`` processes on loopback.

The scheduler loads the plugin with ``--preload dask_bacc.diagnostics``, as on a real
cluster; the client only connects by address. Stragglers are injected with the
straggler plugin: two named workers hold every coded result they compute until the job
is over (their delay ends when the job is done), so which tasks straggle does not
depend on timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from distributed import Client

import dask_bacc
from dask_bacc.testing import SlowWorkers, assert_decodes_reference, inject_stragglers

pytestmark = pytest.mark.multiprocess

N_WORKERS = 4
SLOW = ("w2", "w3")


def _dask(*args: str, log: Path) -> subprocess.Popen:
    """``dask <args>`` with this interpreter (``python -m dask`` is the ``dask`` command)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "dask", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def _wait_for(predicate, what: str, procs: list[subprocess.Popen], timeout: float = 120):
    """Poll until ``predicate()`` holds; fail early if a process died (bounded: timeout)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args} exited with {p.returncode} while waiting for {what}")
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"gave up waiting for {what}")


@pytest.fixture
def cluster(tmp_path):
    """A scheduler (with the plugin preloaded) and 4 single-threaded worker processes."""
    scheduler_file = tmp_path / "scheduler.json"
    procs = [
        _dask(
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--dashboard-address",
            "127.0.0.1:0",
            "--scheduler-file",
            str(scheduler_file),
            "--preload",
            "dask_bacc.diagnostics",
            log=tmp_path / "scheduler.log",
        )
    ]
    try:

        def info():
            if not scheduler_file.exists():
                return None
            try:
                return json.loads(scheduler_file.read_text())
            except json.JSONDecodeError:  # being written
                return None

        sched = _wait_for(info, "the scheduler file", procs)
        for i in range(N_WORKERS):
            procs.append(
                _dask(
                    "worker",
                    "--scheduler-file",
                    str(scheduler_file),
                    "--nthreads",
                    "1",
                    "--name",
                    f"w{i}",
                    "--no-nanny",
                    "--host",
                    "127.0.0.1",
                    log=tmp_path / f"worker-{i}.log",
                )
            )
        yield sched, procs
    finally:
        # workers first: a worker whose scheduler is gone retries to connect for 30 s
        for group in (procs[1:], procs[:1]):
            for p in group:
                if p.poll() is None:
                    p.terminate()
            for p in group:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        return r.status, r.read().decode()


@pytest.mark.timeout(240)
def test_coded_job_on_a_multiprocess_cluster(cluster):
    sched, procs = cluster
    port = sched["services"]["dashboard"]
    with Client(sched["address"], timeout=60) as client:
        _wait_for(
            lambda: len(client.scheduler_info()["workers"]) == N_WORKERS, "the workers", procs
        )
        # each worker is its own process: the tasks' threads really are elsewhere
        pids = client.run(os.getpid)
        assert len(set(pids.values())) == N_WORKERS and os.getpid() not in pids.values()
        inject_stragglers(SlowWorkers(SLOW, delay=600.0), client=client)

        X = np.random.default_rng(0).standard_normal((20, 3))
        job = dask_bacc.submit_coded(
            np.tanh, X, n_blocks=2, n_coded=4, wait=2, client=client, code="berrut"
        )
        out = job.result(timeout=120)
        rep = job.report
        names = {a: str(w["name"]) for a, w in client.scheduler_info()["workers"].items()}
        slow = {i for i, a in enumerate(rep.workers) if names[a] in SLOW}
        assert len(slow) == 2
        assert set(rep.straggled) == slow and rep.cancelled == 2
        assert set(rep.returned) == set(range(4)) - slow
        assert_decodes_reference(out, rep, np.tanh, X)

        def closed():
            _, body = _get(port, "/bacc/stats.json")
            data = json.loads(body)
            jobs = [j for j in data["jobs"] if j["token"] == job.token and j["closed"]]
            return (data, jobs[0]) if jobs else None

        data, stats = _wait_for(closed, "the job in /bacc/stats.json", procs)
        assert data["registered_by"] == "preload"  # the client's registration kept it
        assert (stats["func"], stats["code"], stats["K"], stats["N"]) == ("tanh", "berrut", 2, 4)
        assert stats["needed"] == 2 and stats["landed"] == stats["used"] == 2
        assert stats["cancelled"] == stats["straggled"] == 2 and stats["failed"] == 0
        assert stats["outcome"] == "decoded"
        assert stats["decode_seconds"] == pytest.approx(rep.time_to_decode)

        status, body = _get(port, f"/bacc/stats.json?token={job.token}")
        tasks = {t["index"]: t for t in json.loads(body)["tasks"]}
        assert {i for i, t in tasks.items() if t["outcome"] == "cancelled"} == slow
        assert all(tasks[i]["worker"] == rep.workers[i] for i in tasks)

        status, body = _get(port, "/metrics")
        assert status == 200
        assert 'dask_bacc_jobs_total{code="berrut",outcome="decoded"} 1.0' in body
        assert 'dask_bacc_tasks_total{outcome="cancelled"} 2.0' in body
        assert 'dask_bacc_tasks_total{outcome="used"} 2.0' in body
        status, body = _get(port, "/bacc")
        assert status == 200 and "bokeh" in body.lower()


@pytest.mark.timeout(240)
def test_exact_copies_of_a_layer_on_a_multiprocess_cluster(cluster):
    """Issue 25 on real processes: ``coded(..., code="repetition")`` and
    ``map_coded(f, ddf, code="speculative")`` copy the tasks of a map over 8 partitions on
    4 workers (K > W) and finish while worker w2 holds every task it starts (gated on a
    ``distributed.Event``, released at the end): each of its partitions comes from the
    other copy, and the answer is plain Dask's."""
    import dask.dataframe as dd
    import pandas as pd
    from distributed import Event, wait

    sched, procs = cluster
    with Client(sched["address"], timeout=60) as client:
        _wait_for(
            lambda: len(client.scheduler_info()["workers"]) == N_WORKERS, "the workers", procs
        )

        def gated(part):  # defined here: pickled by value, the workers cannot import tests
            from distributed import Event, get_worker

            if get_worker().name == "w2":
                Event("bacc-mp-gate").wait(timeout=600)
            return part * 2

        pdf = pd.DataFrame({"a": np.arange(40.0), "b": np.arange(40)})
        ddf = dd.from_pandas(pdf, npartitions=8).persist()
        wait(ddf)
        gate = Event("bacc-mp-gate", client=client)
        try:
            meta = pdf.iloc[:0]  # f runs on workers only (get_worker)
            z = dask_bacc.coded(ddf.map_partitions(gated, meta=meta), code="repetition")
            got = client.compute(z).result(timeout=120)
            pd.testing.assert_frame_equal(got, pdf * 2)
            rep = dask_bacc.report_of(z, client)
            # 16 copies, and one more for a block whose copies are all late (the late-copy
            # rule: a backup queued behind gated work on a loaded machine can be)
            assert (rep.K, rep.status) == (8, "finished") and rep.N >= 16
            assert len(rep.returned) == 8 and rep.estimate_method == "exact"

            out = dask_bacc.map_coded(
                gated,
                ddf,
                code="speculative",
                code_options={"quantile": 0.5, "min_tasks": 1, "min_runtime": 0.1},
                client=client,
                meta=meta,
            )
            pd.testing.assert_frame_equal(client.compute(out).result(timeout=120), pdf * 2)
        finally:
            gate.set()
