"""pandas and dask DataFrames/Series: row blocks in, labelled output back."""

from __future__ import annotations

import pickle
import sys

import cloudpickle
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from cluster_helpers import gen_cluster, idle
from distributed import get_worker
from test_exact import quiet_log  # np.log, quietly (NaN, -inf)

import dask_bacc
from dask_bacc.collections import adapt
from dask_bacc.collections.dataframe import (
    DaskFrameBlocks,
    FrameFunction,
    FrameOutput,
    PandasBlocks,
    frame_blocks,
    partition_block,
)
from dask_bacc.testing import assert_decodes_reference, gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8


def make_frame(rows: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    index = pd.date_range("2024-01-01", periods=rows, freq="h", name="when")
    return pd.DataFrame({"a": rng.standard_normal(rows), "b": rng.uniform(1, 2, rows)}, index=index)


def rowwise(d):
    return np.tanh(d / 2) + 1


def reduce(d):
    return d.mean()


def scalar(d):
    return float(np.asarray(d).sum())


def per_block(func, obj, n_blocks):
    """func over ``n_blocks`` row blocks of a pandas object, concatenated (the reference)."""
    bounds = np.array_split(np.arange(len(obj)), n_blocks)
    outs = [func(obj.iloc[b[0] : b[-1] + 1]) for b in bounds]
    if np.ndim(outs[0]) == 0:
        return pd.concat([pd.Series([o]) for o in outs])
    return pd.concat(outs)


def assert_equal(out, expected):
    if isinstance(expected, pd.DataFrame):
        pd.testing.assert_frame_equal(out, expected)
    else:
        pd.testing.assert_series_equal(out, expected)


# -- input checks (no cluster) ---------------------------------------------------------
NON_NUMERIC = [
    ("object", pd.Series(["x", "y", "z", "w"], dtype=object), "astype(float)"),
    ("string", pd.Series(["x", "y", "z", "w"]), "astype(float)"),
    ("category", pd.Series(["lo", "hi", "lo", "hi"], dtype="category"), ".cat.codes"),
    ("datetime", pd.Series(pd.date_range("2024", periods=4)), 'astype("int64")'),
    ("tz datetime", pd.Series(pd.date_range("2024", periods=4, tz="UTC")), 'astype("int64")'),
    ("timedelta", pd.Series(pd.to_timedelta([1, 2, 3, 4], "s")), 'astype("int64")'),
    ("complex", pd.Series(np.ones(4, complex)), "astype(float)"),
]


@pytest.mark.parametrize(("column", "hint"), [pytest.param(c, h, id=i) for i, c, h in NON_NUMERIC])
@pytest.mark.parametrize("lazy", [False, True], ids=["pandas", "dask"])
def test_non_numeric_columns_raise_type_error_naming_them(column, hint, lazy):
    df = pd.DataFrame({"num": np.arange(4.0), "bad": column})
    data = dd.from_pandas(df, npartitions=2) if lazy else df
    with pytest.raises(TypeError, match=r"'bad' \(.*columns=\[\.\.\.\]") as info:
        frame_blocks(data)
    assert hint in str(info.value) and "'num'" not in str(info.value)
    # columns= selects the numeric ones: f never sees the others
    blocks = frame_blocks(data, columns=["num"])
    assert list(blocks.columns) == ["num"] and blocks.dtype == np.float64
    # a Series of that dtype: no columns to select, only a conversion helps
    with pytest.raises(TypeError, match=r"non-numeric.*Convert"):
        frame_blocks(df["bad"])


def test_accepted_dtypes_and_what_f_sees():
    df = pd.DataFrame(
        {
            "i": np.arange(6, dtype="int32"),
            "flag": [True, False] * 3,
            "n": pd.array([1, 2, 3, 4, 5, 6], dtype="Int64"),
            "nb": pd.array([True, False] * 3, dtype="boolean"),
        }
    )
    blocks = frame_blocks(df, n_blocks=2)
    # one coded dtype: the common NumPy dtype of the columns (nullable -> NumPy)
    assert blocks.dtype == np.int64 and blocks.block_shape == (3, 4)
    np.testing.assert_array_equal(blocks.stacked()[1][:, 1], [0, 1, 0])
    assert frame_blocks(df[["flag", "nb"]], n_blocks=2).dtype == np.bool_
    assert frame_blocks(df[["flag"]].assign(x=0.5), n_blocks=2).dtype == np.float64
    seen = {}

    def spy(d):
        seen["frame"] = d
        return d * 2

    wrapped = blocks.wrap(spy, (), {})
    view = seen["frame"]  # the output inference ran f on the first block
    assert list(view.columns) == ["i", "flag", "n", "nb"]
    assert isinstance(view.index, pd.RangeIndex) and len(view) == 3
    assert (view.dtypes == np.int64).all()
    out = wrapped(np.ones((3, 4)))  # a coded (float) share
    assert out.shape == (3, 4) and out.dtype == np.float64
    assert (seen["frame"].dtypes == np.float64).all()


@pytest.mark.parametrize(
    ("column", "match"),
    [
        (pd.Series([1.0, np.nan, 2.0, 3.0]), r"missing values.*'x'.*fillna"),
        (pd.Series([1, None, 2, 3], dtype="Int64"), r"missing values.*'x'.*dropna"),
        (pd.Series([1.0, np.inf, 2.0, 3.0]), r"inf values.*'x'"),
    ],
    ids=["nan", "nullable NA", "inf"],
)
def test_missing_or_infinite_values_raise_value_error(column, match):
    """NaN and inf are refused for the codes that mix blocks (``check_finite``, which the
    runtime calls for those only); pandas NA as the data is read (under every code)."""
    df = pd.DataFrame({"ok": np.arange(4.0), "x": column})
    with pytest.raises(ValueError, match=match):
        frame_blocks(df, n_blocks=2).check_finite()
    with pytest.raises(ValueError, match=r"(missing|inf) values.* in the Series"):
        frame_blocks(df["x"], n_blocks=2).check_finite()
    frame_blocks(df, n_blocks=2, columns=["ok"]).check_finite()  # not selected: not looked at
    if column.dtype == np.float64:  # read as is: a code that copies blocks passes them on
        np.testing.assert_array_equal(frame_blocks(df["x"], n_blocks=2).values, column)
    else:
        with pytest.raises(ValueError, match=match):
            frame_blocks(df, n_blocks=2)


def test_columns_argument_checks():
    df = make_frame(8)
    ddf = dd.from_pandas(df, npartitions=2)
    for data in (df, ddf):
        with pytest.raises(TypeError, match="list of column labels"):
            frame_blocks(data, columns="a")
        with pytest.raises(TypeError, match="list of column labels"):
            frame_blocks(data, columns=3)
        with pytest.raises(ValueError, match=r"\['zz'\] are not in the data"):
            frame_blocks(data, columns=["a", "zz"])
        with pytest.raises(ValueError, match="empty"):
            frame_blocks(data, columns=[])
        with pytest.raises(ValueError, match="repeated"):
            frame_blocks(data, columns=["a", "a"])
        with pytest.raises(ValueError, match="a Series is a single column"):
            frame_blocks(data["a"], columns=["a"])
        assert list(frame_blocks(data, columns=("b",)).columns) == ["b"]
    with pytest.raises(ValueError, match="dim applies to xarray"):
        frame_blocks(df, dim="x")
    with pytest.raises(ValueError, match="repartition"):
        frame_blocks(ddf, n_blocks=2)
    with pytest.raises(ValueError, match="empty"):
        frame_blocks(df.iloc[:0])
    assert isinstance(adapt(df, max_blocks=4), PandasBlocks)
    assert isinstance(adapt(ddf, columns=["a"], meta=None), DaskFrameBlocks)


def test_row_blocks_split_and_pad_with_the_last_row():
    s = pd.Series(np.arange(10.0), name="v")
    blocks = frame_blocks(s, n_blocks=3)  # like np.array_split: 4, 3, 3
    assert blocks.K == 3 and blocks.lengths == [4, 3, 3] and blocks.block_shape == (4,)
    np.testing.assert_array_equal(blocks.stacked(), [[0, 1, 2, 3], [4, 5, 6, 6], [7, 8, 9, 9]])
    by_rows = frame_blocks(s, blocks=4)  # runs of 4 rows, the last one shorter
    assert by_rows.lengths == [4, 4, 2]
    np.testing.assert_array_equal(by_rows.stacked()[2], [8, 9, 9, 9])
    assert frame_blocks(s, max_blocks=4).K == 4
    assert frame_blocks(s, max_blocks=50).K == 10  # at most one block per row
    with pytest.raises(ValueError, match="non-empty blocks"):
        frame_blocks(s, n_blocks=11)
    with pytest.raises(ValueError, match="disagree"):
        frame_blocks(s, n_blocks=2, blocks=4)
    with pytest.raises(TypeError, match="n_blocks must be an integer"):
        frame_blocks(s, n_blocks=2.0)
    # an empty dask partition borrows a row of another one: f sees real values only
    donor = pd.DataFrame({"a": [5.0, 6.0]})
    block = partition_block(donor.iloc[:0], 3, np.dtype(float), "partition 1", donor)
    np.testing.assert_array_equal(block, [[5.0], [5.0], [5.0]])


def test_blocks_are_converted_once_to_row_major_arrays():
    """The encode reads each chunk as one C-contiguous array (a column-major or strided
    one would be copied again by every encode that mixes it): one conversion, padding
    included, and NaN/inf still named per column."""
    df = make_frame(10)
    big = pd.concat([df, df])  # a slice of a larger block: strided in pandas' layout
    part = big.iloc[3:10]
    block = partition_block(part, 9, np.dtype(float), "partition 0")
    assert block.flags.c_contiguous and block.shape == (9, 2)
    np.testing.assert_array_equal(block[:7], part.to_numpy())
    np.testing.assert_array_equal(block[7:], part.to_numpy()[[-1, -1]])
    assert partition_block(part, 7, np.dtype(float), "p").flags.c_contiguous
    ints = pd.DataFrame({"i": np.arange(4), "f": np.linspace(0, 1, 4)})
    mixed = partition_block(ints, 4, np.dtype(float), "p")
    assert mixed.flags.c_contiguous and mixed.dtype == np.float64
    np.testing.assert_array_equal(mixed, ints.to_numpy(dtype=float))
    blocks = frame_blocks(df, n_blocks=3)  # unequal: 4, 3, 3 rows
    assert blocks.values.flags.c_contiguous
    stacked = blocks.stacked()
    assert stacked.flags.c_contiguous and stacked.shape == (3, 4, 2)
    np.testing.assert_array_equal(stacked[2], df.to_numpy()[[7, 8, 9, 9]])
    bad = df.copy()
    bad.iloc[2, 1] = np.inf
    bad.iloc[5, 0] = np.nan
    with pytest.raises(ValueError, match=r"missing values \(NaN/NA\) in column\(s\) \['a'\]"):
        partition_block(bad, 10, np.dtype(float), "partition 3")
    with pytest.raises(ValueError, match=r"inf values in column\(s\) \['b'\]"):
        partition_block(bad[["b"]], 10, np.dtype(float), "partition 3")
    nullable = pd.DataFrame({"n": pd.array([1, None, 3], dtype="Int64")})
    with pytest.raises(ValueError, match=r"missing values .* \['n'\]"):
        partition_block(nullable, 3, np.dtype(np.int64), "partition 0")


def test_outputs_of_f_are_row_major_arrays():
    """What f returns goes to the sketches and the decode as a C-contiguous array."""
    blocks = frame_blocks(make_frame(8), n_blocks=2)

    def two(d):  # a frame of separate columns, one of them an integer
        return pd.DataFrame({"x": d["a"] * 2, "n": np.arange(len(d))})

    wrapped = blocks.wrap(two, (), {})
    share = blocks.stacked()[1]
    out = wrapped(share)
    assert out.flags.c_contiguous and out.dtype == np.float64
    np.testing.assert_array_equal(out, np.column_stack([share[:, 0] * 2, np.arange(4)]))
    transposed = blocks.wrap(lambda d: np.asfortranarray(d.to_numpy()), (), {})
    assert transposed(share).flags.c_contiguous
    np.testing.assert_array_equal(transposed(share), share)


def test_meta_forms_and_wrong_meta():
    assert FrameOutput.from_meta({"x": "f8", "y": "i8"}).columns.tolist() == ["x", "y"]
    series = FrameOutput.from_meta(("x", "f8"))
    assert series.kind == "series" and series.name == "x"
    assert FrameOutput.from_meta("f8").kind == "scalar"
    frame = FrameOutput.from_meta(pd.DataFrame({"p": [1.0]}, index=["total"]))
    assert frame.labels(1).tolist() == ["total"] and frame.labels(2).tolist() == [0, 1]
    for bad in ("not a dtype", object(), [1, 2]):
        with pytest.raises(TypeError, match="meta must be"):
            FrameOutput.from_meta(bad)
    with pytest.raises(TypeError, match=r"meta has non-numeric column\(s\) 's'"):
        FrameOutput.from_meta({"s": "object"})


def test_frame_function_checks_what_f_returns():
    blocks = frame_blocks(make_frame(8), n_blocks=2)
    wrapped = blocks.wrap(lambda d: d.rename(columns={"a": "x"}), (), {})
    assert wrapped.output.describe() == "a DataFrame with columns ['x', 'b']"
    same = pickle.loads(cloudpickle.dumps(wrapped))  # what the workers get
    share = blocks.stacked()[0]
    np.testing.assert_array_equal(same(share), share)
    swapped = FrameFunction(lambda d: d[["b", "a"]], wrapped.columns, None, wrapped.output)
    with pytest.raises(ValueError, match=r"returned columns \['b', 'a'\]"):
        swapped(share)  # on a worker: an erasure, never averaged in
    as_series = FrameFunction(lambda d: d["a"], wrapped.columns, None, wrapped.output)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        as_series(share)
    for func, error, match in [
        (lambda d: d["missing"], ValueError, r"could not infer.*KeyError.*meta="),
        (lambda d: d.astype(str), TypeError, "non-numeric"),
        (lambda d: np.ones((2, 2, 2)), TypeError, "3-d array"),
        (lambda d: "text", TypeError, "is a str"),
    ]:
        with pytest.raises(error, match=match):
            frame_blocks(make_frame(8), n_blocks=2).wrap(func, (), {})


def test_reduction_over_unequal_pandas_blocks_is_refused_early():
    blocks = frame_blocks(make_frame(10), n_blocks=3)
    with pytest.raises(ValueError, match=r"unequal lengths \[4, 3, 3\].*n_blocks=2"):
        blocks.wrap(reduce, (), {})
    with pytest.raises(ValueError, match="a scalar"):
        frame_blocks(make_frame(10), n_blocks=3).wrap(scalar, (), {})
    frame_blocks(make_frame(10), n_blocks=3).wrap(rowwise, (), {})  # row-wise: fine


def test_assemble_reads_rows_or_reductions():
    df = make_frame(4)
    blocks = frame_blocks(df, n_blocks=2)  # blocks of 2 rows, and df.sum() has 2 rows too
    wrapped = blocks.wrap(lambda d: d.sum(), (), {})
    decoded = [wrapped(share) for share in blocks.stacked()]
    f64 = np.dtype(np.float64)
    # "auto" cannot tell these 2-row sums from rows: it reads them as rows...
    as_rows = blocks.assemble(decoded, (2,), f64)
    pd.testing.assert_index_equal(as_rows.index, df.index)
    # ...combine="stack" says f reduces: each block's output keeps f's labels
    sums = blocks.assemble(decoded, (2,), f64, combine="stack")
    pd.testing.assert_series_equal(sums, per_block(lambda d: d.sum(), df, 2))
    with pytest.raises(ValueError, match="combine='concat' keeps the rows"):
        blocks.assemble(decoded, (1,), f64, combine="concat")
    with pytest.raises(ValueError, match="combine must be one of"):
        blocks.assemble(decoded, (2,), f64, combine="glue")
    # an exact code keeps integer and boolean dtypes; approximate (float) values do not
    ints = frame_blocks(pd.DataFrame({"i": [1, 2, 3, 4], "t": [True, False] * 2}), n_blocks=2)
    wrapped = ints.wrap(lambda d: d.astype({"t": bool}), (), {})
    decoded = [wrapped(share) for share in ints.stacked()]
    exact = ints.assemble(decoded, (2, 2), np.dtype(np.int64))
    assert exact.dtypes.tolist() == [np.int64, np.bool_]
    approx = ints.assemble([d + 0.01 for d in decoded], (2, 2), f64)
    assert approx.dtypes.tolist() == [f64, f64]


# -- on a cluster --------------------------------------------------------------------------
KINDS = ["pandas frame", "pandas series", "dask frame", "dask series"]


def make_input(kind, df, npartitions):
    data = df if "frame" in kind else df["a"]
    return dd.from_pandas(data, npartitions=npartitions) if kind.startswith("dask") else data


async def plain(c, kind, func, data, n_blocks):
    """The uncoded map: map_partitions for dask, f per block + concat for pandas."""
    if kind.startswith("dask"):
        return await c.compute(data.map_partitions(func))
    return per_block(func, data, n_blocks)


async def result_of(c, out, kind):
    if kind.startswith("dask"):
        assert isinstance(out, (dd.DataFrame, dd.Series))
        return await c.compute(out)
    assert isinstance(out, (pd.DataFrame, pd.Series))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@gen_cluster(client=True, nthreads=EIGHT)
async def test_exact_round_trip_equals_the_plain_map(c, s, *workers, kind):
    df = make_frame(40).assign(c=np.arange(40))  # an int column: f sees float64 columns
    data = make_input(kind, df, 4)
    opts = {"n_blocks": 4} if kind.startswith("pandas") else {}
    for func in (rowwise, reduce, scalar):
        out = await dask_bacc.map_coded(func, data, code="repetition", client=c, **opts)
        expected = await plain(c, kind, func, data, 4)
        # mixed int/float columns travel as one float dtype; an exact code gives each
        # column its own dtype back, as plain Dask does
        assert_equal(await result_of(c, out, kind), expected)
    if kind.startswith("dask"):
        out = await dask_bacc.map_coded(rowwise, data, code="repetition", client=c)
        assert out.divisions == data.divisions  # row-wise: the input's partitions
    # one dtype in: an exact code gives the plain map's dtypes (ints stay ints)
    ints = make_input(kind, df[["c"]].rename(columns={"c": "a"}), 4)
    out = await dask_bacc.map_coded(lambda d: d * 3, ints, code="uncoded", client=c, **opts)
    assert_equal(await result_of(c, out, kind), await plain(c, kind, lambda d: d * 3, ints, 4))
    # Berrut decodes approximately: integer output columns come back as float64 (wait=1.0:
    # from every result, as the error of some 6-of-8 returned sets exceeds the bound below)
    out = await dask_bacc.map_coded(
        lambda d: d * 3, ints, code="berrut", wait=1.0, client=c, **opts
    )
    out = await result_of(c, out, kind)
    expected = await plain(c, kind, lambda d: d * 3, ints, 4)
    assert set(out.dtypes if "frame" in kind else [out.dtype]) == {np.dtype(np.float64)}
    pd.testing.assert_index_equal(out.index, expected.index)
    error = np.abs(np.asarray(out) - np.asarray(expected))
    assert error.max() < 0.1 * np.ptp(np.asarray(expected))  # approximate, not exact
    # the systematic spline from every result: an exact set, whose decode picks
    # the systematic shares' own integer results (issue 23: never discarded for dtype)
    out = await dask_bacc.map_coded(
        lambda d: d * 3, ints, code="systematic-spline", wait=1.0, client=c, **opts
    )
    assert_equal(await result_of(c, out, kind), expected)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@gen_cluster(client=True, nthreads=EIGHT)
async def test_berrut_with_gated_stragglers(c, s, *workers, kind):
    df = make_frame(40, seed=1)
    data = make_input(kind, df, 4)
    opts = {"n_blocks": 4} if kind.startswith("pandas") else {}
    # the references first: plain tasks submitted later may queue behind the blocked threads
    expected = await plain(c, kind, rowwise, data, 4)
    raw = data if kind.startswith("pandas") else await c.compute(data)
    slow = workers[:2]
    names = [w.name for w in slow]
    gate = await gate_stragglers(workers=names, interruptible=False, client=c)
    job = await dask_bacc.submit_coded(
        rowwise, data, n_coded=8, wait=6, code="berrut", client=c, **opts
    )
    out = await job
    rep = job.report
    # decoded while the two stragglers are still held
    assert all(w.state.executing_count == 1 for w in slow)
    assert rep.status == "finished" and len(rep.returned) == 6
    if kind.startswith("dask"):
        # labels, dtypes and partitions are there before any value is computed
        assert out.divisions == data.divisions
        assert_equal(out._meta, expected.iloc[:0])
    # a lazy output's partitions run where the decode ran, not behind a blocked thread
    got = await result_of(c, out, kind)
    assert all(w.state.executing_count == 1 for w in slow)
    await gate.release()
    await gate.clear()
    assert got.shape == expected.shape
    pd.testing.assert_index_equal(got.index, expected.index)
    assert_equal(got.iloc[:0], expected.iloc[:0])  # names and dtypes
    # the values are the job's own decode of its returned set (blocks of 10 rows)
    blocks = frame_blocks(raw, n_blocks=4)
    assert_decodes_reference(
        np.asarray(got), rep, blocks.wrap(rowwise, (), {}), list(blocks.stacked())
    )
    assert np.abs(np.asarray(got) - np.asarray(expected)).mean() < 0.2
    # a reduction: each block's labels (column names, or 0 for a scalar per block)
    expected = await plain(c, kind, reduce, data, 4)
    async with gate_stragglers(workers=names, interruptible=False, client=c):
        job = await dask_bacc.submit_coded(
            reduce, data, n_coded=8, wait=6, code="berrut", client=c, **opts
        )
        out = await job
        if kind.startswith("dask"):
            assert_equal(out._meta, expected.iloc[:0])
        got = await result_of(c, out, kind)
    assert job.report.status == "finished" and len(job.report.returned) == 6
    pd.testing.assert_index_equal(got.index, expected.index)
    assert got.name == expected.name and got.dtype == np.float64
    assert np.abs(got.to_numpy() - expected.to_numpy()).mean() < 0.2
    await idle(workers)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_ragged_partitions(c, s, *workers):
    df = make_frame(10, seed=2)
    ddf = dd.from_pandas(df, npartitions=3)  # 4, 3, 3 rows
    uneven = ddf.repartition(divisions=[df.index[0], df.index[1], df.index[6], df.index[9]])
    for data in (ddf, uneven, ddf["b"]):
        out = await dask_bacc.map_coded(rowwise, data, code="repetition", client=c)
        assert out.divisions == data.divisions
        assert_equal(await c.compute(out), await c.compute(data.map_partitions(rowwise)))
        # Berrut over padded blocks: the padding is trimmed, labels are the input's
        approx = await c.compute(
            await dask_bacc.map_coded(rowwise, data, code="systematic-spline", client=c)
        )
        whole = await c.compute(data)
        pd.testing.assert_index_equal(approx.index, whole.index)
        assert np.abs(np.asarray(approx) - np.asarray(rowwise(whole))).mean() < 0.2
    for func in (reduce, scalar):
        # a code that mixes blocks needs equal ones for a reduction...
        job = await dask_bacc.submit_coded(func, ddf, code="berrut", client=c)
        with pytest.raises(ValueError, match=r"unequal lengths \[4, 3, 3\].*repartition"):
            await job
        # ...repetition copies each partition's task: plain Dask's answer (issue 25)
        out = await dask_bacc.map_coded(func, ddf, code="repetition", client=c)
        assert_equal(await c.compute(out), await c.compute(ddf.map_partitions(func)))
    # pandas: row-wise over blocks of 4, 3, 3 rows equals f on the whole frame
    out = await dask_bacc.map_coded(rowwise, df, n_blocks=3, code="repetition", client=c)
    pd.testing.assert_frame_equal(out, rowwise(df))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_empty_partition_is_trimmed_to_nothing(c, s, *workers):
    df = pd.DataFrame({"a": np.arange(8.0)})
    ddf = dd.from_pandas(df, npartitions=2)
    ddf = ddf[ddf.a >= 4]  # the first partition is empty
    parts = await c.gather(c.compute(ddf.to_delayed()))
    assert [len(p) for p in parts] == [0, 4]
    out = await dask_bacc.map_coded(np.log, ddf, code="repetition", client=c)
    pd.testing.assert_frame_equal(await c.compute(out), np.log(df.iloc[4:]))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_meta_is_used(c, s, *workers):
    df = make_frame(16, seed=3)

    def renamed(d):
        # fails on the client: proves meta= skips the output inference
        get_worker()
        return (d * 2).rename(columns={"a": "x", "b": "y"})

    meta = {"x": "f8", "y": "f8"}
    out = await dask_bacc.map_coded(renamed, df, meta=meta, n_blocks=4, code="repetition", client=c)
    pd.testing.assert_frame_equal(out, (df * 2).rename(columns={"a": "x", "b": "y"}))
    ddf = dd.from_pandas(df, npartitions=4)
    out = await dask_bacc.map_coded(renamed, ddf, meta=meta, code="repetition", client=c)
    assert list(out.columns) == ["x", "y"]
    pd.testing.assert_frame_equal(
        await c.compute(out), (df * 2).rename(columns={"a": "x", "b": "y"})
    )
    # f returns a Series for a DataFrame: named as f names it, the rows keep their labels
    out = await dask_bacc.map_coded(lambda d: d["a"] - d["b"], ddf, code="repetition", client=c)
    pd.testing.assert_series_equal(await c.compute(out), df["a"] - df["b"])
    # meta for a reduction: the labels of an empty meta are 0..r-1 per block
    out = await dask_bacc.map_coded(
        lambda d: d.sum().to_frame().T,
        ddf,
        meta={"a": "f8", "b": "f8"},
        code="repetition",
        client=c,
    )
    expected = ddf.map_partitions(lambda d: d.sum().to_frame().T)
    pd.testing.assert_frame_equal(await c.compute(out), await c.compute(expected))
    # meta that does not match f: the user's error, raised (issue 23), none averaged in
    job = await dask_bacc.submit_coded(
        lambda d: d * 2, df, meta={"x": "f8"}, n_blocks=4, code="repetition", client=c
    )
    with pytest.raises(ValueError, match=r"returned columns \['a', 'b'\]"):
        await job
    assert job.report.status == "error"
    # a column selection: f sees only those columns
    out = await dask_bacc.map_coded(
        lambda d: d * 2, df.assign(s="x"), columns=["b"], n_blocks=4, code="repetition", client=c
    )
    pd.testing.assert_frame_equal(out, df[["b"]] * 2)


# A mixing code needs numbers: a code that copies partitions (repetition, the default)
# runs any pandas frame, so these name the code whose requirement they test.
MIXING = {"code": "systematic-spline"}
BAD_FRAMES = [
    # (description, options, error, message fragment, also for dask input)
    ("wrong meta type", {"meta": object()}, TypeError, "meta must be", True),
    ("meta of strings", {"meta": {"x": "object"}, **MIXING}, TypeError, "non-numeric", True),
    ("columns a string", {"columns": "a"}, TypeError, "list of column labels", True),
    ("unknown column", {"columns": ["nope"]}, ValueError, "not in the data", True),
    ("dim", {"dim": "x"}, ValueError, "dim applies to xarray", True),
    ("f fails on mock", {"func": lambda d: d["nope"]}, ValueError, "meta=", True),
    (
        "non-numeric column",
        {"frame": pd.DataFrame({"s": ["x"] * 4}), **MIXING},
        TypeError,
        "'s'",
        True,
    ),
    (
        "categorical",
        {"frame": pd.DataFrame({"k": pd.Categorical([1, 2] * 2)}), **MIXING},
        TypeError,
        "cat.codes",
        True,
    ),
    (
        "datetime",
        {"frame": pd.DataFrame({"t": pd.date_range("2024", periods=4)}), **MIXING},
        TypeError,
        "int64",
        True,
    ),
    # data values are only seen on the workers for dask input (see the NaN test)
    (
        "NaN, a code that mixes blocks",
        {"frame": pd.DataFrame({"a": [1.0, np.nan, 2.0, 3.0]}), "code": "berrut"},
        ValueError,
        "fillna",
        False,
    ),
    (
        "NA, any code",
        {"frame": pd.DataFrame({"a": pd.array([1, None, 2, 3], dtype="Int64")})},
        ValueError,
        "fillna",
        False,
    ),
    ("ragged reduction", {"func": reduce, "n_blocks": 3}, ValueError, "n_blocks=2", False),
    ("n_blocks for dask", {"n_blocks": 2}, ValueError, "repartition", None),
]


def _bad_frame_params():
    for description, options, error, match, dask_too in BAD_FRAMES:
        if dask_too is not None:
            yield pytest.param(False, options, error, match, id=f"pandas-{description}")
        if dask_too is not False:
            yield pytest.param(True, options, error, match, id=f"dask-{description}")


@pytest.mark.parametrize(("lazy", "options", "error", "match"), list(_bad_frame_params()))
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_bad_frames_rejected_before_submission(c, s, *workers, lazy, options, error, match):
    options = dict(options)
    frame = options.pop("frame", make_frame(10))
    func = options.pop("func", rowwise)
    if lazy:
        frame = dd.from_pandas(frame, npartitions=2)
    with pytest.raises(error, match=match):
        await dask_bacc.submit_coded(func, frame, client=c, **options)
    assert not s.tasks  # nothing reached the scheduler


@pytest.mark.slow
@pytest.mark.parametrize("code", ["repetition", "hedged", "speculative"])
@gen_cluster(client=True, nthreads=EIGHT)
async def test_codes_that_copy_blocks_pass_nan_and_inf_in_pandas_as_plain_dask(
    c, s, *workers, code
):
    """Issue 40, item 5: NaN and inf in pandas data and in f's output come back where
    pandas puts them, with the input's index and dtypes, under the exact codes that
    copy blocks (in memory, and kept with encode())."""
    df = pd.DataFrame(
        {"a": [1.0, np.nan, 2.0, -3.0, 0.0, np.inf, 5.0, 6.0], "n": np.arange(8)},
        index=list("abcdefgh"),
    )
    expected = quiet_log(df)  # rowwise: what a map over any partitioning gives
    got = await (await dask_bacc.submit_coded(quiet_log, df, code=code, n_blocks=4, client=c))
    pd.testing.assert_frame_equal(got, expected)
    series = await (
        await dask_bacc.submit_coded(quiet_log, df["a"], code=code, n_blocks=4, client=c)
    )
    pd.testing.assert_series_equal(series, expected["a"])
    data = await dask_bacc.encode(df, code=code, n_blocks=4, client=c)
    pd.testing.assert_frame_equal(await (await data.submit(quiet_log)), expected)
    data.release()


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_nan_in_pandas_is_refused_by_the_codes_that_mix_blocks(c, s, *workers):
    df = pd.DataFrame({"a": [1.0, np.nan, 2.0, 3.0] * 2, "b": np.arange(8.0)})
    with pytest.raises(ValueError, match=r"missing values.*\['a'\].*fillna"):
        await dask_bacc.submit_coded(np.tanh, df, code="berrut", n_blocks=4, client=c)
    with pytest.raises(ValueError, match=r"inf values.*\['b'\]"):
        await dask_bacc.encode(
            df.fillna(0.0).assign(b=np.inf), code="systematic-spline", n_blocks=4, client=c
        )
    assert not s.tasks  # refused on the client, before anything was submitted


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_nan_in_dask_partitions_raises_value_error(c, s, *workers):
    df = pd.DataFrame({"a": [1.0, 2.0, np.nan, 4.0], "b": np.arange(4.0)})
    # a mixing code's need (repetition copies each partition's task: NaN in, NaN out)
    job = await dask_bacc.submit_coded(
        np.tanh, dd.from_pandas(df, npartitions=2), code="systematic-spline", client=c
    )
    with pytest.raises(ValueError, match=r"partition 1 has missing values.*'a'.*fillna"):
        await job


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_bool_categorical_and_datetime_columns(c, s, *workers):
    df = pd.DataFrame(
        {
            "flag": [True, False, True, True] * 3,
            "kind": pd.Categorical(["lo", "hi", "mid"] * 4),
            "when": pd.date_range("2024-01-01", periods=12, freq="D"),
            "n": pd.array(range(12), dtype="Int64"),
        }
    )
    # booleans are numbers: an all-bool frame round-trips as bool with an exact code
    out = await dask_bacc.map_coded(
        lambda d: ~d, df[["flag"]], n_blocks=4, code="repetition", client=c
    )
    pd.testing.assert_frame_equal(out, ~df[["flag"]])
    # under Berrut f sees float mixtures of 0/1, and the output is float64
    # (wait=1.0: decoding from every result keeps the error independent of arrival order)
    out = await dask_bacc.map_coded(
        lambda d: d * 1.0, df[["flag"]], n_blocks=4, code="systematic-spline", wait=1.0, client=c
    )
    assert out.dtypes.tolist() == [np.float64]
    np.testing.assert_allclose(out["flag"], df["flag"].astype(float), atol=0.25)
    # categorical and datetime columns: converted by the user, e.g. codes and int64
    converted = pd.DataFrame(
        {"kind": df["kind"].cat.codes, "when": df["when"].astype("int64") // 10**9}
    )
    out = await dask_bacc.map_coded(
        lambda d: d - d.min(), converted, n_blocks=4, code="repetition", client=c
    )
    pd.testing.assert_frame_equal(
        out, per_block(lambda d: d - d.min(), converted, 4).astype(np.int64)
    )
    # nullable integers without missing values: f sees int64; an exact code gives the
    # plain map's nullable Int64 back
    out = await dask_bacc.map_coded(
        lambda d: d + 1, df["n"], n_blocks=4, code="repetition", client=c
    )
    pd.testing.assert_series_equal(out, df["n"] + 1)
    with pytest.raises(TypeError, match=r"'kind' \(category\), 'when' \(datetime64"):
        await dask_bacc.submit_coded(
            np.tanh, dd.from_pandas(df, npartitions=2), code="systematic-spline", client=c
        )


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_speculative_on_frames(c, s, *workers):
    df = make_frame(12, seed=4)
    out = await dask_bacc.map_coded(rowwise, df, n_blocks=3, code="speculative", client=c)
    pd.testing.assert_frame_equal(out, rowwise(df))
    ddf = dd.from_pandas(df, npartitions=3)
    out = await dask_bacc.map_coded(reduce, ddf, code="speculative", client=c)
    pd.testing.assert_series_equal(
        await c.compute(out), await c.compute(ddf.map_partitions(reduce))
    )


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_encoded_frames_map_many_functions(c, s, *workers):
    """dask_bacc.encode keeps the shares; each map learns its own function's output."""
    df = make_frame(16, seed=5)
    for data in (df, dd.from_pandas(df, npartitions=4)):
        lazy = not isinstance(data, pd.DataFrame)
        with await dask_bacc.encode(
            data, code="repetition", n_blocks=None if lazy else 4, client=c
        ) as coded:
            rows = await coded.map(rowwise)
            sums = await coded.map(lambda d: d.sum())
            named = await coded.map(lambda d: d["a"] * 2, meta=("twice", "f8"))
            rows, sums, named = [
                await result_of(c, o, "dask" if lazy else "pandas") for o in (rows, sums, named)
            ]
        pd.testing.assert_frame_equal(rows, rowwise(df))
        pd.testing.assert_series_equal(sums, per_block(lambda d: d.sum(), df, 4))
        pd.testing.assert_series_equal(named, (df["a"] * 2).rename("twice"))
