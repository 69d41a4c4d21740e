"""Hedged execution (``code="hedged"``): a backup once a task runs past what is known of
its function, on an idle worker, within a budget; on every entry point.

The rule is a pure function (:func:`~dask_bacc.runtime.launch.plan_backups`), tested over
finish orders with Hypothesis; the cluster tests hold tasks with ``distributed.Event``
gates, never with wall-clock assertions.
"""

from __future__ import annotations

import asyncio
import sys
import time

import cloudpickle
import dask
import dask.array as da
import numpy as np
import pytest
from cluster_helpers import checked_local_cluster, gen_cluster
from distributed import Client, Event, get_worker
from hypothesis import given, settings
from hypothesis import strategies as st
from test_coding import held_primary  # block 0's primary waits for its Event

import dask_bacc
import dask_bacc.diagnostics
from dask_bacc.diagnostics.latency import TaskTimes
from dask_bacc.runtime.launch import backup_workers, plan_backups
from dask_bacc.runtime.rules import late_blocks, share_backups
from dask_bacc.runtime.speculative import Speculation
from dask_bacc.testing import assert_exact, gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SIX = [("127.0.0.1", 1)] * 6
HEDGE = Speculation.hedge()


@settings(max_examples=200, deadline=None)
@given(
    since=st.dictionaries(st.integers(0, 15), st.floats(0.0, 10.0), max_size=16),
    tail_since=st.one_of(st.none(), st.floats(0.0, 10.0)),
    threshold=st.floats(0.01, 5.0),
    barred=st.sets(st.integers(0, 15)),
)
def test_late_blocks_are_those_past_the_threshold_latest_first(
    since, tail_since, threshold, barred
):
    """The layer jobs' rule of late copies as a pure function: a block is late when its
    newest copy started more than the threshold ago, or, none started, the tail began
    more than the threshold ago; never a block that may not have another copy; the
    latest first."""
    now = 10.0
    late = late_blocks(range(16), since, tail_since, now, threshold, lambda b: b not in barred)
    assert len(set(late)) == len(late) and not set(late) & barred
    for b in range(16):
        started = since.get(b, tail_since)
        expected = b not in barred and started is not None and now - started > threshold
        assert (b in late) == expected, (b, started)
    waited = [now - since.get(b, tail_since) for b in late]  # type: ignore[operator]
    assert waited == sorted(waited, reverse=True)


# -- the rule, pure ---------------------------------------------------------------------
def test_the_hedging_rule_is_armed_from_the_start():
    h = Speculation.hedge(multiplier=2.0, min_runtime=0.0, known=3)
    assert h.hedges and not Speculation.spark().hedges
    # nothing known: not armed; a prior arms it before any task finished
    assert h.threshold(16, []) is None
    assert h.threshold(16, [], prior=0.2) == pytest.approx(0.4)
    assert h.expected(16, [], 0.2) == (0.2, "prior")
    # fewer than `known` finished: still the prior; then the job's own median
    assert h.threshold(16, [0.1, 0.1], prior=0.2) == pytest.approx(0.4)
    assert h.expected(16, [0.1, 0.1, 0.1], 0.2) == (0.1, "job")
    # no prior: what finished, from the first task on (no "90% done" gate)
    assert h.threshold(16, [0.1]) == pytest.approx(0.2)
    # a job smaller than `known` uses its own tasks once all of them that can finished
    assert h.expected(2, [0.3, 0.5], 9.0) == (0.4, "job")
    assert Speculation.hedge(min_runtime=1.0).threshold(16, [0.1]) == 1.0


def test_spark_keeps_its_gate_and_ignores_the_prior():
    spark = Speculation.spark()
    assert spark.threshold(10, [1.0] * 8, prior=0.1) is None
    assert spark.threshold(10, [1.0] * 9, prior=0.1) == 3.0


def test_budget_and_options():
    assert Speculation.hedge(budget=0.25).budget_tasks(16) == 4
    assert Speculation.hedge(budget=0.25).budget_tasks(2) == 1  # at least one task
    assert Speculation.hedge(budget=0).budget_tasks(16) == 0
    assert Speculation.hedge(budget=None).budget_tasks(16) is None
    rule = Speculation.from_options({}, "hedged")
    assert rule.rule == "hedge" and rule.hedges and rule.copies == 3
    assert rule.multiplier == 1.5 and rule.budget == 0.25 and rule.known == 4
    assert rule.min_runtime == 0.05 and rule.interval == 0.05
    with dask.config.set({"bacc.hedge.multiplier": 3, "bacc.hedge.budget": None}):
        rule = Speculation.from_options({"copies": 2}, "hedged")
    assert (rule.multiplier, rule.budget, rule.copies) == (3.0, None, 2)
    assert Speculation.from_options({}) == Speculation.spark()  # speculative: unchanged
    with pytest.raises(TypeError, match="unknown hedged option"):
        Speculation.from_options({"multipler": 2}, "hedged")
    with pytest.raises(ValueError, match="copies"):
        Speculation.hedge(copies=1)
    with pytest.raises(ValueError, match="budget"):
        Speculation.hedge(budget=-1)


def test_task_times_keep_the_recent_median_per_function():
    t = TaskTimes(samples=3, max_functions=2)
    assert t.expected("f") is None
    t.observe("f", [1.0, 2.0, 3.0, float("nan"), -1.0])
    assert t.expected("f") == 2.0
    t.observe("f", [10.0, 10.0])  # the newest three: 3, 10, 10
    assert t.expected("f") == 10.0
    t.observe("g", [1.0])
    t.observe("h", [1.0])  # f is the least recently seen: dropped
    assert t.expected("f") is None and set(t.snapshot()) == {"g", "h"}


@st.composite
def job_states(draw):
    """A job of K blocks mid-run: copies launched, some finished in some order."""
    K = draw(st.integers(1, 8))
    launched_at: dict[int, float] = {}
    for j in range(K):
        launched_at[j] = 0.0
        for c in range(1, draw(st.integers(1, 3))):
            launched_at[c * K + j] = draw(st.floats(0.0, 5.0))
    arrival: dict[int, float] = {}
    failed: set[int] = set()
    for i, t0 in launched_at.items():
        fate = draw(st.sampled_from(["running", "finished", "failed"]))
        if fate == "finished":
            arrival[i] = t0 + draw(st.floats(0.001, 5.0))
        elif fate == "failed":
            failed.add(i)
    now = max([6.0, *arrival.values()])
    order = draw(st.permutations(sorted(arrival)))  # the order the results came in
    pending = [i for i in launched_at if i not in arrival and i not in failed]
    prior = draw(st.none() | st.floats(0.01, 3.0))
    hedged = draw(st.integers(0, 3))
    return K, launched_at, arrival, list(order), pending, now, prior, hedged


@settings(max_examples=300, deadline=None)
@given(state=job_states(), rule=st.sampled_from([HEDGE, Speculation.spark()]))
def test_plan_backups_properties(state, rule):
    K, launched_at, arrival, usable, pending, now, prior, hedged = state
    plan = plan_backups(K, rule, usable, pending, launched_at, arrival, now, prior, hedged)
    covered = {i % K for i in usable}
    # the losers are exactly the copies still running of blocks already given
    assert sorted(plan.losers) == sorted(i for i in pending if i % K in covered)
    copies = {j: [i for i in launched_at if i % K == j] for j in range(K)}
    for j in set(plan.blocks):
        assert j not in covered  # never a copy of a block given
        # never past the copies allowed, however many it gets at once
        assert len(copies[j]) + plan.blocks.count(j) <= rule.copies
        running = [launched_at[i] for i in copies[j] if i in pending]
        if running:  # late: its newest copy ran past the threshold
            assert plan.threshold is not None and now - max(running) > plan.threshold
    # failed blocks first, then late ones, the latest first; the late ones within budget
    late = plan.blocks[len(plan.blocks) - plan.late :]
    assert all(any(i in pending for i in copies[j]) for j in late)
    failed = plan.blocks[: len(plan.blocks) - plan.late]
    assert len(set(failed)) == len(failed)  # a failed block is replaced once
    budget = rule.budget_tasks(K)
    if budget is not None:
        assert plan.late <= max(budget - hedged, 0)
    # first copies first: no late block gets a second while another late one got none
    if len(set(late)) < len(late):
        first = late[: len(set(late))]
        assert sorted(first) == sorted(set(late))
    # the finish order does not matter
    again = plan_backups(
        K, rule, usable[::-1], pending[::-1], launched_at, arrival, now, prior, hedged
    )
    assert sorted(again.blocks) == sorted(plan.blocks) and again.late == plan.late
    assert again.threshold == plan.threshold


def test_late_blocks_are_backed_up_latest_first_within_the_budget():
    K = 8
    launched_at = {j: 0.0 for j in range(K)}
    arrival = {j: 0.1 for j in range(4)}  # four finished in 0.1 s: expected 0.1
    rule = Speculation.hedge(multiplier=2.0, min_runtime=0.0, budget=0.25)  # 2 backups
    launched_at[7] = 0.5  # started later: the least late
    plan = plan_backups(K, rule, [0, 1, 2, 3], [4, 5, 6, 7], launched_at, arrival, 1.0)
    assert plan.threshold == pytest.approx(0.2) and plan.source == "job"
    assert plan.late == 2 and len(plan.blocks) == 2 and 7 not in plan.blocks
    # one backup already charged: one more
    plan = plan_backups(K, rule, [0, 1, 2, 3], [4, 5, 6, 7], launched_at, arrival, 1.0, None, 1)
    assert plan.late == 1
    # a backup that runs late itself gets a third copy (2K + j), not a fourth
    launched_at[K + 4] = 0.3
    plan = plan_backups(K, Speculation.hedge(budget=None, min_runtime=0.0), [0, 1, 2, 3],
                        [4, 5, 6, 7, K + 4], launched_at, arrival, 1.0)  # fmt: skip
    assert 4 in plan.blocks
    launched_at[2 * K + 4] = 0.6
    plan = plan_backups(K, Speculation.hedge(budget=None, min_runtime=0.0), [0, 1, 2, 3],
                        [4, 5, 6, 7, K + 4, 2 * K + 4], launched_at, arrival, 1.0)  # fmt: skip
    assert 4 not in plan.blocks


@settings(max_examples=300, deadline=None)
@given(
    late=st.lists(st.integers(0, 20), unique=True, max_size=8),
    rooms=st.lists(st.integers(-1, 3), min_size=21, max_size=21),
    slots=st.none() | st.integers(0, 12),
    reserve=st.integers(0, 4),
)
def test_share_backups_in_whole_rounds(late, rooms, slots, reserve):
    out = share_backups(late, rooms.__getitem__, slots, reserve)
    room = {b: max(rooms[b], 0) for b in late}
    assert slots is None or len(out) <= slots
    for b in set(out):
        assert b in late and out.count(b) <= room[b]
    # the first round: a first backup for every late block with room, latest first,
    # as many as the slots hold
    eligible = [b for b in late if room[b] > 0]
    n_first = len(eligible) if slots is None else min(len(eligible), slots)
    assert out[:n_first] == eligible[:n_first]
    # each later round gives one more to every late block with room left, or is not given
    done = out[:n_first]
    rest = out[n_first:]
    left = {b: room[b] - done.count(b) for b in late}
    while True:
        round_ = [b for b in late if left[b] > 0]
        fits = slots is None or slots - len(done) >= len(round_) + reserve
        if not round_ or not fits:
            assert rest == []  # nothing past the last whole round
            break
        assert rest[: len(round_)] == round_
        rest = rest[len(round_) :]
        done += round_
        for b in round_:
            left[b] -= 1


def test_a_late_task_gets_its_copies_at_once_when_the_budget_holds_them_for_all():
    K = 8
    launched_at = {j: 0.0 for j in range(K)}
    arrival = {j: 0.1 for j in range(6)}  # six finished in 0.1 s; 6 and 7 run late
    rule = Speculation.hedge(multiplier=2.0, min_runtime=0.0, budget=None)  # copies 3
    plan = plan_backups(K, rule, list(range(6)), [6, 7], launched_at, arrival, 1.0)
    # both late blocks get both backups the rule allows, now: a late backup is not waited for
    assert sorted(plan.blocks) == [6, 6, 7, 7] and plan.late == 4
    assert sorted(plan.blocks[:2]) == [6, 7]  # every late block one before any gets two
    # a budget of 3 backups: one each; the third is kept for a backup that runs late
    budget3 = Speculation.hedge(multiplier=2.0, min_runtime=0.0, budget=3 / 8)
    plan = plan_backups(K, budget3, list(range(6)), [6, 7], launched_at, arrival, 1.0)
    assert sorted(plan.blocks) == [6, 7] and plan.late == 2
    # a block still on time (7 started at 0.9) keeps a first backup in hand: 6 gets one
    budget2 = Speculation.hedge(multiplier=2.0, min_runtime=0.0, budget=2 / 8)
    plan = plan_backups(K, budget2, list(range(6)), [6, 7], {**launched_at, 7: 0.9},
                        arrival, 1.0)  # fmt: skip
    assert plan.blocks == [6]
    # Spark's rule (copies 2, armed once 7 of 8 finished): one backup, as before
    arrival[6] = 0.1
    spark = Speculation.spark(min_runtime=0.0)
    plan = plan_backups(K, spark, list(range(7)), [7], launched_at, arrival, 1.0)
    assert plan.blocks == [7]


def test_backup_workers_idle_first_and_never_slow_while_another_is_free():
    workers = {
        "a": {"status": "running", "metrics": {"executing": 0}},
        "b": {"status": "running", "metrics": {"executing": 0}},
        "c": {"status": "running", "metrics": {"executing": 0}},
        "d": {"status": "paused", "metrics": {"executing": 0}},
    }
    # a runs a copy of the job (busy), b is slow: c only
    assert backup_workers(workers, busy={"a"}, slow={"b"}) == ["c"]
    # every free worker slow: they are still used (a late copy beats none)
    assert backup_workers(workers, busy={"a", "c"}, slow={"b"}) == ["b"]
    assert backup_workers(workers, busy={"a", "b", "c"}, slow=set()) == []


# -- map_coded ------------------------------------------------------------------------
@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_first_job_of_a_fresh_cluster_hedges_a_held_task(c, s, *workers):
    """The very first job: nothing known of f but what its own tasks took; the held task
    is backed up on a worker running none of the job's copies (an idle one), and the job
    ends."""
    X = np.random.default_rng(1).uniform(0, 1, (8, 2))
    gate = await gate_stragglers(indices=[0], interruptible=False, client=c)
    try:
        job = await dask_bacc.submit_coded(np.tanh, X, code="hedged", n_blocks=4, client=c)
        out = await job
    finally:
        await gate.release()
    rep = job.report
    assert_exact(out, np.tanh, X, rtol=0, atol=0)
    assert rep.code["name"] == "hedged" and rep.backups == [4]
    assert rep.workers[4] != rep.workers[0]
    assert 4 in rep.returned and 0 in rep.straggled
    h = rep.hedge
    assert h["source"] == "job" and h["threshold"] is not None
    assert (h["launched"], h["won"], h["cancelled"]) == (1, 1, 0)
    assert h["budget"] == 1
    await gate.clear()
    # /bacc's job table says what hedging did: won of launched, and the threshold
    from test_diagnostics import closed_job

    from dask_bacc.diagnostics.dashboard import BaccPage

    await closed_job(s, job.token)
    page = BaccPage(s)
    page.update()
    (row,) = [i for i, t in enumerate(page.tokens) if t == job.token]
    assert page.jobs.data["backups"][row] == f"1/1 > {h['threshold']:.2f} s"


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_coded_data_hedges_each_call_and_the_next_call_goes_around(c, s, *workers):
    """``encode(code="hedged")`` keeps the K blocks as they are; a call's held eval is
    backed up on an idle worker reading the same share, and the next call evaluates that
    share elsewhere while the held eval still runs (it is not interruptible)."""
    X = np.random.default_rng(2).uniform(0, 1, (8, 2))
    data = await dask_bacc.encode(X, code="hedged", n_blocks=4, client=c)
    assert data.backups is not None and data.backups.hedges
    assert (data.code.K, data.code.N) == (4, 4) and len(set(data.workers)) == 4
    gate = await gate_stragglers(indices=[0], interruptible=False, client=c)
    try:
        first = await data.submit(np.tanh)
        out = await first
        assert_exact(out, np.tanh, X, rtol=0, atol=0)
        rep = first.report
        assert rep.code["name"] == "hedged" and rep.backups == [4]
        assert rep.workers[4] != rep.workers[0]
        assert 4 in rep.returned and 0 in rep.straggled
        assert (rep.hedge["launched"], rep.hedge["won"]) == (1, 1)
        # the held eval still runs on share 0's worker: the next call goes around it
        # (rerouted, so not task 0 of the gate: no backup needed)
        await gate.clear()
        with dask.config.set({"bacc.reroute-busy-after": "0s"}):  # however short the call
            second = await data.submit(np.tanh)
        assert_exact(await second, np.tanh, X, rtol=0, atol=0)
        assert second.report.rerouted.get(0) not in (None, data.workers[0])
    finally:
        await gate.release()
    with pytest.raises(ValueError, match="wait= does not apply"):
        data.submit(np.tanh, wait=3)
    data.release()
    with pytest.raises(ValueError, match="n_coded does not apply"):
        dask_bacc.encode(X, code="hedged", n_coded=8, client=c)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_the_prior_hedges_a_job_before_any_of_its_tasks_finished(c, s, *workers):
    """K = 1: the job has no finished task to learn from; a first job of f taught the
    scheduler what f takes, so the held task is still backed up."""
    X = np.random.default_rng(2).uniform(0, 1, (4, 2))
    first = await dask_bacc.submit_coded(np.tanh, X, code="hedged", n_blocks=4, client=c)
    await first
    plugin = s.plugins[dask_bacc.diagnostics.PLUGIN_NAME]
    while not plugin.task_times.snapshot():  # its run times arrive without a reply
        await asyncio.sleep(0.01)
    assert plugin.backups_total["launched"] == 0
    gate = await gate_stragglers(indices=[0], interruptible=False, client=c)
    try:
        job = await dask_bacc.submit_coded(np.tanh, X, code="hedged", n_blocks=1, client=c)
        out = await job
    finally:
        await gate.release()
    np.testing.assert_array_equal(out, np.tanh(X))
    assert job.report.hedge["source"] == "prior"
    assert job.report.backups == [1] and 1 in job.report.returned
    while plugin.backups_total["won"] < 1:
        await asyncio.sleep(0.01)
    stats = plugin.stats()
    assert stats["totals"]["backups"]["launched"] == 1
    assert any(row["hedge"] for row in stats["jobs"])
    await gate.clear()


async def _held_hedged_job(c, held, budget):
    """A hedged job of 4 blocks of ``np.tanh`` whose tasks ``held`` wait for the gate
    until it has ended; its answer is checked. The threshold (0.5 s) is one no unheld
    task reaches under load, so only the held blocks are ever late."""
    X = np.random.default_rng(3).uniform(0, 1, (8, 2))
    gate = await gate_stragglers(indices=held, interruptible=False, client=c)
    try:
        job = await dask_bacc.submit_coded(
            np.tanh, X, code="hedged", n_blocks=4, client=c,
            code_options={"budget": budget, "min_runtime": 0.5},
        )  # fmt: skip
        out = await job
    finally:
        await gate.release()
    np.testing.assert_array_equal(out, np.tanh(X))
    await gate.clear()
    return job


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_a_budget_short_of_a_second_round_keeps_it_for_a_late_backup(c, s, *workers):
    """Blocks 0 and 1 late at once and a budget of three backups: one each (tasks 4 and
    5), not a second for one of them; block 0's backup is held too, so the third goes to
    it a threshold later (task 8), on a worker none of its copies ran on."""
    job = await _held_hedged_job(c, [0, 1, 4], budget=0.75)
    rep = job.report
    assert sorted(rep.backups[:2]) == [4, 5] and rep.backups[2:] == [8]
    assert {5, 8} <= set(rep.returned)
    # at one check, then a later one, once task 4 had run past the threshold itself
    launched, interval = job.launch.launched_at, job.launch.rule.interval
    assert abs(launched[4] - launched[5]) < interval
    assert launched[8] - launched[4] > rep.hedge["threshold"]
    assert len({rep.workers[0], rep.workers[4], rep.workers[8]}) == 3
    assert rep.hedge["launched"] == 3 and rep.hedge["won"] == 2


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_a_late_tasks_backups_go_together(c, s, *workers):
    """One late block, budget to spare: its two backups (tasks 4 and 8) start together,
    on two idle workers, without waiting to see whether the first one runs late."""
    job = await _held_hedged_job(c, [0], budget=0.5)
    rep = job.report
    assert sorted(rep.backups) == [4, 8]
    launched = job.launch.launched_at
    assert abs(launched[4] - launched[8]) < job.launch.rule.interval  # at one check
    assert len({rep.workers[0], rep.workers[4], rep.workers[8]}) == 3
    # both may land in the burst that ends the job
    assert rep.hedge["launched"] == 2 and rep.hedge["won"] in (1, 2)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_the_budget_bounds_the_backups(c, s, *workers):
    """Two held tasks, a budget of one backup: one is hedged, the other waits for its gate."""
    X = np.random.default_rng(4).uniform(0, 1, (8, 2))
    gate = await gate_stragglers(indices=[0, 1, 4, 5], interruptible=False, client=c)
    job = await dask_bacc.submit_coded(
        np.tanh, X, code="hedged", n_blocks=4, client=c, code_options={"budget": 0.25}
    )
    while len(job.report.backups) < 1:
        await asyncio.sleep(0.01)
    for _ in range(20):  # twenty more checks of the rule: no second backup
        await asyncio.sleep(job.launch.rule.interval)
    assert len(job.report.backups) == 1 and not job.done()
    await gate.release()
    out = await job
    np.testing.assert_array_equal(out, np.tanh(X))
    assert job.report.hedge["budget"] == 1
    await gate.clear()


# -- coded() and coding(): the layer jobs --------------------------------------------------
@pytest.fixture(scope="module")
def client():
    with (
        checked_local_cluster(n_workers=4, threads_per_worker=2) as cluster,
        Client(cluster) as c,
    ):
        yield c


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["coded", "coding"])
@pytest.mark.parametrize("n_chunks", [4, 24], ids=["one-wave", "waves"])
def test_layer_entry_points_hedge_a_held_task(client, entry, n_chunks):
    """coded() and coding() with code="hedged" on 4 workers: 4 tasks in one wave, or 24 in
    waves; block 0's primary is held and a backup gives the block."""
    ev = Event("bacc-test-coding-gate", client=client)
    ev.clear()
    y = da.arange(3 * n_chunks, chunks=3).map_blocks(held_primary, dtype="int64")
    try:
        if entry == "coded":
            z = dask_bacc.coded(y, code="hedged").sum()
            got = z.compute(timeout=60)
            rep = dask_bacc.report_of(z)
        else:
            with dask_bacc.coding(code="hedged", only=held_primary) as block:
                got = y.sum().compute(timeout=60)
            (rep,) = block.reports
        assert got == 2 * int(np.arange(3 * n_chunks).sum())
        assert not ev.is_set()  # block 0's primary is still held
    finally:
        ev.set()
    assert rep.code["name"] == "hedged" and rep.K == n_chunks
    assert 0 in rep.backups  # (a layer job reports the block of each backup)
    assert 0 in rep.straggled and 0 not in rep.returned
    h = rep.hedge
    assert h["launched"] >= 1 and h["won"] >= 1 and h["threshold"] is not None
    # the job is on /bacc and in stats.json like a map_coded job: its code, its K, the
    # held primary given up, a backup used, and what hedging did
    stats = _closed_stats(client, rep.token)
    assert (stats["code"], stats["K"], stats["status"]) == ("hedged", n_chunks, "finished")
    assert stats["func"] == "held_primary"
    outcome = {t["index"]: t["outcome"] for t in stats["tasks"]}
    assert outcome[0] == "cancelled"
    assert [i for i, o in outcome.items() if i % n_chunks == 0 and o == "used"]
    assert all(o == "used" for i, o in outcome.items() if 0 < i < n_chunks)
    assert stats["used"] == n_chunks and stats["straggled"] >= 1
    assert stats["hedge"]["launched"] == h["launched"]


def held_first_partition(part):
    """The primary of the partition holding row 0 waits for the Event
    "bacc-test-span-gate"; its copies and every other partition run at once."""
    key = get_worker().get_current_task()
    name = key[0] if isinstance(key, tuple) else key
    if 0 in part.index and not str(name).startswith("bacc-copy-"):
        Event("bacc-test-span-gate").wait()
    return part * 2


@pytest.mark.slow
def test_a_layer_jobs_late_copies_are_launched_in_its_span(client, monkeypatch):
    """Issue 40, item 1: every kind of job is launched by one lifecycle, whose loop runs in
    the job's span, so what the loop launches later (a layer job's late copy) is the
    job's on the dashboard's span views. Before, a layer job's loop ran outside its span
    and its late copies had none."""
    import dask.dataframe as dd
    import pandas as pd

    from dask_bacc.runtime import _dist

    spans = []
    real_get = _dist.get

    def spy(c, graph, keys):
        spans.append(dask.get_annotations().get("span"))
        return real_get(c, graph, keys)

    monkeypatch.setattr(_dist, "get", spy)
    ev = Event("bacc-test-span-gate", client=client)
    ev.clear()
    df = pd.DataFrame({"x": np.arange(16.0)})
    try:
        job = dask_bacc.submit_coded(
            held_first_partition,
            dd.from_pandas(df, npartitions=4),
            code="hedged",
            meta=df.iloc[:0],  # (not inferred: f runs on the workers only)
            client=client,
        )
        got = job.result(timeout=60).compute()
        assert not ev.is_set()  # the primary of partition 0 is still held
    finally:
        ev.set()
    pd.testing.assert_frame_equal(got, df * 2)
    assert 0 in job.report.backups
    assert len(spans) >= 2  # the first launch and at least one late copy
    assert all(sp is not None for sp in spans), spans
    assert len({tuple(sp["ids"]) for sp in spans}) == 1, spans  # one span: the job's


def _closed_stats(client, token):
    """The scheduler plugin's stats of job ``token`` once it is closed."""
    for _ in range(600):
        stats = dask_bacc.diagnostics.get_stats(client, token)
        if stats is not None and stats["closed"]:
            return stats
        time.sleep(0.05)
    raise AssertionError(f"job {token} not closed on the scheduler: {stats}")


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_the_equal_resources_benchmark_runs(tmp_path):
    """A smoke run of benchmarks/equal_resources.py (4 worker processes, 2 rounds, tiny
    tasks): every strategy's answer equals plain Dask's, and the figures are written."""
    import json
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "eq.json"
    subprocess.run(
        [sys.executable, str(root / "benchmarks/equal_resources.py"), "--workers", "4",
         "--rows", "64", "--task", "0.01", "--rounds", "2", "--cells", "stragglers",
         "--out", str(out)],
        check=True, cwd=root, timeout=170, capture_output=True,
    )  # fmt: skip
    cell = json.loads(out.read_text())["cells"]["stragglers"]
    assert set(cell) == {"plain", "hedged", "speculative", "repetition", "default"}
    assert all(r["max_error"] == 0 for r in cell.values())  # exact strategies: identical
    assert cell["plain"]["p50"] == 1.0 and all(len(r["times"]) == 2 for r in cell.values())


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_the_coding_waves_benchmark_runs(tmp_path):
    """A smoke run of benchmarks/coding_waves.py (4 worker processes, 40 partitions, one
    round): the coded layer's answer equals plain Dask's (it asserts it), times written."""
    import json
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "waves.json"
    subprocess.run(
        [sys.executable, str(root / "benchmarks/coding_waves.py"), "--workers", "4",
         "--n-parts", "40", "--task", "0.002", "--rounds", "1", "--json", str(out),
         "--entry", "coding", "map_coded"],
        check=True, cwd=root, timeout=170, capture_output=True,
    )  # fmt: skip
    cells = json.loads(out.read_text())["cells"]
    assert set(cells) == {"0.0", "0.05"}
    assert all(set(cell) == {"plain", "coding", "map_coded"} for cell in cells.values())
    assert all(len(t) == 1 for cell in cells.values() for t in cell.values())
