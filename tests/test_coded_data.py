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
from cluster_helpers import gen_cluster, idle, until
from distributed import Nanny, get_worker

import dask_bacc
from dask_bacc.codes import BerrutCode
from dask_bacc.runtime import job as job_module
from dask_bacc.runtime.worker import stale_evals
from dask_bacc.testing import assert_decodes_reference, assert_no_bacc_tasks, gate_stragglers

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
    # the backup codes keep the blocks as they are: no N to choose
    with pytest.raises(ValueError, match="n_coded does not apply"):
        dask_bacc.encode(X, code="speculative", n_coded=8, client=object())
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


# -- issue 24 item 3: the shares are read-only ----------------------------------------------
FOUR = [("127.0.0.1", 1)] * 4


def inplace_double(block):
    """An f that changes its block in place (as ``b *= 2`` in a user's function)."""
    block *= 2
    return block


def writeable(block):
    """1.0 where the eval's share accepts writes, 0.0 where it is read-only."""
    return np.full(block.shape, float(block.flags.writeable))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["numpy", "dask"])
@pytest.mark.parametrize("code", ["repetition", "berrut"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_an_in_place_f_raises_and_leaves_the_shares_intact(c, s, *workers, code, kind):
    """Before: the in-place map decoded the doubled blocks (twice doubled where two copies
    were one chunk) and every later map read doubled shares, the repetition answer still
    labelled exact. Now the shares refuse the write: f raises, later maps are unchanged."""
    X0, _ = data(rows=8)
    X = X0.copy()
    blocks = {"n_blocks": 2} if kind == "numpy" else {}
    values = X if kind == "numpy" else da.from_array(X, chunks=(4, 3))
    coded = await dask_bacc.encode(values, code=code, n_coded=4, client=c, **blocks)

    async def tanh():  # every result used: the same decode each time
        out = await coded.map(np.tanh, wait=4)
        return np.asarray(await c.compute(out) if kind == "dask" else out)

    before = await tanh()
    with pytest.raises(ValueError, match="read-only"):
        out = await coded.map(inplace_double, wait=4)
        if kind == "dask":
            await c.compute(out)
    # the same decode of the same shares (summed in the order results arrived)
    np.testing.assert_allclose(await tanh(), before, rtol=1e-13, atol=1e-15)
    if code == "repetition":
        np.testing.assert_array_equal(before, np.tanh(X0))
    np.testing.assert_array_equal(X, X0)
    coded.release()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT, config={"bacc.reroute-busy-after": 0})
async def test_a_rerouted_share_stays_read_only(c, s, *workers):
    """A share evaluated on a spare worker travels there serialized: distributed keeps the
    read-only flag, so an in-place f cannot change that copy either."""
    X, _ = data()
    coded = await dask_bacc.encode(X, code="repetition", n_coded=6, n_blocks=2, client=c)
    await c.gather(coded.shares)
    slow_addr = coded.workers[0]
    slow = next(w for w in workers if w.address == slow_addr)
    # held by worker, not by index: the rerouted eval of share 0 must run
    gate = await gate_stragglers(workers=[slow.name], interruptible=False, client=c)
    first = await coded.submit(model, np.ones((3, 2)), wait=5)
    await first
    assert 0 in first.report.straggled
    job = await coded.submit(writeable, wait=6)
    flags = await job
    assert job.report.rerouted.keys() == {0} and job.report.rerouted[0] != slow_addr
    where = await c.who_has(coded.shares[:1])
    assert job.report.rerouted[0] in where[coded.shares[0].key]  # a copy was shipped there
    np.testing.assert_array_equal(flags, np.zeros_like(X))  # no eval could write, copy or not
    with pytest.raises(ValueError, match="read-only"):
        await coded.map(inplace_double, wait=6)
    np.testing.assert_array_equal(await coded.map(np.tanh, wait=6), np.tanh(X))
    await gate.release()
    await idle(workers)
    await gate.clear()
    coded.release()


def frame_arithmetic_inplace(p):
    """In-place pandas operations on the block (pandas copies on write: f's own copy)."""
    p *= 2
    p.iloc[0, 0] = 1e6
    return p


def frame_values_inplace(p):
    """A write through the block's NumPy values (``to_numpy`` gives the data itself)."""
    p.to_numpy()[...] = -1.0
    return p


def xarray_inplace(b):
    """In-place changes of an xarray block: arithmetic, then the values array."""
    b *= 2
    b.values[...] = -1.0
    return b


@pytest.mark.slow
@gen_cluster(client=True, nthreads=FOUR)
async def test_an_in_place_f_on_a_frame_leaves_the_shares_intact(c, s, *workers):
    """The dataframe adapter wraps each share in a new frame: pandas' in-place operations
    change f's copy only (copy on write), a write through its values is refused; either
    way a later map reads the shares unchanged. (``meta=``: f runs on the workers only,
    never on the client's mock block.)"""
    X, _ = data(rows=8)
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    coded = await dask_bacc.encode(df, code="repetition", n_blocks=2, n_coded=4, client=c)
    expected = df * 2
    expected.iloc[[0, 4], 0] = 1e6  # the first row of each block
    out = await coded.map(frame_arithmetic_inplace, wait=4, meta=df.iloc[:0])
    pd.testing.assert_frame_equal(out, expected)
    with pytest.raises(ValueError, match="read-only"):
        await coded.map(frame_values_inplace, wait=4, meta=df.iloc[:0])
    pd.testing.assert_frame_equal(await coded.map(lambda p: p + 1, wait=4), df + 1)
    np.testing.assert_array_equal(df.to_numpy(), X)
    coded.release()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=FOUR)
async def test_an_in_place_f_on_xarray_raises_and_leaves_the_shares_intact(c, s, *workers):
    """Before: the xarray adapter handed f a DataArray over the share itself, and the next
    map of an exact code decoded the doubled share."""
    X, _ = data(rows=8)
    arr = xr.DataArray(X, dims=("t", "x"), coords={"t": np.arange(len(X))}, name="v")
    coded = await dask_bacc.encode(arr, code="repetition", n_blocks=2, dim="t", client=c)
    with pytest.raises(ValueError, match="read-only"):
        await coded.map(xarray_inplace)
    xr.testing.assert_identical(await coded.map(lambda b: b + 1), arr + 1)
    coded.release()


# -- issue 24 item 7: release() cancels the held stragglers ----------------------------------
async def _until_no_bacc_tasks_or_hold(s):
    """No bacc- task on the scheduler, and the job's hold of its stragglers has let go (a
    failure bound only: gen_cluster's own checks would time out as well)."""
    await assert_no_bacc_tasks(s, timeout=10)
    await until(lambda: not job_module._running, "the jobs' holds to let go", deadline=10)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=FOUR)
async def test_release_cancels_the_held_stragglers(c, s, *workers):
    """Before: the eval of a straggler still running f after its call ended stayed on the
    scheduler (with its share, a dependency) until f returned: forever for a frozen one."""
    X, W = data(rows=8)
    coded = await dask_bacc.encode(X, n_coded=4, n_blocks=2, client=c)
    gate = await gate_stragglers(indices=[0], interruptible=False, client=c)
    job = await coded.submit(model, W, wait=3)
    await job
    await job._task  # the clean-up: the straggler is held
    assert 0 in job.report.straggled
    assert job.workers[0] in coded._held
    assert any(job.token in str(k) for k in s.tasks)
    coded.release()  # not awaited, as a synchronous client's caller would not
    await _until_no_bacc_tasks_or_hold(s)
    assert not coded._held
    # the straggler's thread still runs f (nothing can stop it): only the tasks are gone
    assert sum((await c.run(stale_evals)).values()) == 1
    assert await coded.release() is None  # a second one: nothing left, still awaitable
    await gate.release()
    await idle(workers)
    await gate.clear()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=FOUR)
async def test_a_call_ending_after_release_drops_its_stragglers(c, s, *workers):
    """release() while a call runs: the call ends normally, and its straggler, held by no
    CodedData any more, is cancelled at once instead of held."""
    X, W = data(rows=8)
    coded = await dask_bacc.encode(X, code="repetition", n_coded=4, n_blocks=2, client=c)
    frozen = await gate_stragglers(indices=[0], interruptible=False, client=c)
    late = await gate_stragglers(indices=[1, 2, 3], client=c)  # the call cannot end yet
    job = await coded.submit(model, W, wait=2)
    coded.release()  # not awaited: nothing was held yet
    await late.release()
    np.testing.assert_array_equal(await job, model(X, W))
    await job._task
    assert 0 in job.report.straggled
    await _until_no_bacc_tasks_or_hold(s)
    assert sum((await c.run(stale_evals)).values()) == 1  # still frozen in f
    await frozen.release()
    await idle(workers)
    await frozen.clear()
    await late.clear()
