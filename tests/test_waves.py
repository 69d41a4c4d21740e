"""``map_coded`` with more blocks than workers under the exact codes that copy blocks.

Repetition needs K + 1 workers and hedged/speculative K to give each task a worker of
its own; with fewer, the blocks run in waves as a layer job (``runtime.waves``): the
answer is plain Dask's, and the report says how the job ran. Stragglers are held with
``distributed.Event`` gates, never timed.
"""

from __future__ import annotations

import sys
import time
import warnings

import cloudpickle
import dask
import dask.array as da
import numpy as np
import pandas as pd
import pytest
from cluster_helpers import checked_local_cluster
from distributed import Client, Event, get_worker

import dask_bacc
import dask_bacc.diagnostics
from dask_bacc.runtime.waves import BlocksJob, in_waves

cloudpickle.register_pickle_by_value(sys.modules[__name__])

CODES = ["repetition", "hedged", "speculative"]
GATE = "bacc-test-waves-gate"


@pytest.fixture(scope="module")
def client():
    with (
        checked_local_cluster(n_workers=4, threads_per_worker=1) as cluster,
        Client(cluster) as c,
    ):
        yield c


def scaled(b, factor=3.0):
    return b * factor


def column_sums(b):
    return b.sum(axis=0)


def held_first_block(b):
    """Block 0's first copy waits for the gate; its other copies run at once."""
    key = get_worker().get_current_task()
    name = key[0] if isinstance(key, tuple) else key
    if b.flat[0] == 0 and not str(name).startswith("bacc-copy-"):
        Event(GATE).wait()
    return b + 1


def test_which_jobs_run_in_waves():
    assert in_waves("repetition", 4, 4) and not in_waves("repetition", 3, 4)
    assert in_waves("hedged", 5, 4) and not in_waves("hedged", 4, 4)
    assert in_waves("Speculative", 5, 4)
    # the codes that mix blocks are coded in groups, never in waves
    assert not in_waves("berrut", 100, 4) and not in_waves(None, 100, 4)


@pytest.mark.parametrize("code", CODES)
def test_numpy_blocks_beyond_the_workers_give_plain_answers(client, code):
    X = np.random.default_rng(0).standard_normal((64, 3))
    job = dask_bacc.submit_coded(scaled, X, 2.5, code=code, n_blocks=16, client=client)
    out = job.result()
    assert isinstance(job, BlocksJob)
    np.testing.assert_array_equal(out, X * 2.5, strict=True)
    rep = job.report
    assert rep.K == 16 and rep.code["name"] == code
    assert rep.code["waves"] == {"workers": 4, "needs": 16 + (code == "repetition")}
    assert sorted(i % 16 for i in rep.returned) == list(range(16))
    assert "in waves: K=16 blocks on 4 workers" in repr(rep)


@pytest.mark.parametrize("code", CODES)
def test_the_default_code_on_a_four_chunk_dask_array_on_four_workers(client, code):
    """The issue's case: 4 chunks on 4 workers was refused ("needs N=5 coded tasks")."""
    x = da.arange(40, chunks=10, dtype="float64")
    with dask.config.set({"bacc.code": code}):
        y = dask_bacc.map_coded(scaled, x, client=client)
    assert isinstance(y, da.Array)
    np.testing.assert_array_equal(y.compute(), x.map_blocks(scaled).compute(), strict=True)


def test_a_reducing_f_stacks_as_a_coded_job_does(client):
    x = da.from_array(np.arange(96.0).reshape(24, 4), chunks=(3, 4))
    y = dask_bacc.map_coded(column_sums, x, client=client)
    expected = np.stack([column_sums(b) for b in np.split(np.arange(96.0).reshape(24, 4), 8)])
    np.testing.assert_array_equal(y.compute(), expected, strict=True)


def test_pandas_blocks_keep_their_labels(client):
    pdf = pd.DataFrame({"a": np.arange(40, dtype="float64"), "b": np.linspace(0, 1, 40)})
    out = dask_bacc.map_coded(scaled, pdf, n_blocks=8, client=client)
    pd.testing.assert_frame_equal(out, scaled(pdf), check_exact=True)


def test_a_dask_backed_dataarray_keeps_its_labels(client):
    xr = pytest.importorskip("xarray")
    arr = xr.DataArray(
        np.arange(48.0).reshape(16, 3),
        dims=("time", "x"),
        coords={"time": np.arange(16), "x": ["a", "b", "c"]},
        name="v",
    ).chunk({"time": 2})
    out = dask_bacc.map_coded(scaled, arr, client=client)
    xr.testing.assert_identical(out.compute(), scaled(arr).compute())


def test_nan_and_inf_pass_as_in_plain_dask(client):
    X = np.array([-1.0, 0.0, 1.0, np.nan, 2.0, -3.0, 4.0, 5.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # np.log's own warnings
        out = dask_bacc.map_coded(np.log, X, n_blocks=8, client=client)
        expected = np.log(X)
    np.testing.assert_array_equal(out, expected, strict=True)


def test_nan_and_inf_pass_in_pandas_and_xarray_as_in_plain_dask(client):
    import pandas as pd
    import xarray as xr

    X = np.array([-1.0, 0.0, 1.0, np.nan, 2.0, -3.0, np.inf, 5.0] * 2)
    df = pd.DataFrame({"x": X, "y": X[::-1]}, index=np.arange(16) * 3)
    arr = xr.DataArray(X, dims="t", coords={"t": np.arange(16) * 2}, name="v")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # np.log's own warnings
        job = dask_bacc.submit_coded(np.log, df, n_blocks=8, client=client)
        pd.testing.assert_frame_equal(job.result(), np.log(df))
        assert job.report.code["waves"]  # more blocks than a coded job can place
        job = dask_bacc.submit_coded(np.log, arr, n_blocks=8, client=client)
        xr.testing.assert_identical(job.result(), np.log(arr))
        assert job.report.code["waves"]


def test_f_raising_fails_the_job_with_fs_exception(client):
    def boom(b):
        raise ZeroDivisionError("f failed on a block")

    with pytest.raises(ZeroDivisionError, match="f failed on a block"):
        dask_bacc.map_coded(boom, np.ones(16), n_blocks=8, client=client)


def test_blocks_whose_outputs_differ_in_shape_are_refused(client):
    def ragged(b):
        return b[b > 0]

    X = np.array([1.0, 2.0, -1.0, 3.0] * 4)
    with pytest.raises(ValueError, match="output shape differs between blocks"):
        dask_bacc.map_coded(ragged, X, n_blocks=8, client=client)


def test_a_dask_array_whose_outputs_are_not_arrays_of_one_shape_is_refused(client):
    def ragged(b):
        return b[b > 0]

    def words(b):
        return np.array(["x"] * len(b))

    x = da.from_array(np.array([1.0, 2.0, -1.0, 3.0] * 4), chunks=2)
    with pytest.raises(ValueError, match="output shape differs between blocks"):
        dask_bacc.map_coded(ragged, x, client=client)
    with pytest.raises(ValueError, match="dtype <U1"):
        dask_bacc.map_coded(words, x, client=client)


@pytest.mark.slow
def test_a_held_block_is_backed_up_and_the_job_is_on_the_dashboard(client):
    ev = Event(GATE, client=client)
    ev.clear()
    X = np.arange(24.0).reshape(12, 2)
    try:
        job = dask_bacc.submit_coded(held_first_block, X, code="hedged", n_blocks=12, client=client)
        out = job.result(timeout=60)
        assert not ev.is_set()  # block 0's first copy is still held
    finally:
        ev.set()
    np.testing.assert_array_equal(out, X + 1, strict=True)
    rep = job.report
    assert 0 in rep.backups and 0 in rep.straggled and 0 not in rep.returned
    for _ in range(600):
        stats = dask_bacc.diagnostics.get_stats(client, job.token)
        if stats is not None and stats["closed"]:
            break
        time.sleep(0.05)
    assert stats["closed"], stats
    assert (stats["func"], stats["code"], stats["K"]) == ("held_first_block", "hedged", 12)
    assert stats["code_config"]["waves"] == {"workers": 4, "needs": 12}
    assert stats["used"] == 12 and stats["hedge"]["won"] >= 1
