"""Locating corrupted results (``dask_bacc.codes.robust``; docs/accuracy.md)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dask_bacc.codes import (
    BerrutCode,
    RepetitionCode,
    SplineCode,
    count_sketch,
    detect_inconsistent,
    locate_corrupted,
    robust_decode,
)
from dask_bacc.codes.robust import approxifer_votes, loo_consistency, required_results
from dask_bacc.testing import relative_error as rel
from dask_bacc.testing import smooth_blocks

PROPERTY = settings(deadline=None, max_examples=40, database=None, derandomize=True)


def workload(K: int, N: int, S: int, seed: int, systematic: bool = False, cls=BerrutCode):
    """tanh of a linear map of smooth data: (code, results of the returned, returned, f(X))."""
    rng = np.random.default_rng(seed)
    X = smooth_blocks(K, 12, 6, rng)
    W = rng.standard_normal((6, 5)) * 0.6
    code = cls(K, N, systematic=systematic)
    results = np.tanh(code.encode(X) @ W)
    returned = np.sort(rng.permutation(N)[: N - S])
    return code, results[returned], returned, np.tanh(X @ W)


def corrupt(results: np.ndarray, cols: list[int], kind: str, seed: int) -> np.ndarray:
    """Byzantine results: random values 10x the scale, a sign flip, or a 3x noise."""
    rng = np.random.default_rng(seed)
    out = results.copy()
    scale = float(np.sqrt(np.mean(results**2)))
    for c in cols:
        if kind == "garbage":
            out[c] = 10 * scale * rng.standard_normal(out[c].shape)
        elif kind == "flip":
            out[c] = -out[c]
        else:
            out[c] = out[c] + 3 * scale * rng.standard_normal(out[c].shape)
    return out


SEEDED = [  # (K, A, stragglers, corruption, seed)
    (4, 1, 0, "garbage", 0),
    (4, 1, 2, "flip", 1),
    (8, 1, 1, "noise", 2),
    (8, 1, 3, "garbage", 3),
    (16, 1, 4, "flip", 4),
    (4, 2, 0, "garbage", 5),
    (8, 2, 2, "noise", 6),
    (8, 2, 4, "garbage", 7),
    (16, 2, 3, "flip", 8),
]


@pytest.mark.parametrize(("K", "A", "S", "kind", "seed"), SEEDED)
def test_robust_decoder_finds_and_excludes_corrupted_results(K, A, S, kind, seed):
    N = required_results(K, A) + S + 2
    code, results, returned, exact = workload(K, N, S, seed)
    rng = np.random.default_rng(seed)
    bad_cols = sorted(rng.choice(returned.size, A, replace=False).tolist())
    bad = corrupt(results, bad_cols, kind, seed)
    clean_err = rel(code.decode(results, returned), exact)
    corrupted_err = rel(code.decode(bad, returned), exact)
    decoded, found = robust_decode(code, bad, returned, A)
    assert sorted(found.flagged) == sorted(returned[bad_cols].tolist())
    robust_err = rel(decoded, exact)
    # back to the clean level: what decoding without the corrupted results gives
    keep = [c for c in range(returned.size) if c not in bad_cols]
    np.testing.assert_allclose(decoded, code.decode(results[keep], returned[keep]), atol=1e-12)
    # and near the error with no corruption at all (fewer results: somewhat larger)
    assert robust_err <= 3.0 * clean_err
    assert corrupted_err > 2 * robust_err


def test_robust_decoder_on_sketches():
    """The runtime screens from count sketches of the results, not the results."""
    code, results, returned, _ = workload(8, 19, 2, 11)
    bad = corrupt(results, [4], "garbage", 11)
    sketches = np.stack([count_sketch(r, 16, seed=3) for r in bad])
    assert locate_corrupted(code, sketches, returned, 1).flagged == [int(returned[4])]


def test_detector_flags_a_corrupted_result_and_nothing_else():
    code, results, returned, _ = workload(8, 16, 1, 21)
    assert detect_inconsistent(code, results, returned).flagged == []
    for kind, col in [("garbage", 3), ("flip", 9), ("noise", 12)]:
        bad = corrupt(results, [col], kind, col)
        found = detect_inconsistent(code, bad, returned)
        assert found.flagged == [int(returned[col])], kind
        assert found.scores[int(returned[col])] > 4


def test_systematic_code_is_screened_too():
    code, results, returned, _ = workload(4, 12, 1, 31, systematic=True)
    bad = corrupt(results, [5], "garbage", 31)
    assert locate_corrupted(code, bad, returned, 1).flagged == [int(returned[5])]


def test_rational_locator_votes_for_the_corrupted_point_of_a_rational_function():
    """Linear f: the results lie exactly on P/q, so ApproxIFER's locator is sure."""
    rng = np.random.default_rng(4)
    code = BerrutCode(5, 14)
    results = code.encode(rng.standard_normal((5, 20)))  # f = identity
    results[6] += 5.0
    votes = approxifer_votes(code.worker_points, results, 5, 1)
    assert votes.argmax() == 6 and votes[6] > 0.9


def test_consistency_ratio_of_an_exact_interpolant():
    x = np.cos(np.linspace(0, np.pi, 10))
    Y = np.ones((10, 3))
    assert np.all(loo_consistency(x, Y) < 1e-5)  # rounding only
    Y[4] = 3.0
    t = loo_consistency(x, Y, exclude=[4])
    assert t[4] > 1e6 and np.all(np.delete(t, 4) < 1e-5)


def test_validation():
    code = BerrutCode(4, 12)
    results = np.zeros((8, 3))
    with pytest.raises(ValueError, match=r"2K \+ 2A - 1 = 9"):
        locate_corrupted(code, results, list(range(8)), 1)
    with pytest.raises(TypeError, match="Berrut"):
        locate_corrupted(RepetitionCode(4, 12), np.zeros((12, 3)), list(range(12)), 1)
    assert locate_corrupted(code, np.zeros((12, 3)), list(range(12)), 0).flagged == []
    assert required_results(4, 2) == 11
    assert detect_inconsistent(RepetitionCode(2, 4), np.zeros((4, 1)), [0, 1, 2, 3]).flagged == []
    assert detect_inconsistent(code, np.zeros((3, 1)), [0, 1, 2]).flagged == []


@pytest.mark.slow
@PROPERTY
@given(
    K=st.integers(2, 10),
    A=st.integers(1, 2),
    S=st.integers(0, 4),
    spare=st.integers(0, 6),
    seed=st.integers(0, 2**16),
    systematic=st.booleans(),
)
def test_corrupting_nothing_changes_nothing(K, A, S, spare, seed, systematic):
    N = required_results(K, A) + S + spare
    code, results, returned, _ = workload(K, N, S, seed, systematic)
    decoded, found = robust_decode(code, results, returned, A)
    assert found.flagged == []
    np.testing.assert_array_equal(decoded, code.decode(results, returned))
    assert detect_inconsistent(code, results, returned).flagged == []


@pytest.mark.parametrize(("K", "A", "S", "kind", "seed"), SEEDED[:6])
@pytest.mark.parametrize("systematic", [False, True])
def test_spline_codes_locate_corrupted_results_too(K, A, S, kind, seed, systematic):
    """The spline codes have no rational model for ApproxIFER's locator: the greedy
    leave-one-out test proposes the candidates, the same confirmation decides."""
    N = 2 * K + 2 * A - 1 + S + 2
    code, results, returned, truth = workload(K, N, S, seed, systematic, cls=SplineCode)
    rng = np.random.default_rng(seed)
    cols = sorted(rng.choice(len(returned), A, replace=False).tolist())
    bad = corrupt(results, cols, kind, seed)
    found = locate_corrupted(code, bad, returned, A)
    assert found.flagged == sorted(int(returned[c]) for c in cols)
    assert locate_corrupted(code, results, returned, A).flagged == []
    decoded, _ = robust_decode(code, bad, returned, A)
    keep = [c for c in range(len(returned)) if c not in cols]
    np.testing.assert_allclose(decoded, code.decode(results[keep], returned[keep]), atol=1e-12)
    harmed = rel(code.decode(bad, returned), truth)
    assert rel(decoded, truth) <= harmed + 1e-12
    assert detect_inconsistent(code, results, returned).flagged == []
