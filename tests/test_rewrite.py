"""dask_bacc.coded: the graph rewrite of a lazy map over chunks into one coded driver task."""

from __future__ import annotations

import asyncio
import sys

import cloudpickle
import dask
import dask.array as da
import numpy as np
import pytest
import xarray as xr
from cluster_helpers import gen_cluster, idle

import dask_bacc
from dask_bacc import RewriteError
from dask_bacc.codes import BerrutCode
from dask_bacc.collections.rewrite import _map_partitions_expr, _task_call, find_map
from dask_bacc.testing import assert_decodes_reference, gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
K, N, SLOW = 4, 8, [2, 5]
#: the coded tasks a job decodes from when SLOW straggle (held by gate_stragglers: the same
#: coded indices straggle in every job, whichever worker runs them)
RETURNED = [i for i in range(N) if i not in SLOW]


def product_tanh(block, weights):
    """tanh(block @ weights)."""
    return np.tanh(np.asarray(block) @ weights)


def data():
    rng = np.random.default_rng(7)
    X = rng.standard_normal((4 * K, 3))
    W = rng.standard_normal((3, 2))
    return X, W


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_map_blocks_rewrite_equals_map_coded_with_the_same_stragglers(c, s, *workers):
    X, W = data()
    x = da.from_array(X, chunks=(4, 3))
    y = x.map_blocks(product_tanh, W, chunks=(4, 2), dtype=float)
    async with gate_stragglers(indices=SLOW, client=c):
        z = dask_bacc.coded(y, n_coded=N, wait=N - len(SLOW), code="berrut")
        assert any(str(k).startswith("bacc-driver-") for k in dict(z.__dask_graph__()))
        assert z.shape == y.shape and z.chunks == y.chunks and z.dtype == y.dtype
        rewritten = await c.compute(z)
        rep = await dask_bacc.report_of(z, client=c)
        await idle(workers)  # the held stragglers let go at the decode
        job = await dask_bacc.submit_coded(
            product_tanh, x, W, n_coded=N, wait=N - len(SLOW), client=c, code="berrut"
        )
        direct = await c.compute(await job)
    assert sorted(rep.returned) == sorted(job.report.returned) == RETURNED
    assert rep.code == job.report.code == BerrutCode(K, N).get_config()
    assert_decodes_reference(rewritten, rep, product_tanh, X, args=(W,))
    assert_decodes_reference(direct, job.report, product_tanh, X, args=(W,))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_map_blocks_rewrite_exact_code_equals_plain_and_composes(c, s, *workers):
    X, W = data()
    x = da.from_array(X, chunks=(4, 3))
    y = x.map_blocks(product_tanh, W, chunks=(4, 2), dtype=float)
    z = dask_bacc.coded(y, code="repetition")
    plain = await c.compute(y)
    np.testing.assert_array_equal(await c.compute(z), plain)
    # further lazy operations and persist work on the rewritten collection
    np.testing.assert_allclose(await c.compute(z.sum(axis=0)), plain.sum(axis=0))
    persisted = c.persist(z)
    np.testing.assert_array_equal(await c.compute(persisted), plain)
    # an elementwise operation with a constant is a map over blocks too; integer dtype kept
    xi = da.from_array(np.arange(32).reshape(16, 2), chunks=(4, 2))
    zi = dask_bacc.coded(xi * 3, code="repetition")
    assert zi.dtype == np.int64
    np.testing.assert_array_equal(await c.compute(zi), np.arange(32).reshape(16, 2) * 3)


def _driver_worker(z, workers):
    """The address of the worker that ran the collection's driver task."""
    key = next(k for k in dict(z.__dask_graph__()) if str(k).startswith("bacc-driver-"))
    (addr,) = {w.address for w in workers for entry in w.state.log if entry[0] == key}
    return addr


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * (N + 1))
async def test_a_straggler_never_holds_the_drivers_worker(c, s, *workers):
    """No coded task of the job runs on the driver's worker, so the output chunks (read
    from the driver's result, on that worker) never queue behind a straggler: the result
    comes while the stragglers are still blocked."""
    X, W = data()
    x = da.from_array(X, chunks=(4, 3))
    # the stragglers cannot be stopped: they keep their threads after the decode
    gate = await gate_stragglers(indices=SLOW, interruptible=False, client=c)
    y = x.map_blocks(product_tanh, W, chunks=(4, 2), dtype=float)
    z = dask_bacc.coded(y, n_coded=N, wait=N - len(SLOW), code="berrut")
    persisted = c.persist(z)
    out = await asyncio.wait_for(c.compute(persisted), 60)
    driver_addr = _driver_worker(z, workers)
    rep = await dask_bacc.report_of(z, client=c)
    assert driver_addr not in rep.workers
    assert sorted(rep.straggled) == SLOW
    # the stragglers are still held on their own workers
    blocked = {w.address for w in workers if w.state.executing_count == 1}
    assert {rep.workers[i] for i in SLOW} <= blocked
    assert_decodes_reference(out, rep, product_tanh, X, args=(W,))
    await gate.release()
    await idle(workers)  # the held stragglers let go at the decode
    await gate.clear()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_the_default_n_leaves_the_drivers_worker_out(c, s, *workers):
    X, W = data()
    x = da.from_array(X, chunks=(4, 3))
    z = dask_bacc.coded(x.map_blocks(product_tanh, W, chunks=(4, 2), dtype=float), code="berrut")
    out = await c.compute(c.persist(z))
    driver_addr = _driver_worker(z, workers)
    rep = await dask_bacc.report_of(z, client=c)
    assert rep.N == len(workers) - 1  # 2K = 8 capped by the workers other than the driver's
    assert driver_addr not in rep.workers and len(set(rep.workers)) == rep.N
    assert rep.code == BerrutCode(K, rep.N).get_config()
    assert_decodes_reference(out, rep, product_tanh, X, args=(W,))


def corrupt_share(block, bad_share):
    """tanh(block); a block equal to ``bad_share`` returns -3 tanh(block) (Byzantine)."""
    b = np.asarray(block)
    y = np.tanh(b)
    return -3.0 * y if b.shape == bad_share.shape and np.allclose(b, bad_share) else y


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 12)
async def test_rewrite_with_until_and_adversaries(c, s, *workers):
    t = np.linspace(0.0, 1.0, 64)
    X = 0.5 * np.stack([np.sin(2 * np.pi * 0.3 * t + p) for p in (0, 1, 2)], axis=1)
    x = da.from_array(X, chunks=(16, 3))
    # one corrupted coded result, located and left out: N = 2K + 2A - 1 + 1 spare
    n = 10
    bad = BerrutCode(K, n).encode(np.stack(np.split(X, K)))[3]
    z = dask_bacc.coded(
        x.map_blocks(corrupt_share, bad, dtype=float),
        n_coded=n,
        wait=n,
        adversaries=1,
        code="berrut",
    )
    out = await c.compute(z)
    rep = await dask_bacc.report_of(z, client=c)
    assert rep.adversaries == 1 and rep.excluded == [3] and 3 not in rep.returned
    direct = await dask_bacc.submit_coded(
        corrupt_share,
        X,
        bad,
        n_blocks=K,
        n_coded=n,
        wait=n,
        adversaries=1,
        client=c,
        code="berrut",
    )
    np.testing.assert_allclose(out, await direct, rtol=1e-12, atol=1e-12)
    # adaptive waiting: a smooth f decodes on the error target
    z = dask_bacc.coded(
        x.map_blocks(np.tanh), n_coded=8, wait=dask_bacc.until(error=0.5), code="berrut"
    )
    await c.compute(z)
    rep = await dask_bacc.report_of(z, client=c)
    assert rep.trigger in ("error", "all") and rep.error_estimate <= 0.5
    with pytest.raises(ValueError, match="adversaries must be >= 0"):
        dask_bacc.coded(x.map_blocks(np.tanh), adversaries=-1, code="berrut")


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_report_of_a_rewritten_collection(c, s, *workers):
    import dask.dataframe as dd
    import pandas as pd

    X, W = data()
    x = da.from_array(X, chunks=(4, 3))
    gate = await gate_stragglers(indices=SLOW, client=c)
    y = x.map_blocks(product_tanh, W, chunks=(4, 2), dtype=float)
    z = dask_bacc.coded(y, n_coded=N, wait=N - len(SLOW), code="berrut")
    with pytest.raises(LookupError, match="not been computed"):
        await dask_bacc.report_of(z, client=c)
    await c.compute(z)
    rep = await dask_bacc.report_of(z, client=c)
    assert isinstance(rep, dask_bacc.JobReport) and rep.status == "finished"
    assert (rep.K, rep.N, rep.code["name"]) == (K, N, "berrut")
    assert sorted(rep.returned) == RETURNED
    assert sorted(rep.straggled) == SLOW and rep.error_estimate is not None
    # keys and lists restored from the event log (msgpack hands back tuples)
    assert all(isinstance(i, int) for i in rep.arrival) and isinstance(rep.returned, list)
    # a collection built on it names the same job; computing again gives a newer report
    await idle(workers)  # the held stragglers let go at the decode
    await c.compute(z.sum())
    again = await dask_bacc.report_of(z.sum(), client=c)
    assert again.token != rep.token
    listed = await dask_bacc.rewrite_reports(client=c)
    driver = next(k for k in dict(z.__dask_graph__()) if str(k).startswith("bacc-driver-"))
    assert [r.token for key, r in listed if key == driver] == [rep.token, again.token]
    # dataframes too; anything that is not a rewritten collection is an error
    ddf = dd.from_pandas(pd.DataFrame(X, columns=["a", "b", "c"]), npartitions=K)
    frame = dask_bacc.coded(ddf.map_partitions(np.tanh), code="repetition")
    await c.compute(frame)
    assert (await dask_bacc.report_of(frame, client=c)).code["name"] == "repetition"
    with pytest.raises(ValueError, match="no coded job"):
        dask_bacc.report_of(y, client=c)
    with pytest.raises(ValueError, match="2 coded jobs"):
        dask_bacc.report_of(z + dask_bacc.coded(y, code="berrut"), client=c)
    await gate.release()
    await gate.clear()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_apply_ufunc_rewrite_equals_map_coded(c, s, *workers):
    X, _ = data()
    obj = xr.DataArray(
        X, dims=("time", "x"), coords={"time": np.arange(len(X))}, name="v", attrs={"u": "m"}
    ).chunk({"time": 4})
    W3 = np.eye(3)  # keep the x dimension: apply_ufunc without core dims maps elementwise-shaped

    def f(b):
        return product_tanh(b, W3)

    y = xr.apply_ufunc(f, obj, dask="parallelized", output_dtypes=[float], keep_attrs=True)
    async with gate_stragglers(indices=SLOW, client=c):
        z = dask_bacc.coded(y, n_coded=N, wait=N - len(SLOW), code="berrut")
        assert isinstance(z, xr.DataArray) and z.dims == y.dims and z.name == y.name
        assert z.attrs == y.attrs and z.chunks == y.chunks
        xr.testing.assert_identical(z.coords.to_dataset(), y.coords.to_dataset())
        rewritten = (await c.compute(z)).values
        rep = await dask_bacc.report_of(z, client=c)
        await idle(workers)  # the held stragglers let go at the decode
        direct = await c.compute(
            await dask_bacc.map_coded(
                f, obj.data, n_coded=N, wait=N - len(SLOW), code="berrut", client=c
            )
        )
    assert sorted(rep.returned) == RETURNED
    np.testing.assert_allclose(rewritten, direct, rtol=1e-12, atol=1e-12)
    exact = dask_bacc.coded(y, code="repetition")
    xr.testing.assert_identical(await c.compute(exact), await c.compute(y))


def tanh_block(block):
    """tanh of every variable."""
    return np.tanh(block)


def dataset(X):
    return xr.Dataset(
        {"a": (("time", "x"), X), "b": ("time", X[:, 0] * 2)},
        coords={"time": np.arange(len(X)), "x": [10, 20, 30], "lab": ("time", np.arange(len(X)))},
        attrs={"title": "t"},
    ).chunk({"time": 4})


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_xr_map_blocks_rewrite_equals_map_coded(c, s, *workers):
    X, _ = data()
    ds = dataset(X)
    y = xr.map_blocks(tanh_block, ds)
    async with gate_stragglers(indices=SLOW, client=c):
        z = dask_bacc.coded(y, n_coded=N, wait=N - len(SLOW), code="berrut")
        assert isinstance(z, xr.Dataset) and z.chunks == y.chunks and z.attrs == y.attrs
        rewritten = await c.compute(z)
        rep = await dask_bacc.report_of(z, client=c)
        await idle(workers)  # the held stragglers let go at the decode
        direct = await c.compute(
            await dask_bacc.map_coded(
                tanh_block, ds, dim="time", n_coded=N, wait=N - len(SLOW), code="berrut", client=c
            )
        )
    assert sorted(rep.returned) == RETURNED
    xr.testing.assert_allclose(rewritten, direct, rtol=1e-12, atol=1e-12)
    assert rewritten.lab.dtype == ds.lab.dtype  # labels are restored, not decoded
    exact = await c.compute(dask_bacc.coded(y, code="repetition"))
    xr.testing.assert_identical(exact, await c.compute(y))
    # a DataArray, unnamed, composed with a further reduction
    arr = ds.a.rename(None)
    ya = xr.map_blocks(np.tanh, arr)
    za = dask_bacc.coded(ya, code="repetition").sum("x")
    xr.testing.assert_identical(await c.compute(za), await c.compute(ya.sum("x")))


def tanh_twice(part):
    """tanh(2 part)."""
    return np.tanh(part * 2)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_map_partitions_rewrite_equals_map_coded(c, s, *workers):
    import dask.dataframe as dd
    import pandas as pd

    X, _ = data()
    df = pd.DataFrame(X, columns=["a", "b", "c"], index=pd.RangeIndex(100, 100 + len(X)))
    ddf = dd.from_pandas(df, npartitions=K, sort=True)
    y = ddf.map_partitions(tanh_twice)
    async with gate_stragglers(indices=SLOW, client=c):
        z = dask_bacc.coded(y, n_coded=N, wait=N - len(SLOW), code="berrut")
        assert isinstance(z, dd.DataFrame) and z.npartitions == K and z.divisions == y.divisions
        assert list(z.columns) == list(y.columns)
        rewritten = await c.compute(z)
        rep = await dask_bacc.report_of(z, client=c)
        await idle(workers)  # the held stragglers let go at the decode
        direct = await c.compute(
            await dask_bacc.map_coded(
                tanh_twice, ddf, n_coded=N, wait=N - len(SLOW), client=c, code="berrut"
            )
        )
    pd.testing.assert_frame_equal(rewritten, direct, rtol=1e-12, atol=1e-12)
    pd.testing.assert_index_equal(rewritten.index, df.index)
    assert sorted(rep.returned) == RETURNED and rep.code == BerrutCode(K, N).get_config()
    assert_decodes_reference(rewritten.to_numpy(), rep, tanh_twice, X)
    # exact code: equals the plain map, and a further lazy reduction composes
    exact = dask_bacc.coded(y, code="repetition")
    pd.testing.assert_frame_equal(await c.compute(exact), await c.compute(y))
    pd.testing.assert_series_equal(await c.compute(exact.sum()), await c.compute(y.sum()))
    series = ddf.a.map_partitions(np.square)
    pd.testing.assert_series_equal(
        await c.compute(dask_bacc.coded(series, code="repetition")), await c.compute(series)
    )


def _block_dependent(b, block_id=None):
    return b + (block_id[0] if block_id else 0)


def _unsupported():
    x = da.ones((8, 4), chunks=(2, 4))
    x2 = da.zeros((8, 4), chunks=(2, 4))
    mapped = x.map_blocks(np.tanh)
    (fused,) = dask.optimize(mapped + 1)
    ds = xr.Dataset({"a": ("t", np.ones(8))}).chunk({"t": 2})
    import dask.dataframe as dd
    import pandas as pd

    ddf = dd.from_pandas(pd.DataFrame({"a": np.ones(8)}), npartitions=2)
    return [
        ("reduction", x.sum(axis=0), "not a map over blocks"),
        ("rechunk", mapped.rechunk((4, 4)), "not a map over blocks"),
        ("slice", mapped[:4], "not a map over blocks"),
        ("two chunked inputs", da.map_blocks(np.add, x, x2), "2 chunked inputs"),
        ("collection argument", x.map_blocks(np.add, x2), "chunked input"),
        ("block_id", x.map_blocks(_block_dependent), "block_id"),
        ("fused graph", fused, "not a map over blocks"),
        ("chunked along axis 1", da.ones((8, 4), chunks=(2, 2)).map_blocks(np.tanh), "axes"),
        ("numpy", np.ones(3), "cannot rewrite"),
        ("dataframe reduction", ddf.sum(), "not map_partitions"),
        ("dataframe arithmetic", ddf + 1, "not map_partitions"),
        ("dataset", ds, "Dataset"),
        ("map_blocks of two objects", xr.map_blocks(np.add, ds, args=(ds,)), "several"),
        (
            "map_blocks chunked along two dims",
            xr.map_blocks(np.tanh, xr.DataArray(np.ones((4, 4))).chunk(2)),
            "2 dimensions",
        ),
        ("in-memory DataArray", xr.DataArray(np.ones(3)), "not dask-backed"),
        ("reserved keyword", x.map_blocks(lambda b, code=1: b, code=2), "reserves"),
    ]


@pytest.mark.parametrize("case", _unsupported(), ids=lambda c: c[0])
def test_unsupported_graphs_raise_and_fallback_returns_plain(case):
    _, collection, match = case
    # the refusals of a mixing code (the default, repetition, copies any layer's tasks)
    with pytest.raises(RewriteError, match=match):
        dask_bacc.coded(collection, code="systematic-spline")
    if match != "reserves":
        assert dask_bacc.coded(collection, code="systematic-spline", fallback="plain") is collection


def test_bad_options_raise_before_anything_runs():
    y = da.ones((8, 2), chunks=(2, 2)).map_blocks(np.tanh)
    with pytest.raises(ValueError, match="fallback"):
        dask_bacc.coded(y, fallback="silent")
    with pytest.raises(ValueError, match="unknown code"):
        dask_bacc.coded(y, code="fountain")
    with pytest.raises(TypeError, match="n_coded"):
        dask_bacc.coded(y, n_coded=2.5)
    with pytest.raises(ValueError, match="timeout"):
        dask_bacc.coded(y, timeout=-1)
    with pytest.raises(ValueError, match="unknown chunk sizes"):  # a mixing code's need
        dask_bacc.coded(
            da.ones((8, 2), chunks=(2, 2)).map_blocks(np.tanh, chunks=((np.nan,) * 4, (2,))),
            code="systematic-spline",
        )


def test_private_dask_structures_the_rewrite_reads():
    """Fails loudly when Dask changes the internals ``find_map`` depends on."""
    x = da.ones((8, 3), chunks=(2, 3))
    W = np.full((3, 2), 2.0)

    def f(b, w, scale=1.0):
        return b @ w * scale

    y = x.map_blocks(f, W, scale=3.0, chunks=(2, 2))
    layer = y.__dask_graph__().layers[y.name]
    func, args, kwargs, key = _task_call(y.__dask_graph__(), layer[(y.name, 1, 0)])
    assert func is f and kwargs == {"scale": 3.0} and key == (x.name, 1, 0)
    np.testing.assert_array_equal(args[0], W)

    import dask.dataframe as dd
    import pandas as pd

    ddf = dd.from_pandas(pd.DataFrame({"a": np.arange(6.0)}), npartitions=2)

    def g(p, c, k=1):
        return p * c * k

    func, frame, args, kwargs = _map_partitions_expr(ddf.map_partitions(g, 2, k=5))
    assert func is g and args == (2,) and kwargs == {"k": 5}
    pd.testing.assert_frame_equal(frame.compute(), ddf.compute())

    X, _ = data()
    ds = dataset(X)
    call = find_map(xr.map_blocks(np.tanh, ds, kwargs={}))
    assert call.kind == "xarray.map_blocks" and call.func is np.tanh and call.dim == "time"
    xr.testing.assert_identical(call.data, ds)  # the input, rebuilt from the tasks

    call = find_map(
        xr.apply_ufunc(np.tanh, xr.DataArray(np.ones((4, 2))).chunk(2), dask="parallelized")
    )
    assert call.func is np.tanh and call.kind == "xarray.apply_ufunc"


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_rewrite_config_is_taken_on_the_client(c, s, *workers):
    # the code comes from bacc.code when the collection is rewritten, not when it runs
    x = da.from_array(np.arange(16.0).reshape(8, 2), chunks=(2, 2))
    with dask.config.set({"bacc.code": "berrut"}):  # in force when z runs
        with dask.config.set({"bacc.code": "repetition"}):
            z = dask_bacc.coded(x.map_blocks(np.square))
        # exact (Berrut would only approximate the square), with the plain map's dtype
        np.testing.assert_array_equal(await c.compute(z), np.arange(16.0).reshape(8, 2) ** 2)


def test_find_map_gives_each_kind_its_adapter_which_pickles_to_the_driver():
    """One adapter per kind (``call.adapter``, named by ``call.kind``); it travels pickled,
    inside the call the driver task takes (``without_result``)."""
    import pickle

    import dask.dataframe as dd
    import pandas as pd

    from dask_bacc.collections import rewrite_kinds as kinds

    x = da.ones((8, 2), chunks=(2, 2))
    ddf = dd.from_pandas(pd.DataFrame({"a": np.arange(8.0)}), npartitions=2)
    arr = xr.DataArray(np.ones((8, 2)), dims=("time", "x")).chunk({"time": 2})
    cases = [
        (x.map_blocks(np.tanh), kinds.ArrayRewrite, "dask.array"),
        (ddf.map_partitions(np.tanh), kinds.FrameRewrite, "dask.dataframe"),
        (
            xr.apply_ufunc(np.tanh, arr, dask="parallelized"),
            kinds.ApplyUfuncRewrite,
            "xarray.apply_ufunc",
        ),
        (xr.map_blocks(np.tanh, arr), kinds.XarrayMapBlocksRewrite, "xarray.map_blocks"),
    ]
    for collection, adapter_type, name in cases:
        call = find_map(collection)
        assert type(call.adapter) is adapter_type and call.kind == call.adapter.name == name
        sent = pickle.loads(pickle.dumps(call.without_result()))
        assert type(sent.adapter) is adapter_type and sent.kind == name
        assert sent.result is None and sent.func is np.tanh and sent.dim == call.dim
    assert find_map(cases[-1][0]).dim == "time"
