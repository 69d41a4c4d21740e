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
import threading

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


# -- a worker that does not answer (frozen): the timeout holds (issue 28 item 7) ------------
X = np.cos(np.linspace(0.0, 3.0, 24)[:, None] * (1.0 + np.arange(3)))


def _freeze_transfers(worker):
    """Make ``worker`` answer no data request, as a frozen (SIGSTOPped) worker: the
    scheduler still counts it as running, and a transfer from it never ends. Returns the
    function that thaws it."""
    thaw = asyncio.Event()
    original = worker.handlers["get_data"]

    async def frozen(comm, **kwargs):
        await thaw.wait()
        return await original(comm, **kwargs)

    worker.handlers["get_data"] = frozen
    heartbeat = worker.periodic_callbacks["heartbeat"]
    heartbeat.stop()  # a frozen worker falls silent

    def resume():
        worker.handlers["get_data"] = original
        heartbeat.start()
        thaw.set()

    return resume


@pytest.mark.slow
# the cluster decode's variant ("bacc.client-decode-limit": 0) ends within the timeout too
# (the probe with worker processes: 6.0 s for timeout=5), but leaves its info task on the
# scheduler while the worker stays frozen: not covered here yet
@pytest.mark.parametrize("decode_limit", ["256 MiB"], ids=["client-decode"])
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4, config=NO_STEALING, timeout=60)
async def test_timeout_holds_while_a_worker_holding_a_result_does_not_answer(
    c, s, *workers, decode_limit
):
    """The probe's 18.7 s for timeout=5: a worker frozen during the decode still counts as
    running, so the decode's transfer from it waited until ``worker-ttl`` removed it. Here
    the worker never answers (until the test ends): the job must end by itself, its
    timeout plus a grace, decoding from the others or saying why it could not. Before the
    fix it waited for ever (the test's own bound, 30 s, is 15x the job's)."""
    straggler, frozen = workers[0], workers[1]
    resume = _freeze_transfers(frozen)
    try:
        async with gate_stragglers(workers=[straggler.address], client=c):
            with dask.config.set({"bacc.client-decode-limit": decode_limit}):
                # N = 4 on 4 workers: one task each; wait=1.0 waits for the straggler, so
                # the timeout decodes, from results that include the frozen worker's
                job = await dask_bacc.submit_coded(
                    np.tanh,
                    X,
                    code="berrut",
                    n_blocks=2,
                    n_coded=4,
                    wait=1.0,
                    timeout=4,
                    client=c,
                    progress=False,
                )
                assert sorted(job.workers.values()) == sorted(w.address for w in workers)
                try:
                    out = await asyncio.wait_for(job, 30)
                except dask_bacc.InsufficientResults as exc:
                    # a decode on the cluster cannot tell which input is stuck: it says so;
                    # on the client, the frozen worker's result is written off (enough
                    # others may not have landed by then, on a loaded machine)
                    assert "within the timeout of 4" in str(exc), exc
                else:
                    assert out.shape == X.shape and np.all(np.isfinite(out))
                    i = next(i for i, w in job.workers.items() if w == frozen.address)
                    assert "within the timeout" in job.report.failed[i], job.report.failed
    finally:
        resume()
    await assert_no_bacc_tasks(s)


# -- closing the client mid-job: one exception on every path (issue 28 item 6) -------------
_started = threading.Event()
_go_on = threading.Event()


def held(block):
    """``np.tanh``, held until the test lets it go (in-process workers share the test's
    threading Events); tells the test it started."""
    _started.set()
    _go_on.wait(timeout=60)
    return np.tanh(block)


def held_frame(frame):
    _started.set()
    _go_on.wait(timeout=60)
    return frame


def _close_once_started(client):
    def close():
        if _started.wait(timeout=60):
            client.close()

    thread = threading.Thread(target=close, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
@pytest.mark.parametrize("path", ["map_coded", "CodedData.map", "encode-dask-frame"])
def test_closing_the_client_mid_job_raises_one_error_on_every_path(path):
    """Before: a ``RuntimeError`` from ``map_coded`` and ``CodedData.map``, a
    ``FutureCancelledError ... reason: unknown`` from ``encode`` of a dask collection (the
    gather of its index), and (below) an ``AttributeError`` or ``InsufficientResults``
    with an asynchronous client. Now ``ClientClosedError`` (a ``RuntimeError``) on each."""
    import dask.dataframe as dd
    import pandas as pd
    from cluster_helpers import checked_local_cluster
    from distributed import Client

    _started.clear()
    _go_on.clear()
    try:
        with checked_local_cluster(n_workers=6, threads_per_worker=1) as lc:
            c = Client(lc, set_as_default=False)
            if path == "map_coded":
                closing = _close_once_started(c)
                call = lambda: dask_bacc.map_coded(held, X, n_blocks=3, client=c)  # noqa: E731
            elif path == "CodedData.map":
                coded = dask_bacc.encode(X, n_blocks=3, client=c)
                coded.wait()
                closing = _close_once_started(c)
                call = lambda: coded.map(held)  # noqa: E731
            else:
                frame = pd.DataFrame(X, columns=["a", "b", "c"])
                # meta given: dask would call held_frame for it here, setting _started
                # (and waiting for _go_on) before the job, so the client was closed before
                # encode started instead of mid-job (60 s here, a hang under load in CI)
                data = dd.from_pandas(frame, npartitions=3).map_partitions(
                    held_frame, meta=frame.iloc[:0]
                )
                closing = _close_once_started(c)
                call = lambda: dask_bacc.encode(data, client=c)  # noqa: E731
            with pytest.raises(dask_bacc.ClientClosedError, match="client was closed") as info:
                call()
            assert isinstance(info.value, RuntimeError)
            closing.join(timeout=60)
            _go_on.set()
    finally:
        _go_on.set()


@pytest.mark.slow
@gen_cluster(client=False, nthreads=[("127.0.0.1", 1)] * 6, timeout=60)
async def test_closing_an_asynchronous_client_mid_job_raises_the_same_error(s, *workers):
    from distributed import Client

    _started.clear()
    _go_on.clear()
    c = await Client(s.address, asynchronous=True, set_as_default=False)
    try:
        running = asyncio.ensure_future(dask_bacc.map_coded(held, X, n_blocks=3, client=c))
        await until(_started.is_set, "an eval to start")
        await c.close()
        with pytest.raises(dask_bacc.ClientClosedError, match="client was closed"):
            await asyncio.wait_for(running, 30)
    finally:
        _go_on.set()
        await c.close()


# -- CodedData.wait on its own client (issue 28 item 6) ------------------------------------
@pytest.mark.slow
def test_coded_data_wait_uses_its_own_client_whatever_the_default():
    """``distributed.wait`` waits on the default client: with none it raised "No clients
    found", with another (asynchronous) one it could deadlock."""
    from cluster_helpers import checked_local_cluster
    from distributed import Client

    with checked_local_cluster(n_workers=4, threads_per_worker=1) as lc:
        with Client(lc, set_as_default=False) as c:
            with dask_bacc.encode(X, n_blocks=2, client=c) as coded:
                assert coded.wait() is None
                assert all(share.status == "finished" for share in coded.shares)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4, timeout=60)
async def test_coded_data_wait_with_an_asynchronous_client_is_awaited(c, s, *workers):
    """It returned None at once (the wait's coroutine dropped), shares still pending."""
    coded = await dask_bacc.encode(X, n_blocks=2, client=c)
    await coded.wait()
    assert all(share.status == "finished" for share in coded.shares)
    await coded.release()
