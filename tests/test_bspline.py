"""The local-support code (issue 29): each share reads at most ``support`` blocks, gaps are
named, never decoded silently, and a job waits for a covering share."""

from __future__ import annotations

import numpy as np
import pytest

from dask_bacc.codes import BSplineCode, InsufficientResults, estimate_error, get_code
from dask_bacc.codes.bspline import local_basis, windowed_spline
from dask_bacc.testing import relative_error, smooth_blocks


@pytest.mark.parametrize("support", [2, 4])
@pytest.mark.parametrize("K,N", [(2, 4), (5, 11), (8, 16), (30, 61)])
@pytest.mark.parametrize("systematic", [False, True])
def test_each_share_reads_at_most_its_support(K, N, support, systematic):
    code = BSplineCode(K, N, support=support, systematic=systematic)
    E = code.encoding_matrix()
    reads = (E != 0).sum(axis=1)
    assert reads.max() <= support and reads.min() >= 1
    # the blocks a share reads are neighbours
    for row in E:
        nz = np.flatnonzero(row)
        assert nz.max() - nz.min() < support
    # and the encoder interpolates the blocks: u(alpha_j) = X_j
    np.testing.assert_allclose(local_basis(code.data_points, K, support), np.eye(K), atol=1e-12)


def test_systematic_shares_are_the_blocks_themselves():
    code = get_code("systematic-bspline", 8, 16)
    rows = code.data_rows()
    assert sorted(rows.values()) == list(range(8))
    assert sorted(rows) == sorted(code.systematic_workers.tolist())


def test_the_decode_is_local():
    code = BSplineCode(16, 32)
    D = code.decoding_matrix(list(range(32)))
    assert ((np.abs(D) > 0).sum(axis=1) <= 6).all()


def test_a_gap_is_named_and_not_decoded():
    code = BSplineCode(8, 16)
    # shares 5..10 lie around blocks 3 and 4 (points 1 - 2i/15 against 1 - 2j/7)
    returned = [i for i in range(16) if not 4 <= i <= 11]
    assert code.uncovered(returned) == [3, 4]
    assert not code.can_decode(returned)
    with pytest.raises(InsufficientResults, match=r"blocks \[3, 4\]"):
        code.decode(np.zeros((len(returned), 2)), returned)
    with pytest.raises(InsufficientResults):
        estimate_error(code, np.zeros((len(returned), 2)), returned)
    # one share back in the gap covers both
    assert code.can_decode([*returned, 8])


def test_min_results_is_the_fewest_covering_shares():
    code = BSplineCode(8, 16)
    assert code.min_results == 4
    assert not any(
        code.can_decode(list(s)) for s in [(0, 5, 10), (1, 6, 11), (2, 7, 15)]
    )


def test_windowed_spline_interpolates_and_reproduces_cubics():
    x = np.sort(np.random.default_rng(0).uniform(-1, 1, 12))
    np.testing.assert_allclose(windowed_spline(x, x), np.eye(12), atol=1e-12)
    t = np.linspace(-0.8, 0.8, 9)
    # a natural spline reproduces straight lines everywhere
    np.testing.assert_allclose(windowed_spline(t, x) @ (3 * x - 1), 3 * t - 1, atol=1e-10)


@pytest.mark.parametrize("kind", ["smooth", "random"])
def test_median_error_no_worse_than_berrut(kind):
    """K = 8, N = 16, 4 random stragglers, tanh(X W): the local code's median error over
    40 straggler sets is at most Berrut's (docs/codes.md has the full table)."""
    rng = np.random.default_rng(3)
    W = rng.standard_normal((6, 3))
    errs: dict[str, list[float]] = {"bspline": [], "berrut": []}
    for _ in range(40):
        X = smooth_blocks(8, 100, 6, rng) if kind == "smooth" else rng.standard_normal((8, 100, 6))
        truth = np.tanh(X @ W)
        ret = np.sort(rng.choice(16, 12, replace=False)).tolist()
        for name in errs:
            code = get_code(name, 8, 16)
            if not code.can_decode(ret):
                continue
            out = np.tanh(code.encode(X)[ret] @ W)
            errs[name].append(relative_error(code.decode(out, ret), truth))
    assert np.median(errs["bspline"]) <= np.median(errs["berrut"])
