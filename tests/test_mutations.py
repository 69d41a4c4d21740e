"""Tests that kill mutations of core logic a hand-made mutation run found the suite missed
(issue 13 item 8). Each test's docstring names the mutation it kills; each was checked by
applying the mutation by hand and seeing the test fail."""

from __future__ import annotations

import asyncio
import inspect
import sys

import cloudpickle
import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cluster_helpers import blocker, gen_cluster, names_at, until
from distributed import Event, get_worker

import dask_bacc
from dask_bacc import FirstK
from dask_bacc.codes import LagrangeCode, RepetitionCode
from dask_bacc.testing import assert_decodes_reference, assert_no_bacc_tasks

# gen_cluster workers unpickle the task functions: ship this module's by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
FOUR = [("127.0.0.1", 1)] * 4


# -- 1. the grace period ----------------------------------------------------------------
def gated_or_fail(x, late, failing, late_event, fail_event):
    """tanh(x); workers named in ``late`` first wait for ``late_event``, those in
    ``failing`` wait for ``fail_event`` and then raise."""
    name = str(get_worker().name)
    if name in late:
        Event(late_event).wait()
    if name in failing:
        Event(fail_event).wait()
        raise ZeroDivisionError("injected failure after the grace-period result")
    return np.tanh(x)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_result_inside_the_grace_window_is_decoded(c, s, *workers):
    """Kills: the Decider ignoring grace (``runtime/decide.py`` ``_after_grace`` treating
    ``grace`` as 0, e.g. ``grace = 0``): the job would decode at the 6th result, before the
    late one is released, and the late result would be missing from ``report.returned``.

    FirstK(6, grace=1e4) with two gated tasks: once six results are in (the target is met),
    one gated task is released inside the (huge) grace window; the other then fails, so
    nothing is pending and the job decodes at once, without waiting out the window.
    """
    X = np.random.default_rng(11).standard_normal((16, 2))
    late_names, placement = await names_at(c, (3,), 8)
    fail_names, _ = await names_at(c, (6,), 8)
    late, fail = Event("grace-late", client=c), Event("grace-fail", client=c)
    with dask.config.set({"bacc.on-error": "erase"}):  # the failure is a worker's
        job = await dask_bacc.submit_coded(
            gated_or_fail,
            X,
            late_names,
            fail_names,
            late.name,
            fail.name,
            n_blocks=4,
            n_coded=8,
            wait=FirstK(6, grace=1e4),
            code="berrut",
            client=c,
        )
    assert job.report.workers == placement
    while job.decider.target_met_at is None and not job.done():
        await asyncio.sleep(0.01)
    await late.set()  # inside the grace window: 1e4 x the time the target took
    while 3 not in job.decider.usable and not job.done():
        await asyncio.sleep(0.01)
    await fail.set()  # nothing left pending: decode now
    out = await asyncio.wait_for(job, 30)
    rep = job.report
    assert rep.trigger == "wait"
    assert 3 in rep.returned, rep
    assert sorted(rep.returned) == [0, 1, 2, 3, 4, 5, 7]
    assert list(rep.failed) == [6] and "ZeroDivisionError" in rep.failed[6]
    assert rep.late == []
    assert_decodes_reference(out, rep, np.tanh, X)
    await assert_no_bacc_tasks(s, job.token)


# -- 2. queued stragglers are cancelled -------------------------------------------------
def recorded_tanh(x):
    """tanh(x), recording on the worker that func ran there (read back in-process)."""
    w = get_worker()
    w.__dict__.setdefault("bacc_test_calls", []).append(x.shape)
    return np.tanh(x)


@pytest.mark.slow
@gen_cluster(
    client=True,
    nthreads=FOUR,
    config={"distributed.scheduler.work-stealing": False},
)
async def test_queued_straggler_is_cancelled_and_never_runs_func(c, s, *workers):
    """Kills: skipping the cancel in ``runtime/job.py`` ``_clean_up`` (the
    ``client.cancel(cancel, ...)`` call): the straggler that is not running ``func`` must
    be cancelled on the scheduler, not merely forgotten when its future is dropped.

    Setup (no clock): shares kept on the cluster (``dask_bacc.encode``); one worker has its
    only thread busy with a gated task of another computation, so the share placed there
    is not computed and its eval (strictly pinned there, depending on it) waits on the
    scheduler: a straggler that is not processing. The job decodes from the other three.
    Then that eval must be cancelled (a ``cancel-key`` stimulus in its story), gone from
    the scheduler while the worker is still blocked, and ``func`` must never run for it
    after the blocker is released. (Under the mutation the eval stays ``waiting`` on the
    scheduler: the job's ``as_completed`` still tracks its pending future.)
    """
    X = np.random.default_rng(12).standard_normal((8, 2))
    busy = workers[0]
    hold = Event("queued-hold", client=c)
    block = c.submit(blocker, hold.name, workers=[busy.address], key="queued-blocker")
    await until(lambda: busy.state.executing_count == 1, "the blocker to start")
    data = dask_bacc.encode(X, code="repetition", n_blocks=2, n_coded=4, client=c)
    data = await data if inspect.isawaitable(data) else data
    q = data.workers.index(busy.address)  # the share queued behind the blocker
    job = await data.submit(recorded_tanh, wait=3)
    token = job.token
    evalq = (f"bacc-eval-{token}", q)
    assert job.report.workers[q] == busy.address
    out = await asyncio.wait_for(job, 30)
    np.testing.assert_array_equal(out, np.tanh(X))
    rep = job.report
    assert sorted(rep.returned) == sorted(set(range(4)) - {q})
    # still out at decode: a straggler if it is its block's plain share (0 or 1), else a
    # copy that was not needed (its block's other copy returned)
    assert (rep.straggled, rep.not_needed) == (([q], []) if q < 2 else ([], [q]))
    # the straggler leaves the scheduler while its worker is still blocked: it never ran
    await until(lambda: evalq not in s.tasks, "the queued straggler to leave the scheduler")
    stimuli = [t[-2] for t in s.story(evalq)]
    assert any(str(st).startswith("cancel-key") for st in stimuli), s.story(evalq)
    assert busy.state.executing_count == 1  # still the blocker
    await hold.set()
    assert await block == 0
    # its share is computed now that the thread is free; func never runs for the job
    await until(lambda: s.tasks[data.shares[q].key].state == "memory", "the share")
    await until(lambda: not busy.state.executing_count and not busy.state.ready, "idle")
    assert busy.__dict__.get("bacc_test_calls", []) == []
    assert evalq not in s.tasks
    data.release()
    await assert_no_bacc_tasks(s, token)
    await assert_no_bacc_tasks(s, data.token)


# -- 3. repetition decodes from the lowest-index copy -------------------------------------
def test_repetition_decodes_from_the_lowest_index_copy():
    """Kills: ``RepetitionCode._sources`` preferring the highest-index returned copy
    (dropping the ``[::-1]`` in ``codes/repetition.py``, or any reversal of the preference).

    Two copies of each block carry different values; the decode must use the copy with
    the lowest coded index among those returned, whatever order they are listed in.
    """
    code = RepetitionCode(2, 6)  # task i copies block i % 2: copies {0,2,4} and {1,3,5}
    results = np.arange(6, dtype=float)[:, None] * np.ones((6, 3))  # result i is all i
    for returned in ([0, 1, 2, 3, 4, 5], [5, 4, 3, 2, 1, 0], [4, 3, 2, 5], [3, 2, 5, 4, 1]):
        rows = results[returned]
        lowest = [min(i for i in returned if i % 2 == j) for j in range(2)]
        out = code.decode(rows, returned)
        np.testing.assert_array_equal(out[:, 0], lowest)
        D = code.decoding_matrix(returned)
        np.testing.assert_array_equal(D @ rows, out)  # the cluster decode's matrix too
        assert sorted(np.flatnonzero(D[j])[0] for j in range(2)) == sorted(
            returned.index(i) for i in lowest
        )


def offset_by_worker(x, offsets):
    """x + the offset of the worker it runs on (copies of a block then differ)."""
    return x + offsets[get_worker().address]


@pytest.mark.slow
@pytest.mark.parametrize("decode_limit", ["256 MiB", 0], ids=["client", "cluster"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_repetition_job_uses_the_lowest_index_copy(c, s, *workers, decode_limit):
    """Kills: the same reversal of ``RepetitionCode._sources``, through a job decoding on
    the client and one decoding on the cluster: with every copy returned, block j comes
    from coded task j (its lowest-index copy), not task j + K."""
    import dask

    X = np.arange(8.0).reshape(4, 2)
    _, placement = await names_at(c, (), 4)
    offsets = {addr: 100.0 * i for i, addr in enumerate(placement)}  # task i adds 100 i
    with dask.config.set({"bacc.client-decode-limit": decode_limit}):
        job = await dask_bacc.submit_coded(
            offset_by_worker,
            X,
            offsets,
            n_blocks=2,
            n_coded=4,
            wait=4,
            code="repetition",
            client=c,
        )
        out = await asyncio.wait_for(job, 30)
    assert job.report.workers == placement and sorted(job.report.returned) == [0, 1, 2, 3]
    np.testing.assert_array_equal(out, X + np.array([0.0, 0, 100, 100])[:, None])
    await assert_no_bacc_tasks(s, job.token)


# -- 4. xarray: every coordinate along the dimension is restored --------------------------
def make_labelled():
    rng = np.random.default_rng(13)
    n = 12
    return xr.DataArray(
        rng.standard_normal((n, 3)),
        dims=("time", "x"),
        coords={
            "time": pd.date_range("2021-01-01", periods=n, freq="h"),
            "x": [1, 2, 3],
            "station_height": (("time", "x"), rng.uniform(0, 9, (n, 3))),  # 2-D along time
            "hour": ("time", np.arange(n) % 24),  # a second 1-D coordinate along time
        },
        name="v",
        attrs={"units": "m"},
    )


def double(b):
    return 2.0 * b


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dataarray", "dataset"])
@pytest.mark.parametrize("chunked", [False, True], ids=["memory", "dask"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_xarray_restores_every_coordinate_along_dim(c, s, *workers, kind, chunked):
    """Kills: restoring only the first coordinate along ``dim`` (``collections/xarray.py``
    ``_labelled``: ``keep[:1]``, or ``with_dim[:1]`` where ``dim_coords`` is built): the 2-D
    coordinate along (time, x) and the second 1-D coordinate along time must come back,
    identical to the plain (uncoded) result."""
    arr = make_labelled()
    obj = arr if kind == "dataarray" else arr.to_dataset().assign(w=arr.isel(x=0) * 3.0)
    expected = double(obj)
    if chunked:
        obj = obj.chunk({"time": 3})
    kwargs = {} if chunked else {"n_blocks": 4}
    out = await dask_bacc.map_coded(
        double, obj, dim="time", code="repetition", n_coded=8, client=c, **kwargs
    )
    if chunked:
        out = await c.compute(out)
    assert set(out.coords) == {"time", "x", "station_height", "hour"}
    xr.testing.assert_identical(out, expected)


# -- 5. Lagrange's recovery threshold ---------------------------------------------------
@pytest.mark.parametrize("K", [2, 3, 5])
@pytest.mark.parametrize("degree", [1, 2, 3])
def test_lagrange_min_results_is_the_recovery_threshold(K, degree):
    """Kills: any change to ``LagrangeCode.min_results`` (``degree * (K - 1) + 1``), e.g.
    an off-by-one ``degree * (K - 1)`` or ``degree * K``: the threshold is checked directly,
    decoding from it is exact for a polynomial of that degree, and from one result fewer
    it is an InsufficientResults (never a silent wrong answer)."""
    R = degree * (K - 1) + 1
    N = R + 2
    code = LagrangeCode(K, N, degree=degree)
    assert code.min_results == R
    rng = np.random.default_rng(K * 10 + degree)
    X = rng.standard_normal((K, 3))
    coded = code.encode(X)
    results = coded**degree
    returned = list(rng.permutation(N)[:R])
    assert code.can_decode(returned)
    np.testing.assert_allclose(
        code.decode(results[returned], returned), X**degree, rtol=1e-7, atol=1e-9
    )
    fewer = returned[:-1]
    assert not code.can_decode(fewer)
    with pytest.raises(dask_bacc.InsufficientResults):
        code.decode(results[fewer], fewer)
    with pytest.raises(dask_bacc.InsufficientResults):
        code.decoding_matrix(fewer)
    with pytest.raises(ValueError, match=rf"needs N >= {R} "):
        LagrangeCode(K, R - 1, degree=degree)
