"""Integer data keeps its precision on every path (issue 24, item 2).

float64 holds every integer up to 2**53 exactly, and rounds larger ones. An exact answer
(``report.estimate_method == "exact"``) must not come from data that went through float64
on the way: where the decode can keep integers exact (copies selected, per-column dtypes
restored), it does; where the values would be rounded first (columns of mixed dtypes
stacked into one float64 array, an exact code that mixes blocks), the job is refused
before anything runs, naming the column or variable and its dtype.

The tests docs/reliability.md names failed before the change (wrong integers labelled
exact, or no error); the two under "what still works" guard what must not be refused.
"""

from __future__ import annotations

import sys

import cloudpickle
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cluster_helpers import gen_cluster

import dask_bacc
from dask_bacc.codes import LagrangeCode, get_code

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FOUR = [("127.0.0.1", 1)] * 4
#: integers float64 cannot hold: 2**60 + 1 rounds to 2**60
BIG = 2**60 + 1
X = np.arange(8, dtype=np.int64) + BIG


def ints(values):
    """The values as Python ints (a comparison that cannot go through float64)."""
    return [int(v) for v in np.asarray(values).ravel()]


def mixed_frame():
    return pd.DataFrame({"i": X, "f": np.arange(8.0)})


def mixed_dataset():
    return xr.Dataset({"i": ("x", X), "f": ("x", np.arange(8.0))})


def identity(obj):
    return obj


EXACT_CODES = ["repetition", "systematic-spline", "systematic-berrut", "lagrange"]


# -- mixed dtypes: integer columns/variables beside float ones --------------------------------
@pytest.mark.parametrize("code", [*EXACT_CODES, "berrut"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_pandas_int_column_beyond_2_53_beside_floats_is_refused(c, s, *workers, code):
    """The columns are coded as one float64 array: f would see, and an exact decode return,
    rounded integers. Refused before submission, naming the column and its dtype."""
    with pytest.raises(ValueError, match=r"'i' \(int64\).*2\*\*53.*astype"):
        await dask_bacc.submit_coded(
            identity, mixed_frame(), n_blocks=2, n_coded=4, wait=4, code=code, client=c
        )
    assert not s.tasks


@gen_cluster(client=True, nthreads=FOUR)
async def test_dask_dataframe_int_column_beyond_2_53_beside_floats_is_refused(c, s, *workers):
    """A dask partition's values are seen on the cluster: the partition's block task
    refuses it, and the job raises the ValueError instead of a wrong exact answer."""
    ddf = dd.from_pandas(mixed_frame(), npartitions=2)
    job = await dask_bacc.submit_coded(
        identity, ddf, n_coded=4, wait=4, code="systematic-spline", client=c
    )
    with pytest.raises(ValueError, match=r"'i' \(int64\).*2\*\*53"):
        await job


@gen_cluster(client=True, nthreads=FOUR)
async def test_dask_dataframe_int_column_beyond_2_53_is_kept_exactly_by_repetition(c, s, *workers):
    """Repetition on a dask DataFrame copies the partitions' own tasks: pandas end to end,
    no float64 anywhere, so the integers come back bit for bit (it refused them before)."""
    ddf = dd.from_pandas(mixed_frame(), npartitions=2)
    out = await dask_bacc.submit_coded(identity, ddf, code="repetition", client=c)
    got = await c.compute(await out)
    pd.testing.assert_frame_equal(got, mixed_frame(), check_exact=True)


@gen_cluster(client=True, nthreads=FOUR)
async def test_encode_of_a_mixed_frame_beyond_2_53_is_refused(c, s, *workers):
    """``dask_bacc.encode(...)`` adapts the data the same way: refused before any share."""
    with pytest.raises(ValueError, match=r"'i' \(int64\)"):
        await dask_bacc.encode(mixed_frame(), n_blocks=2, n_coded=4, code="repetition", client=c)
    assert not s.tasks


@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("code", ["repetition", "systematic-spline"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_xarray_int_variable_beyond_2_53_beside_floats_is_refused(
    c, s, *workers, code, chunked
):
    """In memory: refused before submission. Dask-backed: the block task that builds a
    chunk's flat array refuses it on the cluster, and the job raises that ValueError."""
    if not chunked:
        with pytest.raises(ValueError, match=r"'i' \(int64\).*2\*\*53.*astype"):
            await dask_bacc.submit_coded(
                identity, mixed_dataset(), n_blocks=2, n_coded=4, wait=4, code=code, client=c
            )
        assert not s.tasks
        return
    ds = mixed_dataset().chunk({"x": 4})
    job = await dask_bacc.submit_coded(identity, ds, n_coded=4, wait=4, code=code, client=c)
    with pytest.raises(ValueError, match=r"'i' \(int64\).*2\*\*53"):
        await job


@gen_cluster(client=True, nthreads=FOUR)
async def test_list_of_int_and_float_blocks_beyond_2_53_is_refused(c, s, *workers):
    blocks = [X[:4], np.arange(4.0)]
    with pytest.raises(ValueError, match=r"block 0 \(int64\).*2\*\*53"):
        await dask_bacc.submit_coded(
            identity, blocks, n_coded=4, wait=4, code="repetition", client=c
        )
    assert not s.tasks


def with_half(obj):
    """f adding a float column/variable beside the integer one."""
    return obj.assign(g=obj["i"] * 0.5)


@pytest.mark.parametrize("kind", ["frame", "dataset"])
@pytest.mark.parametrize("code", ["repetition", "systematic-spline"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_int_output_beyond_2_53_beside_float_output_is_refused(c, s, *workers, code, kind):
    """f's output is decoded as one array per block: an integer column or variable beyond
    2**53 beside a float one would come back rounded (before: off by up to 8, labelled
    exact, as int64 for a frame under repetition). The job raises a ValueError naming it."""
    data = pd.DataFrame({"i": X}) if kind == "frame" else xr.Dataset({"i": ("x", X)})
    job = await dask_bacc.submit_coded(
        with_half, data, n_blocks=2, n_coded=4, wait=4, code=code, client=c
    )
    with pytest.raises(ValueError, match=r"f's output.*'i' \(int64\).*2\*\*53.*float64"):
        await job


# -- what still works ---------------------------------------------------------------------------
@pytest.mark.parametrize("code", ["repetition", "systematic-spline"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_integer_frames_and_datasets_beyond_2_53_stay_exact(c, s, *workers, code):
    """Integer-only data is coded in its integer dtype: copies and systematic shares carry
    it as it is, and the exact decode selects f's results (no refusal, exact digits)."""
    df = pd.DataFrame({"i": X, "j": X[::-1].copy()})
    job = await dask_bacc.submit_coded(
        identity, df, n_blocks=2, n_coded=4, wait=4, code=code, client=c
    )
    out = await job
    assert job.report.estimate_method == "exact"
    assert ints(out["i"]) == ints(X) and ints(out["j"]) == ints(X[::-1])
    ds = xr.Dataset({"i": ("x", X), "j": ("x", X + 2)})
    job = await dask_bacc.submit_coded(
        identity, ds, n_blocks=2, n_coded=4, wait=4, code=code, client=c
    )
    out = await job
    assert job.report.estimate_method == "exact"
    assert ints(out["i"]) == ints(X) and ints(out["j"]) == ints(X + 2)


@gen_cluster(client=True, nthreads=FOUR)
async def test_mixed_frames_within_2_53_and_explicit_casts_still_run(c, s, *workers):
    """Integers up to 2**53 beside floats are exact in float64 (repetition gives them back
    as int64); the refusal's advice, an explicit cast to float, runs."""
    small = pd.DataFrame({"i": np.arange(8, dtype=np.int64) + 2**53 - 8, "f": np.arange(8.0)})
    out = await dask_bacc.map_coded(
        identity, small, n_blocks=2, n_coded=4, wait=4, code="repetition", client=c
    )
    assert out["i"].dtype == np.int64 and ints(out["i"]) == ints(small["i"])
    cast = mixed_frame().astype({"i": "float64"})
    out = await dask_bacc.map_coded(
        identity, cast, n_blocks=2, n_coded=4, wait=4, code="repetition", client=c
    )
    pd.testing.assert_frame_equal(out, cast)


# -- Lagrange: an exact code that mixes blocks -------------------------------------------------
def test_lagrange_encode_refuses_integers_beyond_2_53():
    """A mixed share of such integers cannot be formed exactly in float64, yet the decode
    would be labelled exact: the code refuses them, naming the dtype."""
    code = LagrangeCode(2, 4)
    with pytest.raises(ValueError, match=r"int64.*2\*\*53.*astype\(float\).*repetition"):
        code.encode(X.reshape(2, 4))
    with pytest.raises(ValueError, match=r"uint64"):
        code.shares(X.astype(np.uint64).reshape(2, 4))
    # integers that float64 holds are encoded (exactly up to the code's own rounding)
    small = np.arange(8, dtype=np.int64).reshape(2, 4) + 2**53 - 8
    decoded = code.decode(code.encode(small), [0, 1, 2, 3])
    np.testing.assert_allclose(decoded, small, rtol=1e-12)
    # codes that copy, and approximate codes, are not refused
    for name in ("repetition", "systematic-spline", "berrut"):
        get_code(name, 2, 4).shares(X.reshape(2, 4))


@pytest.mark.parametrize("kind", ["numpy", "list", "dataarray", "frame", "encode"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_lagrange_job_refuses_integers_beyond_2_53(c, s, *workers, kind):
    """Before: ``map_coded(lambda b: b - 2**60, X, code="lagrange")`` returned integers off
    by up to 1, labelled exact. Now a ValueError naming the dtype, nothing submitted."""

    def shift(b):
        return b - 2**60

    data = {
        "numpy": X,
        "list": [X[:4], X[4:]],
        "dataarray": xr.DataArray(X, dims="x"),
        "frame": pd.DataFrame({"i": X, "j": X + 1}),
        "encode": X,
    }[kind]
    options = {} if kind == "list" else {"n_blocks": 2}
    with pytest.raises(ValueError, match=r"int64.*2\*\*53"):
        if kind == "encode":
            coded = await dask_bacc.encode(data, n_coded=4, code="lagrange", client=c, **options)
            coded.release()
        else:
            await dask_bacc.submit_coded(
                shift, data, n_coded=4, wait=4, code="lagrange", client=c, **options
            )
    assert not s.tasks


@pytest.mark.parametrize("kind", ["dask-array", "dask-frame", "encode"])
@gen_cluster(client=True, nthreads=FOUR)
async def test_lagrange_refuses_integers_beyond_2_53_encoded_on_the_cluster(c, s, *workers, kind):
    """Data on the cluster is encoded by the workers (no LagrangeCode.encode on the
    client): the dask array case returned integers off by up to 1, labelled exact."""
    import dask.array as da

    def shift(b):
        return b - 2**60

    data = {
        "dask-array": da.from_array(X, chunks=4),
        "dask-frame": dd.from_pandas(pd.DataFrame({"i": X, "j": X + 1}), npartitions=2),
        "encode": da.from_array(X, chunks=4),
    }[kind]
    with pytest.raises(ValueError, match=r"int64.*2\*\*53"):
        if kind == "encode":
            coded = await dask_bacc.encode(data, n_coded=4, code="lagrange", client=c)
            try:
                await coded.map(shift, wait=4)
            finally:
                coded.release()
        else:
            job = await dask_bacc.submit_coded(
                shift, data, n_coded=4, wait=4, code="lagrange", client=c
            )
            await job


def big_output(b):
    """Integers beyond 2**53 from data within it (not a polynomial: Lagrange mixes)."""
    return (np.asarray(b) > 3).astype(np.int64) + 2**60


@pytest.mark.parametrize("limit", ["1 GiB", 0])  # client decode, cluster decode
@gen_cluster(client=True, nthreads=FOUR)
async def test_an_exact_decode_that_would_round_integer_results_is_refused(c, s, *workers, limit):
    """Lagrange's decode mixes f's int64 results beyond 2**53 in float64: the answer came
    back rounded (as floats 1.1529215046068468e+18), labelled exact. Found by the fuzz."""
    import dask

    data = np.arange(8, dtype=np.int64)
    with dask.config.set({"bacc.client-decode-limit": limit}):
        with pytest.raises(ValueError, match=r"integers beyond 2\*\*53 .* labelled exact"):
            await dask_bacc.map_coded(
                big_output, data, n_blocks=2, n_coded=4, wait=4, code="lagrange", client=c
            )
        # a decode that selects results keeps every digit
        out = await dask_bacc.map_coded(
            big_output, data, n_blocks=2, n_coded=4, code="repetition", client=c
        )
    assert out.dtype == np.int64 and ints(out) == ints(big_output(data))
