"""``with dask_bacc.coding(...):``: unchanged Dask code, its map layers run with an exact code.

The peer suite runs the upstream-style cases of ``test_layer.py`` (dask's and xarray's own
``map_blocks`` / ``map_partitions`` / ``map_overlap`` / ``xr.map_blocks`` /
``apply_ufunc`` cases that ``coded()`` handles) through ``.compute()`` and ``.persist()``
inside a block and compares them with plain Dask exactly. The rest: what is selected and
what is refused, a held task, f's exception, the reports, the state a block restores.
"""

from __future__ import annotations

import logging
import sys
import threading

import cloudpickle
import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from cluster_helpers import checked_local_cluster
from distributed import Client, Event, get_worker
from distributed.utils_test import captured_logger
from test_layer import CASES, assert_identical, fails_on_block_2

import dask_bacc
from dask_bacc.runtime import coding as coding_module

cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- mapped functions (module level: pickled by value) ------------------------------------
@dask_bacc.codeable
def scale_rows(b):
    return b * 3.0 - 1.0


@dask_bacc.codeable
def score(part):
    return part.assign(s=np.tanh(part["x"] * part["y"]))


@dask_bacc.codeable
def anomaly(d):
    return d - d.mean()


def unmarked(b):
    return b + 1


@dask_bacc.codeable
def held_primary(b, block_id=None):
    """Block 0's primary waits for the Event "bacc-test-coding-gate"; its backup copy
    (``bacc-copy-<token>``) and every other task run at once."""
    key = get_worker().get_current_task()
    name = key[0] if isinstance(key, tuple) else key
    if block_id == (0,) and not str(name).startswith("bacc-copy-"):
        Event("bacc-test-coding-gate").wait()
    return b * 2


@pytest.fixture(scope="module")
def client():
    with (
        checked_local_cluster(n_workers=4, threads_per_worker=2) as cluster,
        Client(cluster) as c,
    ):
        yield c


# -- the peer suite ------------------------------------------------------------------------
@pytest.mark.slow  # (the same cases run through coded() in the fast subset: test_layer.py)
@pytest.mark.usefixtures("client")
@pytest.mark.parametrize("how", ["compute", "persist"])
@pytest.mark.parametrize("case", list(CASES))
def test_peer_case_identical_to_plain_dask(case, how):
    coll = CASES[case]()
    plain = coll.compute()
    with dask_bacc.coding(code="repetition", only="all") as block:
        got = coll.compute() if how == "compute" else coll.persist().compute()
    assert_identical(got, plain)
    coded = [layer for layer in block.layers if layer.coded]
    reports = block.reports
    assert len(reports) == len(coded)
    for layer, rep in zip(coded, reports, strict=True):
        assert rep.K == layer.ntasks and rep.estimate_method == "exact"
        assert sorted(i % rep.K for i in rep.returned) == list(range(rep.K))


def notebook_cell():
    """A cell of ordinary Dask code: arrays, a DataFrame, xarray (30 lines)."""
    rng = da.random.default_rng(0)
    x = rng.standard_normal((4000, 20), chunks=(500, 20))
    y = x.map_blocks(scale_rows)
    col_means = y.mean(axis=0)
    centred = (y - col_means).std()

    pdf = pd.DataFrame(
        {
            "x": np.linspace(-2, 2, 3000),
            "y": np.cos(np.arange(3000)),
            "k": np.arange(3000) % 7,
        }
    )
    ddf = dd.from_pandas(pdf, npartitions=6)
    scored = ddf.map_partitions(score)
    by_key = scored.groupby("k")["s"].mean()
    top = scored["s"].nlargest(5)

    temps = xr.DataArray(
        np.sin(np.arange(2400.0)).reshape(240, 10),
        dims=("time", "site"),
        coords={"time": np.arange(240), "site": list("abcdefghij")},
        name="temperature",
    ).chunk({"time": 40})
    anomalies = xr.map_blocks(anomaly, temps, template=temps)
    smooth = (
        xr.apply_ufunc(scale_rows, temps, dask="parallelized", output_dtypes=[float])
        .rolling(time=3)
        .mean()
    )
    return (
        dask.compute(centred, col_means),
        (by_key.compute(), top.compute()),
        (
            anomalies.load(),
            smooth.compute(),
        ),
    )


def test_a_notebook_cell_gives_the_same_values_and_lists_its_coded_layers(client):
    plain = notebook_cell()
    with dask_bacc.coding(code="repetition") as block:
        got = notebook_cell()
    for g, p in zip(got[0], plain[0], strict=True):
        np.testing.assert_array_equal(g, p, strict=True)
    pd.testing.assert_series_equal(got[1][0], plain[1][0], check_exact=True)
    pd.testing.assert_series_equal(got[1][1], plain[1][1], check_exact=True)
    xr.testing.assert_identical(got[2][0], plain[2][0])
    xr.testing.assert_identical(got[2][1], plain[2][1])
    coded = {layer.function for layer in block.layers if layer.coded}
    assert coded == {"scale_rows", "score", "anomaly"}
    assert all(layer.coded for layer in block.layers)
    reports = block.reports
    assert len(reports) == len(block.layers) >= 5
    assert {r.func for r in reports} == coded
    assert all(r.estimate_method == "exact" and r.status == "finished" for r in reports)
    assert dask_bacc.last_reports() == reports
    assert "layer(s) coded" in repr(block)


def test_a_held_task_does_not_hold_the_computation(client):
    ev = Event("bacc-test-coding-gate", client=client)
    y = da.arange(24, chunks=3).map_blocks(held_primary, dtype="int64")
    try:
        with dask_bacc.coding() as block:
            got = y.sum().compute(timeout=60)
        assert got == 2 * sum(range(24))
        assert not ev.is_set()  # block 0's primary is still held
        (rep,) = block.reports
        assert rep.K == 8 and 8 in rep.returned and 0 not in rep.returned
        assert 0 in rep.straggled
    finally:
        ev.set()


def test_f_raises_its_own_exception(client):
    y = da.arange(12, chunks=3).map_blocks(fails_on_block_2)
    with pytest.raises(ZeroDivisionError, match="refused") as plain:
        y.compute()
    with dask_bacc.coding(only=fails_on_block_2) as block:
        with pytest.raises(ZeroDivisionError, match="refused") as coded:
            y.compute()
    assert str(coded.value) == str(plain.value)
    assert [layer.coded for layer in block.layers] == [True]
    (rep,) = block.reports
    assert rep.status != "finished"


# -- what is selected ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "only, coded",
    [
        (None, {"scale_rows"}),
        (unmarked, {"unmarked"}),
        ("unmarked", {"unmarked"}),
        ([unmarked, "scale_rows"], {"unmarked", "scale_rows"}),
        (dask_bacc.where(lambda layer: layer.ntasks == 4), {"unmarked"}),
    ],
)
def test_only_selects_layers(client, only, coded):
    a = da.ones(40, chunks=10).map_blocks(unmarked)  # 4 blocks
    b = da.ones(40, chunks=8).map_blocks(scale_rows)  # 5 blocks
    plain = (a.compute(), b.compute())
    with dask_bacc.coding(only=only) as block:
        got = dask.compute(a, b)
    for g, p in zip(got, plain, strict=True):
        np.testing.assert_array_equal(g, p, strict=True)
    assert {layer.function for layer in block.layers if layer.coded} == coded


def test_an_array_layer_annotated_bacc_is_coded(client):
    x = da.arange(30, chunks=10)
    with dask.annotate(bacc=True):
        y = x.map_blocks(unmarked)
    z = y.map_blocks(np.negative)  # built outside the annotation: not selected
    with dask_bacc.coding() as block:
        got = z.compute()
    np.testing.assert_array_equal(got, -(np.arange(30) + 1), strict=True)
    assert [(layer.function, layer.coded) for layer in block.layers] == [("unmarked", True)]


def test_nothing_selected_sends_dasks_own_graph(client, monkeypatch):
    seen = []
    real = Client.get

    def spy(self, dsk, keys, **kwargs):
        seen.append(dsk)
        return real(self, dsk, keys, **kwargs)

    monkeypatch.setattr(Client, "get", spy)
    y = (da.ones(100, chunks=10) + 1).sum()
    # and the block says so at its end, with what to do (once, for all its computations)
    with pytest.warns(RuntimeWarning, match="nothing was selected") as caught:
        with dask_bacc.coding() as block:
            assert y.compute() == 200
            assert y.compute() == 200
    assert len(caught) == 1 and "only='all'" in str(caught[0].message)
    assert "2 computation(s)" in str(caught[0].message)
    assert block.layers == [] and block.reports == []
    assert len(seen) == 2
    from dask._expr import Expr

    # the expression dask made, not a rewritten graph
    assert all(isinstance(sent, Expr) for sent in seen)


def test_refused_layers_run_uncoded_and_say_why(client):
    x = da.arange(400, chunks=10)
    total = x.map_blocks(unmarked).sum(split_every=4)
    pdf = pd.DataFrame({"a": np.arange(200) % 9, "b": np.arange(200.0)})
    with dask.config.set({"dataframe.shuffle.method": "p2p"}):
        shuffled = dd.from_pandas(pdf, npartitions=5).shuffle("a").map_partitions(unmarked)
        plain = (total.compute(), shuffled.compute())
        with dask_bacc.coding(only="all") as block:
            got = (total.compute(), shuffled.compute())
    assert got[0] == plain[0]
    pd.testing.assert_frame_equal(got[1], plain[1], check_exact=True)
    reasons = [layer.reason for layer in block.layers if not layer.coded]
    assert any("several chunks" in r for r in reasons), reasons  # the tree reduction
    assert any("P2P shuffle" in r for r in reasons), reasons
    assert any(layer.coded for layer in block.layers)


def test_chained_coded_layers_and_a_shared_one(client):
    """Two marked layers in a row (the second's driver runs the first's), and the first
    also read by another output: one job each, the values plain Dask's, and no key with two
    specs on the scheduler."""
    x = da.arange(60, chunks=10).astype(float)
    first = x.map_blocks(scale_rows)
    second = first.map_blocks(anomaly)
    both = second + first
    plain = dask.compute(both, first)
    with captured_logger("distributed.scheduler", level=logging.WARNING) as log:
        with dask_bacc.coding() as block:
            got = dask.compute(both, first)
    for g, p in zip(got, plain, strict=True):
        np.testing.assert_array_equal(g, p, strict=True)
    assert "different `run_spec`" not in log.getvalue()
    assert [layer.function for layer in block.layers if layer.coded] == ["scale_rows", "anomaly"]
    assert len(block.reports) == 2


# -- arguments and state -------------------------------------------------------------------
def test_bad_arguments_raise_at_the_block():
    with pytest.raises(ValueError, match="coded\\(y, code='berrut'\\)"):
        dask_bacc.coding(code="berrut")
    with pytest.raises(TypeError, match="only="):
        dask_bacc.coding(only=3)
    with pytest.raises(ValueError):
        dask_bacc.coding(code="speculative", code_options={"rule": "nonsense"})


def test_blocks_nest_and_restore_on_exit_and_on_exceptions(client):
    before = dask.config.get("scheduler", None)
    outer = dask_bacc.coding(only="all")
    inner = dask_bacc.coding(only=unmarked)
    y = da.ones(20, chunks=5).map_blocks(unmarked)
    with outer:
        with pytest.raises(KeyError):
            with inner:
                y.compute()
                raise KeyError("inside")
        assert coding_module._ACTIVE.get() is outer
        y.compute()
    assert coding_module._ACTIVE.get() is None
    assert dask.config.get("scheduler", None) == before
    assert [layer.function for layer in inner.layers] == ["unmarked"]
    assert [layer.function for layer in outer.layers] == ["unmarked"]
    y.compute()  # after the blocks: recorded by neither
    assert len(outer.layers) == len(inner.layers) == 1


def test_a_block_applies_to_its_own_thread(client):
    y = da.ones(20, chunks=5).map_blocks(scale_rows)
    seen = {}

    def elsewhere():
        seen["value"] = y.compute()
        seen["active"] = coding_module._ACTIVE.get()

    with dask_bacc.coding() as block:
        t = threading.Thread(target=elsewhere)
        t.start()
        t.join(60)
    np.testing.assert_array_equal(seen["value"], np.full(20, 2.0))
    assert seen["active"] is None and block.layers == []


def test_turned_off_by_config(client):
    y = da.ones(20, chunks=5).map_blocks(scale_rows)
    with dask.config.set({"bacc.coding.enabled": False}), dask_bacc.coding() as block:
        np.testing.assert_array_equal(y.compute(), np.full(20, 2.0))
    assert block.layers == []


def test_blockwise_and_a_persisted_input(client):
    """A marked function through ``da.blockwise`` (two chunked inputs), reading a
    persisted array: the copies read the chunks already in memory."""
    x = da.arange(40, chunks=10).astype(float).persist()
    w = da.ones(40, chunks=10)
    y = da.blockwise(anomaly, "i", x + w, "i", dtype=float)
    plain = y.compute()
    with dask_bacc.coding() as block:
        got = y.compute()
    np.testing.assert_array_equal(got, plain, strict=True)
    assert [(layer.function, layer.coded, layer.ntasks) for layer in block.layers] == [
        ("anomaly", True, 4)
    ]


def test_a_graph_the_hook_cannot_read_runs_uncoded_with_a_warning(client, monkeypatch):
    def broken(*args):
        raise KeyError("a graph shape nobody foresaw")

    monkeypatch.setattr(coding_module, "find_layers", broken)
    y = da.ones(20, chunks=5).map_blocks(scale_rows)
    with dask_bacc.coding() as block:
        with pytest.warns(RuntimeWarning, match="runs uncoded.*nobody foresaw"):
            np.testing.assert_array_equal(y.compute(), np.full(20, 2.0))
        with pytest.warns(RuntimeWarning, match="runs uncoded"):
            np.testing.assert_array_equal(y.persist().compute(), np.full(20, 2.0))
    assert block.layers == []
