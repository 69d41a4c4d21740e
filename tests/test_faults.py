"""Deterministic faults at each point of a coded job's life (issue 13 item 7).

A worker leaves (``Worker.close``) after its result landed but before the job gathered it,
while the decode task runs on the cluster, and while its result is being screened for
corruption. Each point is reached with distributed Events (no sleeps decide anything);
each test checks that the job ends (a correct decode from the other results, or a clear
InsufficientResults), never hangs, and leaves no ``bacc-`` task on the scheduler.
"""

from __future__ import annotations

import asyncio
import sys

import cloudpickle
import dask
import numpy as np
import pytest
from cluster_helpers import blocker, gen_cluster, names_at, until
from distributed import Event, Queue, get_worker

import dask_bacc
from dask_bacc.codes.transform import Transform
from dask_bacc.testing import assert_decodes_reference, assert_no_bacc_tasks, gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
TEN = [("127.0.0.1", 1)] * 10
NO_STEALING = {"distributed.scheduler.work-stealing": False}


def worker_of(workers, address):
    return next(w for w in workers if w.address == address)


# -- 1. a result lost after it landed, before the job gathered it -------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    "noticed",
    [False, True],
    ids=["at-gather", "while-waiting"],
)
@gen_cluster(client=True, nthreads=EIGHT, timeout=60)
async def test_result_lost_after_landing_before_gather(c, s, *workers, noticed):
    """Client-side decode gathers the used results once, at the decode. To hold that
    gather, the job waits for all 8 results and task 7 is gated: results 0-6 land (not
    gathered), then the worker holding result 2 closes.

    ``while-waiting``: the job's liveness check (``bacc.poll-interval``) writes result 2
    off before the gate opens. ``at-gather``: the poll interval is longer than the test,
    so the gate opens first and the decode set includes the lost result: the gather
    itself meets the loss. Either way the job must decode from the 7 others (correctly),
    not hang, and leave no task behind. ``at-gather`` hung before the gather was watched
    (the lost result's eval, pinned to the departed worker, stayed in no-worker); the
    same race exists with the default 500 ms poll whenever the last result lands between
    the worker leaving and the job's next liveness check.
    """
    X = np.random.default_rng(21).standard_normal((16, 2))
    _, placement = await names_at(c, (), 8)
    gate = await gate_stragglers(indices=[7], client=c)
    victim = worker_of(workers, placement[2])
    poll = "100ms" if noticed else "1h"
    with dask.config.set({"bacc.poll-interval": poll}):
        job = await dask_bacc.submit_coded(
            np.tanh, X, n_blocks=4, n_coded=8, wait=8, code="berrut", client=c
        )
        assert job.report.workers == placement and job.decode_here
        await until(lambda: len(job.decider.usable) == 7, "results 0-6 to land")
        assert not job._values  # landed, not gathered
        await victim.close(executor_wait=False)
        await until(lambda: victim.address not in s.workers, "the scheduler to drop the worker")
        if noticed:
            await until(lambda: 2 in job.decider.failed, "the job to write result 2 off")
        await gate.release()
        try:
            out = await asyncio.wait_for(job, 15)
        except asyncio.TimeoutError:
            await job.cancel()  # end the hung loop, then check the clean-up still happens
            await assert_no_bacc_tasks(s)
            pytest.fail(f"the job hung after losing a landed result: {job!r}")
    await gate.clear()
    rep = job.report
    assert sorted(rep.returned) == [0, 1, 3, 4, 5, 6, 7]
    assert "left" in rep.failed[2] or "lost" in rep.failed[2], rep.failed
    assert_decodes_reference(out, rep, np.tanh, X)
    await assert_no_bacc_tasks(s)


# -- 2. a worker lost while the decode task runs on it ------------------------------------
def gated_inverse(y):
    """Identity; inside the cluster decode (which applies the transform's inverse to the
    K stacked blocks, 3-d here) it first reports its worker on a Queue and waits for an
    Event. The evals' round-trip check (one 2-d result each) passes through."""
    try:
        name = str(get_worker().name)
    except ValueError:  # on the client: pass through
        return y
    if np.ndim(y) != 3:
        return y
    Queue("fault-decode-on").put(name)
    Event("fault-decode-go").wait()
    return y


HOLD_DECODE = Transform(np.asarray, gated_inverse, "hold-decode")


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT, config=NO_STEALING, timeout=60)
async def test_worker_lost_while_the_decode_task_runs(c, s, *workers):
    """Output decoded on the cluster (``bacc.client-decode-limit: 0``): one stack-decode
    task next to the first used result. An identity transform whose inverse (run inside
    that task) waits for an Event holds the decode task while it runs; its worker then
    closes, taking a used result with it. The job must notice, decode again from the 7
    results left, and return that decode (no hang, no task left)."""
    X = np.random.default_rng(22).standard_normal((16, 2))
    go = Event("fault-decode-go", client=c)
    started = Queue("fault-decode-on", client=c)
    with dask.config.set({"bacc.client-decode-limit": 0}):
        job = await dask_bacc.submit_coded(
            np.tanh,
            X,
            n_blocks=4,
            n_coded=8,
            wait=8,
            code="berrut",
            transform=HOLD_DECODE,
            client=c,
        )
        assert not job.decode_here
        name = await started.get(timeout=30)  # the decode task is running on `name`
        victim = next(w for w in workers if str(w.name) == name)
        lost = {i for i, a in enumerate(job.report.workers) if a == victim.address}
        assert len(lost) == 1
        assert any(
            ts.state == "processing" and ts.processing_on.address == victim.address
            for k, ts in s.tasks.items()
            if str(k).startswith(f"('bacc-stack-{job.token}")
        )
        await victim.close(executor_wait=False)
        await until(lambda: lost <= set(job.decider.failed), "the job to write the result off")
        await go.set()  # the decode again runs through
        out = await asyncio.wait_for(job, 30)
    rep = job.report
    assert sorted(rep.returned) == sorted(set(range(8)) - lost)
    assert all("left" in rep.failed[i] or "lost" in rep.failed[i] for i in lost), rep.failed
    assert rep.trigger == "exhausted"
    assert_decodes_reference(out, rep, np.tanh, X, transform=HOLD_DECODE)
    await assert_no_bacc_tasks(s)


# -- 3. a worker lost while its result is being screened ----------------------------------
@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT, config=NO_STEALING, timeout=60)
async def test_worker_lost_while_its_result_is_screened(c, s, *workers):
    """``adversaries=1`` on output decoded on the cluster needs one sketch task per result
    before the decode (to locate a corrupted result). Result 3 lands, but its worker's
    thread is then taken by a higher-priority gated task, so the sketch of result 3 is
    still queued when every result is in and the job starts screening; that worker then
    closes. Result 3 cannot be checked: it is left out (``report.excluded`` as unchecked, or
    ``report.failed`` once the job sees its worker gone) and the job decodes from the
    others, without hanging or leaving a task behind.

    The screen waits for sketches up to ``bacc.accuracy.sketch-timeout``, but not for one
    whose result's worker left: with that timeout far beyond the test's, the job must
    still end at once.
    """
    X = np.random.default_rng(23).standard_normal((12, 2))
    _, placement = await names_at(c, (), 6)
    gate = await gate_stragglers(indices=[3], client=c)
    hold = Event("fault-screen-hold", client=c)
    victim = worker_of(workers, placement[3])
    with dask.config.set({"bacc.client-decode-limit": 0, "bacc.accuracy.sketch-timeout": "600s"}):
        job = await dask_bacc.submit_coded(
            np.tanh, X, n_blocks=2, n_coded=6, wait=6, adversaries=1, code="berrut", client=c
        )
        assert job.report.workers == placement and not job.decode_here
        sketch3 = (f"bacc-sketch-{job.token}", 3)
        await until(lambda: victim.state.executing_count == 1, "eval 3 to start")
        # queued behind eval 3, ahead of its sketch: takes the thread when eval 3 ends
        block = c.submit(blocker, hold.name, workers=[victim.address], priority=100)
        await until(lambda: block.key in victim.state.tasks, "the blocker to reach the worker")
        await gate.release()
        await until(lambda: job.report.trigger is not None, "the screen to start")
        assert sorted(job.decider.usable) == list(range(6))
        assert s.tasks[sketch3].state == "processing"
        assert victim.state.tasks[sketch3].state == "ready"  # queued, not run
        await victim.close(executor_wait=False)
        out = await asyncio.wait_for(job, 30)
    rep = job.report
    # left out: unchecked at the screen (excluded), or written off once its worker was
    # seen gone (failed), whichever the job noticed first
    assert 3 not in rep.returned
    assert 3 in rep.excluded or "left" in rep.failed.get(3, ""), (rep.excluded, rep.failed)
    assert len(rep.returned) >= 5  # 2K + 2A - 1 results were needed
    assert_decodes_reference(out, rep, np.tanh, X)
    await hold.set()
    block.release()
    await gate.clear()
    await assert_no_bacc_tasks(s)


# -- 4. the decode's worker lost while the client gathers the decoded blocks ---------------
@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT, config=NO_STEALING, timeout=60)
async def test_worker_lost_while_the_decoded_blocks_are_gathered(c, s, *workers, monkeypatch):
    """Issue 24 ("every wait bounded"): the decoded blocks of a cluster decode sit on the
    decode's worker, next to its first used result. That worker leaves as the client
    gathers them: the scheduler would recompute the decode from results pinned strictly
    to their workers, the departed one among them, and the gather waited for ever. The
    job must notice, decode again from the 7 results left, and return that decode."""
    from dask_bacc.runtime import job as job_module

    real_gather = job_module._dist.gather
    victims: list[str] = []

    async def gather_after_a_loss(client, futures, errors="raise"):
        keys = [f.key for f in futures] if isinstance(futures, list) else []
        if not victims and keys and str(keys[0][0]).startswith("bacc-decode"):
            ts = s.tasks[keys[0]]
            await until(lambda: ts.state == "memory", "the first decoded block")
            (address,) = {ws.address for ws in ts.who_has or ()}
            victims.append(address)
            await worker_of(workers, address).close(executor_wait=False)
            await until(lambda: address not in s.workers, "the scheduler to drop the worker")
        return await real_gather(client, futures, errors)

    monkeypatch.setattr(job_module._dist, "gather", gather_after_a_loss)
    X = np.random.default_rng(23).standard_normal((16, 2))
    with dask.config.set({"bacc.client-decode-limit": 0}):
        job = await dask_bacc.submit_coded(
            np.tanh, X, n_blocks=4, n_coded=8, wait=8, code="berrut", client=c
        )
        assert not job.decode_here
        out = await asyncio.wait_for(job, 30)
    (victim,) = victims
    lost = {i for i, a in enumerate(job.report.workers) if a == victim}
    rep = job.report
    assert lost and sorted(rep.returned) == sorted(set(range(8)) - lost)
    assert_decodes_reference(out, rep, np.tanh, X)
    await assert_no_bacc_tasks(s)
