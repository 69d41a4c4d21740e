"""Regression tests for the chaos and fuzz run (issue 13): exact means checked, no leaks."""

from __future__ import annotations

import asyncio
import gc
import sys

import cloudpickle
import dask
import numpy as np
import pytest
from cluster_helpers import checked_local_cluster, gen_cluster, names_at

import dask_bacc
from dask_bacc.codes import LagrangeCode
from dask_bacc.codes.base import decode_residual
from dask_bacc.testing import assert_no_bacc_tasks, gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
X = np.random.default_rng(0).standard_normal((36, 3))


def quadratic(b):
    return b * b + 2 * b


def test_check_matrix_vanishes_exactly_on_polynomials_of_the_degree():
    blocks = np.stack(np.split(X, 4))
    code = LagrangeCode(4, 12, degree=2)
    ok = np.stack([quadratic(s) for s in code.encode(blocks)])
    bad = np.stack([np.tanh(s) for s in code.encode(blocks)])
    for returned in ([0, 2, 3, 5, 6, 8, 9, 11], list(range(12))):
        assert decode_residual(code, ok[returned], returned) < 1e-13
        assert decode_residual(code, bad[returned], returned) > 1e-3
    assert code.check_matrix(list(range(7))) is None  # the threshold: anything fits
    assert decode_residual(code, ok[:7], list(range(7))) is None


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_lagrange_with_the_wrong_degree_raises_instead_of_claiming_exact(c, s, *workers):
    """The chaos run's wrong answer labelled exact: f of degree 2 under a degree-1 code.
    The default wait collects one spare result, which contradicts the decode."""
    job = await dask_bacc.submit_coded(quadratic, X, n_blocks=4, code="lagrange", client=c)
    assert job.report.wait_target == 5  # threshold 4 plus one spare
    with pytest.raises(dask_bacc.InexactDecode, match="polynomial of degree <= 1") as info:
        await job
    assert info.value.residual > 1e-3 and info.value.report is job.report
    assert job.report.status == "error"
    # forced onto the cluster decode: the decode task computes the same check
    with dask.config.set({"bacc.client-decode-limit": 0}):
        job = await dask_bacc.submit_coded(quadratic, X, n_blocks=4, code="lagrange", client=c)
        with pytest.raises(dask_bacc.InexactDecode):
            await job


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_lagrange_checked_or_said_unchecked(c, s, *workers):
    for limit in ("256 MiB", 0):  # client decode, cluster decode
        with dask.config.set({"bacc.client-decode-limit": limit}):
            job = await dask_bacc.submit_coded(
                quadratic, X, n_blocks=4, code="lagrange", code_options={"degree": 2}, client=c
            )
            out = await job
        rep = job.report
        np.testing.assert_allclose(out, quadratic(X), rtol=1e-9, atol=1e-12)
        assert rep.estimate_method == "exact" and rep.error_estimate == 0.0
        assert rep.check_residual is not None and rep.check_residual < 1e-12
    # N at the threshold: nothing to check with, and the report says so
    job = await dask_bacc.submit_coded(
        quadratic, X, n_blocks=4, code="lagrange", code_options={"degree": 2}, n_coded=7, client=c
    )
    out = await job
    rep = job.report
    np.testing.assert_allclose(out, quadratic(X), rtol=1e-9, atol=1e-12)
    assert rep.estimate_method == "exact-unchecked" and rep.error_estimate is None
    assert "exact if f is a polynomial" in repr(rep)


def divide_by_zero(b):
    return 1 / 0 * b


def nan_block(b):
    return np.full(b.shape, np.nan)


def no_array(b):
    return None


def text(b):
    return "x"


@pytest.mark.slow
@pytest.mark.parametrize("func", [divide_by_zero, nan_block, no_array, text])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_a_failed_job_releases_its_tasks_without_a_gc(c, s, *workers, func):
    """The fuzz run's leak: a job whose func raises or returns something undecodable kept
    its erred eval tasks on the scheduler until gc.collect() broke a job <-> exception
    (traceback frames) cycle."""
    # func's own exception on its blocks is raised as in plain Dask (issue 23), and that
    # path must release the job's tasks as well
    raised = {divide_by_zero: ZeroDivisionError, nan_block: ValueError}.get(
        func, dask_bacc.InsufficientResults
    )
    # NaN results are plain Dask's answer under a code that copies blocks; under one that
    # mixes them, NaN on a block's own data is refused (no mix of blocks can give it)
    code = {"code": "systematic-spline", "n_coded": 8} if func is nan_block else {}
    gc.disable()
    try:
        with pytest.raises(raised) as info:
            await dask_bacc.map_coded(
                func, np.ones((36, 3)), n_blocks=4, client=c, **{"code": "repetition", **code}
            )
        await assert_no_bacc_tasks(s)
    finally:
        gc.enable()
    if func is divide_by_zero:
        assert any("block" in note for note in info.value.__notes__)
        return
    # the reason is named, not only its kind ("8 x InvalidResult")
    why = {
        nan_block: "func returned NaN or inf on block",
        no_array: "8 x InvalidResult: result has dtype object",
        text: "8 x InvalidResult: result has dtype <U1",
    }[func]
    assert why in str(info.value), str(info.value)


def sleepy(b, slow_name):
    """tanh(b), three seconds late on the worker named ``slow_name`` (every worker: "*")."""
    import time

    from distributed import get_worker

    if slow_name in ("*", str(get_worker().name)):
        time.sleep(3)
    return np.tanh(b)


@pytest.mark.slow
def test_two_clients_in_one_process_leak_nothing():
    """The chaos run's leak: a job on a client that is not the default client, with a
    straggler still running at the end, left its eval tasks on the scheduler forever (the
    clean-up bound an asyncio object to the default client's loop and died)."""
    import time

    from distributed import Client

    with checked_local_cluster(n_workers=8, threads_per_worker=1) as lc:
        with Client(lc.scheduler_address) as c1, Client(lc.scheduler_address) as c2:
            assert c2 is dask_bacc.runtime.submit.default_client() and c1 is not c2
            slow = next(iter(lc.workers.values())).name
            for _ in range(3):
                job = dask_bacc.submit_coded(
                    sleepy, X, str(slow), n_blocks=4, n_coded=8, wait=6, code="berrut", client=c1
                )
                job.result()
            deadline = time.monotonic() + 15
            while any("bacc-" in str(k) for k in lc.scheduler.tasks):
                assert time.monotonic() < deadline, list(lc.scheduler.tasks)
                time.sleep(0.1)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_spans_of_finished_jobs_do_not_accumulate(c, s, *workers):
    """The chaos run's memory growth: one distributed span per job, never removed (and one
    more for the scatter of its in-memory input). Beyond bacc.diagnostics.history
    finished jobs, spans older than span-ttl are dropped."""
    ext = s.extensions["spans"]
    settings = {"bacc.diagnostics.history": 3, "bacc.diagnostics.span-ttl": "0s"}
    settings["bacc.data-inline-limit"] = 0  # scattered input: its span is pruned too
    with dask.config.set(settings):
        seen: set[str] = set()
        for _ in range(12):
            await dask_bacc.map_coded(np.tanh, X, n_blocks=4, n_coded=8, code="berrut", client=c)
            seen.update(sp.id for sp in ext.spans.values() if sp.name[0] == "bacc")
        await assert_no_bacc_tasks(s)
        await dask_bacc.map_coded(np.tanh, X, n_blocks=4, n_coded=8, code="berrut", client=c)
    roots = [sp for sp in ext.root_spans if sp.name == ("bacc",)]
    assert len(roots) <= 3 + 1  # the history, and the newest job
    # the ("default",) span distributed opens for each job's scattered input blocks too
    scatters = [sp for sp in ext.root_spans if sp.name == ("default",)]
    assert 1 <= len(scatters) <= 3 + 1
    assert len(ext.spans_search_by_tag["bacc"]) == 2 * len(roots)
    # the pruned ones are gone from the map of span ids too: nothing grows per job
    kept = [sp for sp in ext.spans.values() if sp.name[0] == "bacc"]
    assert len(kept) == 2 * len(roots)
    gone = [i for i in seen if i not in ext.spans]
    assert len(gone) >= 2 * (12 - 4)
    # a late heartbeat naming a pruned span drops its metrics instead of failing
    ws = next(iter(s.workers.values()))
    ext.heartbeat(ws, {("execute", gone[0], "bacc-eval", "thread-cpu", "seconds"): 1.0})
    assert gone[0] not in ext.spans
    # the dashboard's span views still work on what is left; the workers are all alive
    assert ext.merge_by_tags("bacc").done
    assert len(s.workers) == 8


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_spans_of_finished_layer_jobs_do_not_accumulate(c, s, *workers):
    """Layer jobs (coded(), coding(), dataframes, map_coded in waves) open a span each,
    as coded jobs do, and have no clean-up round trip of their own: they prune too."""
    ext = s.extensions["spans"]
    settings = {"bacc.diagnostics.history": 3, "bacc.diagnostics.span-ttl": "0s"}
    with dask.config.set(settings):
        for _ in range(10):
            out = await dask_bacc.map_coded(np.tanh, X, n_blocks=12, code="hedged", client=c)
            np.testing.assert_array_equal(out, np.tanh(X))
        await assert_no_bacc_tasks(s)
        await dask_bacc.map_coded(np.tanh, X, n_blocks=12, code="hedged", client=c)
    roots = [sp for sp in ext.root_spans if sp.name == ("bacc",)]
    while len(roots) > 3 + 1:  # the last job's pruning request is answered without a reply
        await asyncio.sleep(0.01)
        roots = [sp for sp in ext.root_spans if sp.name == ("bacc",)]
    assert 1 <= len(roots) <= 3 + 1


def positives(b):
    return b[b[:, 0] > 0]


@pytest.mark.slow
@pytest.mark.parametrize("code", ["berrut", "systematic-spline", "repetition"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_a_value_dependent_output_shape_is_an_error_not_a_silent_answer(c, s, *workers, code):
    """The chaos run's silent approximate answers: f = b[b[:, 0] > 0] gave a decoded output
    of a made-up shape (from the few results that happened to agree)."""
    data = np.random.default_rng(2).standard_normal((400, 3))
    for limit in ("256 MiB", 0):  # client decode, cluster decode
        with dask.config.set({"bacc.client-decode-limit": limit}):
            with pytest.raises(ValueError, match=r"output (shape|length) depends on the values"):
                await dask_bacc.map_coded(positives, data, n_blocks=4, code=code, client=c)
    await assert_no_bacc_tasks(s)


@pytest.mark.slow
def test_timeout_bounds_reaching_the_scheduler_and_a_closed_client_is_named():
    import time

    from distributed import Client, LocalCluster

    with checked_local_cluster(n_workers=8, threads_per_worker=1) as lc:
        c = Client(lc)
        # every task 3 s late: the client is closed before the job can finish (with no
        # delay the job could finish first, and nothing would raise)
        job = dask_bacc.submit_coded(sleepy, X, "*", n_blocks=4, client=c)
        c.close()
        with pytest.raises(RuntimeError, match="client was closed before it finished"):
            job.result()
    gone = LocalCluster(n_workers=1, processes=False, dashboard_address=None)
    c2 = Client(gone.scheduler_address)
    gone.close()
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="could not be reached"):
        dask_bacc.map_coded(np.tanh, X, n_blocks=2, client=c2, timeout=2)
    assert time.monotonic() - start < 10  # not distributed's 30 s connect timeout
    c2.close()


def test_estimates_and_screening_of_huge_values_do_not_overflow():
    """Data near 1e200 gave overflow RuntimeWarnings (errors under this suite's filters)
    and an estimate of None, though the decode was fine."""
    from dask_bacc.codes import BerrutCode, detect_inconsistent, estimate_error

    code = BerrutCode(4, 12)
    blocks = np.stack(np.split(X, 4))
    results = np.tanh(code.encode(blocks))
    returned = list(range(11))
    small = estimate_error(code, results[returned], returned)
    huge = estimate_error(code, 1e200 * results[returned], returned)
    assert np.isfinite(huge.overall) and np.isclose(huge.overall, small.overall)
    assert detect_inconsistent(code, 1e200 * results[returned], returned).flagged == []


def test_coded_rejects_what_map_coded_rejects_when_called():
    """The chaos run's late validation: coded(ddf.map_partitions(f)) on a frame with a
    categorical column returned without complaint and failed only inside the driver task."""
    import dask.dataframe as dd
    import pandas as pd

    df = pd.DataFrame({"a": np.arange(40.0), "k": pd.Categorical(["x", "y"] * 20)})
    ddf = dd.from_pandas(df, npartitions=4)
    with pytest.raises(TypeError, match="non-numeric column"):
        dask_bacc.coded(ddf.map_partitions(lambda p: p.assign(a=p.a * 2)), code="systematic-spline")


# no memory limit: the workers' memory monitor would un-pause them at once
@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT, worker_kwargs={"memory_limit": 0})
async def test_paused_workers_are_waited_for_within_the_timeout(c, s, *workers):
    """The chaos run's paused cluster: with every worker paused (memory pressure) a job
    raised 'no running workers' at once, where plain Dask waits."""
    from distributed.core import Status

    for w in workers:
        w.status = Status.paused
    while any(ws.status != Status.paused for ws in s.workers.values()):
        await asyncio.sleep(0.01)
    with pytest.raises(TimeoutError, match="every worker stayed paused"):
        await dask_bacc.map_coded(np.tanh, X, n_blocks=4, client=c, timeout=1)
    job = asyncio.ensure_future(
        dask_bacc.map_coded(np.tanh, X, n_blocks=4, code="repetition", client=c, timeout=30)
    )
    await asyncio.sleep(0.5)
    assert not job.done()  # waiting, as plain Dask would
    for w in workers:
        w.status = Status.running
    np.testing.assert_array_equal(await job, np.tanh(X))


def identity(d):
    return d


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_exact_codes_keep_each_columns_dtype(c, s, *workers):
    """The chaos run's dtypes: with mixed int, float and bool columns, exact codes returned
    every column as float64, where plain Dask keeps int64 and bool."""
    import dask.dataframe as dd
    import pandas as pd

    df = pd.DataFrame({"i": np.arange(40), "f": np.linspace(0, 1, 40), "b": np.arange(40) % 3 == 0})
    for data in (df, dd.from_pandas(df, npartitions=4)):
        for code in ("repetition", "uncoded", "speculative"):
            out = await dask_bacc.map_coded(
                identity, data, code=code, client=c, **({"n_blocks": 4} if data is df else {})
            )
            if not isinstance(out, pd.DataFrame):
                assert out.dtypes.to_dict() == df.dtypes.to_dict()  # the lazy meta too
                out = await c.compute(out)
            pd.testing.assert_frame_equal(out, df)
    # approximate codes: floats, never truncated
    out = await dask_bacc.map_coded(identity, df, code="berrut", n_blocks=4, client=c)
    assert (out.dtypes == np.float64).all()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_a_held_straggler_whose_worker_dies_is_released(c, s, *workers):
    """The soak's leak: a straggler still running at decode is held until it ends; when
    its worker died meanwhile, the strictly pinned task sat in no-worker for good and the
    hold (and the scheduler's task) never went away."""
    _, placement = await names_at(c, (), 8)
    victim = next(w for w in workers if w.address == placement[5])
    # task 5 cannot be stopped: it keeps its thread after the decode
    gate = await gate_stragglers(indices=[5], interruptible=False, client=c)
    job = await dask_bacc.submit_coded(
        np.tanh, X, n_blocks=4, n_coded=8, wait=7, code="berrut", client=c
    )
    await job
    assert 5 in job.report.straggled
    while victim.state.executing_count == 0:  # still running: held, not cancelled
        await asyncio.sleep(0.01)
    await victim.close(executor_wait=False)
    await assert_no_bacc_tasks(s, timeout=10)
    await gate.release()
    await gate.clear()


def fails_on(b, names):
    from distributed import get_worker

    if str(get_worker().name) in names:
        raise RuntimeError("this worker fails")
    return np.tanh(b)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_an_approximate_answer_without_an_estimate_warns(c, s, *workers):
    """The soak's 'approximate answers without an estimate': Berrut decoding from fewer
    results than an estimate needs (two of N=4 fail, K=2) passed its answer on with
    report.error_estimate None and no word; now it warns and the report keeps the warning."""
    bad, _ = await names_at(c, (1, 2), 4)
    with (
        pytest.warns(dask_bacc.ApproximationWarning, match="could not be estimated") as w,
        dask.config.set({"bacc.on-error": "erase"}),  # failing workers, not f's error
    ):
        job = await dask_bacc.submit_coded(
            fails_on, X, bad, n_blocks=2, n_coded=4, code="berrut", client=c
        )
        await job
    rep = job.report
    assert rep.error_estimate is None and rep.estimate_method == "unknown"
    assert sorted(rep.returned) == [0, 3] and rep.trigger == "exhausted"
    assert rep.warnings == [f"ApproximationWarning: {w[0].message}"]


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_a_task_cancelled_by_the_scheduler_is_not_a_user_cancel(c, s, *workers, monkeypatch):
    """The full soak's one unexpected error: a job no one cancelled raised
    "coded job ... was cancelled", because a future of the job was cancelled by the
    scheduler (distributed's FutureCancelledError is an asyncio.CancelledError) and the
    job took it for a cancel of its own loop. It is an error naming the reason now."""
    from distributed.client import FutureCancelledError

    from dask_bacc.runtime.job import CodedJob

    async def cancelled_by_the_scheduler(self):
        raise FutureCancelledError(("bacc-eval-x", 0), "lost dependencies")

    monkeypatch.setattr(CodedJob, "_loop", cancelled_by_the_scheduler)
    job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=4, code="berrut", client=c)
    with pytest.raises(RuntimeError, match=r"cancelled by the scheduler.*lost dependencies") as e:
        await job
    assert isinstance(e.value.__cause__, FutureCancelledError)
    assert job.report.status == "error" and "lost dependencies" in job.report.error
    await assert_no_bacc_tasks(s)
