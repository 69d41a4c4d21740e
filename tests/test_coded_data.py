"""dask_bacc.encode / CodedData: encode once, map many times."""

from __future__ import annotations

import asyncio
import sys
import time

import cloudpickle
import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cluster_helpers import gen_cluster, idle
from distributed import Nanny, get_worker

import dask_bacc
from dask_bacc.codes import BerrutCode
from dask_bacc.runtime.worker import stale_evals
from dask_bacc.testing import assert_decodes_reference, gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
K, N = 4, 8


def model(block, weights):
    return np.tanh(block @ weights)


def cooperative(block, weights, slow_names):
    """model(); on the slow workers, loop until the job says it no longer needs us."""
    if str(get_worker().name) in slow_names:
        while not dask_bacc.cancelled():
            time.sleep(0.005)
    return model(block, weights)


def data(rows=4 * K):
    rng = np.random.default_rng(11)
    return rng.standard_normal((rows, 3)), rng.standard_normal((3, 2))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_map_equals_map_coded_under_the_same_stragglers(c, s, *workers):
    X, W = data()
    slow_idx = [1, 6]  # the same coded tasks straggle in both jobs, wherever they run
    async with gate_stragglers(indices=slow_idx, client=c):
        coded = await dask_bacc.encode(X, n_coded=N, n_blocks=K, client=c, code="berrut")
        assert coded.code.K == K and coded.code.N == N
        job = await coded.submit(model, W, wait=N - len(slow_idx))
        out = await job
        assert sorted(job.report.straggled) == slow_idx
        await idle(workers)
        direct = await dask_bacc.map_coded(
            model, X, W, n_blocks=K, n_coded=N, wait=N - len(slow_idx), client=c, code="berrut"
        )
    np.testing.assert_allclose(out, direct, rtol=1e-12, atol=1e-12)
    assert_decodes_reference(out, job.report, model, X, args=(W,))
    # a second step with other weights reuses the same shares (no new encode tasks)
    encodes = {k for k in s.tasks if "bacc-encode" in str(k) and coded.token not in str(k)}
    out2 = await coded.map(model, 2 * W, wait=N)
    assert (
        not {k for k in s.tasks if "bacc-encode" in str(k) and coded.token not in str(k)} - encodes
    )
    code = BerrutCode(K, N)
    shares = code.encode(np.stack(np.split(X, K)))
    expected = code.decode(np.stack([model(sh, 2 * W) for sh in shares]), list(range(N)))
    np.testing.assert_allclose(out2, np.concatenate(expected), rtol=1e-12, atol=1e-12)
    coded.release()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_every_input_kind_round_trips_with_an_exact_code(c, s, *workers):
    X, W = data()
    inputs = {
        "numpy": (X, {"n_blocks": K}, lambda out: out, model(X, W)),
        "dask": (da.from_array(X, chunks=(4, 3)), {}, np.asarray, model(X, W)),
    }
    for name, (values, options, convert, expected) in inputs.items():
        coded = await dask_bacc.encode(values, code="repetition", client=c, **options)
        out = await coded.map(model, W)
        if name == "dask":
            out = await c.compute(out)
        np.testing.assert_array_equal(convert(out), expected)
        coded.release()

    df = pd.DataFrame(X, columns=["a", "b", "c"])
    coded = await dask_bacc.encode(df, code="repetition", n_blocks=K, client=c)
    frame_out = await coded.map(lambda p: p * 2)
    pd.testing.assert_frame_equal(frame_out, df * 2)
    coded.release()

    arr = xr.DataArray(X, dims=("t", "x"), coords={"t": np.arange(len(X))}, name="v")
    coded = await dask_bacc.encode(arr, code="repetition", n_blocks=K, dim="t", client=c)
    xr.testing.assert_identical(await coded.map(lambda b: b * 2), arr * 2)
    coded.release()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_release_frees_the_shares_on_the_cluster(c, s, *workers):
    X, W = data()
    x = da.from_array(X, chunks=(4, 3))
    with await dask_bacc.encode(x, n_coded=6, client=c) as coded:
        await c.gather(coded.shares)  # in memory, one per distinct worker
        holders = await c.who_has(coded.shares)
        assert len({h[0] for h in holders.values()}) == 6
        assert any("bacc-encode" in str(k) for k in s.tasks)
        await c.compute(await coded.map(model, W))
    while s.tasks:  # the scheduler forgets shares and chunks (gen_cluster times out if not)
        await asyncio.sleep(0.01)
    with pytest.raises(RuntimeError, match="released"):
        coded.submit(model, W)


@pytest.mark.slow
@gen_cluster(
    client=True, nthreads=EIGHT, config={"bacc.reroute-busy-after": 0}
)  # any age: no wall-clock in the test
async def test_stragglers_do_not_pile_up_across_calls(c, s, *workers):
    """A straggler of step t still holds its worker's only thread in step t+1: its share
    is evaluated on a spare worker instead of queueing there."""
    X, W = data()
    coded = await dask_bacc.encode(X, n_coded=6, n_blocks=K, client=c)  # 2 spare workers
    await c.gather(coded.shares)
    slow_addr = coded.workers[0]
    slow = next(w for w in workers if w.address == slow_addr)
    # the slow worker's task cannot be stopped: it holds the thread across calls
    gate = await gate_stragglers(workers=[slow.name], interruptible=False, client=c)
    first = await coded.submit(model, W, wait=5)
    await first
    assert 0 in first.report.straggled
    assert slow.state.executing_count == 1  # still held
    for _ in range(3):
        job = await coded.submit(model, W, wait=5)
        await job
        # only the blocked share moves (the workers share one process: the busy check
        # must still tell them apart)
        assert set(job.report.rerouted) == {0}
        assert job.report.rerouted[0] != slow_addr
        assert 0 not in job.report.failed
        # nothing of this job ever waits on the blocked worker
        queued = [k for k in slow.state.tasks if "bacc-eval" in str(k)]
        assert all(first.token in str(k) for k in queued), queued
    stale = await c.run(stale_evals)
    assert stale == {w.address: int(w.address == slow_addr) for w in workers}
    await gate.release()
    while slow.state.executing_count:
        await asyncio.sleep(0.01)
    await gate.clear()
    assert await c.run(stale_evals, workers=[slow_addr]) == {slow_addr: 0}
    job = await coded.submit(model, W)
    await job
    assert job.report.rerouted == {}  # the worker is free again: its share is used in place
    coded.release()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_cancelled_lets_a_long_func_stop_early(c, s, *workers):
    X, W = data()
    coded = await dask_bacc.encode(X, n_coded=6, n_blocks=K, client=c)
    await c.gather(coded.shares)
    slow_addr = coded.workers[0]
    slow = next(w for w in workers if w.address == slow_addr)
    job = await coded.submit(cooperative, W, {str(slow.name)}, wait=5)
    await job
    assert 0 in job.report.straggled
    while slow.state.executing_count:  # f sees cancelled() and returns by itself
        await asyncio.sleep(0.01)
    assert dask_bacc.cancelled() is False  # outside a coded task
    coded.release()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_large_arguments_are_sent_once_per_call(c, s, *workers):
    X, _ = data()
    coded = await dask_bacc.encode(X, n_coded=6, n_blocks=K, client=c)
    gate = await gate_stragglers(indices=range(6), client=c)
    big = np.random.default_rng(0).standard_normal((3, 20_000))  # 480 kB
    job = await coded.submit(model, big, wait=6)
    evals: list = []
    while len(evals) < 6:  # submissions reach the scheduler in batches
        await asyncio.sleep(0.01)
        evals = [ts for k, ts in s.tasks.items() if f"bacc-eval-{job.token}" in str(k)]
    args_keys = [k for k in s.tasks if str(k).startswith(f"bacc-args-{job.token}")]
    assert len(evals) == 6 and len(args_keys) == 1
    assert all(s.tasks[args_keys[0]] in ts.dependencies for ts in evals)
    await gate.release()
    np.testing.assert_allclose((await job).shape, (len(X), 20_000))
    await gate.clear()
    # small arguments stay inline (no extra hop)
    job = await coded.submit(model, np.ones((3, 2)))
    await job
    assert not any(str(k).startswith(f"bacc-args-{job.token}") for k in s.tasks)
    coded.release()


@pytest.mark.slow
@gen_cluster(client=True, Worker=Nanny, nthreads=[("127.0.0.1", 1)] * 5, timeout=120)
async def test_a_share_lost_with_its_worker_is_recomputed(c, s, *nannies):
    X, W = data(rows=8)
    coded = await dask_bacc.encode(X, code="repetition", n_coded=3, n_blocks=2, client=c)
    await c.gather(coded.shares)
    victim_addr = coded.workers[0]
    victim = next(n for n in nannies if n.worker_address == victim_addr)
    await victim.kill()
    while victim_addr in s.workers:
        await asyncio.sleep(0.01)
    out = await coded.map(model, W)
    np.testing.assert_array_equal(out, model(X, W))
    holders = await c.who_has(coded.shares[:1])
    (where,) = holders.values()
    assert where and victim_addr not in where  # recomputed from its lineage elsewhere
    coded.release()


def test_validation():
    X, _ = data()
    with pytest.raises(ValueError, match="speculative"):
        dask_bacc.encode(X, code="speculative", client=object())
    with pytest.raises(TypeError, match="n_coded"):
        dask_bacc.encode(X, n_coded=2.5, client=object())


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_map_validation_submits_nothing(c, s, *workers):
    X, W = data()
    coded = await dask_bacc.encode(X, n_coded=6, n_blocks=K, client=c)
    await c.gather(coded.shares)
    before = set(s.tasks)
    for call, error in [
        (lambda: coded.submit("tanh"), TypeError),
        (lambda: coded.submit(model, W, wait=7), ValueError),
        (lambda: coded.submit(model, W, combine="glue"), ValueError),
        (lambda: coded.submit(model, W, meta=pd.DataFrame()), ValueError),
        (lambda: coded.submit(model, W, timeout=-1), ValueError),
    ]:
        with pytest.raises(error):
            job = call()
            if asyncio.iscoroutine(job):
                await job
    assert set(s.tasks) == before
    with dask.config.set({"bacc.reroute-busy": False}):
        np.testing.assert_allclose((await coded.map(model, W, wait=6)).shape, (16, 2))
    coded.release()
