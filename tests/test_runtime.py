"""Coded jobs on a real (in-process) distributed cluster."""

from __future__ import annotations

import asyncio
import concurrent.futures
import sys

import cloudpickle
import dask
import dask.array as da
import numpy as np
import pytest
from cluster_helpers import gen_cluster, idle, names_at
from distributed import Nanny, get_worker

import dask_bacc
from dask_bacc.codes import get_code
from dask_bacc.runtime.worker import state
from dask_bacc.testing import assert_decodes_reference, assert_exact, gate_stragglers, tasks_on

# worker processes (Nanny tests) cannot import this module: ship its functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8


def bad_on(x, bad, kind):
    """tanh(x), except on the workers named in ``bad``: raise, NaN, or a wrong shape."""
    if str(get_worker().name) in bad:
        if kind == "raise":
            raise ZeroDivisionError("injected failure")
        if kind == "nan":
            return np.full(x.shape, np.nan)
        if kind == "shape":
            return np.tanh(x)[:-1]
        if kind == "object":
            return np.array([object()])
    return np.tanh(x)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_first_k_of_n_with_gated_stragglers(c, s, *workers):
    X = np.random.default_rng(0).standard_normal((40, 3))
    slow = workers[:2]
    # the two stragglers cannot be stopped (like a func that never polls cancelled())
    gate = await gate_stragglers(workers=[w.name for w in slow], interruptible=False, client=c)
    job = await dask_bacc.submit_coded(
        np.tanh, X, n_blocks=4, code="systematic-spline", n_coded=8, wait=6, client=c
    )
    out = await job
    rep = job.report
    # decoded while the two stragglers are still held
    assert all(w.state.executing_count == 1 for w in slow)
    assert rep.status == "finished" and rep.trigger == "wait"
    slow_idx = tasks_on(rep, slow)
    assert len(slow_idx) == 2
    # still out at decode: a systematic task held is a straggler; a parity task held is
    # one too unless every block's own data returned (then it was not needed)
    assert set(rep.straggled) | set(rep.not_needed) == slow_idx
    assert slow_idx & set(rep.plain_shares) <= set(rep.straggled)
    given = {job.code.data_rows()[i] for i in rep.returned if i in job.code.data_rows()}
    assert (set(rep.not_needed) == set()) == (len(given) < 4)
    assert rep.cancelled == 2
    assert sorted(rep.returned) == sorted(set(range(8)) - slow_idx)
    assert rep.failed == {}
    assert len(set(rep.workers)) == 8  # one coded task per distinct worker
    assert_decodes_reference(out, rep, np.tanh, X)
    # every worker is told the job is over (right after the result is handed over)
    while not all(state(w).is_done(job.token) for w in workers):
        await asyncio.sleep(0.01)
    # the stragglers still hold their threads: the scheduler keeps them
    # processing on their workers, so new work is not sent to those busy threads
    running = {(f"bacc-eval-{job.token}", i) for i in slow_idx}
    while {
        k
        for k, ts in s.tasks.items()
        if k[0] == f"bacc-eval-{job.token}" and ts.state != "released"
    } != running:
        await asyncio.sleep(0.01)
    assert all(s.tasks[k].state == "processing" for k in running)
    busy = {w.address for w in slow}
    assert {s.tasks[k].processing_on.address for k in running} == busy
    plain = c.submit(np.square, 3.0, key="plain-after-job")
    assert await plain == 9.0
    assert {ws.address for ws in s.tasks["plain-after-job"].who_has}.isdisjoint(busy)
    await gate.release()
    # once they return, their results are dropped: the scheduler holds no task of this job
    while any(job.token in str(k) for k in s.tasks):
        await asyncio.sleep(0.01)
    await idle(workers)
    await gate.clear()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_keys_and_strict_pinning(c, s, *workers):
    X = np.ones((8, 2))
    gate = await gate_stragglers(indices=range(8), client=c)
    job = await dask_bacc.submit_coded(
        np.tanh, X, n_blocks=4, n_coded=8, wait=8, code="berrut", client=c
    )
    while len([k for k in s.tasks if str(k).startswith(f"('bacc-eval-{job.token}'")]) < 8:
        await asyncio.sleep(0.01)
    evals = {k: ts for k, ts in s.tasks.items() if k[0] == f"bacc-eval-{job.token}"}
    assert sorted(k[1] for k in evals) == list(range(8))
    # NumPy input: each share travels in its eval task's spec, with no task of its own
    assert {ts.key for ts in s.tasks.values() if job.token in str(ts.key)} == set(evals)
    for (_, i), ts in evals.items():
        assert ts.worker_restrictions == {job.report.workers[i]}
        assert not ts.loose_restrictions
        assert not ts.dependencies
    assert not job.done()
    await gate.release()
    out = await job
    await gate.clear()
    assert out.shape == (8, 2)
    assert sorted(job.report.returned) == list(range(8))  # wait=8: every result decoded
    assert_decodes_reference(out, job.report, np.tanh, X)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_eval_that_raises_is_an_erasure(c, s, *workers):
    """A failing worker's exception is an erasure with bacc.on-error "erase" (by default
    f's exceptions are the user's errors: tests/test_trust.py)."""
    X = np.random.default_rng(1).standard_normal((24, 2))
    bad = {str(workers[3].name)}
    with dask.config.set({"bacc.on-error": "erase"}):
        job = await dask_bacc.submit_coded(
            bad_on,
            X,
            bad,
            "raise",
            n_blocks=4,
            n_coded=8,
            wait=8,
            client=c,
            code="berrut",
        )
    out = await job
    rep = job.report
    (i_bad,) = tasks_on(rep, [workers[3]])
    assert list(rep.failed) == [i_bad]
    assert "ZeroDivisionError: injected failure" in rep.failed[i_bad]
    assert i_bad not in rep.returned and len(rep.returned) == 7
    assert rep.trigger == "exhausted"
    assert_decodes_reference(out, rep, np.tanh, X)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kind", "reason"),
    [("nan", "NaN/inf"), ("shape", "differs from"), ("object", "real numeric")],
)
@gen_cluster(client=True, nthreads=EIGHT)
async def test_invalid_results_are_erasures(c, s, *workers, kind, reason):
    X = np.random.default_rng(2).standard_normal((16, 3))
    bad = {str(workers[5].name)}
    # wait for all 8: the bad result is certainly seen, then written off
    job = await dask_bacc.submit_coded(
        bad_on, X, bad, kind, n_blocks=4, n_coded=8, wait=8, client=c, code="berrut"
    )
    out = await job
    rep = job.report
    (i_bad,) = tasks_on(rep, [workers[5]])
    assert reason in rep.failed[i_bad]
    assert i_bad not in rep.returned
    assert np.isfinite(out).all()
    assert_decodes_reference(out, rep, np.tanh, X)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_all_evals_fail_raises_insufficient_results(c, s, *workers):
    X = np.ones((8, 2))
    names = {str(w.name) for w in workers}
    with dask.config.set({"bacc.on-error": "erase"}):  # every worker fails: erasures
        job = await dask_bacc.submit_coded(bad_on, X, names, "raise", n_blocks=4, client=c)
    with pytest.raises(dask_bacc.InsufficientResults, match=r"0 usable result.*ZeroDivisionError"):
        await job
    assert job.done() and job.report.status == "error"
    assert len(job.report.failed) == job.report.N


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_worker_closed_mid_job(c, s, *workers):
    X = np.random.default_rng(3).standard_normal((16, 2))
    leaving = workers[7]
    gate = await gate_stragglers(workers=[leaving.name], client=c)
    # wait for all 8: the job can only finish by writing off the closed worker's task
    job = await dask_bacc.submit_coded(
        np.tanh, X, n_blocks=4, n_coded=8, wait=8, client=c, code="berrut"
    )
    while leaving.state.executing_count == 0:
        await asyncio.sleep(0.01)
    await leaving.close(executor_wait=False)
    out = await job
    rep = job.report
    (i_gone,) = tasks_on(rep, [leaving])
    assert "left" in rep.failed[i_gone]
    assert rep.trigger == "exhausted" and len(rep.returned) == 7
    assert_decodes_reference(out, rep, np.tanh, X)
    await gate.release()
    await gate.clear()


@pytest.mark.slow
@gen_cluster(client=True, Worker=Nanny, nthreads=[("127.0.0.1", 1)] * 4, timeout=120)
async def test_worker_killed_mid_job_and_all_workers_gone(c, s, *nannies):
    X = np.random.default_rng(4).standard_normal((8, 2))
    info = await c.scheduler.identity(n_workers=-1)
    name_of = {a: str(w["name"]) for a, w in info["workers"].items()}
    victim = nannies[0]
    await gate_stragglers(workers=[name_of[victim.worker_address]], client=c)  # never released
    job = await dask_bacc.submit_coded(
        np.tanh, X, n_blocks=2, n_coded=4, wait=4, client=c, code="berrut"
    )
    await asyncio.sleep(0)  # let the task start before the kill (not a timing assumption)
    await victim.kill()
    out = await job
    rep = job.report
    assert rep.trigger == "exhausted"
    assert len(rep.failed) == 1 and "left" in next(iter(rep.failed.values()))
    assert_decodes_reference(out, rep, np.tanh, X)

    # now every coded task blocks, wherever it runs (the victim's nanny restarted its
    # worker, which may register between any identity call and the job's own placement
    # query), and every worker dies: an error, never a hang
    await gate_stragglers(indices=range(3), client=c)  # never released
    job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=2, n_coded=3, client=c, code="berrut")
    await asyncio.gather(*(n.kill() for n in nannies))  # nannies[0] restarted its worker
    with pytest.raises(dask_bacc.InsufficientResults, match="left before returning"):
        await job


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_timeout_decodes_from_what_arrived(c, s, *workers):
    X = np.random.default_rng(5).standard_normal((16, 2))
    slow = workers[:2]
    async with gate_stragglers(workers=[w.name for w in slow], client=c):
        job = await dask_bacc.submit_coded(
            np.tanh, X, n_blocks=4, n_coded=8, wait=8, timeout=5, client=c, code="berrut"
        )
        out = await job
    rep = job.report
    assert rep.trigger == "timeout"
    assert set(rep.straggled) == tasks_on(rep, slow)
    assert_decodes_reference(out, rep, np.tanh, X)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_cancel_job(c, s, *workers):
    X = np.ones((8, 2))
    async with gate_stragglers(workers=[w.name for w in workers], client=c):
        job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=4, client=c)
        await job.cancel()
        assert job.done() and job.report.status == "cancelled"
        with pytest.raises(concurrent.futures.CancelledError):
            await job
        while any(job.token in str(k) for k in s.tasks):
            await asyncio.sleep(0.01)


class _DeafTask:
    """A job loop whose Task.cancel() is lost, as asyncio.wait_for can lose it on Python
    < 3.12 when the cancellation lands as a result arrives (CPython gh-86296)."""

    def __init__(self, task):
        self.task = task

    def cancel(self, msg=None):
        return False

    def __await__(self):
        return self.task.__await__()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_cancel_job_when_the_task_cancellation_is_lost(c, s, *workers):
    X = np.ones((8, 2))
    async with gate_stragglers(workers=[w.name for w in workers], client=c):
        job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=4, client=c)
        job._task = _DeafTask(job._task)
        await asyncio.wait_for(job.cancel(), timeout=30)  # the loop sees the request itself
        assert job.done() and job.report.status == "cancelled"
        with pytest.raises(concurrent.futures.CancelledError):
            await job
    await idle(workers)


@pytest.mark.slow
@pytest.mark.parametrize("code", ["repetition", "uncoded", "lagrange"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_exact_codes_are_exact(c, s, *workers, code):
    X = np.random.default_rng(6).standard_normal((12, 3))
    options = {"degree": 2} if code == "lagrange" else {}
    job = await dask_bacc.submit_coded(
        np.square, X, code=code, n_blocks=3, client=c, code_options=options
    )
    out = await job
    np.testing.assert_allclose(out, X**2, rtol=1e-9, atol=1e-12)
    code_ = get_code(**job.report.code)
    # Lagrange's default wait adds one spare result that checks the decode
    assert job.report.wait_target == code_.min_results + code_.check_spare
    assert job.report.error_estimate == 0.0 and job.report.estimate_method == "exact"


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_round_trips_numpy_list_dask(c, s, *workers):
    rng = np.random.default_rng(7)
    X = rng.standard_normal((16, 4))
    # numpy in, numpy out; rows kept -> concatenated
    out = await dask_bacc.map_coded(np.tanh, X, n_blocks=4, client=c, code="repetition")
    assert isinstance(out, np.ndarray) and out.shape == X.shape
    np.testing.assert_array_equal(out, np.tanh(X))
    # reduction -> stacked: one output per block
    out = await dask_bacc.map_coded(np.sum, X, n_blocks=4, client=c, code="repetition")
    assert out.shape == (4,)
    np.testing.assert_allclose(out, X.reshape(4, 4, 4).sum(axis=(1, 2)))
    X3 = X[:, :3]
    out = await dask_bacc.map_coded(np.mean, X3, n_blocks=4, client=c, axis=0, code="uncoded")
    assert out.shape == (4, 3)  # (K, columns): per-block column means, stacked
    np.testing.assert_allclose(out, X3.reshape(4, 4, 3).mean(axis=1))
    # a square block is ambiguous under "auto" (rows kept?): combine= decides
    out = await dask_bacc.map_coded(
        np.mean, X, n_blocks=4, client=c, axis=0, code="uncoded", combine="stack"
    )
    assert out.shape == (4, 4)
    np.testing.assert_allclose(out, X.reshape(4, 4, 4).mean(axis=1))
    # list in, list out
    blocks = [rng.standard_normal((3, 2)) for _ in range(3)]
    out = await dask_bacc.map_coded(np.exp, blocks, client=c, code="repetition")
    assert isinstance(out, list) and len(out) == 3
    for b, o in zip(blocks, out, strict=True):
        np.testing.assert_allclose(o, np.exp(b))
    # dask array in (chunked on both axes), dask array out backed by decode futures
    x = da.from_array(X, chunks=(4, 2))
    y = await dask_bacc.map_coded(np.tanh, x, client=c, code="repetition")
    assert isinstance(y, da.Array) and y.shape == X.shape and y.chunks[0] == (4, 4, 4, 4)
    np.testing.assert_array_equal(await c.compute(y), np.tanh(X))
    # Berrut on a dask array equals the reference decode of its own returned set
    job = await dask_bacc.submit_coded(
        np.tanh, x, client=c, code="systematic-spline", n_coded=8, wait=6
    )
    y = await job
    assert isinstance(y, da.Array)
    assert_decodes_reference(await c.compute(y), job.report, np.tanh, X)
    s_out = await dask_bacc.map_coded(np.sum, x, client=c, code="uncoded")
    assert s_out.shape == (4,)
    np.testing.assert_allclose(await c.compute(s_out), X.reshape(4, 4, 4).sum(axis=(1, 2)))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_args_and_kwargs_are_broadcast(c, s, *workers):
    X = np.random.default_rng(8).standard_normal((8, 3))
    W = np.arange(6.0).reshape(3, 2)

    def affine(block, weights, *, bias):
        return block @ weights + bias

    out = await dask_bacc.map_coded(affine, X, W, bias=1.5, n_blocks=4, code="lagrange", client=c)
    np.testing.assert_allclose(out, X @ W + 1.5, rtol=1e-9)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_systematic_decodes_as_soon_as_exact(c, s, *workers):
    """All K systematic tasks back: exact, so no need to wait for the other results."""
    X = np.random.default_rng(9).standard_normal((12, 2))
    code = get_code("systematic-berrut", 3, 8)
    systematic = set(code.systematic_workers.tolist())
    _, placement = await names_at(c, (), 8)
    # every non-systematic coded task blocks
    async with gate_stragglers(indices=set(range(8)) - systematic, client=c):
        # the default wait (6 of 8); an explicit wait= is kept to (tests/test_adaptive.py)
        job = await dask_bacc.submit_coded(np.tanh, X, code=code, client=c)
        assert job.report.workers == placement
        out = await job
    assert set(job.report.returned) == systematic and job.report.trigger == "exact"
    assert_exact(out, np.tanh, X, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_default_wait_keeps_collecting_for_a_grace_period(c, s, *workers):
    X = np.random.default_rng(10).standard_normal((16, 2))
    slow = workers[:2]
    # berrut: the systematic spline decodes at once, without the grace period,
    # when its K systematic tasks are in, which depends on where the gated workers' tasks
    # are (the test failed about one run in three)
    async with gate_stragglers(workers=[w.name for w in slow], client=c):
        job = await dask_bacc.submit_coded(
            np.tanh, X, n_blocks=4, n_coded=8, code="berrut", client=c
        )
        await job
    rep = job.report
    assert rep.wait_target == 6 and rep.trigger == "wait"
    assert sorted(rep.returned) == sorted(set(range(8)) - tasks_on(rep, slow))
    # the decode waited out the grace period: 0.2 x the time the target took
    assert rep.time_to_decode >= 1.2 * rep.target_met


def test_grace_validation_and_exact_codes():
    from dask_bacc import FirstK, Fraction
    from dask_bacc.codes import BerrutCode, RepetitionCode

    with pytest.raises(ValueError, match="grace"):
        FirstK(3, grace=-1)
    policy = Fraction(0.5, grace=0.3)
    assert policy.grace_for(BerrutCode(2, 4)) == 0.3
    assert policy.grace_for(RepetitionCode(2, 4)) == 0.0  # exact: nothing to gain
    assert FirstK(3).grace_for(BerrutCode(2, 4)) == 0.0


def test_a_registration_cut_short_by_a_closing_client_logs_nothing():
    """Closing the client while the worker plugin's registration still waits for a worker
    is not a failure of the plugin: no "registering the worker plugin failed" line; any
    other error is still logged."""
    import logging

    from distributed.comm.core import CommClosedError

    from dask_bacc.runtime.job import _registered, logger

    async def failed(exc):
        future = asyncio.get_running_loop().create_future()
        future.set_exception(exc)
        return future

    class Lines(logging.Handler):
        def __init__(self):
            super().__init__(logging.WARNING)
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    lines = Lines()
    logger.addHandler(lines)
    try:
        _registered(asyncio.run(failed(CommClosedError("in <TCP (closed)>"))))
        assert lines.lines == []
        _registered(asyncio.run(failed(RuntimeError("the plugin's setup raised"))))
        assert len(lines.lines) == 1 and "registering the worker plugin failed" in lines.lines[0]
    finally:
        logger.removeHandler(lines)
