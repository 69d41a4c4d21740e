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
from dask_bacc.testing import assert_no_bacc_tasks, gate_stragglers

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


# -- item 1: the result check runs under the transform --------------------------------------
X = np.random.default_rng(3).standard_normal((16, 3))


@pytest.mark.parametrize("code", ["systematic-spline", "repetition", "berrut", "speculative"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_values_outside_the_log_transform_are_refused(c, s, *workers, code):
    """np.tanh is negative on half of X: log clipped it to tiny, and the job returned
    2.2e-308 for every negative value, labelled exact with error 0."""
    if code == "berrut":  # no share of real data: every result is written off
        with pytest.raises(dask_bacc.InsufficientResults, match="outside the domain"):
            await dask_bacc.map_coded(np.tanh, X, n_blocks=2, code=code, transform="log", client=c)
    else:
        with pytest.raises(ValueError, match=r"outside the domain of transform='log'"):
            await dask_bacc.map_coded(np.tanh, X, n_blocks=2, code=code, transform="log", client=c)
    await assert_no_bacc_tasks(s)


@gen_cluster(client=True, nthreads=FOUR)
async def test_coded_data_refuses_values_outside_the_transform(c, s, *workers):
    data = await dask_bacc.encode(X, code="repetition", n_blocks=2, client=c)
    with pytest.raises(ValueError, match="outside the domain"):
        await data.map(np.tanh, transform="log")
    np.testing.assert_allclose(await data.map(np.exp, transform="log"), np.exp(X), rtol=1e-12)
    data.release()


def relu(b):
    return np.maximum(b, 0.0)


@pytest.mark.parametrize("limit", ["1 GiB", 0])
@gen_cluster(client=True, nthreads=FOUR)
async def test_zeros_come_back_exactly_through_log(c, s, *workers, limit):
    """0 is in the domain: log clips it to log(tiny), and the inverse gives 0 back (it gave
    2.2e-308)."""
    with dask.config.set({"bacc.client-decode-limit": limit}):
        job = await dask_bacc.submit_coded(
            relu, X, n_blocks=2, code="repetition", transform="log", client=c
        )
        out = await job
    assert job.report.estimate_method == "exact"
    np.testing.assert_array_equal(out == 0, relu(X) == 0)
    np.testing.assert_allclose(out, relu(X), rtol=1e-13, atol=0)


def unnormalised(b):
    return np.exp(b)  # positive, but its rows are not probabilities


def probabilities(b):
    e = np.exp(b)
    return e / e.sum(axis=1, keepdims=True)


@gen_cluster(client=True, nthreads=FOUR)
async def test_log_probabilities_refuses_rows_that_are_not_probabilities(c, s, *workers):
    """The inverse renormalises each row: rows that do not sum to 1 came back altered,
    labelled exact."""
    with pytest.raises(ValueError, match="log-probabilities"):
        await dask_bacc.map_coded(
            unnormalised, X, n_blocks=2, code="repetition", transform="log-probabilities", client=c
        )
    job = await dask_bacc.submit_coded(
        probabilities, X, n_blocks=2, code="repetition", transform="log-probabilities", client=c
    )
    np.testing.assert_allclose(await job, probabilities(X), rtol=1e-13)
    assert job.report.estimate_method == "exact"


def positive_on_integers(b):
    """Positive on the data (integers), negative on blocks that mix them."""
    return np.where(b == np.round(b), b + 1.0, -1.0)


@gen_cluster(client=True, nthreads=FOUR)
async def test_a_mixed_share_outside_the_transform_is_a_domain_failure(c, s, *workers):
    data = np.arange(24, dtype=float).reshape(8, 3)
    # the systematic shares (1, 2) are held until the mixed ones (0, 3) have failed: the
    # exact decode from 1 and 2 would otherwise end the job before they arrive
    gate = await gate_stragglers(indices=[1, 2], client=c)
    job = await dask_bacc.submit_coded(
        positive_on_integers,
        data,
        code="systematic-spline",
        n_blocks=2,
        n_coded=4,
        wait=4,
        transform="log",
        client=c,
    )
    mixed = [(f"bacc-eval-{job.token}", i) for i in (0, 3)]
    await until(
        lambda: all(k in s.tasks and s.tasks[k].state == "memory" for k in mixed),
        "the mixed shares' results",
    )
    await gate.release()
    with pytest.warns(dask_bacc.ApproximationWarning, match="outside transform="):
        out = await job
    await gate.clear()
    assert job.report.domain_failure and job.report.estimate_method == "exact"
    np.testing.assert_allclose(out, data + 1.0, rtol=1e-13)


@gen_cluster(client=True, nthreads=FOUR)
async def test_lagrange_refuses_a_transform(c, s, *workers):
    """Lagrange decodes a polynomial f exactly; log of one is not a polynomial."""
    with pytest.raises(ValueError, match="does not apply to"):
        await dask_bacc.submit_coded(
            np.exp,
            X,
            n_blocks=2,
            code="lagrange",
            code_options={"degree": 2},
            transform="log",
            client=c,
        )


# -- item 5: array subclasses ----------------------------------------------------------------
def masked(b):
    return np.ma.masked_less(b, 0.0)


class Tagged(np.ndarray):
    """An ndarray subclass with state of its own (as units or a mask are)."""

    tag = "metres"


def tagged(b):
    return np.asarray(b).view(Tagged)


@pytest.mark.parametrize("func", [masked, tagged])
@pytest.mark.parametrize("code", ["systematic-spline", "repetition", "berrut"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_array_subclass_results_are_refused(c, s, *workers, func, code):
    """A masked array lost its mask (np.asarray in the result check): the decoded answer
    had the masked values back, with no word."""
    with pytest.raises(TypeError, match=f"func returned a .*{type(func(X)).__name__}"):
        await dask_bacc.map_coded(func, X, n_blocks=2, code=code, client=c)
    with pytest.raises(TypeError, match="plain NumPy arrays"):
        await dask_bacc.map_coded(func, X, n_blocks=2, code=code, transform="log", client=c)
    await assert_no_bacc_tasks(s)


# -- NaN and inf under the codes that copy blocks (issue 40, item 5) ------------------------
def quiet_log(block):
    """``np.log``, without the warning for negatives (NaN) and zeros (-inf)."""
    with np.errstate(all="ignore"):
        return np.log(block)


def nan_at_or_below_3(block):
    """NaN where the value is at most 3: all of block 0's own data below."""
    return np.where(block > 3, block, np.nan)


@pytest.mark.slow
@pytest.mark.parametrize("code", ["systematic-spline", "bspline"])
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 8)
async def test_nan_from_f_on_a_blocks_own_data_is_refused_not_decoded(c, s, *workers, code):
    """f's NaN on a block's own data is plain Dask's answer there, which no mix of blocks
    can give. It used to be erased like a mixed share's NaN, and the block decoded from
    the other shares as if f were finite there: 0, 1, 2, 3 where plain Dask gives NaN,
    with no warning. Every other share is held, so the real share answers first."""
    X = np.arange(16.0).reshape(8, 2)
    rows = get_code(code, 4, 6).data_rows()
    own = next(i for i, b in rows.items() if b == 0)
    gate = await gate_stragglers(indices=[i for i in range(6) if i != own], client=c)
    try:
        job = await dask_bacc.submit_coded(
            nan_at_or_below_3, X, code=code, n_blocks=4, n_coded=6, client=c
        )
        with pytest.raises(ValueError, match="NaN or inf on block 0's own data"):
            await job
    finally:
        await gate.release()
    await gate.clear()


def nan_data():
    X = np.random.default_rng(40).uniform(-1.0, 2.0, (8, 2))
    X[0, 0], X[3, 1], X[5, 0] = np.nan, np.inf, 0.0
    return X


@pytest.mark.slow
@pytest.mark.parametrize("code", ["repetition", "hedged", "speculative"])
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 8)
async def test_codes_that_copy_blocks_pass_nan_and_inf_as_plain_dask(c, s, *workers, code):
    """NaN and inf in the data and in f's output (log of negatives and of zero) come back
    where plain Dask puts them, for in-memory data, a list of blocks, a dask array and
    data kept with encode(): an exact code that copies blocks mixes nothing."""
    import dask.array as da

    X = nan_data()
    expected = quiet_log(X)
    job = await dask_bacc.submit_coded(quiet_log, X, code=code, n_blocks=4, client=c)
    np.testing.assert_array_equal(await job, expected)
    assert job.report.failed == {} and job.report.estimate_method == "exact"
    blocks = list(np.split(X, 4))
    got = await (await dask_bacc.submit_coded(quiet_log, blocks, code=code, client=c))
    for g, b in zip(got, blocks, strict=True):
        np.testing.assert_array_equal(g, quiet_log(b))
    x = da.from_array(X, chunks=(2, 2))
    out = await (await dask_bacc.submit_coded(quiet_log, x, code=code, client=c))
    np.testing.assert_array_equal(await c.compute(out) if hasattr(out, "dask") else out, expected)
    data = await dask_bacc.encode(X, code=code, n_blocks=4, client=c)
    np.testing.assert_array_equal(await (await data.submit(quiet_log)), expected)
    data.release()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 8)
async def test_codes_that_mix_blocks_still_refuse_nan(c, s, *workers):
    """A code whose shares mix blocks would spread a NaN to every block it mixes: the data
    is refused before anything runs, on the client (in memory) or where the share is
    encoded (a dask array)."""
    import dask.array as da

    X = nan_data()
    with pytest.raises(ValueError, match="NaN or inf"):
        await dask_bacc.submit_coded(quiet_log, X, code="berrut", n_blocks=4, client=c)
    with pytest.raises(ValueError, match="NaN or inf"):
        await dask_bacc.encode(X, code="systematic-spline", n_blocks=4, n_coded=6, client=c)
    x = da.from_array(X, chunks=(2, 2))
    job = await dask_bacc.submit_coded(np.tanh, x, code="berrut", n_coded=6, client=c)
    with pytest.raises(ValueError, match="NaN or inf"):
        await job
