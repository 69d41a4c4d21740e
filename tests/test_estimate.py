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
    """docs/accuracy.md: within 2x of the true error in at least 80% of cells; here 48
    fixed seeded cases (random and smooth data, K 4-16, N/K 1.5 and 2, 0-3 stragglers)."""
    ratios = []
    for kind, K, r, S, pattern, seed in SEEDED:
        code, results, returned, decoded, exact = case(kind, K, int(r * K), S, pattern, seed)
        est = estimate_error(code, results, returned)
        ratios.append(est.overall / rel(decoded, exact))
    ratios = np.array(ratios)
    within = np.mean((ratios >= 0.5) & (ratios <= 2.0))
    assert within >= 0.9, sorted(ratios.round(2))
    assert np.all((ratios > 0.25) & (ratios < 4.0)), sorted(ratios.round(2))


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
    if n >= 3 or est.method == "exact":
        assert math.isfinite(est.overall) and est.overall >= 0
        assert np.all(np.isfinite(est.per_block)) and np.all(est.per_block >= 0)
    # the order results arrived in does not matter
    perm = rng.permutation(n)
    again = estimate_error(code, results[returned[perm]], returned[perm])
    np.testing.assert_allclose(again.per_block, est.per_block, rtol=1e-9, atol=1e-15)
