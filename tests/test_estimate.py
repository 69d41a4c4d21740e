"""A-posteriori error estimates (``dask_bacc.codes.estimate``; docs/accuracy.md)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dask_bacc.codes import (
    BerrutCode,
    InsufficientResults,
    LagrangeCode,
    RepetitionCode,
    Uncoded,
    count_sketch,
    estimate_error,
    get_code,
)
from dask_bacc.codes.estimate import barycentric_matrix, floater_hormann_weights
from dask_bacc.testing import relative_error as rel
from dask_bacc.testing import smooth_blocks

PROPERTY = settings(deadline=None, max_examples=40, database=None, derandomize=True)


def case(kind: str, K: int, N: int, S: int, pattern: str, seed: int, systematic: bool = False):
    """(code, results of the returned tasks, returned, decoded, exact f(X))."""
    rng = np.random.default_rng(seed)
    if kind == "smooth":
        X = smooth_blocks(K, 12, 6, rng)
    else:
        X = rng.standard_normal((K, 12, 6))
    W = rng.standard_normal((6, 5)) * 0.6
    code = BerrutCode(K, N, systematic=systematic)
    results = np.tanh(code.encode(X) @ W)
    if pattern == "adjacent":
        start = int(rng.integers(0, N - S + 1))
        lost = np.arange(start, start + S)
    else:
        lost = rng.choice(N, S, replace=False)
    returned = rng.permutation(np.setdiff1d(np.arange(N), lost))
    decoded = code.decode(results[returned], returned)
    return code, results[returned], returned, decoded, np.tanh(X @ W)


# -- exact decodes: 0 ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "code",
    [RepetitionCode(3, 7), Uncoded(4), LagrangeCode(3, 8, degree=2)],
    ids=lambda c: repr(c),
)
def test_exact_codes_estimate_zero_when_decodable(code):
    rng = np.random.default_rng(0)
    results = rng.standard_normal((code.N, 5))
    est = estimate_error(code, results, list(range(code.N)))
    assert est.overall == 0.0 and est.method == "exact"
    np.testing.assert_array_equal(est.per_block, np.zeros(code.K))
    with pytest.raises(InsufficientResults):
        estimate_error(code, results[:1], [0])


def test_systematic_exact_blocks_are_zero():
    code, results, returned, decoded, exact = case("random", 4, 8, 2, "random", 3, True)
    est = estimate_error(code, results, returned)
    have = set(returned.tolist())
    for j, worker in enumerate(code.systematic_workers):
        if int(worker) in have:
            assert est.per_block[j] == 0.0
            np.testing.assert_allclose(decoded[j], exact[j], atol=1e-12)
    # every systematic task back: the decode is exact, and so is the estimate
    sys_only = np.asarray(code.systematic_workers)
    code_results = np.tanh(code.encode(np.ones((4, 2, 3))))[sys_only]
    est = estimate_error(code, code_results, sys_only)
    assert est.overall == 0.0 and est.method == "exact"


def test_coincident_points_are_exact_blocks():
    code = BerrutCode(5, 11)  # every data point is a worker point
    rng = np.random.default_rng(1)
    X = rng.standard_normal((5, 4))
    results = np.tanh(code.encode(X))
    est = estimate_error(code, results, list(range(11)))
    assert est.overall == 0.0
    np.testing.assert_array_equal(est.per_block, np.zeros(5))


def test_ill_conditioned_exact_decode_is_not_vouched_for():
    code = LagrangeCode(8, 16)
    results = np.random.default_rng(3).standard_normal((16, 2))
    assert estimate_error(code, results, range(0, 16, 2)).overall == 0.0  # spread points
    est = estimate_error(code, results[:8], range(8))  # eight adjacent stragglers
    assert math.isnan(est.overall) and est.method == "ill-conditioned"
    assert np.isnan(est.per_block).all() and est.to_dict()["overall"] is None


def test_too_few_results_is_unknown_not_zero():
    code = BerrutCode(4, 8)
    results = np.random.default_rng(2).standard_normal((2, 3))
    est = estimate_error(code, results, [1, 5])
    assert math.isnan(est.overall) and est.method == "unknown"
    assert np.isnan(est.per_block).all()
    assert est.to_dict()["overall"] is None


def test_constant_function_estimates_zero():
    code = BerrutCode(4, 9)
    results = np.full((7, 3), 2.5)
    est = estimate_error(code, results, [0, 1, 2, 4, 5, 7, 8])
    assert est.overall == 0.0


# -- calibration on a fixed set of seeded cases ----------------------------------------------
SEEDED = [
    (kind, K, r, S, pattern, seed)
    for seed, (kind, K, r, (S, pattern)) in enumerate(
        itertools.product(
            ["smooth", "random"],
            [4, 8, 16],
            [1.5, 2],
            [(0, "none"), (1, "random"), (3, "random"), (3, "adjacent")],
        )
    )
]


def test_estimate_within_factor_two_on_seeded_cases():
    """docs/accuracy.md: at least 0.5x the true error in >= 95% of the decodes, within 2x
    in most; here 48 fixed seeded cases (random and smooth data, K 4-16, N/K 1.5 and 2,
    0-3 stragglers). Decodes from 3 results, or across a gap wider than the others can
    test, have no estimate ("unreliable"). Before the
    prediction bound (issue 23) 0.9 of them were within 2x; the bound trades a few
    overestimates (up to 5x at K = 4, N = 6) for fewer underestimates."""
    ratios, unreliable = [], 0
    for kind, K, r, S, pattern, seed in SEEDED:
        code, results, returned, decoded, exact = case(kind, K, int(r * K), S, pattern, seed)
        est = estimate_error(code, results, returned)
        if len(returned) == 3:
            assert est.method == "unreliable"
        if est.method == "unreliable":
            unreliable += 1
        else:
            ratios.append(est.overall / rel(decoded, exact))
    assert unreliable <= 8
    ratios = np.array(ratios)
    assert np.mean(ratios >= 0.5) >= 0.95, sorted(ratios.round(2))
    within = np.mean((ratios >= 0.5) & (ratios <= 2.0))
    assert within >= 0.8, sorted(ratios.round(2))
    assert np.all((ratios > 0.25) & (ratios < 8.0)), sorted(ratios.round(2))


def test_per_block_estimates_follow_the_true_block_errors():
    hits = []
    for seed in range(6):
        code, results, returned, decoded, exact = case("smooth", 8, 16, 2, "random", 100 + seed)
        est = estimate_error(code, results, returned)
        true = np.linalg.norm((decoded - exact).reshape(8, -1), axis=1) / np.linalg.norm(
            exact.reshape(8, -1), axis=1
        )
        hits.extend(((est.per_block >= true / 2) & (est.per_block <= 2 * true)).tolist())
    assert np.mean(hits) >= 0.75


def test_estimate_from_sketches_matches_full_results():
    code, results, returned, _, _ = case("random", 8, 16, 2, "random", 7)
    full = estimate_error(code, results, returned)
    sketches = np.stack([count_sketch(r, 32, seed=5) for r in results])  # 60 -> 32 numbers
    sk = estimate_error(code, sketches, returned)
    assert 0.6 <= sk.overall / full.overall <= 1.6


# -- the building blocks ----------------------------------------------------------------------
def test_count_sketch_samples_large_results_linearly():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(5000), rng.standard_normal(5000)
    sa, sb = (count_sketch(x, 64, 2, max_entries=1000) for x in (a, b))
    np.testing.assert_allclose(count_sketch(a - 2 * b, 64, 2, max_entries=1000), sa - 2 * sb)
    # norms kept on average over seeds (sampling and hashing both unbiased)
    ratios = [
        np.sum(count_sketch(a, 64, s, max_entries=1000) ** 2) / np.sum(a**2) for s in range(200)
    ]
    assert abs(np.mean(ratios) - 1) < 0.1


def test_count_sketch_is_linear_and_keeps_norms():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 300, 40))
    sa, sb = count_sketch(a, 256, 9), count_sketch(b, 256, 9)
    np.testing.assert_allclose(count_sketch(2 * a - 3 * b, 256, 9), 2 * sa - 3 * sb, atol=1e-9)
    assert abs(np.linalg.norm(sa) / np.linalg.norm(a) - 1) < 0.3
    small = rng.standard_normal((4, 5))
    np.testing.assert_array_equal(count_sketch(small, 256), small.ravel())  # small: exact
    assert count_sketch(np.arange(10), 4).dtype == np.float64
    with pytest.raises(TypeError):
        count_sketch(np.array(["a"]), 4)


def test_floater_hormann_weights():
    x = np.cos(np.linspace(0, np.pi, 9))
    np.testing.assert_array_equal(floater_hormann_weights(x, 0), (-1.0) ** np.arange(9))
    targets = np.linspace(-0.95, 0.95, 7)
    for d in (1, 2, 3):  # reproduces polynomials of degree d
        M = barycentric_matrix(targets, x, floater_hormann_weights(x, d))
        np.testing.assert_allclose(M @ (x**d - x), targets**d - targets, atol=1e-12)
    # too few nodes: the degree drops to len - 1
    np.testing.assert_array_equal(floater_hormann_weights(np.array([0.3]), 2), [1.0])
    # a target on a node gets that node's unit row
    M = barycentric_matrix(x[[2]], x, floater_hormann_weights(x, 1))
    np.testing.assert_array_equal(M[0], np.eye(9)[2])


# -- properties -------------------------------------------------------------------------------
@pytest.mark.slow
@PROPERTY
@given(
    K=st.integers(1, 10),
    extra=st.integers(1, 10),
    seed=st.integers(0, 2**16),
    systematic=st.booleans(),
    data=st.data(),
)
def test_estimate_properties(K, extra, seed, systematic, data):
    N = K + extra
    rng = np.random.default_rng(seed)
    code = BerrutCode(K, N, systematic=systematic)
    results = np.tanh(code.encode(rng.standard_normal((K, 3, 2))))
    n = data.draw(st.integers(1, N))
    returned = rng.permutation(N)[:n]
    est = estimate_error(code, results[returned], returned)
    assert est.per_block.shape == (K,)
    if est.method == "unreliable":  # too few results checkable by leave-one(-run)-out
        assert math.isnan(est.overall) and np.all(np.isnan(est.per_block) | (est.per_block == 0))
    elif n >= 3 or est.method == "exact":
        assert math.isfinite(est.overall) and est.overall >= 0
        assert np.all(np.isfinite(est.per_block)) and np.all(est.per_block >= 0)
    # the order results arrived in does not matter
    perm = rng.permutation(n)
    again = estimate_error(code, results[returned[perm]], returned[perm])
    np.testing.assert_allclose(again.per_block, est.per_block, rtol=1e-9, atol=1e-15)


# -- small K: an estimate that is not optimistic (issue 23; docs/accuracy.md "Small K") ------
SMALL_K_CODES = (
    "systematic-spline",
    "spline",
    "berrut",
    "systematic-berrut",
    "bspline",
    "systematic-bspline",
)


def readme_case(name: str, K: int, N: int, kind: str, returned: list[int], seed: int):
    """The README's setup, smaller: tanh(X @ W), 16 features, 4 outputs, 200 rows a block
    (800 output entries: sketched to 256 numbers as in a job). Returns (true error, the
    job's estimate: ``estimate_decode`` on the count sketches)."""
    from dask_bacc.codes import get_code
    from dask_bacc.runtime.quality import estimate_decode

    rng = np.random.default_rng(seed)
    X = smooth_blocks(K, 200, 16, rng) if kind == "smooth" else rng.standard_normal((K, 200, 16))
    W = rng.standard_normal((16, 4))
    code = get_code(name, K, N)
    results = np.tanh(code.encode(X)[returned] @ W)
    true = rel(code.decode(results, returned), np.tanh(X @ W))
    sketches = np.stack([count_sketch(r, 256, seed=seed) for r in results])
    est, _, _ = estimate_decode(code, sketches, returned)
    return true, est


def test_small_k_estimate_is_at_least_half_the_true_error():
    """K = 2, 3, 4, N = 2K, every share straggling in turn (the others all returned), the
    four approximate codes, random and smooth rows: the estimate is >= 0.5x the true
    error, or it says it cannot estimate (``nan``, method "unreliable": the job warns),
    in >= 95% of the approximate decodes. Before issue 23's change: 0.77."""
    honest, total = 0, 0
    for name, K, kind in itertools.product(SMALL_K_CODES, (2, 3, 4), ("random", "smooth")):
        N = 2 * K
        for lost in range(N):
            returned = [i for i in range(N) if i != lost]
            true, est = readme_case(name, K, N, kind, returned, seed=10 * K + lost)
            if true < 1e-12 and est.overall == 0.0:
                continue  # exact (a systematic code whose systematic shares all returned)
            total += 1
            honest += bool(est.method == "unreliable" or est.overall >= 0.5 * true)
    assert total > 100
    assert honest / total >= 0.95, (honest, total)


@pytest.mark.parametrize("lost", [1, 2])  # the systematic shares of K=2, N=4
def test_readme_setup_with_a_systematic_straggler_says_it_cannot_estimate(lost):
    """The issue's case: K = 2, N = 4, the systematic spline, one systematic share straggling.
    The decode is off by about 0.4 while the estimate said 0.08 (below bacc.warn-error,
    so no warning). Three results leave one interior point, predicted from two by two
    interpolants that are the same line there: nothing can check an estimate."""
    from dask_bacc.codes import get_code

    assert get_code("systematic-spline", 2, 4).systematic_workers.tolist() == [1, 2]
    returned = [i for i in range(4) if i != lost]
    for seed in range(3):
        true, est = readme_case("systematic-spline", 2, 4, "random", returned, seed)
        assert true > 0.1  # worth a warning
        assert est.method == "unreliable" and math.isnan(est.overall)
        assert est.per_block[lost - 1] != 0.0  # the other block is exact: 0
        assert est.per_block[2 - lost] == 0.0


# issue 41, item 5: the systematic spline at K = 3, N = 5 with the middle block's own task
# late was about 0.6 off with an estimate of 0.06 and no warning; benchmarks/small_k.py
# --held holds each block's own task in turn for every systematic and local code at K <= 4
@pytest.mark.parametrize(
    "name, K, N, returned",
    [
        # the case: task 2 (the middle block's) late, decoded from the other 4
        ("systematic-spline", 3, 5, [0, 1, 3, 4]),
        # K = 4, N = 8 at the default wait (6 results): block 2's task 4 late, and end
        # task 0 (below 0.5x in 6 of these 8 draws, 4 silent), and its mirror image
        ("systematic-spline", 4, 8, [1, 2, 3, 5, 6, 7]),
        ("systematic-spline", 4, 8, [0, 1, 2, 4, 5, 6]),
    ],
)
def test_a_held_own_task_at_small_k_is_not_underestimated(name, K, N, returned):
    """The estimate is at least half the true error, or there is none ("unreliable": the
    job warns), in every draw. Before the fix the tests left one point out of 4 results
    (through 3 points the spline codes' companion is a quadratic, not the decode's cubic)
    or out of 6 (never as evenly surrounded as the held data point midway between them):
    their ratios did not carry over, and the estimate was 0.09-0.5x the true error."""
    for kind in ("random", "smooth"):
        for seed in range(4):
            true, est = readme_case(name, K, N, kind, returned, seed)
            assert true > 0.1  # worth a warning
            assert est.method == "unreliable" or est.overall >= 0.5 * true, (kind, seed, true, est)


def test_a_test_through_too_few_points_checks_another_pair():
    """``full_pair_nodes``: the spline codes' companion (Floater-Hormann of degree 3)
    through the 3 points a leave-one-out test keeps of 4 results is the quadratic through
    them, not the cubic of the decode: such tests are not counted, so a 4-result decode of
    a spline code has no estimate; Berrut's companion (degree 1) keeps its degree."""
    from dask_bacc.codes import get_code
    from dask_bacc.codes.estimate import full_pair_nodes

    spline, berrut = get_code("spline", 3, 5), BerrutCode(3, 5)
    assert full_pair_nodes(spline, 4) == 4 and full_pair_nodes(spline, 5) == 4
    assert full_pair_nodes(berrut, 3) == 2 and full_pair_nodes(berrut, 4) == 2
    rng = np.random.default_rng(0)
    X, W = rng.standard_normal((3, 40, 6)), rng.standard_normal((6, 3))
    for returned in ([0, 1, 3, 4], [0, 1, 2, 4], [0, 2, 3, 4]):
        for code, method in ((spline, "unreliable"), (berrut, "embedded-fh1")):
            results = np.tanh(code.encode(X)[returned] @ W)
            assert estimate_error(code, results, returned).method == method


def test_a_data_point_more_balanced_than_every_test_is_not_vouched_for():
    """``balance``: 6 results of the spline code at K = 4, N = 8 with the middle two
    missing leave data points 1 and 2 with 3 results on each side; a leave-one-out test
    keeps 3 and 2 at best, and the pair (spline against Floater-Hormann of degree 3)
    agrees more at the better surrounded point: no test checks it ("unreliable").
    Berrut's pair (degree 1) sees every interior point alike: estimated."""
    from dask_bacc.codes import get_code
    from dask_bacc.codes.estimate import balance

    spline = get_code("spline", 4, 8)
    assert balance(spline, np.array([3, 1, 5]), np.array([3, 4, 4])).tolist() == [3, 1, 3]
    assert balance(BerrutCode(4, 8), np.array([3, 0]), np.array([3, 4])).tolist() == [1, 0]
    returned = [0, 1, 2, 5, 6, 7]
    rng = np.random.default_rng(1)
    X, W = rng.standard_normal((4, 40, 6)), rng.standard_normal((6, 3))
    results = np.tanh(spline.encode(X)[returned] @ W)
    assert estimate_error(spline, results, returned).method == "unreliable"
    # with result 3 back (7 results) the test at result 3 keeps 3 on each side: estimated
    more = [0, 1, 2, 3, 5, 6, 7]
    results = np.tanh(spline.encode(X)[more] @ W)
    assert estimate_error(spline, results, more).method == "embedded-fh3"
    berrut = BerrutCode(4, 8)
    results = np.tanh(berrut.encode(X)[returned] @ W)
    assert estimate_error(berrut, results, returned).method == "embedded-fh1"


def test_a_linear_function_from_four_results_is_reproduced_not_unreliable():
    """Leave-one-out that predicts every point exactly is evidence too: for a function
    linear along the worker points the embedded pair (exact for linear functions) is
    kept: Berrut's error (degree 0: not exact), relative to the decode. From 4 results
    (two left-out points); from 3, one left-out point cannot tell a line from three
    collinear values of another function (issue 41:
    ``test_three_collinear_results_do_not_vouch_for_an_exact_decode``), and the job says
    it cannot estimate."""
    code = BerrutCode(3, 6)
    line = np.array([1.0, -0.5, 3.0])
    for returned, method in (([0, 1, 3, 5], "embedded-fh1"), ([0, 1, 3], "unreliable")):
        results = 2.0 + np.outer(code.worker_points[returned], line)
        est = estimate_error(code, results, returned)
        assert est.method == method, (returned, est)
        if method != "unreliable":
            truth = 2.0 + np.outer(code.data_points, line)
            true = rel(code.decode(results, returned), truth)
            assert 0.8 <= est.overall / true <= 1.25, (est, true)  # / decoded norm


def test_prediction_factor_widens_with_fewer_and_more_scattered_ratios():
    from dask_bacc.codes.estimate import prediction_factor, t95

    assert t95(1) == pytest.approx(6.314) and t95(30) == pytest.approx(1.697)
    assert t95(31) == pytest.approx(1.6449 + 1.524 / 31) and t95(200) < t95(31)
    with pytest.raises(ValueError):
        t95(0)
    # no spread: half the common ratio (the contract is >= 0.5x)
    assert prediction_factor(np.full(5, 2.0)) == pytest.approx(1.0)
    scattered = np.array([0.5, 2.0, 1.0, 0.7, 1.4])
    assert prediction_factor(scattered) > prediction_factor(np.ones(5))
    assert prediction_factor(scattered[:2]) > prediction_factor(scattered)
    with pytest.raises(ValueError):
        prediction_factor(np.ones(1))


def test_few_loo_points_inflate_the_estimate_and_three_results_are_unreliable():
    code, results, returned, decoded, exact = case("random", 4, 8, 3, "random", 5)
    est = estimate_error(code, results[:3], returned[:3])
    assert est.method == "unreliable" and math.isnan(est.overall)
    est = estimate_error(code, results, returned)  # 5 results: 3 interior points
    assert est.method == "embedded-fh1" and est.calibration > 1.0
    assert est.overall >= 0.5 * rel(decoded, exact)


def readme_predict(block, weights):
    return np.tanh(block @ weights)


@pytest.mark.parametrize("held", [1, 2])  # the systematic shares of K=2, N=4
def test_readme_job_with_a_held_systematic_share_warns(held):
    """The README's job (4 workers, K = 2, N = 4, the systematic spline, wait=3) with one
    systematic share held back: decoded from the other three, it is off by about 0.4,
    and the job says it cannot estimate that (before: an estimate of about 0.08, no
    warning). No wall clock: the share is held by an event until the job is done."""
    import sys

    import cloudpickle
    from cluster_helpers import gen_cluster

    import dask_bacc
    from dask_bacc.testing import gate_stragglers

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    X = np.random.default_rng(0).standard_normal((4000, 16))
    W = np.random.default_rng(1).standard_normal((16, 4))

    @gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
    async def run(c, s, *workers):
        gate = await gate_stragglers(indices=[held], client=c)
        with pytest.warns(dask_bacc.ApproximationWarning, match="could not be estimated") as w:
            job = await dask_bacc.submit_coded(
                readme_predict, X, W, code="systematic-spline", n_blocks=2, wait=3, client=c
            )
            Y = await job
        rep = job.report
        assert sorted(rep.returned) == sorted({0, 1, 2, 3} - {held})
        assert rep.error_estimate is None and rep.estimate_method == "unreliable"
        assert rel(Y, readme_predict(X, W)) > 0.1  # what the warning is about
        assert any("can be checked" in str(x.message) for x in w)
        await gate.release()
        await gate.clear()

    run()


def test_three_collinear_results_do_not_vouch_for_an_exact_decode():
    """Issue 41, found by benchmarks/upstream_cases.py (xarray's
    ``test_vectorize_dask_dtype`` under the spline code): f = int(median(b)) gave 0, 1, 2
    on the three shares of K = 2, N = 3, the one left-out point was predicted exactly, and
    the decode (0.5 and 1.5 where f gives 1 and 2, a 32% error) was reported with an
    estimate of 7e-17 and no warning. One left-out point is too few to vouch for it."""
    from dask_bacc.runtime.quality import estimate_decode

    code = get_code("spline", 2, 3)
    X = np.array([[[0.0, 1.0, 2.0]], [[1.0, 2.0, 3.0]]])

    def f(b):
        return np.array([int(np.median(r)) for r in b], dtype=float)

    Y = np.stack([f(s) for s in code.encode(X)])
    est, _, _ = estimate_decode(code, Y, [0, 1, 2])
    true = np.stack([f(b) for b in X])
    assert rel(code.decode(Y, [0, 1, 2]), true) > 0.1  # the case: a decode far off
    assert np.isnan(est.overall) and est.method == "unreliable", est
