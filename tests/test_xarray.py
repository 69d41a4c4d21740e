"""xarray DataArray/Dataset input: blocks along a dimension, labels restored, accessor."""

from __future__ import annotations

import sys

import cloudpickle
import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cluster_helpers import gen_cluster, idle
from distributed import get_worker
from test_exact import quiet_log  # np.log, quietly (NaN, -inf)

import dask_bacc
from dask_bacc.collections.xarray import XarrayBlocks
from dask_bacc.testing import gate_stragglers, reference_decode

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
FOUR = [("127.0.0.1", 1)] * 4
K, ROWS = 4, 6  # four blocks of six time steps


def make_array(chunked: bool = False) -> xr.DataArray:
    rng = np.random.default_rng(0)
    arr = xr.DataArray(
        rng.standard_normal((K * ROWS, 3)),
        dims=("time", "x"),
        coords={
            "time": pd.date_range("2020-01-01", periods=K * ROWS, freq="D"),
            "x": ["a", "b", "c"],
            "doy": ("time", np.arange(K * ROWS)),  # a non-index coordinate along time
            "lon": ("x", [10.0, 20.0, 30.0]),
        },
        name="temp",
        attrs={"units": "K"},
    )
    return arr.chunk({"time": ROWS}) if chunked else arr


def make_dataset(chunked: bool = False) -> xr.Dataset:
    rng = np.random.default_rng(1)
    arr = make_array()
    ds = xr.Dataset(
        {
            "temp": arr,
            "pressure": (("x", "time"), rng.uniform(1, 2, (3, K * ROWS)).astype(np.float32)),
            "weights": ("x", [0.5, 1.0, 2.0], {"role": "constant"}),
        },
        attrs={"title": "test"},
    )
    ds["pressure"].attrs["units"] = "hPa"
    return ds.chunk({"time": ROWS}) if chunked else ds


def rowwise(b):
    return np.tanh(b) * 2


def reduce_time(b):
    return b.mean("time")


def plain_reduction(obj, func):
    """What mapping func over each block and stacking the outputs along time gives."""
    parts = [func(obj.isel(time=slice(j * ROWS, (j + 1) * ROWS))) for j in range(K)]
    out = xr.concat(
        parts, dim="time", data_vars="all", coords="different", compat="equals", join="outer"
    )
    return out.assign_coords(time=obj.time.values[::ROWS])


def only_on_workers(block):
    get_worker()  # raises on the client: meta= must spare the template call
    return block * 2


def assert_same_labels(out, expected):
    """Identical dims, coords, attrs, names, dtypes and shapes; values may differ."""
    assert type(out) is type(expected)
    xr.testing.assert_identical(out.coords.to_dataset(), expected.coords.to_dataset())
    assert out.attrs == expected.attrs
    assert out.sizes == expected.sizes
    if isinstance(out, xr.DataArray):
        assert out.name == expected.name
        pairs = [(out, expected)]
    else:
        assert list(out.data_vars) == list(expected.data_vars)
        pairs = [(out[k], expected[k]) for k in expected.data_vars]
    for a, b in pairs:
        assert a.dims == b.dims and a.dtype == b.dtype and a.attrs == b.attrs


def expected_decode(obj, func, report):
    """The job's own decode, computed here (``reference_decode`` of f on the blocks as the
    adapter flattens them), rebuilt into labelled output."""
    blocks = XarrayBlocks(obj, dim="time", n_blocks=K)
    decoded = reference_decode(report, blocks.wrap(func, (), {}), list(blocks.stacked()))
    return blocks.assemble(list(decoded), decoded.shape[1:], decoded.dtype)


async def run(c, obj, func, *args, **kwargs):
    kwargs.setdefault("code", "repetition")
    kwargs.setdefault("n_coded", 8)
    if not is_lazy(obj):  # in memory: split into K blocks
        kwargs.setdefault("n_blocks", K)
    out = await dask_bacc.map_coded(func, obj, *args, dim="time", client=c, **kwargs)
    return out


def is_lazy(obj) -> bool:
    return bool(obj.chunks)


# -- exact round trips ------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["memory", "dask"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_dataarray_rowwise_exact_equals_plain_map(c, s, *workers, chunked):
    arr = make_array(chunked)
    out = await run(c, arr, rowwise)
    assert is_lazy(out) == chunked
    if chunked:
        assert out.chunks == arr.chunks
        expected = await c.compute(xr.map_blocks(rowwise, arr))
        out = await c.compute(out)
    else:
        expected = rowwise(arr)
    xr.testing.assert_identical(out, expected)


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["memory", "dask"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_dataarray_reduction_exact(c, s, *workers, chunked):
    arr = make_array(chunked)
    out = await run(c, arr, reduce_time)
    assert is_lazy(out) == chunked
    out = await c.compute(out) if chunked else out
    # one row per block, labelled by the block's first time stamp; doy (along time) dropped
    expected = plain_reduction(make_array(), reduce_time)
    xr.testing.assert_identical(out, expected)
    assert out.sizes == {"time": K, "x": 3}


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["memory", "dask"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_dataset_rowwise_exact_equals_plain_map(c, s, *workers, chunked):
    ds = make_dataset(chunked)
    out = await run(c, ds, rowwise)
    assert is_lazy(out) == chunked
    if chunked:
        expected = await c.compute(xr.map_blocks(rowwise, ds))
        out = await c.compute(out)
    else:
        expected = rowwise(ds)
    xr.testing.assert_identical(out, expected)
    # the float32 variable keeps its dtype; weights (no time) is f's output for block 0
    assert out.pressure.dtype == np.float32
    assert out.weights.dims == ("x",)


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["memory", "dask"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_dataset_reduction_exact(c, s, *workers, chunked):
    ds = make_dataset(chunked)
    out = await run(c, ds, reduce_time)
    out = await c.compute(out) if chunked else out
    xr.testing.assert_identical(out, plain_reduction(make_dataset(), reduce_time))
    assert out.pressure.dims == ("time", "x")


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_dataset_to_dataarray_and_args(c, s, *workers):
    ds = make_dataset()

    def combine(b, scale, offset=0.0):
        return (b.temp * b.weights * scale + offset).rename("weighted")

    out = await run(c, ds, combine, 3.0, offset=1.0)
    xr.testing.assert_identical(out, combine(ds, 3.0, offset=1.0))


# -- stragglers with the Berrut code ---------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["memory", "dask"])
@pytest.mark.parametrize("kind", ["dataarray", "dataset"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_berrut_with_gated_stragglers(c, s, *workers, chunked, kind):
    obj = make_array(chunked) if kind == "dataarray" else make_dataset(chunked)
    # the first two workers' tasks are held (still running at the decode)
    slow = [w.name for w in workers[:2]]
    gate = await gate_stragglers(workers=slow, interruptible=False, client=c)
    job = await dask_bacc.submit_coded(
        np.tanh,
        obj,
        dim="time",
        n_blocks=None if chunked else K,
        n_coded=8,
        wait=6,
        code="berrut",
        client=c,
    )
    out = await job
    rep = job.report
    # decoded while the two stragglers are still held
    assert rep.status == "finished" and len(rep.returned) == 6 and rep.cancelled == 2
    assert all(w.state.executing_count == 1 for w in workers[:2])
    assert is_lazy(out) == chunked
    if chunked:
        # the lazy labels along time were computed with the input, not queued now behind
        # the stragglers (which hold their workers' only threads)
        keys = list(dask.core.flatten(out.doy.data.__dask_keys__()))
        assert keys and all(k in s.tasks for k in keys)
        out = await c.compute(out)
    memory = make_array() if kind == "dataarray" else make_dataset()
    plain = np.tanh(memory)
    assert_same_labels(out, plain)
    error = abs(out - plain).mean()  # an approximation, and a close one
    assert 0 < max(float(e) for e in ([error] if kind == "dataarray" else error.values())) < 0.3
    # exactly the Berrut estimate of the returned set
    expected = expected_decode(memory, lambda b: np.tanh(b), rep)
    xr.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    await gate.release()
    await idle(workers)
    await gate.clear()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_berrut_reduction_labels(c, s, *workers):
    ds = make_dataset(chunked=True)
    out = await c.compute(await run(c, ds, reduce_time, code="berrut", wait=8))
    plain = plain_reduction(make_dataset(), reduce_time)
    assert_same_labels(out, plain)
    xr.testing.assert_allclose(out, plain, atol=0.2)


# -- dtypes and non-numeric variables ----------------------------------------------------
@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_integer_dataarray_dtypes(c, s, *workers):
    arr = xr.DataArray(np.arange(48).reshape(24, 2), dims=("time", "y"), name="n")
    exact = await run(c, arr, lambda b: b * 3)
    xr.testing.assert_identical(exact, arr * 3)  # an exact code keeps int64
    job = await dask_bacc.submit_coded(
        lambda b: b * 3, arr, dim="time", n_blocks=K, n_coded=8, wait=8, code="berrut", client=c
    )
    approx = await job
    assert approx.dtype == np.float64  # decoded approximations are not rounded to integers
    expected = expected_decode(arr, lambda b: b * 3, job.report)
    xr.testing.assert_allclose(approx, expected, rtol=1e-9)
    np.testing.assert_allclose(approx.values, arr.values * 3, atol=1.0)
    # the systematic spline from every result: an exact set, whose decode picks
    # the systematic shares' own integer results (issue 23)
    job = await dask_bacc.submit_coded(
        lambda b: b * 3,
        arr,
        dim="time",
        n_blocks=K,
        n_coded=8,
        wait=8,
        code="systematic-spline",
        client=c,
    )
    xr.testing.assert_identical(await job, arr * 3)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_mixed_integer_and_float_variables(c, s, *workers):
    ds = make_dataset()
    ds["count"] = ("time", np.arange(K * ROWS))
    seen = {}

    def record(b):
        seen.update({k: v.dtype for k, v in b.data_vars.items()})
        return b * 2

    out = await run(c, ds, record)
    # one float block: f sees the integer variable as float64, even with an exact code
    assert seen["count"] == np.float64 and seen["pressure"] == np.float32
    assert out["count"].dtype == np.float64
    np.testing.assert_array_equal(out["count"].values, ds["count"].values * 2)
    xr.testing.assert_identical(out.drop_vars("count"), (ds * 2).drop_vars("count"))


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["memory", "dask"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_non_numeric_constant_is_passed_through(c, s, *workers, chunked):
    ds = make_dataset(chunked).assign(station=("x", ["p", "q", "r"]))

    def scale(b):
        assert b.station.values.tolist() == ["p", "q", "r"]  # f sees it unchanged
        return b.assign(temp=b.temp * 2)

    out = await run(c, ds, scale)
    out = await c.compute(out) if chunked else out
    xr.testing.assert_identical(out, scale(make_dataset().assign(station=("x", ["p", "q", "r"]))))
    assert out.station.dtype.kind == "U"


@gen_cluster(client=True, nthreads=FOUR)
async def test_non_numeric_output_from_data_rejected(c, s, *workers):
    ds = make_dataset().assign(station=("x", ["p", "q", "r"]))

    def relabel(b):
        return b.assign(station=b.station + "!")

    with pytest.raises(TypeError, match=r"'station'.*passes through unchanged"):
        await dask_bacc.submit_coded(relabel, ds, dim="time", n_blocks=2, n_coded=3, client=c)
    assert not s.tasks


# -- meta, the accessor ----------------------------------------------------------------------
@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_meta_skips_the_template_call(c, s, *workers):
    arr = make_array(chunked=True)
    meta = make_array().isel(time=slice(0, 0))  # empty along time: row-wise
    out = await c.compute(await run(c, arr, only_on_workers, meta=meta))
    xr.testing.assert_identical(out, make_array() * 2)
    with pytest.raises(ValueError, match="No worker"):
        only_on_workers(arr)
    # a reduction's meta lacks the dimension; a full-length meta (xr.map_blocks' template)
    # is row-wise
    meta = reduce_time(make_array()).astype(np.float64)
    out = await run(c, make_array(), lambda b: only_on_workers(b).mean("time"), meta=meta)
    xr.testing.assert_identical(out, plain_reduction(make_array() * 2, reduce_time))
    out = await run(c, make_array(), only_on_workers, meta=make_array())
    xr.testing.assert_identical(out, make_array() * 2)


@pytest.mark.slow
@pytest.mark.parametrize("code", ["speculative", "uncoded"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_other_exact_strategies(c, s, *workers, code):
    for obj in (make_dataset(), make_dataset(chunked=True)):
        out = await run(c, obj, rowwise, code=code, n_coded=None)
        out = await c.compute(out) if obj.chunks else out
        xr.testing.assert_identical(out, rowwise(make_dataset()))


@pytest.mark.slow
@pytest.mark.parametrize("chunked", [False, True], ids=["memory", "dask"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_accessor(c, s, *workers, chunked):
    arr, ds = make_array(chunked), make_dataset(chunked)
    opts = {"code": "repetition", "n_coded": 8, "client": c}
    if not chunked:
        opts["n_blocks"] = K
    out_arr = await arr.bacc.map_coded(rowwise, dim="time", **opts)
    job = await ds.bacc.submit_coded(reduce_time, dim="time", **opts)
    out_ds = await job
    assert job.report.K == K and job.report.status == "finished"
    if chunked:
        out_arr, out_ds = await c.gather(c.compute([out_arr, out_ds]))
    xr.testing.assert_identical(out_arr, rowwise(make_array()))
    xr.testing.assert_identical(out_ds, plain_reduction(make_dataset(), reduce_time))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_default_dim(c, s, *workers):
    arr = make_array(chunked=True)  # the only chunked dimension
    out = await dask_bacc.map_coded(rowwise, arr, code="repetition", n_coded=8, client=c)
    xr.testing.assert_identical(await c.compute(out), rowwise(make_array()))
    one = xr.DataArray(np.linspace(0, 1, 8), dims="t")  # a nameless 1-D object: its dim
    out = await dask_bacc.map_coded(rowwise, one, code="repetition", n_blocks=4, client=c)
    xr.testing.assert_identical(out, rowwise(one))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_persisted_and_chained_input(c, s, *workers):
    # dask-backed constants (weights) whose graphs hold futures are computed on the cluster
    ds = c.persist(make_dataset(chunked=True))
    once = await run(c, ds, rowwise)
    assert is_lazy(once.weights)  # f's row-wise output without time: lazy, from futures
    twice = await run(c, once, rowwise)
    xr.testing.assert_identical(await c.compute(twice), rowwise(rowwise(make_dataset())))
    # in-memory data with lazy labels and constants: an in-memory output
    arr = make_array()
    mixed = arr.assign_coords(doy=arr.doy.chunk(6), lon=arr.lon.chunk(1))
    out = await run(c, mixed, rowwise)
    assert out.doy.chunks is None and out.lon.chunks is None
    xr.testing.assert_identical(out, rowwise(arr))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=FOUR)
async def test_combine_must_agree_with_f(c, s, *workers):
    arr = make_array()
    # f decides: a row-wise f concatenates, a reduction stacks; "auto" or the agreeing value
    out = await dask_bacc.map_coded(
        reduce_time, arr, dim="time", n_blocks=2, n_coded=4, combine="stack", client=c
    )
    assert out.sizes == {"time": 2, "x": 3}
    with pytest.raises(ValueError, match="combine='stack' does not apply"):
        await dask_bacc.map_coded(
            rowwise, arr, dim="time", n_blocks=2, n_coded=4, combine="stack", client=c
        )


@pytest.mark.slow
@gen_cluster(client=True, nthreads=FOUR)
async def test_nan_is_refused_by_the_codes_that_mix_blocks(c, s, *workers):
    """On the client for in-memory data (naming the variable), where the share is encoded
    for dask-backed data."""
    arr = make_array().copy()
    arr[3, 1] = np.nan
    with pytest.raises(ValueError, match="the data contains NaN or inf"):
        await dask_bacc.submit_coded(rowwise, arr.rename(None), dim="time", code="berrut", client=c)
    ds = make_dataset()
    ds["temp"][0, 0] = np.inf
    with pytest.raises(ValueError, match=r"\['temp'\] contains NaN or inf"):
        await dask_bacc.submit_coded(rowwise, ds, dim="time", code="berrut", client=c)
    job = await dask_bacc.submit_coded(
        rowwise, arr.chunk({"time": 12}), client=c, n_coded=3, code="berrut"
    )
    with pytest.raises(ValueError, match="NaN or inf"):
        await job


@pytest.mark.slow
@pytest.mark.parametrize("code", ["repetition", "hedged", "speculative"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_codes_that_copy_blocks_pass_nan_and_inf_as_plain_dask(c, s, *workers, code):
    """Issue 40, item 5: NaN and inf in the data and in f's output come back where plain
    Dask (xarray's map_blocks) puts them, in memory and dask-backed."""
    arr = make_array().copy() - 0.5
    arr[3, 1], arr[5, 0], arr[20, 2] = np.nan, np.inf, 0.0
    chunked = arr.chunk({"time": 6})
    expected = xr.map_blocks(quiet_log, chunked).compute(scheduler="sync")
    got = await (await dask_bacc.submit_coded(quiet_log, arr, dim="time", code=code, client=c))
    xr.testing.assert_identical(got, expected)
    job = await dask_bacc.submit_coded(quiet_log, chunked, code=code, client=c)
    out = await job
    xr.testing.assert_identical(await c.compute(out), expected)


# -- validation ------------------------------------------------------------------------------
def nan_array():
    arr = make_array().copy()
    arr[0, 0] = np.nan
    return arr


def _bad_inputs():
    arr, ds = make_array(), make_dataset()
    return [
        ("bad dim", (rowwise, arr), {"dim": "depth"}, ValueError, "not a dimension"),
        ("columns", (rowwise, ds), {"dim": "time", "columns": ["temp"]}, ValueError, "columns"),
        (
            "non-numeric dataarray",
            (rowwise, arr.copy(data=np.full(arr.shape, "a"))),
            {"dim": "time"},
            TypeError,
            "real numeric",
        ),
        (
            "non-numeric variable along dim",
            (rowwise, ds.assign(label=("time", ["a"] * K * ROWS))),
            {"dim": "time"},
            TypeError,
            "'label'",
        ),
        (
            "datetime variable along dim",
            (rowwise, ds.assign(when=("time", ds.time.values))),
            {"dim": "time"},
            TypeError,
            "'when'",
        ),
        (
            "nan, a code that mixes blocks",
            (rowwise, nan_array()),
            {"dim": "time", "code": "berrut"},
            ValueError,
            "NaN or inf",
        ),
        ("no default dim", (rowwise, arr), {}, ValueError, "pass dim="),
        (
            "several chunked dims",
            (rowwise, arr.chunk({"time": 6, "x": 1})),
            {},
            ValueError,
            "several dimensions",
        ),
        (
            "ragged chunks",
            (rowwise, arr.chunk({"time": 5})),
            {"dim": "time"},
            ValueError,
            "ragged",
        ),
        (
            "n_blocks for dask-backed",
            (rowwise, arr.chunk({"time": 6})),
            {"dim": "time", "n_blocks": 4},
            ValueError,
            "n_blocks",
        ),
        ("uneven split", (rowwise, arr), {"dim": "time", "n_blocks": 5}, ValueError, "equal"),
        (
            "f returns an array",
            (lambda b: b.values, arr),
            {"dim": "time"},
            TypeError,
            "must return a DataArray or Dataset",
        ),
        (
            "f changes the length of dim",
            (lambda b: b.isel(time=slice(0, 1)), arr),
            {"dim": "time"},
            ValueError,
            "keep the dimension's length",
        ),
        ("meta not xarray", (rowwise, arr), {"dim": "time", "meta": 3}, TypeError, "meta"),
        (
            "variables chunked differently",
            (rowwise, ds.assign(temp=arr.chunk({"time": 6}), pressure=ds.pressure.chunk(12))),
            {"dim": "time"},
            ValueError,
            "chunked differently",
        ),
        (
            "no variable along dim",
            (rowwise, ds[["weights"]].assign_coords(time=ds.time)),
            {"dim": "time"},
            ValueError,
            "no data variable",
        ),
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [pytest.param(a, k, e, m, id=d) for d, a, k, e, m in _bad_inputs()],
)
@gen_cluster(client=True, nthreads=FOUR)
async def test_bad_input_rejected_before_submission(c, s, *workers, args, kwargs, error, match):
    kwargs = {"n_coded": 3, "client": c, **kwargs}
    data = args[1]
    variables = [data.variable] if isinstance(data, xr.DataArray) else data.variables.values()
    if "n_blocks" not in kwargs and all(v.chunks is None for v in variables):
        kwargs["n_blocks"] = 2
    with pytest.raises(error, match=match):
        await dask_bacc.submit_coded(*args, **kwargs)
    assert not s.tasks  # nothing reached the scheduler


def test_flat_block_is_one_row_major_copy_of_every_variable():
    """Each block of a dask-backed object is converted once, by one task, into the flat
    ``(rows, total)`` array the encode reads, whatever the position of ``dim``."""
    from dask_bacc.collections.xarray import _dask_blocks, _flat_block, _in_memory_flat

    rng = np.random.default_rng(0)
    ds = xr.Dataset(
        {
            "a": (("time", "x"), rng.standard_normal((12, 3))),
            "b": (("x", "time"), rng.integers(0, 5, (3, 12))),  # dim not first, integer
        }
    )
    expected = np.concatenate([ds["a"].values, ds["b"].values.T.astype(float)], axis=1)
    flat = _in_memory_flat(dict(ds.data_vars.variables), "time", np.dtype(float))
    assert flat.flags.c_contiguous
    np.testing.assert_array_equal(flat, expected)
    chunked = ds.chunk({"time": 4, "x": 2})  # x is rechunked to one chunk
    coded = {k: v.variable for k, v in chunked.data_vars.items()}
    delayed = _dask_blocks(coded, "time", (4, 4, 4), np.dtype(float))
    assert len(delayed) == 3
    blocks = dask.compute(*delayed, scheduler="sync")
    for j, block in enumerate(blocks):
        assert block.flags.c_contiguous
        np.testing.assert_array_equal(block, expected[4 * j : 4 * (j + 1)])
    # NaN is kept (a code that copies blocks passes it on; a mixed share refuses it)
    kept = _flat_block((0,), np.dtype(float), np.array([[1.0], [np.nan]]))
    np.testing.assert_array_equal(kept, [[1.0], [np.nan]])
