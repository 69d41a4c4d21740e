"""The synchronous API a notebook user calls: default client, blocking result, cancel."""

from __future__ import annotations

import concurrent.futures

import dask
import dask.array as da
import numpy as np
import pytest
from cluster_helpers import checked_local_cluster
from distributed import Client

import dask_bacc
from dask_bacc.testing import assert_decodes_reference, gate_stragglers


@pytest.fixture
def client():
    with checked_local_cluster(n_workers=6, threads_per_worker=1) as cluster, Client(cluster) as c:
        yield c


@pytest.mark.slow
def test_map_coded_with_default_client(client):
    X = np.random.default_rng(0).standard_normal((30, 4))
    out = dask_bacc.map_coded(np.tanh, X, n_blocks=3)
    assert isinstance(out, np.ndarray) and out.shape == X.shape
    job = dask_bacc.submit_coded(np.tanh, X, n_blocks=3)
    assert isinstance(job, dask_bacc.CodedJob)
    out = job.result()
    rep = job.report
    assert job.done() and rep.status == "finished"
    # the default code, repetition: N = 2K, a copy of each block
    assert (rep.K, rep.N, rep.wait_target, rep.code["name"]) == (3, 6, 3, "repetition")
    assert_decodes_reference(out, rep, np.tanh, X)
    text = repr(rep)
    assert "K=3 N=6" in text and "when the wait target was met" in text
    assert "status=finished" in repr(job)
    # the dask-array path with a synchronous client
    y = dask_bacc.map_coded(np.tanh, da.from_array(X, chunks=10), code="repetition")
    np.testing.assert_array_equal(y.compute(), np.tanh(X))


@pytest.mark.slow
def test_result_timeout_and_cancel(client):
    X = np.ones((6, 2))
    with gate_stragglers(workers=["0"]):
        job = dask_bacc.submit_coded(np.tanh, X, n_blocks=3, wait=6, code="berrut")
        with pytest.raises(TimeoutError):
            job.result(timeout=0.2)  # held on worker 0 until released: cannot finish
        assert not job.done()
        job.cancel()
        assert job.done() and job.report.status == "cancelled"
        with pytest.raises(concurrent.futures.CancelledError):
            job.result()


@pytest.mark.slow
def test_insufficient_results_sync(client):
    def always_fails(x):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):  # f's own error, as in plain Dask
        dask_bacc.map_coded(always_fails, np.ones((6, 2)), n_blocks=3)
    with dask.config.set({"bacc.on-error": "erase"}):
        with pytest.raises(dask_bacc.InsufficientResults, match=r"0 usable result.*RuntimeError"):
            dask_bacc.map_coded(always_fails, np.ones((6, 2)), n_blocks=3)


@pytest.mark.slow
def test_an_interrupted_result_cancels_the_job(client, monkeypatch):
    """Ctrl-C (or a notebook's stop button) in result() cancels the job, nothing runs on."""
    X = np.ones((12, 2))
    gate = gate_stragglers(indices=range(6))  # every coded task (N <= 6 workers) is held
    job = dask_bacc.submit_coded(np.tanh, X, n_blocks=3)
    real_sync = client.sync

    def interrupted(func, *args, **kwargs):
        if getattr(func, "__name__", "") == "_result":
            raise KeyboardInterrupt  # as the signal arrives while result() waits
        return real_sync(func, *args, **kwargs)

    monkeypatch.setattr(client, "sync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        job.result()
    monkeypatch.undo()
    assert job.done() and job.report.status == "cancelled"
    with pytest.raises(concurrent.futures.CancelledError):
        job.result()
    gate.release()
    gate.clear()


def wrong_keyword(x, *, scale):
    return x * scale


@pytest.mark.slow
def test_func_error_is_raised_as_in_plain_dask_and_erasures_show_the_cause(client):
    """bacc.on-error: raise (the default): func's own TypeError, as plain Dask raises it;
    with "erase" every share is written off and InsufficientResults carries the cause."""
    X = np.ones((12, 2))
    with pytest.raises(TypeError, match="scal") as raised:
        dask_bacc.map_coded(wrong_keyword, X, n_blocks=3, scal=2.0)  # a typo reaching func
    assert any("coded share" in n for n in raised.value.__notes__)
    with dask.config.set({"bacc.on-error": "erase"}):
        with pytest.raises(dask_bacc.InsufficientResults) as info:
            dask_bacc.map_coded(wrong_keyword, X, n_blocks=3, scal=2.0)
    err = info.value
    assert isinstance(err.__cause__, TypeError) and "scal" in str(err.__cause__)
    assert err.report.status == "error" and len(err.report.failed) == err.report.N
    assert all("TypeError" in r for r in err.report.failed.values())
