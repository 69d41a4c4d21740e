"""The codes that mix blocks: no silent wrong answer through ``coded()`` (issue 41).

Each case came from dask's and xarray's own tests run through ``coded()`` under the codes
that mix blocks (``benchmarks/upstream_cases.py``), where the answer differed from plain
Dask without a word. Each is now refused with its real cause, and the test follows the
refusal's advice and checks the call then runs (an exact code then equals plain Dask).
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
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import dask_bacc
from dask_bacc.collections.base import lossy_cast

cloudpickle.register_pickle_by_value(sys.modules[__name__])

SIX = [("127.0.0.1", 1)] * 6
MIXING = ["systematic-spline", "bspline", "berrut"]


async def error_of(c, collection):
    """``(type, message)`` of the error computing ``collection`` raises (None if none)."""
    from distributed import wait

    future = c.compute(collection)
    await wait(future)
    exc = await future.exception() if future.status == "error" else None
    return None if exc is None else (type(exc), str(exc))


async def assert_within_estimate(c, z, got, want):
    """The documented rule for an approximate answer: the labels of plain Dask's, and a
    relative error within twice the job's own estimate, or a warning."""
    if isinstance(want, (pd.DataFrame, pd.Series)):
        pd.testing.assert_index_equal(got.index, want.index)
    report = await dask_bacc.report_of(z, c)
    a, b = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    error = np.linalg.norm(a - b) / np.linalg.norm(b)
    warned = any(w.startswith("ApproximationWarning") for w in report.warnings)
    assert warned or error <= 2 * (report.error_estimate or 0) + 1e-12, (error, report)


# -- item 2: values the declared dtype cannot hold ------------------------------------------
@given(
    hnp.arrays(
        st.sampled_from([np.float64, np.float32, np.int64, np.int32]),
        hnp.array_shapes(max_dims=2, max_side=5),
    ),
    st.sampled_from([np.int64, np.int16, np.uint8, np.bool_, np.float32, np.float64]),
)
def test_lossy_cast_is_none_exactly_when_the_cast_keeps_every_value(values, dtype):
    found = lossy_cast(values, dtype)
    with np.errstate(all="ignore"):
        back = values.astype(dtype).astype(values.dtype)
    kept = np.array_equal(back, values, equal_nan=values.dtype.kind == "f")
    if values.dtype.kind == "i" and np.dtype(dtype).kind == "f":
        assert found is None  # integers beyond 2**53: refused apart, with their own advice
    elif kept:
        assert found is None, (values, dtype, found)
    else:
        assert found in (
            "NaN",
            "inf",
            "fractions",
            "values out of its range",
            "values other than 0 and 1",
        ), found


def _lying_frame(kind: str):
    """A dask DataFrame whose meta types both columns int64, but whose partitions hold
    NaN (``kind="nan"``) or fractions in column 'x': an earlier map declared the wrong
    meta, as dask's own tests do."""
    pdf = pd.DataFrame({"x": np.arange(40, dtype="i8"), "y": np.arange(40, dtype="i8") * 2})
    ddf = dd.from_pandas(pdf, npartitions=4)
    if kind == "nan":
        return ddf.map_partitions(lambda d: d.assign(x=d.x.where(d.x % 3 > 0)), meta=pdf[:0])
    return ddf.map_partitions(lambda d: d.assign(x=d.x / 4), meta=pdf[:0])


@pytest.mark.parametrize("code", MIXING)
@pytest.mark.parametrize("kind", ["nan", "fractions"])
@gen_cluster(client=True, nthreads=SIX)
async def test_frame_values_its_meta_cannot_hold_are_refused_by_column(c, s, *w, code, kind):
    """Before: NaN in a column the meta types int64 came back as -9.22e18, and fractions
    truncated, with no error (the partition was cast to the meta's dtype to be coded)."""
    y = _lying_frame(kind).map_partitions(lambda d: d + 1)
    error = await error_of(c, dask_bacc.coded(y, code=code))
    assert error is not None, "decoded a partition cast from values its meta cannot hold"
    found = "NaN" if kind == "nan" else "fractions"
    assert issubclass(error[0], ValueError)
    assert f"column 'x' holds {found} in dtype float64" in error[1], error[1]
    assert "declares it int64" in error[1] and "code='repetition'" in error[1]
    plain = await c.compute(y)
    # the advice: declare the real dtype (and fill NaN) ...
    fixed = _lying_frame(kind).astype("float64")
    if kind == "nan":
        fixed = fixed.fillna(0)
    z = dask_bacc.coded(fixed.map_partitions(lambda d: d + 1), code=code)
    got = await c.compute(z)
    want = await c.compute(fixed.map_partitions(lambda d: d + 1))
    await assert_within_estimate(c, z, got, want)
    # ... or an exact code, which equals plain Dask
    exact = await c.compute(dask_bacc.coded(y, code="repetition"))
    pd.testing.assert_frame_equal(exact, plain)


@pytest.mark.parametrize("code", MIXING)
@gen_cluster(client=True, nthreads=SIX)
async def test_xarray_values_its_template_cannot_hold_are_refused(c, s, *w, code):
    a = xr.DataArray(np.arange(40), dims="t", name="v").chunk(t=10)
    lying = xr.map_blocks(lambda o: o.where(o % 3 > 0), a, template=a)  # int64 template
    y = xr.map_blocks(lambda o: o + 1, lying, template=lying)
    error = await error_of(c, dask_bacc.coded(y, code=code))
    assert error is not None, "decoded a chunk cast from NaN to int64"
    assert "variable 'v' holds NaN in dtype float64" in error[1], error[1]
    assert "declares it int64" in error[1]
    exact = await c.compute(dask_bacc.coded(y, code="repetition"))
    xr.testing.assert_identical(exact, await c.compute(y))


# -- item 3: xr.map_blocks' checks on f's result --------------------------------------------
def _field():
    return xr.DataArray(
        np.arange(40.0).reshape(20, 2),
        dims=("t", "y"),
        coords={"t": np.arange(20), "y": [10, 20]},
        name="v",
    ).chunk(t=5)


XARRAY_CHECKS = {
    "unexpected coordinate": lambda a: xr.map_blocks(
        lambda o: o.assign_coords(c=10), a, template=a
    ),
    "missing coordinate": lambda a: xr.map_blocks(lambda o: o.drop_vars("y"), a, template=a),
    "unexpected data variable": lambda a: xr.map_blocks(
        lambda o: o.assign(w=o.v * 2), a.to_dataset(), template=a.to_dataset()
    ),
    "missing dimension": lambda a: xr.map_blocks(lambda o: o.isel(y=0), a, template=a),
}


@pytest.mark.parametrize("code", MIXING)
@pytest.mark.parametrize("case", sorted(XARRAY_CHECKS))
@gen_cluster(client=True, nthreads=SIX)
async def test_xarray_map_blocks_checks_raise_as_plain_xarray(c, s, *w, code, case):
    """Before: the coded output took the template's layout and returned without error
    where plain ``xr.map_blocks`` raises; now the same ValueError, with xarray's message."""
    y = XARRAY_CHECKS[case](_field())
    plain = await error_of(c, y)
    assert plain is not None and plain[0] is ValueError, plain
    assert await error_of(c, dask_bacc.coded(y, code=code)) == plain


# -- item 4: each refusal names its real cause, and its advice runs --------------------------
@gen_cluster(client=True, nthreads=SIX)
async def test_a_new_axis_in_front_of_the_rows_is_refused_by_name_and_the_advice_runs(c, s, *w):
    """Before: ``b[None]`` / ``new_axis=0`` on an array chunked along axis 0 only was
    refused as "chunked along axes other than 0", and the rechunk it advised changed
    nothing."""
    import dask.array as da

    from dask_bacc import RewriteError

    x = da.from_array(np.arange(32.0).reshape(8, 4), chunks=(2, 4))
    for y in (
        x.map_blocks(lambda b: b[None], new_axis=0, dtype=float),
        da.map_blocks(lambda b: b[None], x, chunks=((1,), *x.chunks), dtype=float),
    ):
        with pytest.raises(RewriteError, match=r"blocks along axis 1.*new_axis=0") as err:
            dask_bacc.coded(y, code="bspline")
        assert "other than 0" not in str(err.value)
        # the advice: the new axis after the rows, moved after coding
        z = dask_bacc.coded(x.map_blocks(lambda b: b[:, None], new_axis=1), code="bspline")
        got = await c.compute(da.moveaxis(z, 1, 0))
        want = await c.compute(y)
        assert got.shape == want.shape
        await assert_within_estimate(c, z, np.moveaxis(got, 0, 1), np.moveaxis(want, 0, 1))


@gen_cluster(client=True, nthreads=SIX)
async def test_a_scalar_per_block_is_refused_by_name_and_the_advice_runs(c, s, *w):
    """Before: the refusal named ``combine=``, which ``coded()`` does not take."""
    import dask.array as da

    x = da.from_array(np.arange(32.0).reshape(8, 4), chunks=(2, 4))
    y = x.map_blocks(lambda b: b.sum(), chunks=((1,) * 4, (1,)), dtype=float)
    error = await error_of(c, dask_bacc.coded(y, code="bspline"))
    assert error is not None and "0-d scalar per block" in error[1], error
    assert "keepdims=True" in error[1]
    fixed = x.map_blocks(lambda b: b.sum(keepdims=True), chunks=((1,) * 4, (1,)), dtype=float)
    z = dask_bacc.coded(fixed, code="bspline")
    await assert_within_estimate(c, z, await c.compute(z), await c.compute(fixed))


# -- item 1: filters and value-dependent lengths ---------------------------------------------
def _sevens():
    pdf = pd.DataFrame({"x": np.arange(24) % 7, "y": np.arange(24.0)})
    return pdf, dd.from_pandas(pdf, npartitions=4)


@pytest.mark.parametrize("code", ["berrut", "spline", "systematic-spline", "bspline"])
@pytest.mark.parametrize("with_meta", [False, True])
@gen_cluster(client=True, nthreads=SIX)
async def test_a_filter_every_mixed_share_agrees_on_is_refused(c, s, *w, code, with_meta):
    """Before: under berrut and spline every mixed share of ``d[d.x.isin([1, 2])]`` (a
    float mixture) matched nothing, every result had 0 rows, and the job returned 0 rows
    where plain Dask returns 8, with an estimate of 0.0 and no warning. Now f's length
    on real data (a result of a share of real data, or a probe of block 0) is compared
    with the mixed shares', whatever arrived first."""
    pdf, ddf = _sevens()
    meta = {"meta": pdf[:0]} if with_meta else {}
    y = ddf.map_partitions(lambda d: d[d.x.isin([1, 2])], **meta)
    error = await error_of(c, dask_bacc.coded(y, code=code))
    assert error is not None, "decoded a filter from mixtures of rows"
    assert error[0] is ValueError and "length depends on the values" in error[1], error
    assert "code='repetition'" in error[1]
    # the advice: an exact code, equal to plain Dask
    got = await c.compute(dask_bacc.coded(y, code="repetition"))
    pd.testing.assert_frame_equal(got, await c.compute(y))


@pytest.mark.parametrize("code", ["berrut", "bspline"])
@gen_cluster(client=True, nthreads=SIX)
async def test_a_reduction_of_fixed_length_still_decodes(c, s, *w, code):
    """The check on real data lets a reduction through: its length is the same on real
    and on mixed blocks."""
    _, ddf = _sevens()
    y = ddf.map_partitions(lambda d: d.sum())
    z = dask_bacc.coded(y, code=code)
    await assert_within_estimate(c, z, await c.compute(z), await c.compute(y))


@gen_cluster(client=True, nthreads=SIX)
async def test_refusals_of_maps_with_no_input_or_several_outputs_name_them(c, s, *w):
    """Found by benchmarks/upstream_cases.py under every code that mixes blocks: a map
    without an array argument was refused with an internal ``KeyError``, and one output
    of a several-output ``apply_gufunc`` as "a MaterializedLayer layer". Each advice runs."""
    import dask.array as da

    from dask_bacc import RewriteError

    no_input = da.map_blocks(lambda: np.ones((2, 4)), chunks=((2,) * 4, (4,)), dtype=float)
    for made in (no_input, da.ones((8, 4), chunks=(2, 4))):
        with pytest.raises(RewriteError, match=r"no chunked input array.*da.ones") as err:
            dask_bacc.coded(made, code="bspline")
        assert "KeyError" not in str(err.value)
    data = da.from_array(np.arange(32.0).reshape(8, 4), chunks=(2, 4))
    with pytest.raises(RewriteError, match=r"holds its data.*no map over its blocks"):
        dask_bacc.coded(data, code="bspline")  # was "a MaterializedLayer layer"
    # the advice: code the map that reads the blocks
    ones = da.ones((8, 4), chunks=(2, 4))
    z = dask_bacc.coded(ones.map_blocks(lambda b: b * 2), code="bspline")
    await assert_within_estimate(c, z, await c.compute(z), await c.compute(ones * 2))

    a = da.from_array(np.arange(16.0).reshape(8, 2), chunks=(2, 2))
    _, largest = da.apply_gufunc(
        lambda x: (x.sum(-1), x.max(-1)), "(i)->(),()", a, output_dtypes=(float, float)
    )
    with pytest.raises(RewriteError, match=r"takes output 1 of the map .* several arrays"):
        dask_bacc.coded(largest, code="bspline")
    whole = da.apply_gufunc(np.exp, "(i)->(i)", a[:, 0].rechunk(-1), output_dtypes=float)
    with pytest.raises(RewriteError, match=r"only relabels the blocks of the map"):
        dask_bacc.coded(whole, code="bspline")  # was "a MaterializedLayer layer"
    z = dask_bacc.coded(a[:, 0].rechunk(2).map_blocks(np.exp), code="bspline")
    await assert_within_estimate(c, z, await c.compute(z), await c.compute(whole))
    alone = da.apply_gufunc(lambda x: x.max(-1), "(i)->()", a, output_dtypes=float)
    z = dask_bacc.coded(alone, code="bspline")
    await assert_within_estimate(c, z, await c.compute(z), await c.compute(largest))


@gen_cluster(client=True, nthreads=SIX)
async def test_a_frame_refusal_names_the_operation_not_a_dask_expr_class(c, s, *w):
    pdf, ddf = _sevens()
    other = dd.from_pandas(pdf * 2, npartitions=2)
    y = dd.map_overlap(lambda a, b: a + b, ddf, 1, 1, other, align_dataframes=True)
    from dask_bacc import RewriteError

    with pytest.raises(RewriteError, match=r"dd.map_overlap over several DataFrames"):
        dask_bacc.coded(y, code="bspline")
    # the advice: an exact code, equal to plain Dask
    got = await c.compute(dask_bacc.coded(y, code="repetition"))
    pd.testing.assert_frame_equal(got, await c.compute(y))


@gen_cluster(client=True, nthreads=SIX)
async def test_a_filter_is_refused_when_the_shares_of_real_data_come_first(c, s, *w):
    """The verdict does not depend on the arrival order: with the mixed shares held, the
    shares of real data arrive first and decode exactly, and the job still compares a
    mixed share's length (when it lands) and refuses the filter."""
    import asyncio

    from cluster_helpers import until

    from dask_bacc.codes import get_code
    from dask_bacc.testing import gate_stragglers

    _, ddf = _sevens()
    real = get_code("systematic-spline", 4, 6).data_rows()
    mixed = [i for i in range(6) if i not in real]
    gate = await gate_stragglers(indices=mixed, client=c)
    try:
        job = asyncio.ensure_future(
            dask_bacc.map_coded(
                lambda d: d[d.x.isin([1, 2])], ddf, code="systematic-spline", n_coded=6, client=c
            )
        )

        def real_done():
            done = [k for k, t in s.tasks.items() if "bacc-eval" in str(k) and t.state == "memory"]
            return len(done) >= len(real)

        await until(real_done, "the shares of real data")
        assert not job.done()  # waiting for a mixed share's length
        await gate.release()
        with pytest.raises(ValueError, match="length depends on the values"):
            await job
    finally:
        await gate.clear()


@pytest.mark.parametrize("code", ["berrut", "spline", "systematic-spline"])
@gen_cluster(client=True, nthreads=SIX)
async def test_drop_duplicates_that_every_mixture_keeps_whole_is_refused(c, s, *w, code):
    """Before: under berrut and spline each partition dropped a duplicate row (3 of 4
    rows), but no mixture of partitions has duplicates, so every mixed share kept 4 rows,
    the output looked row-wise, and the job returned 12 rows where plain Dask returns 9,
    with an estimate of 0.06 and no warning. f on a real block (a share of real data, or
    block 0, run beside the coded tasks under a code without shares of real data) now
    shows the length."""
    parts = [pd.DataFrame({"x": np.roll([1.0, 1.0, 2.0, 3.0], k) + k}) for k in range(3)]
    ddf = dd.from_pandas(pd.concat(parts, ignore_index=True), npartitions=3, sort=False)
    y = ddf.map_partitions(lambda d: d.drop_duplicates())
    error = await error_of(c, dask_bacc.coded(y, code=code))
    assert error is not None, "decoded drop_duplicates from mixtures of rows"
    assert error[0] is ValueError and "length depends on the values" in error[1], error
    got = await c.compute(dask_bacc.coded(y, code="repetition"))
    pd.testing.assert_frame_equal(got, await c.compute(y))
