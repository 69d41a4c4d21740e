"""The scheduler plugin, /bacc/stats.json, /bacc, /metrics, spans and the progress bar."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys

import cloudpickle
import dask
import numpy as np
import pytest
from cluster_helpers import gen_cluster, idle
from distributed import Client, get_worker
from tornado.httpclient import AsyncHTTPClient

import dask_bacc
from dask_bacc import diagnostics
from dask_bacc.diagnostics import PLUGIN_NAME, BaccDiagnostics
from dask_bacc.diagnostics.progress import want_progress
from dask_bacc.testing import gate_stragglers, tasks_on

# worker threads unpickle the test's functions: ship them by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
DASHBOARD = {"dashboard": True, "dashboard_address": "127.0.0.1:0"}


def gated(x):
    """tanh(x): the function of the gated jobs (its name shows in the figures)."""
    return np.tanh(x)


def raise_on(x, bad):
    if str(get_worker().name) in bad:
        raise ZeroDivisionError("injected failure")
    return np.tanh(x)


def names(workers):
    return {str(w.name) for w in workers}


async def closed_job(s, token):
    """The plugin's stats of job ``token`` once it is closed (its stragglers released)."""
    plugin = s.plugins[PLUGIN_NAME]
    while token not in plugin.jobs or plugin.jobs[token].closed is None:
        await asyncio.sleep(0.01)
    return plugin.stats(token)


async def fetch(s, path):
    http = AsyncHTTPClient()
    response = await http.fetch(f"http://127.0.0.1:{s.http_server.port}{path}", raise_error=False)
    return response.code, response.body.decode()


async def gated_job(c, workers, **kwargs):
    """Berrut, K=4, N=8, wait=6 with the first two workers' tasks held after ``func`` (not
    interruptible: still running at the decode) until the returned gate is released."""
    X = np.random.default_rng(0).standard_normal((40, 3))
    kwargs.setdefault("code", "berrut")
    gate = await gate_stragglers(workers=names(workers[:2]), interruptible=False, client=c)
    job = await dask_bacc.submit_coded(gated, X, n_blocks=4, n_coded=8, wait=6, client=c, **kwargs)
    return job, gate


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_plugin_registration_is_idempotent(c, s, *workers):
    assert PLUGIN_NAME not in s.plugins
    await dask_bacc.map_coded(np.tanh, np.ones((4, 2)), n_blocks=2, client=c, code="berrut")
    plugin = s.plugins[PLUGIN_NAME]
    assert isinstance(plugin, BaccDiagnostics) and plugin.registered_by == "client"
    await dask_bacc.map_coded(np.tanh, np.ones((4, 2)), n_blocks=2, client=c, code="berrut")
    assert await diagnostics.register(c) is True  # explicit: asks the scheduler again
    async with Client(s.address, asynchronous=True) as c2:  # another client, same scheduler
        await dask_bacc.map_coded(np.tanh, np.ones((4, 2)), n_blocks=2, client=c2, code="berrut")
    assert s.plugins[PLUGIN_NAME] is plugin
    assert [name for name in s.plugins if "bacc" in name] == [PLUGIN_NAME]
    # one JSON route on the HTTP server however often the plugin was registered
    routes = [
        r
        for r in s.http_application.default_router.rules
        if "bacc" in repr(getattr(r.target, "rules", ""))
    ]
    assert len(routes) == 1
    while len([j for j in plugin.jobs.values() if j.closed]) < 3:
        await asyncio.sleep(0.01)
    assert plugin.jobs_total[("berrut", "decoded")] == 3


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_stats_of_a_gated_job_with_stragglers(c, s, *workers):
    job, gate = await gated_job(c, workers)
    await job
    rep = job.report
    stats = await closed_job(s, job.token)
    slow = tasks_on(rep, workers[:2])
    assert (stats["func"], stats["code"], stats["K"], stats["N"]) == ("gated", "berrut", 4, 8)
    assert stats["needed"] == rep.wait_target == 6
    assert stats["landed"] == stats["used"] == len(rep.returned) == 6
    assert stats["cancelled"] == rep.cancelled == 2
    assert stats["straggled"] == 2 and stats["failed"] == 0 and stats["late"] == 0
    assert stats["status"] == "finished" and stats["outcome"] == "decoded"
    assert stats["trigger"] == "wait"
    assert stats["decode_seconds"] == pytest.approx(rep.time_to_decode)
    assert 0 < stats["decoded_after"] <= stats["now"]
    by_index = {t["index"]: t for t in stats["tasks"]}
    assert {i for i, t in by_index.items() if t["outcome"] == "cancelled"} == slow
    assert {i for i, t in by_index.items() if t["outcome"] == "used"} == set(rep.returned)
    for i, t in by_index.items():
        assert t["worker"] == rep.workers[i]
        if i in slow:  # blocked in func: left to finish, its result dropped
            assert t["ended"] is None and "still running" in t["reason"]
        else:  # every result used landed before the decode finished
            assert t["dispatched"] <= t["ended"] <= stats["decoded_after"]
    # the list view has the same summary, newest job first
    listing = s.plugins[PLUGIN_NAME].stats()
    assert listing["jobs"][0]["token"] == job.token
    assert listing["totals"]["tasks"] == {
        "used": 6,
        "late": 0,
        "excluded": 0,
        "cancelled": 2,
        "failed": 0,
    }
    # and the client can read it without HTTP
    assert (await diagnostics.get_stats(c, job.token))["cancelled"] == 2
    await gate.release()
    await gate.clear()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_failed_tasks_and_a_departed_worker_are_reported(c, s, *workers):
    X = np.random.default_rng(1).standard_normal((16, 2))
    with dask.config.set({"bacc.on-error": "erase"}):  # a failing worker: an erasure
        job = await dask_bacc.submit_coded(
            raise_on, X, names(workers[3:4]), n_blocks=4, n_coded=8, wait=8, client=c, code="berrut"
        )
    await job
    stats = await closed_job(s, job.token)
    (bad,) = tasks_on(job.report, workers[3:4])
    assert stats["failed"] == 1 and stats["landed"] == 7
    assert "ZeroDivisionError: injected failure" in stats["failures"][str(bad)]
    assert {t["index"] for t in stats["tasks"] if t["outcome"] == "failed"} == {bad}

    # a worker closes while its (pinned) task runs: the task can never return
    leaving = workers[7]
    gate = await gate_stragglers(workers=[leaving.name], client=c)
    job = await dask_bacc.submit_coded(
        gated, X, n_blocks=4, n_coded=8, wait=8, client=c, code="berrut"
    )
    while leaving.state.executing_count == 0:
        await asyncio.sleep(0.01)
    await leaving.close(executor_wait=False)
    await job
    stats = await closed_job(s, job.token)
    (gone,) = tasks_on(job.report, [leaving])
    assert stats["failed"] == 1 and "left" in stats["failures"][str(gone)]
    assert stats["trigger"] == "exhausted" and stats["used"] == 7
    await gate.release()
    await gate.clear()


@pytest.mark.slow
@gen_cluster(
    client=True,
    nthreads=EIGHT,
    scheduler_kwargs={"preload": ["dask_bacc.diagnostics"]},
    config={"bacc": {"diagnostics": {"enabled": False}}},
)
async def test_preloaded_plugin_works_from_transitions_alone(c, s, *workers):
    """The client sends nothing: every figure comes from the scheduler's transitions."""
    plugin = s.plugins[PLUGIN_NAME]
    assert plugin.registered_by == "preload"
    job, gate = await gated_job(c, workers)
    await job
    stats = await closed_job(s, job.token)
    assert stats["func"] is None and stats["needed"] is None  # only the client knows those
    assert stats["K"] is None and stats["N"] == 8
    assert stats["landed"] == stats["used"] == 6
    assert stats["cancelled"] == stats["straggled"] == 2
    assert stats["status"] == "decoded" and stats["outcome"] == "decoded"
    assert stats["decode_seconds"] == pytest.approx(stats["decoded_after"])
    used = {t["index"] for t in stats["tasks"] if t["outcome"] == "used"}
    assert used == set(job.report.returned)  # read off the decode tasks' dependencies
    assert plugin.jobs_total[("unknown", "decoded")] == 1
    await gate.release()
    await gate.clear()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_job_of_a_client_that_dies_is_closed_as_abandoned(c, s, *workers):
    gate = await gate_stragglers(workers=names(workers), client=c)
    c2 = await Client(s.address, asynchronous=True)
    X = np.ones((8, 2))
    job = await dask_bacc.submit_coded(gated, X, n_blocks=4, n_coded=8, client=c2, code="berrut")
    plugin = s.plugins[PLUGIN_NAME]
    while job.token not in plugin.jobs or plugin.jobs[job.token].func is None:
        await asyncio.sleep(0.01)  # its start message arrived
    # the client goes without a word (no report): its tasks are released with it
    await c2.close()
    stats = await closed_job(s, job.token)
    assert stats["outcome"] == "abandoned" and stats["status"] == "abandoned"
    assert stats["func"] == "gated" and stats["cancelled"] == 8 and stats["landed"] == 0
    assert plugin.jobs_total[("berrut", "abandoned")] == 1
    await gate.release()
    await gate.clear()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT, scheduler_kwargs=DASHBOARD)
async def test_stats_json_page_and_metrics_over_http(c, s, *workers):
    job, gate = await gated_job(c, workers)
    await job
    await closed_job(s, job.token)

    code, body = await fetch(s, "/bacc/stats.json")
    assert code == 200
    data = json.loads(body)
    (row,) = data["jobs"]
    assert (row["token"], row["landed"], row["needed"], row["cancelled"]) == (
        job.token,
        6,
        6,
        2,
    )
    assert data["totals"]["jobs"] == [{"code": "berrut", "outcome": "decoded", "count": 1}]
    code, body = await fetch(s, f"/bacc/stats.json?token={job.token}")
    assert code == 200 and len(json.loads(body)["tasks"]) == 8
    code, body = await fetch(s, "/bacc/stats.json?token=0123")
    assert code == 404 and "0123" in body
    # a payload in the token is not echoed, and the JSON is never sniffed as anything else
    http = AsyncHTTPClient()
    port = s.http_server.port
    payload = "%3Cscript%3Ealert(1)%3C/script%3E"
    response = await http.fetch(
        f"http://127.0.0.1:{port}/bacc/stats.json?token={payload}", raise_error=False
    )
    assert response.code == 404 and b"<script>" not in response.body
    assert response.headers.get("X-Content-Type-Options") == "nosniff"

    code, body = await fetch(s, "/metrics")
    assert code == 200
    assert 'dask_bacc_jobs_total{code="berrut",outcome="decoded"} 1.0' in body
    assert 'dask_bacc_tasks_total{outcome="used"} 6.0' in body
    assert 'dask_bacc_tasks_total{outcome="cancelled"} 2.0' in body
    assert 'dask_bacc_tasks_total{outcome="failed"} 0.0' in body
    assert "dask_bacc_decode_seconds_count 1.0" in body
    assert 'dask_bacc_stragglers_bucket{le="2.0"} 1.0' in body
    assert 'dask_bacc_stragglers_bucket{le="1.0"} 0.0' in body
    assert "dask_bacc_jobs_running 0.0" in body

    # the page is a Bokeh server document: its content comes over a websocket (see
    # test_browser.py); the HTML is distributed's page template with Bokeh's loader
    code, body = await fetch(s, "/bacc")
    assert code == 200 and "bokeh" in body.lower() and 'id="myTopnav"' in body
    # nosniff on every /bacc route, the Bokeh page and its script loader too
    for path in ("/bacc", "/bacc/autoload.js?bokeh-autoload-element=x", "/bacc/stats.json"):
        response = await http.fetch(f"http://127.0.0.1:{port}{path}", raise_error=False)
        assert response.headers.get("X-Content-Type-Options") == "nosniff", path
    code, body = await fetch(s, "/status")  # the navigation bar links the page
    assert code == 200 and 'href="bacc"' in body
    await gate.release()
    await gate.clear()


@pytest.mark.slow
@gen_cluster(
    client=True,
    nthreads=[("127.0.0.1", 1)] * 4,
    scheduler_kwargs={**DASHBOARD, "http_prefix": "/dask"},
)
async def test_routes_honour_the_dashboard_prefix(c, s, *workers):
    job = await dask_bacc.submit_coded(np.tanh, np.ones((4, 2)), n_blocks=2, client=c)
    await job
    await closed_job(s, job.token)
    code, body = await fetch(s, "/dask/bacc/stats.json")
    assert code == 200 and json.loads(body)["jobs"][0]["token"] == job.token
    code, body = await fetch(s, "/dask/bacc")
    assert code == 200 and "bokeh" in body.lower() and 'id="myTopnav"' in body
    code, _ = await fetch(s, "/bacc/stats.json")
    assert code == 404


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_history_is_bounded(c, s, *workers):
    with dask.config.set({"bacc.diagnostics.history": 2}):
        for _ in range(4):
            job = await dask_bacc.submit_coded(
                np.tanh, np.ones((4, 2)), n_blocks=2, client=c, code="berrut"
            )
            await job
            await closed_job(s, job.token)
    plugin = s.plugins[PLUGIN_NAME]
    stats = plugin.stats()
    assert plugin.history == 2
    assert [j["token"] for j in stats["jobs"]] == [job.token, *list(plugin.jobs)[:1]]
    assert len(stats["jobs"]) == 2
    assert stats["totals"]["jobs"] == [{"code": "berrut", "outcome": "decoded", "count": 4}]


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_job_tasks_are_grouped_under_a_span(c, s, *workers):
    import dask.array as da

    # a dask array: its output stays on the cluster, so the decode runs there as tasks
    x = da.from_array(np.ones((8, 2)), chunks=(2, 2))
    job = await dask_bacc.submit_coded(np.tanh, x, client=c)
    await c.compute(await job)
    stats = await closed_job(s, job.token)
    span = s.extensions["spans"].spans[stats["span_id"]]
    assert span.name == ("bacc", "tanh")
    groups = {tg.name for tg in span.groups}
    assert {f"bacc-eval-{job.token}", f"bacc-decode-{job.token}"} <= groups
    assert {f"bacc-stack-{job.token}", f"bacc-info-{job.token}"} <= groups


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_progress_bar_when_forced_on(c, s, *workers, capsys):
    """The bar (on stderr) in a non-interactive run: only for the jobs that ask for it."""
    X = np.random.default_rng(2).standard_normal((16, 2))
    # off by default here
    await dask_bacc.map_coded(np.tanh, X, n_blocks=4, client=c, code="berrut")
    job, gate = await gated_job(c, workers, progress=True)
    await job
    await gate.release()
    await gate.clear()
    await idle(workers)  # the cancelled stragglers' threads are free again
    with dask.config.set({"bacc.progress": True}):  # or on from the configuration
        await dask_bacc.map_coded(np.sin, X, n_blocks=4, n_coded=8, wait=8, client=c, code="berrut")

    err = capsys.readouterr().err
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("bacc ")]
    assert not any("tanh" in line for line in lines), err
    gated_lines = [line for line in lines if line.startswith("bacc berrut gated:")]
    assert any(" 0/6 " in line for line in gated_lines), err  # opened at submission
    (final,) = [line for line in gated_lines if "decoded=" in line]
    assert "6/6" in final and f"cancelled={job.report.cancelled}" in final
    assert job.report.cancelled == 2
    (final,) = [
        line for line in lines if line.startswith("bacc berrut sin:") and "decoded=" in line
    ]
    assert "8/8" in final and "cancelled=0" in final
    # inside a task (the driver of coded()) only an explicit progress=True shows a bar
    assert await c.submit(_progress_in_a_task) == (False, True)


def _progress_in_a_task():
    with dask.config.set({"bacc.progress": True}):
        return want_progress(None), want_progress(True)


def test_progress_default(monkeypatch):
    assert want_progress(None) is False  # pytest is not an interactive session
    assert want_progress(True) is True and want_progress(False) is False
    with dask.config.set({"bacc.progress": True}):
        assert want_progress(None) is True
    with dask.config.set({"bacc.progress": "false"}):  # from DASK_BACC__PROGRESS
        assert want_progress(None) is False
    monkeypatch.setattr(sys, "ps1", ">>> ", raising=False)
    assert want_progress(None) is True
    assert want_progress(False) is False


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2)
async def test_a_job_that_fails_to_launch_is_closed_as_an_error(c, s, *workers):
    from dask_bacc.runtime.report import JobReport

    class Job:  # what the monitor reads of a CodedJob
        client = c
        token = "ab" * 16
        progress = None
        report = JobReport(token=token, func="f", code={"name": "berrut"}, K=2, N=4, wait_target=3)

    monitor = await diagnostics.start_job(Job())
    with pytest.raises(RuntimeError, match="boom"), monitor.submitting():
        raise RuntimeError("boom")
    stats = await closed_job(s, Job.token)
    assert stats["status"] == "error" and stats["outcome"] == "error"
    assert stats["error"] == "RuntimeError: boom" and stats["func"] == "f"
    assert s.plugins[PLUGIN_NAME].jobs_total[("berrut", "error")] == 1


class _FakeTask:
    """The scheduler TaskState attributes the plugin reads."""

    def __init__(self, key, worker, deps=()):
        from types import SimpleNamespace

        self.key = key
        self.worker_restrictions = {worker} if worker else set()
        self.processing_on = SimpleNamespace(address=worker) if worker else None
        self.dependencies = list(deps)
        self.exception_text = None


class _FakeScheduler:
    def __init__(self):
        self.tasks = {}
        self.workers = {f"w{i}": None for i in range(4)}
        self.clients = {"c1": None}
        self.handlers = {}


def _drive(plugin, sched, key, *states, worker=None, deps=()):
    """Feed the plugin the transitions ``states[0] -> states[1] -> ...`` of ``key``."""
    sched.tasks.setdefault(key, _FakeTask(key, worker, deps))
    for start, finish in itertools.pairwise(states):
        plugin.transition(key, start, finish, stimulus_id="test", worker=worker)


def test_plugin_state_machine_without_a_cluster():
    """Transitions and messages in, figures out: a report lost on the way, a departed
    worker, a rejected and an excluded result."""
    from distributed.metrics import time

    sched = _FakeScheduler()
    plugin = BaccDiagnostics(history=10)
    plugin.scheduler = sched

    def job(token, *, report=None, failed=None, lose_worker=None):
        evals = [(f"bacc-eval-{token}", i) for i in range(4)]
        plugin.handle_job(
            "start",
            token,
            {"func": "f", "code": {"name": "berrut"}, "K": 2, "N": 4, "needed": 3, "client": "c1"},
        )
        for i, key in enumerate(evals):
            _drive(plugin, sched, key, "released", "waiting", "processing", worker=f"w{i}")
        for i in (0, 1, 2):
            if i == failed:
                _drive(plugin, sched, evals[i], "processing", "erred", worker=f"w{i}")
            else:
                _drive(plugin, sched, evals[i], "processing", "memory", worker=f"w{i}")
        if lose_worker is not None:  # its worker leaves: the pinned task has nowhere to go
            del sched.workers[f"w{lose_worker}"]
            _drive(plugin, sched, evals[lose_worker], "processing", "released", "waiting")
            _drive(plugin, sched, evals[lose_worker], "waiting", "no-worker")
        used = [sched.tasks[evals[i]] for i in (0, 1, 2) if i != failed]
        for j in (0, 1):
            key = (f"bacc-decode-{token}", j)
            _drive(plugin, sched, key, "released", "waiting", "processing", "memory", deps=used)
        if report is not None:
            plugin.handle_job("finish", token, report)
        return plugin.jobs[token]

    # 1. the normal case: task 3 straggles, the report closes the job at once
    rep = {"status": "finished", "straggled": [3], "returned": [0, 1, 2], "late": []}
    rep.update({"failed": {"1": "InvalidResult: wrong shape"}, "time_to_decode": 0.25})
    j1 = job("a" * 32, report=rep)
    assert j1.closed is not None and j1.outcome == "decoded"
    s1 = j1.summary()
    assert (s1["landed"], s1["used"], s1["failed"], s1["cancelled"]) == (2, 2, 1, 1)
    assert s1["failures"] == {"1": "InvalidResult: wrong shape"}  # landed, but rejected
    assert s1["decode_seconds"] == 0.25 and s1["straggled"] == 1
    assert {t["index"]: t["outcome"] for t in j1.detail(time())["tasks"]} == {
        0: "used",
        1: "failed",
        2: "used",
        3: "cancelled",
    }

    # 2. the report never arrives: closed 10 s after it could have been
    j2 = job("b" * 32, failed=2)
    assert j2.closed is None and j2.status == "decoded"
    assert j2.failures() == {2: "erred"}  # what the scheduler knows (no exception text here)
    plugin.sweep(time() + 5)
    assert j2.closed is None
    plugin.sweep(time() + 11)
    assert j2.closed is not None and j2.outcome == "decoded"
    s2 = j2.summary()
    assert (s2["used"], s2["failed"], s2["cancelled"]) == (2, 1, 1)

    # 3. a worker leaves while its task runs; the robust decoder excludes a result
    sched.workers = {f"w{i}": None for i in range(4)}
    rep = {"status": "finished", "straggled": [], "returned": [0, 1], "late": []}
    rep.update({"failed": {"3": "worker w3 left before returning"}, "excluded": [2]})
    j3 = job("c" * 32, lose_worker=3)
    assert j3.closed is None  # task 3 sits in no-worker until the client lets it go
    plugin.handle_job("finish", j3.token, rep)
    _drive(plugin, sched, (f"bacc-eval-{j3.token}", 3), "no-worker", "released", "forgotten")
    assert j3.closed is not None
    s3 = j3.summary()
    assert (s3["used"], s3["excluded"], s3["failed"], s3["cancelled"]) == (2, 1, 1, 0)
    assert "left" in s3["failures"]["3"]

    assert plugin.jobs_total == {("berrut", "decoded"): 3}
    assert dict(plugin.tasks_total) == {
        "used": 6,
        "late": 0,
        "excluded": 1,
        "cancelled": 2,
        "failed": 3,
    }
    assert plugin.decode_hist.total == 3 and plugin.straggler_hist.counts[1] == 3


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4, scheduler_kwargs=DASHBOARD)
async def test_a_systematic_code_is_named_as_given(c, s, *workers):
    """D4: code="systematic-berrut" was reported, shown on /bacc and counted in
    dask_bacc_jobs_total as "berrut"."""
    job = await dask_bacc.submit_coded(
        np.tanh, np.ones((4, 2)), n_blocks=2, code="systematic-berrut", client=c
    )
    await job
    await closed_job(s, job.token)
    assert repr(job.report).startswith("<JobReport systematic-berrut tanh")
    assert repr(job).startswith("<CodedJob systematic-berrut tanh")
    _, body = await fetch(s, "/bacc/stats.json")
    data = json.loads(body)
    assert [row["code"] for row in data["jobs"]] == ["systematic-berrut"]
    assert data["totals"]["jobs"][0]["code"] == "systematic-berrut"
    _, body = await fetch(s, "/metrics")
    assert 'dask_bacc_jobs_total{code="systematic-berrut",outcome="decoded"} 1.0' in body


def test_the_timeline_numbers_coded_tasks_with_whole_numbers():
    """The /bacc timeline's y-axis showed ticks such as 2.5 for coded task numbers."""
    from dask_bacc.diagnostics.dashboard import BaccPage

    (axis,) = BaccPage(scheduler=None).timeline.yaxis
    assert axis.ticker.min_interval == 1 and axis.ticker.num_minor_ticks == 0
    assert axis.formatter.format == "0"


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4, scheduler_kwargs=DASHBOARD)
async def test_notebook_reprs_of_a_report_a_job_and_coded_data(c, s, *workers):
    """JobReport, CodedJob and CodedData render as HTML in a notebook, as Client and
    Future do: code, K and N, what returned, straggled or failed, the error estimate and a
    link to the job on /bacc (which opens on that job)."""
    X = np.random.default_rng(0).standard_normal((8, 2))
    job = await dask_bacc.submit_coded(
        lambda b: np.tanh(b), X, n_blocks=2, n_coded=4, code="berrut", client=c
    )
    running = job._repr_html_()
    assert "CodedJob" in running and "&lt;lambda&gt;" in running and "<lambda>" not in running
    await job
    page = job.report._repr_html_()
    for text in ("JobReport", "berrut, K=2 data blocks, N=4 coded tasks", "finished"):
        assert text in page, text
    assert (
        f'Returned</th><td style="text-align: left; padding: 1px 0">{len(job.report.returned)}:'
        in page
    )
    assert "Error estimate" in page and "embedded-fh1" in page
    link = job.report.dashboard
    assert link is not None and link.endswith(f"/bacc?token={job.token}")
    assert f'href="{link}"' in page
    # the link works: the page answers, and opens on the job
    code, _ = await fetch(s, f"/bacc?token={job.token}")
    assert code == 200
    data = await dask_bacc.encode(X, n_blocks=2, n_coded=4, client=c)
    shown = data._repr_html_()
    assert "CodedData" in shown and "in memory" in shown and "4 on 4 workers" in shown
    data.release()
    assert "released" in data._repr_html_()


def test_the_timeline_opens_on_the_job_of_the_link():
    """/bacc?token=... selects that job on the timeline."""
    from types import SimpleNamespace

    from dask_bacc.diagnostics.dashboard import requested_token

    def doc(arguments):  # what Bokeh's server gives a session
        return SimpleNamespace(
            session_context=SimpleNamespace(request=SimpleNamespace(arguments=arguments))
        )

    assert requested_token(doc({"token": [b"abc123"]})) == "abc123"
    assert requested_token(doc({})) is None
    assert requested_token(SimpleNamespace()) is None


def test_the_jobs_of_one_notebook_cell_share_one_progress_bar(monkeypatch, capsys):
    """A notebook loop of 480 coded calls showed 480 progress widgets: the jobs of one
    IPython cell share one bar (reset for each job); the cell's end closes it."""
    import types

    from dask_bacc.diagnostics import progress

    class Shell:
        execution_count = 7

        def __init__(self):
            self.events = types.SimpleNamespace(register=self.register)
            self.hooks = []

        def register(self, event, fn):
            assert event == "post_run_cell"
            self.hooks.append(fn)

    shell = Shell()
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    monkeypatch.setattr(progress, "_shared", progress._Shared())

    def report():
        return types.SimpleNamespace(
            wait_target=4,
            code="berrut",
            func="f",
            failed={},
            status="finished",
            time_to_decode=0.1,
            trigger="wait",
            cancelled=1,
        )

    bars = []
    for _ in range(5):  # one cell, a loop of five jobs
        bar = progress.ProgressBar(report())
        bar.update(4)
        bar.close()
        bars.append(bar.bar)
    assert all(b is bars[0] for b in bars) and not bars[0].disable  # one bar, still open
    assert "job 5 of this cell" in bars[0].desc
    shell.execution_count = 8  # the next cell: a new bar
    later = progress.ProgressBar(report())
    assert later.bar is not bars[0] and bars[0].disable  # the old one was closed
    later.close()
    (hook,) = shell.hooks  # registered once
    hook(None)  # the cell ends
    assert later.bar.disable
    err = capsys.readouterr().err
    assert "decoded=" in err


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_the_page_has_a_per_worker_table_of_the_straggler_model(c, s, *workers):
    from dask_bacc.diagnostics.dashboard import BaccPage

    page = BaccPage(s)
    page.update()
    assert page.worker_table.source is page.workers and page.workers.data["worker"] == []
    job = await dask_bacc.submit_coded(
        np.tanh, np.ones((8, 2)), n_blocks=2, n_coded=4, wait=4, code="berrut", client=c
    )  # wait=4: every worker's task returns (none cut short, its latency unknown)
    await job
    await closed_job(s, job.token)
    page.update()
    data = page.workers.data
    assert sorted(data["worker"]) == sorted(w.address for w in workers)
    assert set(data) == {"worker", "host", "p_late", "q50", "q90", "q99", "n"}
    assert all(h == "127.0.0.1" for h in data["host"])
    assert all(0.0 <= p <= 1.0 for p in data["p_late"])
    assert "From 1 job(s)" in page.model_title.text
    # and /bacc/stats.json has the same figures
    stats = await diagnostics.get_stats(c)
    assert set(stats["workers"]["workers"]) == set(data["worker"])
