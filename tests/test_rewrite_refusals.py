"""``coded()`` keeps a computation identical to plain Dask or refuses it (issue 23, item 4).

Each case was measured by running upstream dask and xarray test cases through
``coded(..., code="repetition")``, where the rewrite changed the answer silently or crashed
from deep inside. Every case here is either kept identical to plain Dask (compared with
plain Dask's result) or refused with a :class:`dask_bacc.RewriteError` whose message names
the feature and the alternative: at ``coded()`` time where the graph shows it, at compute
time where only the data does. Also item 6: a coded job's warnings reach the client.

Since issue 25, ``code="repetition"`` and ``"speculative"`` copy each task of the final
layer as it is (``tests/test_layer.py``) and need none of this; the cases run with
``code="uncoded"`` (exact, through the map rewrite) and the approximate codes, which still
go through it.
"""

from __future__ import annotations

import asyncio
import pickle
import sys
import warnings

import cloudpickle
import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cluster_helpers import gen_cluster

import dask_bacc
from dask_bacc import ApproximationWarning, RewriteError

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SIX = [("127.0.0.1", 1)] * 6


def frame():
    df = pd.DataFrame({"a": np.arange(16.0), "b": np.arange(16) * 2})
    return dd.from_pandas(df, npartitions=4)


def array():
    return da.from_array(np.arange(32.0).reshape(16, 2), chunks=(4, 2))


def labelled():
    """A DataArray chunked along x, whose coordinate along x is not the positions."""
    return xr.DataArray(
        np.arange(16.0), dims="x", coords={"x": np.arange(16) * 10}, name="v"
    ).chunk({"x": 4})


async def error_of(c, collection):
    """``(type, message)`` of the error computing ``collection`` raises (None if none):
    only strings are kept, so that no traceback holds the computation's futures."""
    from distributed import wait

    future = c.compute(collection)
    await wait(future)
    # future.exception(), not ``await future``: a raise here would tie the future into a
    # reference cycle with its traceback, and its keys would outlive the test
    exc = await future.exception() if future.status == "error" else None
    return None if exc is None else (type(exc), str(exc))


def assert_refused(error, pattern):
    import re

    assert error is not None, "no error raised"
    kind, message = error
    assert issubclass(kind, RewriteError), error
    assert re.search(pattern, message, flags=re.S), message


# -- refused at coded() time ----------------------------------------------------------------
# by the approximate codes, which need equal blocks of one input; the exact codes take each
# of these layers as it is (tests/test_layer.py), and the refusal says so
def test_dataframe_map_overlap_is_refused_not_taken_for_map_partitions():
    y = frame().map_overlap(lambda p: p.rolling(2).sum(), 1, 0)
    with pytest.raises(RewriteError, match=r"map_overlap.*plain Dask: ddf.map_overlap") as err:
        dask_bacc.coded(y, code="berrut")
    assert "code='repetition'" in str(err.value) and "code='speculative'" in str(err.value)
    assert dask_bacc.coded(y, code="berrut", fallback="plain") is y


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_drop_axis_decodes_and_the_chunked_axis_refusal_advice_runs(c, s, *workers):
    """Issue 41, item 4: a map that drops an axis was refused as "f does not take the
    chunk as its first argument", then as "the chunks along the dropped axis joined",
    though one chunk along it is joined to itself. One chunk along the dropped axis now
    decodes; several are refused as chunked along other axes than 0, and the rechunk that
    refusal advises then runs."""
    d = da.from_array(np.arange(32.0).reshape(8, 4), chunks=(2, 4))
    y = d.map_blocks(lambda b: b.sum(axis=1), drop_axis=1, dtype=float)
    z = dask_bacc.coded(y, code="bspline")
    got, want = await c.compute(z), await c.compute(y)
    report = await dask_bacc.report_of(z, c)
    error = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert error <= 2 * report.error_estimate + 1e-12 or report.warnings, (error, report)
    split = d.rechunk((2, 2)).map_blocks(lambda b: b.sum(axis=1), drop_axis=1, dtype=float)
    with pytest.raises(RewriteError, match=r"chunked along axes other than 0.*rechunk") as err:
        dask_bacc.coded(split, code="bspline")
    assert "first argument" not in str(err.value)
    fixed = d.rechunk((2, 2)).rechunk({1: -1})
    y2 = fixed.map_blocks(lambda b: b.sum(axis=1), drop_axis=1, dtype=float)
    assert (await c.compute(dask_bacc.coded(y2, code="bspline"))).shape == want.shape


@pytest.mark.parametrize("trim", [True, False])
def test_array_map_overlap_is_refused_by_name(trim):
    y = array().map_overlap(lambda b: b + 1, depth={0: 1, 1: 0}, boundary="none", trim=trim)
    with pytest.raises(RewriteError, match=r"overlapping blocks.*plain Dask: x.map_overlap"):
        dask_bacc.coded(y, code="berrut")


def test_partition_info_is_refused():
    def f(p, partition_info=None):
        return p + (partition_info or {"number": 0})["number"]

    y = frame().map_partitions(f, meta=frame()._meta)
    with pytest.raises(RewriteError, match=r"partition_info.*plain Dask"):
        dask_bacc.coded(y, code="berrut")


def test_masked_array_meta_is_refused():
    y = array().map_blocks(lambda b: np.ma.masked_greater(b, 10))
    with pytest.raises(RewriteError, match=r"numpy.ma.MaskedArray.*plain Dask: y.compute\(\)"):
        dask_bacc.coded(y, code="berrut")
    # masked input blocks: f would see the masked values unmasked
    masked = da.ma.masked_greater(array(), 10)
    y = masked.map_blocks(lambda b: np.asarray(b.filled(0)) * 2, meta=np.empty((0, 0)))
    with pytest.raises(RewriteError, match=r"input blocks are numpy.ma.MaskedArray.*plain Dask"):
        dask_bacc.coded(y, code="berrut")


def test_reading_the_graph_never_crashes_with_a_bare_error(monkeypatch):
    # a failure deep inside the rewrite (here: a KeyError reading the graph) is a
    # RewriteError with a message, and fallback="plain" still gives the collection back
    # (the mixing rewrite: find_map reads the graph for the approximate codes)
    from dask_bacc.runtime import driver

    def broken(collection):
        raise KeyError("some-layer")

    monkeypatch.setattr(driver, "find_map", broken)
    y = array().map_blocks(np.tanh)
    with pytest.raises(RewriteError, match=r"KeyError.*plain Dask.*fallback='plain'"):
        dask_bacc.coded(y, code="systematic-spline")
    assert dask_bacc.coded(y, code="systematic-spline", fallback="plain") is y


# -- pure checks of the decoded output (no cluster) ------------------------------------------
def test_a_lossy_cast_to_the_declared_dtype_is_refused():
    from dask_bacc.collections.rewrite_kinds import _cast, _frame_like

    # NaN in a column that meta types as int64 would become -9223372036854775808
    meta = pd.DataFrame({"a": pd.Series([], dtype=float), "b": pd.Series([], dtype="int64")})
    block = pd.DataFrame({"a": [1.0, 2.0], "b": [np.nan, 4.0]})
    with pytest.raises(RewriteError, match=r"column 'b'.*NaN.*int64.*plain Dask"):
        _frame_like(block, meta)
    series = pd.Series([np.nan, 1.0], name="b")
    with pytest.raises(RewriteError, match="NaN"):
        _frame_like(series, pd.Series([], dtype="int64", name="b"))
    with pytest.raises(RewriteError, match="fractions"):
        _cast(np.array([0.5]), np.dtype(np.int64), "the output")
    with pytest.raises(RewriteError, match="mask"):
        _cast(np.ma.masked_array([1.0], mask=[True]), np.dtype(np.float64), "the output")
    # a lossless cast is made, as before: the plain map's dtypes
    ok = _frame_like(pd.DataFrame({"a": [1.0], "b": [4.0]}), meta)
    assert ok["b"].dtype == np.int64 and ok["b"].tolist() == [4]


def test_index_names_come_from_the_meta():
    from dask_bacc.collections.rewrite_kinds import _frame_like

    meta = pd.DataFrame({"a": pd.Series([], dtype=float)}).rename_axis("idx", axis=0)
    meta = meta.rename_axis("cols", axis=1)
    out = _frame_like(pd.DataFrame({"a": [1.0]}, index=[5]), meta)
    assert out.index.name == "idx" and out.columns.name == "cols"


# -- kept identical, or refused on the data ---------------------------------------------------
@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_index_metadata_set_by_f_is_kept(c, s, *workers):
    ddf = frame()
    y = ddf.map_partitions(lambda p: p.rename_axis("idx"))
    pd.testing.assert_frame_equal(
        await c.compute(dask_bacc.coded(y, code="uncoded")), await c.compute(y)
    )
    df = pd.DataFrame({"a": np.arange(16.0), "b": np.arange(16) * 2}).rename_axis("row")
    named = dd.from_pandas(df, npartitions=4)
    y = named.a.map_partitions(lambda s: s.rename_axis("r2") * 2)
    pd.testing.assert_series_equal(
        await c.compute(dask_bacc.coded(y, code="uncoded")), await c.compute(y)
    )


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_enforced_metadata_is_applied_as_map_partitions_does(c, s, *workers):
    ddf = frame()
    # enforce_metadata (the default) names each Series partition after the meta
    y = ddf.a.map_partitions(lambda s: s.rename("z"), meta=("q", "f8"))
    pd.testing.assert_series_equal(
        await c.compute(dask_bacc.coded(y, code="uncoded")), await c.compute(y)
    )
    y = ddf.a.map_partitions(lambda s: s.rename("z"), meta=("q", "f8"), enforce_metadata=False)
    pd.testing.assert_series_equal(
        await c.compute(dask_bacc.coded(y, code="uncoded")), await c.compute(y)
    )
    # columns that do not match the meta: plain Dask raises, and so does coded()
    y = ddf.map_partitions(lambda p: p[["b", "a"]], meta=ddf._meta)
    assert issubclass((await error_of(c, y))[0], ValueError)
    assert_refused(
        await error_of(c, dask_bacc.coded(y, code="uncoded")), r"columns \['b', 'a'\].*meta"
    )


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_nan_or_floats_in_an_int_typed_column_are_never_cast(c, s, *workers):
    # f makes NaN where meta says int64: plain Dask returns float64 with the NaN; coded
    # must not return -9223372036854775808 there (it refuses, with a message)
    ddf = frame()
    y = ddf.map_partitions(lambda p: p.assign(b=p.b.where(p.b > 3)), meta=ddf._meta)
    plain = await c.compute(y)
    assert plain.b.isna().any()
    z = dask_bacc.coded(y, code="uncoded")
    error = await error_of(c, z)
    if error is None:  # kept identical
        pd.testing.assert_frame_equal(await c.compute(z), plain)
    else:  # refused, with a message about the NaN
        assert issubclass(error[0], (ValueError, RuntimeError)) and "NaN" in error[1], error
    # floats where meta says int64 are not truncated to the declared dtype (plain Dask
    # returns the floats): refused, naming the column and the dtypes
    y = ddf.map_partitions(lambda p: p / 3, meta=ddf._meta)
    assert (await c.compute(y)).b.dtype == np.float64
    assert_refused(
        await error_of(c, dask_bacc.coded(y, code="uncoded")),
        r"column 'b' has dtype float64.*declares int64.*plain Dask",
    )


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_masked_result_is_refused_on_the_data(c, s, *workers):
    # meta= says plain arrays, f returns masked ones: found on the data
    y = array().map_blocks(lambda b: np.ma.masked_greater(b, 10), meta=np.empty((0, 0)))
    assert_refused(
        await error_of(c, dask_bacc.coded(y, code="uncoded")), r"masked array.*plain Dask"
    )


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_xarray_f_reading_the_blocked_coordinate_is_refused(c, s, *workers):
    # upstream's canonical xr.map_blocks(lambda obj: obj + obj.x, ...)
    arr = labelled()
    # refused when coded() is called: f runs on a mock block there, as map_coded does
    with pytest.raises(RewriteError, match=r"(?s)reads the coordinate.*'x'.*plain Dask"):
        dask_bacc.coded(xr.map_blocks(lambda obj: obj + obj.x, arr), code="uncoded")
    # f that does not read it is kept identical, coordinates included
    y = xr.map_blocks(lambda obj: obj * 2, arr)
    xr.testing.assert_identical(
        await c.compute(dask_bacc.coded(y, code="uncoded")), await c.compute(y)
    )


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_xarray_f_reading_a_non_index_coordinate_is_refused(c, s, *workers):
    # a lazy non-index coordinate along the mapped dimension: a coded block lacks it, and
    # f failing there (AttributeError) is named for what it is
    arr = labelled().assign_coords(lab=("x", np.arange(16.0)))
    with pytest.raises(RewriteError, match=r"(?s)reads the coordinate.*'lab'.*fails on a block"):
        dask_bacc.coded(xr.map_blocks(lambda obj: obj + obj.lab, arr), code="uncoded")


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_dataframe_f_reading_or_changing_the_index_is_refused(c, s, *workers):
    df = pd.DataFrame({"a": np.arange(8.0)}, index=pd.Index(np.arange(8) * 2, name="k"))
    ddf = dd.from_pandas(df, npartitions=2)
    cases = [
        (lambda p: p.reset_index(), "reads the index"),  # the labels become a column
        (lambda p: p.assign(b=p.index * 1.0), "reads the index"),
        (lambda p: p.reset_index(drop=True), "changes their index labels"),
    ]
    for f, match in cases:
        y = ddf.map_partitions(f)
        with pytest.raises(RewriteError, match="(?s)" + match + ".*plain Dask"):
            dask_bacc.coded(y, code="uncoded")  # refused before anything is computed
    y = ddf.map_partitions(lambda p: p * 2)  # f that leaves the index alone: identical
    pd.testing.assert_frame_equal(
        await c.compute(dask_bacc.coded(y, code="uncoded")), await c.compute(y)
    )


def _noisy(obj):
    return obj + np.random.default_rng().uniform(size=obj.shape)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_a_random_f_is_not_taken_for_one_that_reads_labels(c, s, *workers):
    # f's output differs between two calls on the same mock whatever the labels: the label
    # checks conclude nothing (no false refusal)
    z = dask_bacc.coded(xr.map_blocks(_noisy, labelled()), code="uncoded")
    assert (await c.compute(z)).shape == (16,)
    df = pd.DataFrame({"a": np.arange(8.0)}, index=pd.Index(np.arange(8) * 2, name="k"))
    y = dd.from_pandas(df, npartitions=2).map_partitions(_noisy)
    assert (await c.compute(dask_bacc.coded(y, code="uncoded"))).shape == (8, 1)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_xarray_template_that_does_not_match_is_checked(c, s, *workers):
    ds = labelled().to_dataset()
    # f adds a data variable the template lacks: plain xarray raises, and coded() raises
    # the same (issue 41, item 3: tests/test_mixing_refusals.py)
    y = xr.map_blocks(lambda o: o.assign(w=o.v * 2), ds, template=ds)
    assert issubclass((await error_of(c, y))[0], ValueError)
    assert await error_of(c, dask_bacc.coded(y, code="uncoded")) == await error_of(c, y)
    # f returns floats where the template says int64: refused, not truncated
    ints = labelled().astype(np.int64)
    y = xr.map_blocks(lambda o: o / 3, ints, template=ints)
    assert_refused(
        await error_of(c, dask_bacc.coded(y, code="uncoded")), r"float64.*int64.*plain Dask"
    )
    # f changes an index coordinate along another dimension than the mapped one
    grid = xr.DataArray(
        np.ones((16, 2)), dims=("x", "y"), coords={"x": np.arange(16), "y": [1, 2]}
    ).chunk({"x": 4})
    y = xr.map_blocks(lambda o: o.assign_coords(y=[5, 6]), grid, template=grid)
    assert issubclass((await error_of(c, y))[0], ValueError)
    assert_refused(await error_of(c, dask_bacc.coded(y, code="uncoded")), r"index coordinate 'y'")
    # a template whose coordinate along the mapped dimension differs from the input's
    arr = labelled()
    y = xr.map_blocks(lambda o: o, arr, template=arr.assign_coords(x=arr.x + 1))
    with pytest.raises(RewriteError, match=r"template has other values for the coordinate"):
        dask_bacc.coded(y, code="uncoded")


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_delayed_and_keyed_large_arguments_are_passed_to_the_driver(c, s, *workers):
    x = array()
    scale = dask.delayed(np.float64)(3.0)
    big = np.full((3, 200_000), 2.0)  # dask stores it once, under its own key
    cases = [
        x.map_blocks(lambda b, s: b * s, scale),
        x.map_blocks(lambda b, w=None: b + w[0, 0], w=big),
        x.map_blocks(lambda b, w: b + w[0][0, 0] * w[1], [big, scale], dtype=float),
    ]
    for y in cases:
        np.testing.assert_array_equal(
            await c.compute(dask_bacc.coded(y, code="uncoded")), await c.compute(y)
        )


# -- item 6: the driver's warnings reach the client ---------------------------------------
def _warn_events(events):
    return [
        (pickle.loads(m["category"]), pickle.loads(m["message"]))
        for _, m in events
        if isinstance(m, dict) and "category" in m
    ]


@pytest.mark.slow
@gen_cluster(client=True, nthreads=SIX)
async def test_driver_warnings_reach_the_calling_client_once_per_job(c, s, *workers):
    """Three jobs, each driver on a worker whose worker client (made by an earlier
    driver) would raise every ``warn`` event again: each warning is raised once, by the
    client that built the collection, and sent to it alone."""
    from dask_bacc.runtime.driver import WARN_TOPIC

    x = da.from_array(np.linspace(0, 1, 32).reshape(16, 2), chunks=(4, 2))
    y = x.map_blocks(lambda b: np.sign(b - 0.5) * np.abs(b - 0.5) ** 0.3)
    reports = []
    with dask.config.set({"bacc.warn-error": 1e-12}), warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always", ApproximationWarning)
        for _ in range(3):
            z = dask_bacc.coded(y, code="berrut", n_coded=6)
            await c.compute(z)
            reports.append(await dask_bacc.report_of(z, client=c))
        expected = sum(len(rep.warnings) for rep in reports)

        def approx():
            return [w for w in got if issubclass(w.category, ApproximationWarning)]

        for _ in range(500):  # the client turns the event into a warning on its loop
            if len(approx()) >= expected:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # (a copy from another client would come by now)
    assert all(any(w.startswith("ApproximationWarning") for w in r.warnings) for r in reports)
    assert len(approx()) == expected, [str(w.message) for w in approx()]
    sent = _warn_events(await c.get_events(WARN_TOPIC + c.id))
    assert [f"{cat.__name__}: {msg}" for cat, msg in sent] == [
        w for rep in reports for w in rep.warnings
    ]
    assert _warn_events(await c.get_events("warn")) == []  # no other client hears them


@pytest.mark.slow
@pytest.mark.multiprocess
def test_driver_warning_reaches_a_client_of_worker_processes():
    from distributed import Client, LocalCluster

    x = da.from_array(np.linspace(0, 1, 32).reshape(16, 2), chunks=(4, 2))
    y = x.map_blocks(lambda b: np.sign(b - 0.5) * np.abs(b - 0.5) ** 0.3)
    with (
        LocalCluster(
            n_workers=6, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
        dask.config.set({"bacc.warn-error": 1e-12}),
    ):
        z = dask_bacc.coded(y, code="berrut", n_coded=6)
        with pytest.warns(ApproximationWarning) as caught:
            z.compute()
            # the event travels scheduler -> client: wait until it has been handled
            deadline = 30
            while not [w for w in caught if w.category is ApproximationWarning] and deadline:
                client.sync(_sleep, 0.1)
                deadline -= 0.1
        rep = dask_bacc.report_of(z, client=client)
    assert len([w for w in caught if w.category is ApproximationWarning]) == len(rep.warnings)


async def _sleep(t):
    import asyncio

    await asyncio.sleep(t)


def test_report_of_names_what_it_takes():
    """Not a dask collection: a TypeError that says what report_of takes (was an
    AttributeError)."""
    import numpy as np

    import dask_bacc

    with pytest.raises(TypeError, match=r"dask collection that dask_bacc\.coded returned"):
        dask_bacc.report_of(np.zeros(3))
    with pytest.raises(TypeError, match="list"):
        dask_bacc.report_of([1, 2])
