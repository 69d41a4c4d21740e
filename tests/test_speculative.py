"""Speculative backup tasks behind the same API (code="speculative")."""

from __future__ import annotations

import asyncio
import sys

import cloudpickle
import dask
import numpy as np
import pytest
from cluster_helpers import gen_cluster
from distributed import get_worker

import dask_bacc
from dask_bacc.runtime.speculative import Speculation
from dask_bacc.testing import assert_exact, gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SIX = [("127.0.0.1", 1)] * 6


def fails_on(x, bad):
    if str(get_worker().name) in bad:
        raise OSError("disk on fire")
    return np.tanh(x)


def test_rules():
    spark = Speculation.spark()
    assert (spark.multiplier, spark.quantile, spark.min_runtime) == (3.0, 0.9, 0.1)
    assert spark.threshold(10, [1.0] * 8) is None  # 8 < floor(0.9 * 10) finished
    assert spark.threshold(10, [1.0] * 9) == 3.0
    assert spark.threshold(10, [0.01] * 9) == 0.1  # min_runtime
    assert spark.threshold(1, []) is None
    cubed = Speculation.cubed()
    assert cubed.threshold(9, [1.0] * 8) is None  # fewer than 10 tasks: never
    assert cubed.threshold(10, [1.0] * 4) is None  # not half done
    assert cubed.threshold(10, [1.0, 2.0, 3.0, 4.0, 5.0]) == 9.0
    with pytest.raises(ValueError, match="quantile"):
        Speculation(quantile=-0.1)


def test_rule_from_options_and_config():
    assert Speculation.from_options({}) == Speculation.spark()
    assert Speculation.from_options({"rule": "cubed"}).min_tasks == 10
    assert Speculation.from_options({"multiplier": 1.5}).multiplier == 1.5
    with dask.config.set({"bacc.speculative.min-runtime": "2s", "bacc.speculative.rule": "cubed"}):
        rule = Speculation.from_options({})
    assert (rule.rule, rule.min_runtime) == ("cubed", 2.0)
    with pytest.raises(ValueError, match="spark' or 'cubed"):
        Speculation.from_options({"rule": "hadoop"})
    with pytest.raises(TypeError, match="unknown speculative option"):
        Speculation.from_options({"multipler": 2})


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_exact_and_no_backup_when_nothing_is_slow(c, s, *workers):
    X = np.random.default_rng(0).standard_normal((16, 3))
    # nothing here runs anywhere near a minute: no task is slow, so no backup (durations
    # count from submission, so a short min_runtime could fire on a loaded machine)
    job = await dask_bacc.submit_coded(
        np.tanh, X, code="speculative", n_blocks=4, client=c, code_options={"min_runtime": 60.0}
    )
    out = await job
    np.testing.assert_array_equal(out, np.tanh(X))
    rep = job.report
    assert rep.backups == [] and rep.N == 4 and rep.cancelled == 0
    assert rep.code["name"] == "speculative" and rep.code["rule"] == "spark"


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_backup_for_gated_task_and_loser_cancelled(c, s, *workers):
    X = np.random.default_rng(1).uniform(0, 1, (8, 2))
    # block 0's first copy (coded task 0) is held until released, whatever the job does
    gate = await gate_stragglers(indices=[0], interruptible=False, client=c)
    job = await dask_bacc.submit_coded(
        np.tanh, X, code="speculative", n_blocks=4, client=c, code_options={"min_runtime": 0.0}
    )
    out = await job
    rep = job.report
    assert rep.backups == [4]  # the backup of block 0
    assert rep.workers[4] != rep.workers[0]
    assert 4 in rep.returned and 0 not in rep.returned
    assert 0 in rep.straggled and rep.cancelled == 1
    (slow,) = [w for w in workers if w.address == rep.workers[0]]
    assert slow.state.executing_count == 1  # the loser is still blocked: never waited for
    assert_exact(out, np.tanh, X, rtol=0, atol=0)
    while (f"bacc-eval-{job.token}", 0) in s.tasks:
        await asyncio.sleep(0.01)  # the losing copy was cancelled
    await gate.release()
    await gate.clear()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_failed_task_is_backed_up_at_once(c, s, *workers):
    """Four workers, four blocks: every worker runs a primary; one fails, another backs up."""
    X = np.random.default_rng(2).standard_normal((8, 2))
    bad = workers[1]
    with dask.config.set({"bacc.on-error": "erase"}):  # a failing worker, not f's error
        job = await dask_bacc.submit_coded(
            fails_on,
            X,
            {str(bad.name)},
            code="speculative",
            n_blocks=4,
            client=c,
            code_options={"min_runtime": 3600.0},  # speculation never fires: the failure
        )
    out = await job
    rep = job.report
    (j,) = [i for i in range(4) if rep.workers[i] == bad.address]
    assert "OSError: disk on fire" in rep.failed[j]
    assert rep.backups == [4 + j]
    np.testing.assert_array_equal(out, np.tanh(X))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_speculative_rejects_n_coded_and_wait(c, s, *workers):
    X = np.ones((8, 2))
    with pytest.raises(ValueError, match="do not apply"):
        await dask_bacc.submit_coded(
            np.tanh, X, code="speculative", n_blocks=4, n_coded=6, client=c
        )
    with pytest.raises(ValueError, match="do not apply"):
        await dask_bacc.submit_coded(np.tanh, X, code="speculative", n_blocks=4, wait=3, client=c)
    assert not s.tasks
