""" "Exact" means exact (issue 24, items 1, 4, 5 and 6): an answer the transform altered,
a value-dependent output shape, a masked result and a timeout that never fires are
refused instead of decoded into a wrong answer labelled exact.

Each test here failed before the change it guards (named in docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import sys
import warnings

import cloudpickle
import dask
import numpy as np
import pytest
from cluster_helpers import gen_cluster, until

import dask_bacc
from dask_bacc.codes import get_code
from dask_bacc.testing import gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FOUR = [("127.0.0.1", 1)] * 4


def positives(b):
    return b[b[:, 0] > 0]


def shape_data() -> np.ndarray:
    """K=2 blocks whose four coded shares (systematic spline, N=4) keep three different
    numbers of rows under :func:`positives`: a block's own share agrees with a mixed one,
    so two results can agree while the others are written off one by one."""
    code = get_code("systematic-spline", 2, 4)
    for seed in range(100):
        X = np.random.default_rng(seed).standard_normal((16, 3))
        shares = code.shares(X.reshape(2, 8, 3))
        rows = [int((s[:, 0] > 0).sum()) for s in shares]
        if len(set(rows)) == 3:
            return X
    raise AssertionError("no seed gives three different shapes")


# item 4: every arrival order, one result a burst (each odd shape written off alone
# was the hole: the job decoded from the few that happened to agree)
ORDERS = list(itertools.permutations(range(4)))


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["1 GiB", 0])  # client decode, cluster decode
@gen_cluster(client=True, nthreads=FOUR, timeout=240)
async def test_a_value_dependent_shape_fails_whatever_the_arrival_order(c, s, *workers, limit):
    X = shape_data()
    with dask.config.set({"bacc.client-decode-limit": limit}):
        for order in ORDERS:
            gates = [await gate_stragglers(indices=[i], client=c) for i in range(4)]
            job = await dask_bacc.submit_coded(positives, X, n_blocks=2, n_coded=4, client=c)
            d = job.decider
            try:
                for i in order:  # one result at a time, each seen before the next lands
                    if job.done():
                        break
                    await gates[i].release()
                    await until(
                        lambda i=i, job=job, d=d: job.done() or i in d.arrival or i in d.failed,
                        f"result {i} of order {order}",
                    )
                with pytest.raises(ValueError, match="output shape depends on the values"):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        out = await asyncio.wait_for(job, 30)
                        raise AssertionError(f"order {order}: decoded shape {np.shape(out)}")
            finally:
                for g in gates:
                    await g.release()
                    await g.clear()


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -1.0, 0.0, "nan"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_a_timeout_that_cannot_fire_is_refused(c, s, *workers, timeout):
    X = np.ones((8, 2))
    with pytest.raises(
        ValueError, match=r"timeout must be a (positive, finite )?number of seconds"
    ):
        await dask_bacc.submit_coded(np.tanh, X, n_blocks=2, timeout=timeout, client=c)
    with dask.config.set({"bacc.timeout": timeout}):
        with pytest.raises(ValueError, match=r"bacc\.timeout must be a (positive, finite )?number"):
            await dask_bacc.submit_coded(np.tanh, X, n_blocks=2, client=c)
    data = await dask_bacc.encode(X, n_blocks=2, client=c)
    with pytest.raises(
        ValueError, match=r"timeout must be a (positive, finite )?number of seconds"
    ):
        data.submit(np.tanh, timeout=timeout)
    data.release()


@pytest.mark.parametrize("grace", [math.nan, math.inf, -1.0])
def test_a_grace_that_holds_for_ever_is_refused(grace):
    with pytest.raises(ValueError, match="grace must be a finite number"):
        dask_bacc.FirstK(2, grace=grace)


@gen_cluster(client=True, nthreads=FOUR)
async def test_a_timeout_given_as_a_duration_is_read(c, s, *workers):
    X = np.ones((8, 2))
    with dask.config.set({"bacc.timeout": "30s"}):
        job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=2, client=c)
    assert job.timeout == 30.0
    np.testing.assert_allclose(await job, np.tanh(X))


def test_result_timeout_is_checked():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=4, threads_per_worker=1, processes=False, dashboard_address=None
    )
    with cluster, Client(cluster) as c:
        job = dask_bacc.submit_coded(np.tanh, np.ones((4, 2)), n_blocks=2, client=c)
        with pytest.raises(ValueError, match="timeout must be a positive, finite number"):
            job.result(timeout=math.nan)
        np.testing.assert_allclose(job.result(timeout=30), np.tanh(np.ones((4, 2))))
