"""Straggler injection: models, reproducible draws, interruptible delays on a cluster."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from cluster_helpers import checked_local_cluster, gen_cluster

import dask_bacc
from dask_bacc.runtime.worker import STRAGGLER_PLUGIN_NAME
from dask_bacc.stragglers import (
    Bimodal,
    ShiftedExponential,
    SlowWorkers,
    StragglerPlugin,
    clear_stragglers,
    inject_stragglers,
    task_seconds,
)


def test_model_validation():
    with pytest.raises(ValueError, match="p must lie"):
        Bimodal(p=1.5)
    with pytest.raises(ValueError, match="factor"):
        Bimodal(p=0.1, factor=0.5)
    with pytest.raises(ValueError, match="delay"):
        SlowWorkers(names=["a"], delay=-1)
    with pytest.raises(ValueError, match="scale"):
        ShiftedExponential(scale=float("nan"))
    with pytest.raises(TypeError, match="StragglerModel"):
        StragglerPlugin(model="slow")


def test_model_draws():
    rng = np.random.default_rng(0)
    slow = SlowWorkers(names=[1, "b"], delay=2.0, factor=3.0)
    assert slow.draw(rng, "1", elapsed=0.5) == 2.0 + 2 * 0.5
    assert slow.draw(rng, "b", elapsed=0.0) == 2.0
    assert slow.draw(rng, "2", elapsed=0.5) == 0.0
    assert Bimodal(p=0.0, delay=5).draw(rng, "w", 1.0) == 0.0
    assert Bimodal(p=1.0, delay=5, factor=2).draw(rng, "w", 1.0) == 6.0
    draws = [ShiftedExponential(scale=0.5, shift=1.0).draw(rng, "w", 0) for _ in range(2000)]
    assert min(draws) >= 1.0
    assert abs(np.mean(draws) - 1.5) < 0.1  # mean of shift + Exp(scale)


def test_plugin_draws_are_seeded_and_reproducible():
    model = Bimodal(p=0.3, delay=1.0)
    a, b, other = (
        StragglerPlugin(model, seed=7),
        StragglerPlugin(model, seed=7),
        StragglerPlugin(model, seed=8),
    )

    def pattern(plugin, seq):
        return [plugin.delay(index=i, seq=seq, elapsed=0, worker_name="w") for i in range(200)]

    assert pattern(a, 0) == pattern(b, 0)
    assert pattern(a, 0) != pattern(a, 1)  # a new job draws anew
    assert pattern(a, 0) != pattern(other, 0)
    hits = np.mean([d > 0 for seq in range(5) for d in pattern(a, seq)])
    assert 0.2 < hits < 0.4
    assert a.log[-1][:2] == (4, 199)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 8)
async def test_injected_stragglers_are_cancelled_and_interrupted(c, s, *workers):
    slow = workers[:2]
    await inject_stragglers(SlowWorkers(names=[w.name for w in slow], delay=3600), client=c)
    assert all(STRAGGLER_PLUGIN_NAME in w.plugins for w in workers)
    X = np.random.default_rng(0).standard_normal((16, 2))
    job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=4, n_coded=8, wait=6, client=c)
    await job
    rep = job.report
    slow_idx = {i for i, a in enumerate(rep.workers) if a in {w.address for w in slow}}
    assert set(rep.straggled) == slow_idx
    assert rep.cancelled == 2
    # the hour-long injected delays end because the job decoded: the workers become idle
    while any(w.state.executing_count for w in slow):
        await asyncio.sleep(0.01)
    logged = [entry for w in slow for entry in w.plugins[STRAGGLER_PLUGIN_NAME].log]
    assert {entry[3] for entry in logged} == {3600.0}
    # compute spent: every eval recorded the thread time it occupied, the interrupted
    # stragglers included (far less than the hour they drew)
    spent = await task_seconds(client=c)
    assert sorted(index for _, index, _, _ in spent) == list(range(8))
    assert all(0 <= seconds < 3600 for *_, seconds in spent)
    await clear_stragglers(client=c)
    assert not any(STRAGGLER_PLUGIN_NAME in w.plugins for w in workers)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2)
async def test_plain_task_draws_from_the_same_plugin(c, s, a, b):
    from dask_bacc.stragglers import plain_task

    await inject_stragglers(SlowWorkers(names=[a.name], delay=0.0, factor=1.0), client=c)
    out = await c.submit(plain_task, np.arange(3.0), 10**9, 2, np.square, workers=[a.address])
    np.testing.assert_array_equal(out, [0.0, 1.0, 4.0])
    seq, index, name, delay = a.plugins[STRAGGLER_PLUGIN_NAME].log[-1]
    assert (seq, index, name, delay) == (10**9, 2, str(a.name), 0.0)
    # without a plugin the task just runs
    await clear_stragglers(client=c)
    assert await c.submit(plain_task, 2.0, 0, 0, np.sqrt, workers=[b.address]) == np.sqrt(2.0)


@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 2)
async def test_injected_stragglers_leave_at_the_end_of_a_with_block(c, s, a, b):
    """inject_stragglers stayed installed silently for every later job: as a context
    manager it removes itself on exit, also when the block raises."""
    model = SlowWorkers(names=[a.name], delay=0.0)
    async with inject_stragglers(model, client=c) as injection:
        assert all(STRAGGLER_PLUGIN_NAME in w.plugins for w in (a, b))
        assert injection.client is c
    assert not any(STRAGGLER_PLUGIN_NAME in w.plugins for w in (a, b))
    with pytest.raises(KeyError):
        async with inject_stragglers(model, client=c):
            raise KeyError("inside")
    assert not any(STRAGGLER_PLUGIN_NAME in w.plugins for w in (a, b))


def test_injected_stragglers_with_a_synchronous_client():
    from distributed import Client

    with checked_local_cluster(n_workers=2, threads_per_worker=1) as lc, Client(lc) as c:
        with inject_stragglers(SlowWorkers(names=["0"], delay=0.0)):
            on = c.run(lambda dask_worker: STRAGGLER_PLUGIN_NAME in dask_worker.plugins)
            assert all(on.values())
        off = c.run(lambda dask_worker: STRAGGLER_PLUGIN_NAME in dask_worker.plugins)
        assert not any(off.values())
