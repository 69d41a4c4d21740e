"""Decoding in a transformed domain (issue 12): ``inverse(decode(forward(results)))`` in the
codes, on the cluster for every entry point, the error estimate after the inverse map, and
the warnings about approximate answers (``ApproximationWarning``)."""

from __future__ import annotations

import sys
import warnings

import cloudpickle
import dask
import dask.array as da
import numpy as np
import pytest
from cluster_helpers import checked_local_cluster, gen_cluster

import dask_bacc
from dask_bacc.codes import RepetitionCode, SplineCode, estimate_error
from dask_bacc.codes.estimate import sample_sketch
from dask_bacc.codes.transform import TRANSFORMS, Transform, get_transform
from dask_bacc.testing import assert_decodes_reference

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
X = np.random.default_rng(0).standard_normal((64, 5))


def probs(x):
    """Row-wise softmax: class probabilities of a linear model."""
    e = np.exp(1.5 * x)
    return e / e.sum(axis=1, keepdims=True)


# -- the codes side ---------------------------------------------------------------------------
def test_presets_and_pairs():
    log = get_transform("log")
    y = np.array([[0.0, 1e-3, 0.5, 2.0]])
    assert np.isfinite(log.forward(y)).all()  # log(max(y, tiny)): no -inf at 0
    np.testing.assert_allclose(log.inverse(log.forward(y[:, 1:])), y[:, 1:])
    lp = get_transform("log_probabilities")
    p = probs(X[:4])
    np.testing.assert_allclose(lp.inverse(lp.forward(p)), p, atol=1e-15)
    np.testing.assert_allclose(lp.inverse(lp.forward(p) + 3.0), p, atol=1e-15)  # renormalised
    pair = get_transform((np.sqrt, np.square))
    assert isinstance(pair, Transform) and pair.name == "sqrt/square"
    assert get_transform(pair) is pair and get_transform(None) is None
    assert set(TRANSFORMS) >= {"log", "log-probabilities"}
    with pytest.raises(ValueError, match="unknown transform"):
        get_transform("logit")
    with pytest.raises(TypeError, match="transform must be"):
        get_transform(3)
    with pytest.raises(TypeError, match="two callables"):
        get_transform((np.sqrt, 2))


def test_exact_codes_stay_exact_through_a_transform():
    tr = get_transform("log")
    code = RepetitionCode(4, 8)
    blocks = np.stack(np.split(X, 4))
    results = np.stack([tr.forward(probs(s)) for s in code.encode(blocks)])
    returned = [5, 2, 7, 0]
    out = tr.inverse(code.decode(results[returned], returned))
    np.testing.assert_allclose(out, np.stack([probs(b) for b in blocks]), rtol=1e-13)


def test_estimate_is_measured_after_the_inverse_map():
    """On smooth probabilities the estimate in the output domain tracks the true error, and
    works from a row sample of the transformed results as from the whole results."""
    t = np.linspace(0, 1, 8 * 16)
    data = np.stack([np.sin(2 * np.pi * f * t) for f in (0.5, 0.8, 1.1, 1.4, 1.7)], axis=1)
    tr = get_transform("log-probabilities")
    code = SplineCode(8, 24)
    blocks = np.stack(np.split(data, 8))
    results = np.stack([tr.forward(probs(s)) for s in code.encode(blocks)])
    returned = [i for i in range(24) if i not in (3, 4, 11, 17)]
    decoded = tr.inverse(code.decode(results[returned], returned))
    truth = np.stack([probs(b) for b in blocks])
    true = np.linalg.norm(decoded - truth) / np.linalg.norm(truth)
    est = estimate_error(code, results[returned], returned, transform=tr)
    assert est.method == "embedded-fh3"
    assert 0.25 * true <= est.overall <= 4 * true, (est.overall, true)
    samples = np.stack([sample_sketch(r, 40, 1) for r in results[returned]])
    assert samples.shape[1:] == (8, 5)  # whole rows: the row-wise inverse applies
    sampled = estimate_error(code, samples, returned, transform=tr)
    assert 0.25 * true <= sampled.overall <= 4 * true


# -- on the cluster -----------------------------------------------------------------------------
@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_map_coded_spline_log_equals_its_reference(c, s, *workers):
    """The issue's cluster target: the output is inverse(decode(forward(f(encode(X))))) for
    the returned set in the report, decoding on the client (NumPy) and on the cluster (a
    dask array), with an error estimate in the output domain."""
    tr = get_transform("log")
    job = await dask_bacc.submit_coded(
        probs, X, code="spline", transform="log", n_blocks=4, n_coded=8, client=c
    )
    out = await job
    rep = job.report
    assert rep.transform == "log" and rep.estimate_method == "embedded-fh3"
    assert rep.error_estimate is not None and rep.error_estimate < 0.5
    assert_decodes_reference(out, rep, probs, X, transform=tr, rtol=1e-10, atol=1e-14)

    with dask.config.set({"bacc.client-decode-limit": 0}):  # force the decode task
        job = await dask_bacc.submit_coded(
            probs, X, code="spline", transform="log", n_blocks=4, n_coded=8, client=c
        )
        out = await job
    assert_decodes_reference(out, job.report, probs, X, transform=tr, rtol=1e-10, atol=0)
    assert job.report.error_estimate is not None

    darr = da.from_array(X, chunks=16)
    job = await dask_bacc.submit_coded(
        probs, darr, code="systematic-spline", transform="log-probabilities", n_coded=8, client=c
    )
    out = await job
    assert isinstance(out, da.Array)
    tr = get_transform("log-probabilities")
    assert_decodes_reference(
        await c.compute(out), job.report, probs, X, transform=tr, rtol=1e-10, atol=0
    )


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_transform_on_every_entry_point(c, s, *workers):
    tr = get_transform("log")
    data = await dask_bacc.encode(X, code="spline", n_coded=8, n_blocks=4, client=c)
    job = await data.submit(probs, transform="log")
    out = await job
    assert_decodes_reference(out, job.report, probs, X, transform=tr, rtol=1e-10, atol=0)
    # exact codes stay exact up to rounding
    out = await dask_bacc.map_coded(
        probs, X, code="repetition", transform="log", n_blocks=4, n_coded=8, client=c
    )
    np.testing.assert_allclose(out, probs(X), rtol=1e-12)
    spec = await dask_bacc.map_coded(
        probs, X, code="speculative", transform="log", n_blocks=4, client=c
    )
    np.testing.assert_allclose(spec, probs(X), rtol=1e-12)
    lazy = dask_bacc.coded(
        da.from_array(X, chunks=16).map_blocks(probs),
        code="repetition",
        n_coded=8,
        transform="log",
    )
    got = await c.compute(lazy)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, probs(X), rtol=1e-12)
    with pytest.raises(ValueError, match="unknown transform"):
        await dask_bacc.submit_coded(probs, X, transform="logit", client=c)


# -- warnings about approximate answers ---------------------------------------------------------
@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_large_estimates_warn(c, s, *workers):
    rough = np.random.default_rng(1).standard_normal((64, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job = await dask_bacc.submit_coded(
            np.tanh, rough, n_blocks=4, n_coded=8, code="berrut", client=c
        )
        await job
    ours = [w for w in caught if issubclass(w.category, dask_bacc.ApproximationWarning)]
    est = job.report.error_estimate
    assert est is not None and est > 0.1  # rough data, N = 2K: far from exact
    assert len(ours) == 1
    msg = str(ours[0].message)
    assert f"{est:.3g}" in msg and "bacc.warn-error" in msg and "repetition" in msg
    assert ours[0].filename == __file__  # pointed at the caller
    with dask.config.set({"bacc.warn-error": None}), warnings.catch_warnings():
        warnings.simplefilter("error", dask_bacc.ApproximationWarning)
        await dask_bacc.map_coded(np.tanh, rough, n_blocks=4, n_coded=8, code="berrut", client=c)
    with dask.config.set({"bacc.warn-error": 10.0}), warnings.catch_warnings():
        warnings.simplefilter("error", dask_bacc.ApproximationWarning)
        await dask_bacc.map_coded(np.tanh, rough, n_blocks=4, n_coded=8, code="berrut", client=c)


@pytest.mark.slow
def test_large_estimates_warn_with_a_synchronous_client():
    from distributed import Client

    rough = np.random.default_rng(1).standard_normal((64, 3))
    with checked_local_cluster(n_workers=8, threads_per_worker=1) as lc, Client(lc):
        with pytest.warns(dask_bacc.ApproximationWarning, match="estimated relative error") as w:
            dask_bacc.map_coded(np.tanh, rough, n_blocks=4, n_coded=8, code="berrut")
        assert w[0].filename == __file__


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_unmet_until_target_warns(c, s, *workers):
    """until(error=1e-9) on rough data cannot be met: the job decodes when every result is
    in (trigger "all") and says that the target was missed."""
    rough = np.random.default_rng(2).standard_normal((64, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job = await dask_bacc.submit_coded(
            np.tanh,
            rough,
            n_blocks=4,
            n_coded=8,
            code="berrut",
            wait=dask_bacc.until(error=1e-9),
            client=c,
        )
        await job
    assert job.report.trigger == "all"
    ours = [w for w in caught if issubclass(w.category, dask_bacc.ApproximationWarning)]
    assert len(ours) == 1 and "until(error=1e-09) was not met" in str(ours[0].message)


@pytest.mark.parametrize("name", ["log", "log-probabilities"])
def test_the_presets_closed_form_check_is_the_round_trip(name):
    """Issue 24 item 1: a preset refuses exactly the values its inverse does not give back
    (checked in closed form, as it is cheaper than the round trip itself)."""
    tr = get_transform(name)
    generic = Transform(tr._forward, tr._inverse, "round-trip")
    rng = np.random.default_rng(5)
    tiny = np.finfo(np.float64).tiny
    cases = [
        probs(X[:8]),  # probabilities
        probs(X[:8]) * (1 + 1e-6),  # rows off by 1e-6
        np.where(probs(X[:8]) < 0.05, 0.0, probs(X[:8])),  # zeros (rows no longer sum to 1)
        np.abs(rng.standard_normal((8, 5))),
        rng.standard_normal((8, 5)),  # negative values
        np.full((2, 3), tiny / 4),  # subnormal
        np.array([[0.25, 0.75, 0.0]]),  # an exact zero in a probability row
    ]
    for y in cases:
        refused = []
        for t in (tr, generic):
            try:
                t.checked_forward(y)
                refused.append(False)
            except dask_bacc.exceptions.OutsideTransform:
                refused.append(True)
        assert refused[0] == refused[1], (name, y)
