"""What a job saved against plain Dask: ``JobReport.plain_ready``, ``time_saved``,
``total_cpu``, ``redundant_cpu``, and their totals on ``/bacc`` (issue 26, point 5).

No wall-clock assertions: straggling shares are held with ``gate_stragglers`` (or a
distributed Event), and the figures are checked for their source and their order only.
"""

from __future__ import annotations

import asyncio
import json
import sys

import cloudpickle
import dask.array as da
import numpy as np
import pytest
from cluster_helpers import gen_cluster, idle, until
from distributed import Event, get_worker

import dask_bacc
from dask_bacc import JobReport, diagnostics
from dask_bacc.codes import get_code
from dask_bacc.diagnostics.dashboard import _fmt_saved, _fmt_totals
from dask_bacc.diagnostics.html import report_html
from dask_bacc.runtime.savings import (
    cpu_split,
    estimate_finish,
    plain_ready,
    plain_shares,
    uncoded_tasks,
)
from dask_bacc.testing import gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8


# -- the pure figures --------------------------------------------------------------------
def test_plain_shares_are_each_blocks_own_data():
    rep = get_code("repetition", 4, 8)
    assert plain_shares(rep.data_rows(), 4) == [0, 1, 2, 3]
    sys_spline = get_code("systematic-spline", 4, 8)
    plain = plain_shares(sys_spline.data_rows(), 4)
    assert plain is not None and len(plain) == 4
    assert [sys_spline.data_rows()[i] for i in plain] == [0, 1, 2, 3]
    # no share of real data for every block: no counterfactual
    assert plain_shares(get_code("berrut", 4, 8).data_rows(), 4) is None
    assert plain_shares(get_code("spline", 4, 8).data_rows(), 4) is None


def test_plain_ready_measured_model_lower_bound_unknown():
    arrival = {0: 1.0, 1: 2.0, 2: 3.0, 4: 1.5}
    # every plain share returned: measured
    cf = plain_ready([0, 1, 2], arrival, {}, {})
    assert (cf.plain_ready, cf.source, cf.estimated) == (3.0, "measured", [])
    # plain share 3 held: a lower bound without the model
    cf = plain_ready([0, 1, 2, 3], arrival, {}, {3: 3.5})
    assert (cf.plain_ready, cf.source, cf.estimated) == (3.5, "lower-bound", [3])
    # with the model: the worker's first quantile beyond the time it ran (median task 1.75)
    workers = ["a", "b", "c", "slow", "e"]
    cf = plain_ready([0, 1, 2, 3], arrival, {}, {3: 3.5}, workers, {"slow": [1.0, 3.0, 9.0]})
    assert cf.source == "model" and cf.estimated == [3]
    assert cf.plain_ready == pytest.approx(3.0 * 1.75)
    # beyond the worker's q99: back to the lower bound
    cf = plain_ready([0, 1, 2, 3], arrival, {}, {3: 50.0}, workers, {"slow": [1.0, 3.0, 9.0]})
    assert (cf.plain_ready, cf.source) == (50.0, "lower-bound")
    # a plain share that failed, or no plain shares: unknown, never made up
    assert plain_ready([0, 1, 2, 3], arrival, {3: "worker left"}, {}).plain_ready is None
    assert plain_ready(None, arrival, {}, {}).source is None
    assert estimate_finish(2.0, None, [5.0]) == (2.0, "lower-bound")


def test_cpu_split_counts_what_an_uncoded_run_would_not():
    cpu = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 0.5, 5: 0.25}
    # repetition K=3, N=6: copy 4 (block 1) won, so copy 1 is the redundant one
    data_rows = {i: i % 3 for i in range(6)}
    uncoded = uncoded_tasks(data_rows, [0, 1, 2], used=[0, 4, 2])
    assert uncoded == [0, 4, 2]
    assert cpu_split(cpu, 3, 6, uncoded) == (4.75, pytest.approx(2.25))
    # no plain shares: (N - K) / N of the total
    assert cpu_split(cpu, 4, 6, None) == (4.75, pytest.approx(4.75 / 3))
    assert uncoded_tasks(data_rows, None, [0]) is None


def test_report_fields_round_trip_and_show():
    rep = JobReport(token="ab" * 16, func="f", code={"name": "repetition"}, K=2, N=4, wait_target=2)
    rep.status, rep.time_to_decode = "finished", 1.0
    rep.plain_shares, rep.uncoded_tasks = [0, 1], [0, 3]
    rep.plain_ready, rep.plain_ready_source = 2.5, "lower-bound"
    rep.plain_estimated, rep.plain_ready_estimated = [1], True
    rep.time_saved, rep.total_cpu, rep.redundant_cpu = 1.5, 3.0, 1.0
    again = JobReport.from_dict(json.loads(json.dumps(rep.to_dict())))
    assert again == rep
    text = repr(rep)
    assert "time saved at least 1.500s" in text and "lower-bound estimate" in text
    assert "extra CPU 1.000s of 3.000s" in text
    assert "Against plain Dask" in report_html(rep)
    # a report written before these fields existed still loads, with the defaults
    old = rep.to_dict()
    for key in (
        "plain_shares",
        "uncoded_tasks",
        "plain_ready",
        "plain_ready_estimated",
        "plain_ready_source",
        "plain_estimated",
        "time_saved",
        "total_cpu",
        "redundant_cpu",
    ):
        old.pop(key)
    loaded = JobReport.from_dict(old)
    assert loaded.plain_ready is None and loaded.time_saved is None
    assert loaded.plain_ready_estimated is False and loaded.plain_shares == []
    assert "time saved" not in repr(loaded)


def test_dashboard_formats_savings():
    assert _fmt_saved({"time_saved": 1.0, "plain_ready_source": "lower-bound"}) == ">= 1.000"
    assert _fmt_saved({"time_saved": 1.0, "plain_ready_source": "model"}) == "~1.000"
    assert _fmt_saved({"time_saved": -0.5, "plain_ready_source": "measured"}) == "-0.500"
    assert _fmt_saved({"time_saved": None}) == ""
    # a lower bound of zero says nothing: never ">= -0.000"
    assert _fmt_saved({"time_saved": -0.0, "plain_ready_source": "lower-bound"}) == "?"
    assert _fmt_totals({"time_saved_jobs": 0, "cpu": 0.0}) == ""
    line = _fmt_totals({"time_saved": 2.0, "time_saved_jobs": 3, "cpu": 4.0, "redundant_cpu": 1.0})
    assert "2.000 s saved over 3 job(s)" in line and "extra CPU 1.000 s of 4.000 s" in line


def test_a_lower_bound_of_zero_is_not_printed_as_time_saved():
    rep = JobReport(token="t", func="f", code={"name": "repetition"}, K=2, N=4, wait_target=2)
    rep.plain_ready, rep.time_to_decode, rep.time_saved = 1.25, 1.25, -0.0
    rep.plain_ready_source, rep.plain_ready_estimated = "lower-bound", True
    line = rep.savings_line()
    assert line is not None and "-0.000" not in line and "at least" not in line
    assert "unknown" in line and "1.250s or later" in line
    rep.time_saved = 0.5  # a real bound is still stated as one
    assert "time saved at least 0.500s" in (rep.savings_line() or "")


# -- coded jobs on a cluster ---------------------------------------------------------------


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_backups_that_were_not_needed_are_not_stragglers(c, s, *workers):
    """Repetition with no straggler among the primaries: the backups still out when
    every block arrived were not needed; the report says so, and counts no straggler."""
    X = np.random.default_rng(0).uniform(0, 1, (8, 2))
    async with gate_stragglers(indices=[4, 5, 6, 7], client=c):  # every backup
        job = await dask_bacc.submit_coded(
            np.tanh, X, code="repetition", n_blocks=4, n_coded=8, client=c
        )
        await job
    rep = job.report
    assert sorted(rep.returned) == [0, 1, 2, 3]
    assert rep.straggled == [] and sorted(rep.not_needed) == [4, 5, 6, 7]
    text = repr(rep)
    assert "straggled 0, not needed 4" in text
    assert "Not needed" in report_html(rep)
    from test_diagnostics import closed_job

    row = await closed_job(s, job.token)
    assert row["straggled"] == 0 and row["not_needed"] == 4


async def _cpu_filled(job) -> None:
    """The CPU figures come with the job's clean-up round trip, just after the result."""
    await until(lambda: job.report.total_cpu is not None, "the job's CPU figures")


@gen_cluster(client=True, nthreads=EIGHT)
async def test_systematic_share_held_and_cancelled(c, s, *workers):
    """A systematic share straggles: the job decodes without it, and its block's uncoded
    time is an estimate, flagged; the session totals on /bacc count the job."""
    code = get_code("systematic-spline", 4, 8)
    plain = plain_shares(code.data_rows(), 4)
    assert plain is not None
    held = plain[2]
    X = np.random.default_rng(0).standard_normal((16, 3))
    gate = await gate_stragglers(indices=[held], client=c)
    try:
        job = await dask_bacc.submit_coded(
            np.tanh, X, n_blocks=4, n_coded=8, wait=6, code="systematic-spline", client=c
        )
        await job
        rep = job.report
        assert held in rep.straggled and held not in rep.arrival
        assert rep.plain_shares == plain
        assert rep.plain_ready_estimated and rep.plain_estimated == [2]
        assert rep.plain_ready_source in ("model", "lower-bound")
        # it had not finished when the result was handed over, after the decode
        assert rep.plain_ready > rep.time_to_decode and rep.time_saved > 0
        assert rep.time_saved == pytest.approx(rep.plain_ready - rep.time_to_decode)
        await _cpu_filled(job)
        assert 0 <= rep.redundant_cpu <= rep.total_cpu
        assert len(rep.uncoded_tasks) == 4 and held in rep.uncoded_tasks
    finally:
        await gate.release()
        await gate.clear()
    # /bacc/stats.json: the job's row and the session totals
    plugin = s.plugins[diagnostics.PLUGIN_NAME]
    await until(lambda: plugin.jobs[job.token].closed is not None, "the job to close")
    stats = plugin.stats()
    (row,) = [r for r in stats["jobs"] if r["token"] == job.token]
    assert row["time_saved"] == pytest.approx(rep.time_saved)
    assert row["plain_ready_source"] == rep.plain_ready_source
    assert row["total_cpu"] is not None and row["redundant_cpu"] is not None
    totals = stats["totals"]
    assert totals["time_saved_jobs"] == 1
    assert totals["time_saved"] == pytest.approx(rep.time_saved)
    assert totals["cpu"] > 0 and 0 <= totals["redundant_cpu"] <= totals["cpu"]
    await idle(workers)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_repetition_every_primary_finished_is_measured(c, s, *workers):
    X = np.random.default_rng(1).standard_normal((16, 3))
    job = await dask_bacc.submit_coded(
        np.tanh, X, n_blocks=4, n_coded=8, wait=8, code="repetition", client=c
    )
    await job
    rep = job.report
    assert rep.plain_shares == [0, 1, 2, 3] and all(i in rep.arrival for i in range(4))
    assert rep.plain_ready_source == "measured" and not rep.plain_ready_estimated
    assert rep.plain_ready == max(rep.arrival[i] for i in range(4))
    # it waited for all eight: plain Dask would have been ready no later
    assert rep.time_saved <= 0
    await _cpu_filled(job)
    assert 0 < rep.redundant_cpu < rep.total_cpu
    # the Prometheus metrics of the session
    from prometheus_client import generate_latest

    from dask_bacc.diagnostics.metrics import BaccMetricCollector

    plugin = s.plugins[diagnostics.PLUGIN_NAME]
    await until(lambda: plugin.jobs[job.token].closed is not None, "the job to close")
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    registry.register(BaccMetricCollector())
    body = generate_latest(registry).decode()
    assert "dask_bacc_time_saved_seconds " in body
    assert "dask_bacc_cpu_seconds_total " in body
    assert "dask_bacc_redundant_cpu_seconds_total " in body


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_berrut_has_no_uncoded_counterfactual(c, s, *workers):
    X = np.random.default_rng(2).standard_normal((16, 3))
    gate = await gate_stragglers(indices=[7], client=c)
    try:
        job = await dask_bacc.submit_coded(
            np.tanh, X, n_blocks=4, n_coded=8, wait=6, code="berrut", client=c
        )
        await job
        rep = job.report
        # no share is a block's own data: nothing to measure, nothing made up
        assert rep.plain_shares == [] and rep.uncoded_tasks == []
        assert rep.plain_ready is None and rep.time_saved is None
        assert rep.plain_ready_source is None and not rep.plain_ready_estimated
        await _cpu_filled(job)
        # the coded tasks do equal work: (N - K) / N of the thread time is redundant
        assert rep.redundant_cpu == pytest.approx(rep.total_cpu / 2)
    finally:
        await gate.release()
        await gate.clear()
    await idle(workers)


# -- exact copies of a layer ----------------------------------------------------------------
def primary_waits(b, event, block_id=None):
    """Block 0's primary waits for the distributed Event ``event``; its copy runs at once."""
    key = get_worker().get_current_task()
    name = key[0] if isinstance(key, tuple) else key
    if block_id == (0,) and not str(name).startswith("bacc-copy-"):
        Event(event).wait()
    return b * 2


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)] * 4)
async def test_redundant_job_primary_lost_to_its_copy(c, s, *workers):
    ev = Event("bacc-test-savings-gate", client=c)
    K = 6
    y = da.arange(3 * K, chunks=3).map_blocks(
        primary_waits, "bacc-test-savings-gate", dtype="int64"
    )
    try:
        z = dask_bacc.coded(y, code="repetition")
        got = await asyncio.wait_for(c.compute(z), 30)
        np.testing.assert_array_equal(got, np.arange(3 * K) * 2)
        rep = await dask_bacc.report_of(z, client=c)
        assert rep.plain_shares == list(range(K))
        assert K in rep.returned and 0 not in rep.returned  # block 0 from its copy
        # block 0's primary had not finished when its copy won: a lower bound
        assert rep.plain_ready_source == "lower-bound" and 0 in rep.plain_estimated
        assert rep.plain_ready_estimated and rep.time_saved is not None
        assert rep.plain_ready >= rep.arrival[K]
        assert K in rep.uncoded_tasks  # the winning copy counts as block 0's task
        assert rep.total_cpu is not None and 0 <= rep.redundant_cpu <= rep.total_cpu
    finally:
        await ev.set()
    await idle(workers)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 2)] * 4)
async def test_redundant_job_speculative_all_primaries(c, s, *workers):
    """Speculative copies of a layer, none needed (a long threshold): every block's time
    is its primary's, measured, and no thread time is redundant."""
    K = 4
    y = da.arange(3 * K, chunks=3).map_blocks(np.negative)
    z = dask_bacc.coded(y, code="speculative", code_options={"min_runtime": 60.0})
    got = await asyncio.wait_for(c.compute(z), 30)
    np.testing.assert_array_equal(got, -np.arange(3 * K))
    rep = await dask_bacc.report_of(z, client=c)
    assert sorted(rep.returned) == list(range(K)) and not rep.backups
    assert rep.plain_ready_source == "measured" and not rep.plain_ready_estimated
    assert rep.plain_ready == max(rep.arrival.values())
    assert rep.redundant_cpu == 0.0 and rep.total_cpu is not None
