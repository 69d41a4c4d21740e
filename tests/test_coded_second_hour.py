"""Issue 28, items 2 and 3: ``coded()`` on a small cluster, and advice that can be followed.

What a new user met in their second hour: ``coded()`` on 2 chunks and 4 workers waited for
every result (no protection), its worker count left out the driver task's worker without
saying so, its errors came at compute time and advised options it does not take
(``n_blocks=``, ``columns=``, ``meta=``), and an ``f`` that reads the DatetimeIndex was
told to pass ``meta=`` when the rule is that ``f`` must not use the index.
"""

from __future__ import annotations

import inspect
import re
import sys

import cloudpickle
import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cluster_helpers import gen_cluster, idle

import dask_bacc
from dask_bacc import RewriteError
from dask_bacc.testing import gate_stragglers

cloudpickle.register_pickle_by_value(sys.modules[__name__])

FOUR = [("127.0.0.1", 1)] * 4


def tanh(block):
    return np.tanh(block)


def array(chunks: int) -> da.Array:
    X = np.random.default_rng(3).standard_normal((8, 3))
    return da.from_array(X, chunks=(8 // chunks, 3))


# -- item 2: small clusters -------------------------------------------------------------------
@gen_cluster(client=True, nthreads=FOUR)
async def test_two_chunks_on_four_workers_decode_without_a_straggler(c, s, *workers):
    """Berrut on 2 chunks gets N = 3 (the driver task's worker runs no coded task) and
    must not wait for all 3: the held coded task is not waited for."""
    x = array(2)
    y = x.map_blocks(tanh)
    async with gate_stragglers(indices=[1], client=c):
        z = dask_bacc.coded(y, code="berrut")
        out = await c.compute(z)
        rep = await dask_bacc.report_of(z, client=c)
    await idle(workers)
    assert (rep.K, rep.N) == (2, 3)
    assert rep.wait_target == 2 < rep.N
    assert rep.straggled == [1] and 1 not in rep.returned
    assert out.shape == y.shape and np.isfinite(out).all()


@gen_cluster(client=True, nthreads=FOUR[:3])
async def test_map_coded_on_three_workers_leaves_one_result_spare(c, s, *workers):
    """The same rule for map_coded (one concept, in the default wait): Berrut on 2 blocks
    and 3 workers has N = 3, and its default wait (ceil(0.75 * 3) = 3) would have been
    every result."""
    from dask_bacc.codes.registry import get_code
    from dask_bacc.runtime.wait import resolve_wait

    assert resolve_wait(None, get_code("berrut", 2, 3)).target(get_code("berrut", 2, 3)) == 2
    assert resolve_wait(None, get_code("berrut", 4, 8)).target(get_code("berrut", 4, 8)) == 6
    X = np.random.default_rng(3).standard_normal((8, 3))
    async with gate_stragglers(indices=[1], client=c):
        job = await dask_bacc.submit_coded(tanh, X, n_blocks=2, code="berrut", client=c)
        await job
    assert (job.report.N, job.report.wait_target) == (3, 2)
    assert job.report.straggled == [1]
    await idle(workers)


@gen_cluster(client=True, nthreads=FOUR)
async def test_too_many_chunks_for_the_workers_raises_at_coded_time(c, s, *workers):
    """8 chunks on 4 workers with an exact code that cannot copy the map's tasks
    (Lagrange): refused by coded() itself (nothing computed), counting all 4 workers and
    saying why one takes no coded task; its advice names only what coded() and dask
    take, and following it works. (An approximate code codes such chunks in groups:
    below, and tests/test_grouped.py.)"""
    y = array(8).map_blocks(tanh)
    with pytest.raises(ValueError) as info:
        dask_bacc.coded(y, code="lagrange")
    msg = str(info.value)
    assert "4 workers" in msg and "driver" in msg and "3 " in msg
    assert "n_blocks" not in msg
    assert "rechunk" in msg and "code='repetition'" in msg
    assert not s.tasks  # nothing was computed
    assert set(re.findall(r"\b([a-z_]+)=", msg)) <= ACCEPTED
    plain = await c.compute(y)
    # the advice: fewer, larger chunks before the map; or the exact code, in waves
    fewer = dask_bacc.coded(array(8).rechunk({0: 4}).map_blocks(tanh), code="berrut")
    out = await c.compute(fewer)
    assert (await dask_bacc.report_of(fewer, client=c)).K == 2
    assert out.shape == plain.shape and np.isfinite(out).all()
    exact = dask_bacc.coded(y, code="repetition")
    np.testing.assert_array_equal(await c.compute(exact), plain)
    # an approximate code: in groups, each group's shares on distinct workers, none on
    # the driver's worker
    grouped = dask_bacc.coded(y, code="berrut")
    out = await c.compute(grouped)
    rep = await dask_bacc.report_of(grouped, client=c)
    assert rep.code["name"] == "grouped" and rep.groups is not None
    assert len(set(rep.workers)) == 3
    start = 0
    for n in rep.code["shares"]:
        assert len(set(rep.workers[start : start + n])) == n
        start += n
    assert out.shape == plain.shape and np.isfinite(out).all()


@gen_cluster(client=True, nthreads=FOUR)
async def test_what_the_cluster_and_the_chunks_decide_raises_at_coded_time(c, s, *workers):
    """Options that cannot run on these chunks and workers raise when coded() is called,
    not when the collection is computed."""
    y = array(2).map_blocks(tanh)
    with pytest.raises(ValueError, match="6 distinct workers, but the cluster has 4"):
        dask_bacc.coded(y, code="berrut", n_coded=6)
    with pytest.raises(ValueError, match="wait=5 exceeds"):
        dask_bacc.coded(y, code="berrut", n_coded=3, wait=5)
    with pytest.raises(ValueError, match="must exceed the K=2"):
        dask_bacc.coded(y, code="berrut", n_coded=2)
    with pytest.raises(ValueError, match="n_coded and wait do not apply"):
        dask_bacc.coded(y, code="speculative", wait=2)
    assert not s.tasks


# -- item 3: advice that can be followed ---------------------------------------------------
def frame(index: pd.Index | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(5)
    df = pd.DataFrame(rng.standard_normal((16, 2)), columns=["a", "b"])
    if index is not None:
        df.index = index
    return df


def scale_ab(df):
    return df[["a", "b"]] * 2.0


def hour_weighted(df):
    return df[["a"]].mul(df.index.hour, axis=0)


@gen_cluster(client=True, nthreads=FOUR)
async def test_an_unused_string_column_gets_advice_that_works(c, s, *workers):
    df = frame().assign(name=[f"r{i}" for i in range(16)])
    ddf = dd.from_pandas(df, npartitions=2)
    with pytest.raises(TypeError) as info:
        dask_bacc.coded(ddf.map_partitions(scale_ab), code="berrut")
    msg = str(info.value)
    assert "'name'" in msg and "columns=" not in msg
    assert "ddf[['a', 'b']]" in msg and "code='repetition'" in msg
    plain = await c.compute(ddf.map_partitions(scale_ab))
    # the advice: select the numeric columns f uses before the map (Lagrange: exact
    # for this linear f) ...
    z = dask_bacc.coded(ddf[["a", "b"]].map_partitions(scale_ab), code="lagrange")
    pd.testing.assert_frame_equal(await c.compute(z), plain)
    # ... or the exact code, which runs the map as it is
    exact = dask_bacc.coded(ddf.map_partitions(scale_ab), code="repetition")
    pd.testing.assert_frame_equal(await c.compute(exact), plain)


def test_f_reading_the_datetime_index_is_told_f_must_not_use_it():
    """No cluster: refused when coded() is called, with the rule, not 'pass meta='."""
    times = pd.date_range("2024-01-01", periods=16, freq="h")
    ddf = dd.from_pandas(frame(times), npartitions=2)
    with pytest.raises(RewriteError) as info:
        dask_bacc.coded(ddf.map_partitions(hour_weighted), code="berrut")
    msg = str(info.value)
    assert "reads the index" in msg and "RangeIndex" in msg
    assert "meta=" not in msg


def needs_many_rows(df):
    """Fails on small blocks, such as dask's and coded()'s mock blocks: it needs meta=."""
    if len(df) < 5:
        raise ValueError("too few rows")
    return df * 2.0


@gen_cluster(client=True, nthreads=FOUR)
async def test_f_failing_on_the_mock_block_gets_advice_coded_accepts(c, s, *workers):
    """f that fails on the mock block coded() calls it on: refused when coded() is
    called, with advice coded() takes (not meta=, which map_partitions already has and
    coded() cannot pass on), and following it works."""
    ddf = dd.from_pandas(frame(), npartitions=2)
    y = ddf.map_partitions(needs_many_rows, meta=frame().iloc[:0])
    with pytest.raises(ValueError) as info:
        dask_bacc.coded(y, code="lagrange")
    msg = str(info.value)
    assert "too few rows" in msg and "meta=" not in msg and "code='repetition'" in msg
    assert not s.tasks
    exact = dask_bacc.coded(y, code="repetition")
    pd.testing.assert_frame_equal(await c.compute(exact), await c.compute(y))


# the parameters an error may tell the user to pass: coded()'s own and those of the calls
# its messages name (the map, the rechunk/repartition before it, the input's constructor)
ACCEPTED = {
    name
    for call in (
        dask_bacc.coded,
        dd.DataFrame.map_partitions,
        da.Array.map_blocks,
        da.Array.map_overlap,
        da.Array.rechunk,
        dd.DataFrame.repartition,
        dd.from_pandas,
        xr.map_blocks,
        xr.apply_ufunc,
    )
    for name in inspect.signature(call).parameters
}


def refusals() -> list[tuple[str, BaseException]]:
    """coded()'s refusals of what a new user writes, without a cluster."""
    times = pd.date_range("2024-01-01", periods=16, freq="h")
    with_text = dd.from_pandas(frame().assign(name="x"), npartitions=2)
    by_time = dd.from_pandas(frame(times), npartitions=2)
    x = array(2)
    cases = {
        "string column": lambda: dask_bacc.coded(with_text.map_partitions(scale_ab), code="berrut"),
        "index read": lambda: dask_bacc.coded(by_time.map_partitions(hour_weighted), code="berrut"),
        "mock fails": lambda: dask_bacc.coded(
            dd.from_pandas(frame(), npartitions=2).map_partitions(
                needs_many_rows, meta=frame().iloc[:0]
            ),
            code="berrut",
        ),
        "reduction": lambda: dask_bacc.coded(x.sum(axis=1), code="berrut"),
        "two inputs": lambda: dask_bacc.coded(da.map_blocks(np.add, x, x), code="berrut"),
        "overlap": lambda: dask_bacc.coded(
            x.map_overlap(tanh, depth=1, boundary="none"), code="berrut"
        ),
    }
    out = []
    for what, call in cases.items():
        with pytest.raises((TypeError, ValueError)) as info:
            call()
        out.append((what, info.value))
    return out


def test_every_refusal_names_only_parameters_its_call_takes():
    with dask.config.set(scheduler="sync"):
        found = refusals()
    for what, exc in found:
        named = set(re.findall(r"\b([a-z_]+)=", str(exc)))
        assert named <= ACCEPTED, (what, named - ACCEPTED, str(exc))
