"""On the cluster: error estimates in the report, ``wait=until(error=...)``, ``adversaries=``."""

from __future__ import annotations

import asyncio
import json
import sys
import warnings

import cloudpickle
import numpy as np
import pytest
from cluster_helpers import gen_cluster, idle, names_at
from distributed import get_worker

import dask_bacc
from dask_bacc.codes import get_code
from dask_bacc.testing import assert_decodes_reference, gate_stragglers
from dask_bacc.testing import relative_error as rel

cloudpickle.register_pickle_by_value(sys.modules[__name__])

EIGHT = [("127.0.0.1", 1)] * 8
TWELVE = [("127.0.0.1", 1)] * 12

T = np.linspace(0.0, 1.0, 64)
SMOOTH = 0.5 * np.stack([np.sin(2 * np.pi * 0.3 * T + p) for p in (0, 1, 2)], axis=1)
ROUGH = np.random.default_rng(0).standard_normal((64, 3))


def corrupt_on(x, bad):
    """tanh(x), except that the workers named in ``bad`` return -3 tanh(x) (Byzantine)."""
    y = np.tanh(x)
    return -3.0 * y if str(get_worker().name) in bad else y


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_report_carries_the_error_estimate(c, s, *workers):
    job = await dask_bacc.submit_coded(
        np.tanh, SMOOTH, n_blocks=4, n_coded=8, wait=8, client=c, code="berrut"
    )
    out = await job
    rep = job.report
    assert rep.estimate_method == "embedded-fh1"
    assert len(rep.block_errors) == 4 and all(e >= 0 for e in rep.block_errors)
    true = rel(out, np.tanh(SMOOTH))
    assert 0.5 * true <= rep.error_estimate <= 2 * true
    assert rep.suspects == []
    assert "estimated relative error" in repr(rep)
    json.dumps(rep.to_dict())  # JSON-serialisable
    # exact codes: 0, without any sketch task
    job = await dask_bacc.submit_coded(np.tanh, SMOOTH, n_blocks=4, code="repetition", client=c)
    await job
    assert job.report.error_estimate == 0.0 and job.report.estimate_method == "exact"
    assert job.report.block_errors == [0.0] * 4
    assert not [k for k in s.tasks if str(k).startswith(f"('bacc-sketch-{job.token}")]


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_until_stops_early_on_a_smooth_function(c, s, *workers):
    _, placement = await names_at(c, (), 8)
    policy = dask_bacc.until(error=0.1, min_results=6)
    async with gate_stragglers(indices=[2, 6], client=c):
        job = await dask_bacc.submit_coded(
            np.tanh, SMOOTH, n_blocks=4, n_coded=8, code="systematic-spline", wait=policy, client=c
        )
        assert job.report.workers == placement
        out = await job
    rep = job.report
    assert rep.trigger == "error"
    assert sorted(rep.straggled) == [2, 6] and len(rep.returned) == 6
    assert rep.estimates[-1][0] == 6 and rep.estimates[-1][1] <= 0.1
    assert rep.error_estimate <= 0.1
    assert_decodes_reference(out, rep, np.tanh, SMOOTH)
    assert rel(out, np.tanh(SMOOTH)) < 0.1


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_until_waits_longer_on_a_rough_function(c, s, *workers):
    gate = await gate_stragglers(indices=[2, 6], client=c)
    policy = dask_bacc.until(error=0.1, min_results=6)
    job = await dask_bacc.submit_coded(
        np.tanh, ROUGH, n_blocks=4, n_coded=8, wait=policy, code="berrut", client=c
    )
    while not job.report.estimates:  # the six ungated results landed and were estimated
        await asyncio.sleep(0.01)
    assert job.report.estimates[0][0] == 6 and job.report.estimates[0][1] > 0.1
    assert not job.done()  # still waiting for the gated stragglers
    await gate.release()
    out = await job
    await gate.clear()
    rep = job.report
    assert rep.trigger == "all" and sorted(rep.returned) == list(range(8))
    assert_decodes_reference(out, rep, np.tanh, ROUGH)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_a_deadline_decodes_from_the_results_in_and_cancels_the_rest(c, s, *workers):
    """``until(deadline=...)``: held tasks never land; the decode comes at the deadline
    (or, on a loaded machine, once the six free results are in, whichever is later)."""
    async with gate_stragglers(indices=[2, 6], client=c):
        job = await dask_bacc.submit_coded(
            np.tanh,
            SMOOTH,
            n_blocks=4,
            n_coded=8,
            code="systematic-spline",
            wait=dask_bacc.until(deadline=0.2),
            client=c,
        )
        out = await job
    rep = job.report
    assert rep.trigger == "deadline"
    assert sorted(rep.straggled) == [2, 6] and len(rep.returned) == 6
    assert rep.estimates == []  # no estimate per arrival: the deadline alone decides
    assert_decodes_reference(out, rep, np.tanh, SMOOTH)
    # an exact code is not hurried: it answers from a copy of every block
    async with gate_stragglers(indices=[1], client=c):
        job = await dask_bacc.submit_coded(
            np.tanh, SMOOTH, n_blocks=4, code="repetition", wait=dask_bacc.until(deadline=0.01),
            client=c,
        )  # fmt: skip
        out = await job
    np.testing.assert_array_equal(out, np.tanh(SMOOTH))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_until_with_a_timeout_and_with_an_exact_code(c, s, *workers):
    async with gate_stragglers(indices=[2, 6], client=c):
        job = await dask_bacc.submit_coded(
            np.tanh,
            ROUGH,
            n_blocks=4,
            n_coded=8,
            code="systematic-spline",
            wait=dask_bacc.until(error=1e-6),
            timeout=10,  # the six ungated results must land first, even on a loaded machine
            client=c,
        )
        await job
    assert job.report.trigger == "timeout" and len(job.report.returned) == 6
    # an exact code's error is 0 once decodable: until() waits for its threshold and, as
    # the default wait, Lagrange's one spare result that checks the decode
    job = await dask_bacc.submit_coded(
        np.square,
        ROUGH,
        n_blocks=4,
        code="lagrange",
        code_options={"degree": 2},
        wait=dask_bacc.until(error=0.01),
        client=c,
    )
    out = await job
    assert job.report.wait_target == 8 and job.report.error_estimate == 0.0
    assert job.report.estimate_method == "exact" and job.report.check_residual < 1e-12
    np.testing.assert_allclose(out, ROUGH**2, rtol=1e-9, atol=1e-12)


def linear(x):
    """3x + 1 (a degree-1 polynomial)."""
    return 3.0 * x + 1.0


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 16)
async def test_ill_conditioned_lagrange_decode_warns(c, s, *workers):
    """Eight adjacent stragglers out of 16: Lagrange decodes from the first eight points, a
    decode too ill-conditioned to call exact. It warns and reports no error figure; with
    the stragglers spread out instead, the same job is exact and silent."""
    X = np.random.default_rng(5).standard_normal((64, 3))
    for slow_indices, event in ((range(8, 16), "lagrange-gap"), (range(1, 16, 2), "spread")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            async with gate_stragglers(indices=slow_indices, client=c):
                job = await dask_bacc.submit_coded(
                    linear,
                    X,
                    n_blocks=8,
                    n_coded=16,
                    code="lagrange",
                    wait=8,  # the threshold: decode from the first eight points
                    client=c,
                )
                out = await job
        rep = job.report
        assert sorted(rep.returned) == sorted(set(range(16)) - set(slow_indices))
        ours = [w for w in caught if "amplifies rounding errors" in str(w.message)]
        if event == "spread":
            # exact at the threshold, with no spare result to check it
            assert not ours and rep.estimate_method == "exact-unchecked"
            np.testing.assert_allclose(out, 3.0 * X + 1.0, rtol=1e-9)
        else:
            assert len(ours) == 1 and issubclass(ours[0].category, RuntimeWarning)
            assert rep.error_estimate is None and rep.estimate_method == "ill-conditioned"
            assert "unknown; ill-conditioned: the decode is too ill-conditioned" in str(rep)
            assert rel(out, 3.0 * X + 1.0) < 1.0  # not exact, but bounded
        await idle(workers)


def test_until_validation():
    from dask_bacc.codes import BerrutCode

    with pytest.raises(ValueError, match="error"):
        dask_bacc.until(error=0)
    with pytest.raises(ValueError, match="error"):
        dask_bacc.until(error=float("nan"))
    with pytest.raises(ValueError, match="min_results"):
        dask_bacc.until(error=0.1, min_results=0)
    policy = dask_bacc.until(error=0.1, min_results=9)
    with pytest.raises(ValueError, match="exceeds"):
        policy.validate(BerrutCode(4, 8))
    assert dask_bacc.until(error=0.1).floor(BerrutCode(4, 8)) == 4  # K by default
    assert dask_bacc.until(error=0.1).target(BerrutCode(4, 8)) == 8


@pytest.mark.slow
@pytest.mark.parametrize("n_bad", [1, 2])
@gen_cluster(client=True, nthreads=TWELVE)
async def test_adversaries_are_located_and_excluded(c, s, *workers, n_bad):
    bad_idx = (3, 8)[:n_bad]
    N = 2 * 4 + 2 * n_bad - 1 + 1  # one spare
    bad, _ = await names_at(c, bad_idx, N)
    job = await dask_bacc.submit_coded(
        corrupt_on,
        SMOOTH,
        bad,
        n_blocks=4,
        n_coded=N,
        wait=N,
        adversaries=n_bad,
        client=c,
        code="berrut",
    )
    out = await job
    rep = job.report
    assert rep.adversaries == n_bad and sorted(rep.excluded) == sorted(bad_idx)
    assert not set(bad_idx) & set(rep.returned) and len(rep.returned) == N - n_bad
    assert rep.late == []
    assert_decodes_reference(out, rep, np.tanh, SMOOTH)
    # the error is that of decoding the honest results; all N, corrupted ones included,
    # would be far worse
    code = get_code(**rep.code)
    coded = code.encode(np.stack(np.split(SMOOTH, 4)))
    results = np.tanh(coded)
    results[list(bad_idx)] *= -3.0
    poisoned = np.concatenate(code.decode(results, list(range(N))))
    assert rel(poisoned, np.tanh(SMOOTH)) > 5 * rel(out, np.tanh(SMOOTH))
    assert "excluded as corrupted" in repr(rep)
    clean = await dask_bacc.submit_coded(
        np.tanh,
        SMOOTH,
        n_blocks=4,
        n_coded=N,
        wait=N,
        adversaries=n_bad,
        client=c,
        code="berrut",
    )
    await clean
    assert clean.report.excluded == []  # nothing corrupted: nothing excluded


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_detector_reports_an_inconsistent_result(c, s, *workers):
    bad, _ = await names_at(c, (5,), 8)
    job = await dask_bacc.submit_coded(
        corrupt_on,
        SMOOTH,
        bad,
        n_blocks=4,
        n_coded=8,
        wait=8,
        client=c,
        code="berrut",
    )
    with pytest.warns(dask_bacc.SuspectResultsWarning, match=r"coded tasks \[5\]") as w:
        out = await job
    rep = job.report
    assert rep.suspects == [5] and rep.consistency[5] > 4
    assert 5 in rep.returned  # reported only, still decoded in
    assert "inconsistent with the others" in repr(rep)
    assert "adversaries=k" in str(w[0].message)
    # the estimate includes how far the suspect moved the answer: not far too low
    true = rel(out, np.tanh(SMOOTH))
    assert rep.error_estimate >= 0.5 * true


@pytest.mark.slow
@gen_cluster(client=True, nthreads=EIGHT)
async def test_adversaries_validation_before_submitting(c, s, *workers):
    with pytest.raises(ValueError, match=r"N >= 2K \+ 2A - 1 = 9"):
        await dask_bacc.submit_coded(
            np.tanh,
            SMOOTH,
            n_blocks=4,
            n_coded=8,
            code="systematic-spline",
            adversaries=1,
            client=c,
        )
    with pytest.raises(ValueError, match="interpolating codes"):
        await dask_bacc.submit_coded(
            np.tanh, SMOOTH, n_blocks=2, code="repetition", adversaries=1, client=c
        )
    with pytest.raises(ValueError, match="speculative"):
        await dask_bacc.submit_coded(
            np.tanh, SMOOTH, n_blocks=2, code="speculative", adversaries=1, client=c
        )
    with pytest.raises(ValueError, match="wait= asks for 6"):
        await dask_bacc.submit_coded(
            np.tanh,
            SMOOTH,
            n_blocks=2,
            n_coded=8,
            wait=6,
            code="systematic-spline",
            adversaries=2,
            client=c,
        )
    with pytest.raises(ValueError, match=">= 0"):
        dask_bacc.submit_coded(np.tanh, SMOOTH, adversaries=-1, client=c)
    with pytest.raises(TypeError, match="integer"):
        dask_bacc.submit_coded(np.tanh, SMOOTH, adversaries=True, client=c)
    assert not s.tasks  # nothing was submitted
    # defaults: K and N leave room for 2K + 2A - 1 results (8 workers, A=1: K=2, N=7,
    # the 5 results needed being the default wait of 0.75 N)
    job = await dask_bacc.submit_coded(
        np.tanh, SMOOTH, code="systematic-spline", adversaries=1, client=c
    )
    await job
    rep = job.report
    assert (rep.K, rep.N) == (2, 7) and rep.wait_target == 6


def garbage_on(x, bad):
    """tanh(x); the workers named in ``bad`` return large noise, each its own (Byzantine;
    identical garbage from two workers would be mutually consistent, a documented limit)."""
    y = np.tanh(x)
    name = str(get_worker().name)
    if name in bad:
        return 10.0 * np.random.default_rng(sum(map(ord, name))).standard_normal(y.shape)
    return y


def flip_on(x, bad):
    """tanh(x); the workers named in ``bad`` return -tanh(x) (a sign flip)."""
    y = np.tanh(x)
    return -y if str(get_worker().name) in bad else y


def warned(caught, category):
    return [w for w in caught if issubclass(w.category, category)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "func", "where", "adversaries"),
    [
        ("systematic-spline", garbage_on, (5,), 0),  # no adversaries=
        ("berrut", garbage_on, (5,), 0),
        ("systematic-spline", garbage_on, None, 0),  # a corrupted systematic result
        ("berrut", flip_on, (0,), 0),  # a sign flip at an end point
        ("berrut", flip_on, (11,), 1),
        ("berrut", garbage_on, (3, 8), 1),  # more corrupted results than adversaries=
    ],
)
@gen_cluster(client=True, nthreads=TWELVE)
async def test_corruption_is_excluded_or_warns(c, s, *workers, code, func, where, adversaries):
    """The chaos run's silent corruptions: every corrupted result is either excluded
    (report.excluded) or named in a SuspectResultsWarning, and the error estimate is not
    far below the true error of what was decoded."""
    if where is None:  # the worker holding block 1's systematic share
        where = (int(get_code(code, 4, 12).systematic_workers[1]),)
    bad, _ = await names_at(c, where, 12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job = await dask_bacc.submit_coded(
            func,
            SMOOTH,
            bad,
            n_blocks=4,
            n_coded=12,
            wait=12,
            code=code,
            adversaries=adversaries or None,
            client=c,
        )
        out = await job
    rep = job.report
    suspects = warned(caught, dask_bacc.SuspectResultsWarning)
    for i in where:
        assert i in rep.excluded or (i in rep.suspects and suspects), (i, rep)
    true = rel(out, np.tanh(SMOOTH))
    if true > 1e-6:
        assert rep.error_estimate is not None and rep.error_estimate >= true / 3, (
            rep.error_estimate,
            true,
        )
