"""The spline codes (issue 12): matrices against SciPy's splines, convergence against
Berrut's, systematic exactness, validation. The shared harness in test_codes.py runs every
generic property on them too."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.interpolate import CubicSpline, make_smoothing_spline

from dask_bacc.codes import BerrutCode, SplineCode, get_code
from dask_bacc.codes.spline import spline_matrix


@pytest.mark.parametrize("m", [3, 4, 7, 16])
def test_spline_matrix_is_scipys_natural_spline_with_linear_ends(m):
    rng = np.random.default_rng(m)
    x = np.sort(rng.uniform(-1, 1, m))
    y = rng.standard_normal(m)
    inside = np.linspace(x[0], x[-1], 41)
    ref = CubicSpline(x, y, bc_type="natural")
    np.testing.assert_allclose(spline_matrix(inside, x) @ y, ref(inside), atol=1e-12)
    outside = np.array([x[0] - 0.3, x[-1] + 0.2])
    tangent = ref(x[[0, -1]]) + ref(x[[0, -1]], 1) * (outside - x[[0, -1]])
    np.testing.assert_allclose(spline_matrix(outside, x) @ y, tangent, atol=1e-12)


@pytest.mark.parametrize("lam", [1e-4, 1e-2, 1.0])
def test_smoothing_spline_is_scipys(lam):
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(-1, 1, 12))
    y = np.sin(3 * x) + 0.1 * rng.standard_normal(12)
    t = np.linspace(x[0], x[-1], 31)
    ref = make_smoothing_spline(x, y, lam=lam)
    np.testing.assert_allclose(spline_matrix(t, x, smoothing=lam) @ y, ref(t), atol=1e-8)


def test_one_and_two_results():
    code = SplineCode(4, 8)
    rng = np.random.default_rng(0)
    Y = rng.standard_normal((8, 3))
    np.testing.assert_array_equal(code.decode(Y[[5]], [5]), np.broadcast_to(Y[5], (4, 3)))
    # two results: the straight line through them
    z, a = code.worker_points, code.data_points
    line = Y[2] + (a[:, None] - z[2]) * (Y[6] - Y[2]) / (z[6] - z[2])
    np.testing.assert_allclose(code.decode(Y[[6, 2]], [6, 2]), line, atol=1e-12)


def test_encoder_interpolates_the_data():
    code = SplineCode(5, 11)
    X = np.random.default_rng(1).standard_normal((5, 4))
    M = SplineCode(5, 5, systematic=True)  # worker points == data points
    np.testing.assert_allclose(M.encode(X)[M.systematic_workers], X, atol=1e-12)
    # linear data is reproduced exactly by both maps (natural splines keep lines)
    lin = 2.0 * code.data_points[:, None] + np.arange(4.0)
    Y = code.encode(lin)
    np.testing.assert_allclose(Y, 2.0 * code.worker_points[:, None] + np.arange(4.0), atol=1e-12)
    np.testing.assert_allclose(code.decode(Y[[0, 3, 9]], [0, 3, 9]), lin, atol=1e-12)


def test_points():
    code = SplineCode(4, 9)
    np.testing.assert_allclose(code.data_points, [0.75, 0.25, -0.25, -0.75])
    np.testing.assert_allclose(code.worker_points, np.linspace(1, -1, 9))
    sys_code = SplineCode(4, 9, systematic=True)
    z = sys_code.worker_points
    assert np.all(np.diff(z) < 0)
    np.testing.assert_array_equal(z[sys_code.systematic_workers], sys_code.data_points)


def test_systematic_exactness():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((6, 5))
    code = SplineCode(6, 12, systematic=True)
    Y = np.tanh(code.encode(X))
    sw = code.systematic_workers.tolist()
    others = [i for i in range(12) if i not in sw]
    returned = sw + others[:2]
    assert code.is_exact(returned) and not code.is_exact(returned[1:])
    np.testing.assert_allclose(code.decode(Y[returned], returned), np.tanh(X), atol=1e-12)
    # a block whose systematic worker straggled is estimated, the others stay exact
    est = code.decode(Y[returned[1:]], returned[1:])
    np.testing.assert_allclose(est[1:], np.tanh(X[1:]), atol=1e-12)
    assert not np.allclose(est[0], np.tanh(X[0]))
    smooth = SplineCode(6, 12, systematic=True, smoothing=0.1)
    assert not smooth.is_exact(list(range(12)))


def _mean_error(code, trials: int, s: int, rng) -> float:
    errs = []
    for _ in range(trials):
        X = rng.standard_normal((code.K, 16, 8))
        W = 1.5 * rng.standard_normal((8, 8)) / np.sqrt(8)
        returned = np.sort(rng.permutation(code.N)[: code.N - s])
        Y = np.tanh(code.encode(X) @ W)
        est = code.decode(Y[returned], returned)
        truth = np.tanh(X @ W)
        errs.append(np.linalg.norm(est - truth) / np.linalg.norm(truth))
    return float(np.mean(errs))


def test_spline_converges_much_faster_than_berrut():
    """tanh(XW) on i.i.d. rows, K=8, s=2: the error ratio between N=16 and N=64 (same
    straggler draws for both codes) is far steeper for the spline code (about 80x against
    11x in benchmarks/spline_points.py)."""
    ratios = {}
    for cls in (BerrutCode, SplineCode):
        errs = [_mean_error(cls(8, N), 20, 2, np.random.default_rng(7)) for N in (16, 64)]
        ratios[cls.name] = errs[0] / errs[1]
    assert ratios["berrut"] > 3  # it converges too, only slower
    assert ratios["spline"] > 3 * ratios["berrut"], ratios


def test_validation():
    with pytest.raises(TypeError, match="smoothing"):
        SplineCode(3, 6, smoothing="a")
    with pytest.raises(ValueError, match="smoothing"):
        SplineCode(3, 6, smoothing=-1.0)
    with pytest.raises(TypeError, match="systematic"):
        SplineCode(3, 6, systematic=1)
    with pytest.raises(ValueError, match="N >= K"):
        SplineCode(5, 3, systematic=True)
    with pytest.raises(ValueError, match="cannot take systematic=False"):
        get_code("systematic-spline", 3, 6, systematic=False)
    with pytest.raises(ValueError, match="strictly increasing"):
        spline_matrix([0.0], np.array([0.0, 0.0, 1.0]))


def test_batched_leave_one_out_rows_equal_the_per_target_loop():
    """SplineCode.loo_matrices (one batched Thomas sweep) against the generic loop of
    InterpolatingCode, for targets inside and outside the predicting set."""
    from dask_bacc.codes.base import InterpolatingCode
    from dask_bacc.codes.spline import natural_rows

    rng = np.random.default_rng(4)
    x = np.sort(rng.uniform(-1, 1, (6, 9)), axis=1)
    t = rng.uniform(-1.4, 1.4, 6)
    ref = np.stack([spline_matrix(t[r : r + 1], x[r])[0] for r in range(6)])
    np.testing.assert_allclose(natural_rows(t, x), ref, atol=1e-13)
    code = SplineCode(8, 20)
    z = code.worker_points
    base = np.array([0, 1, 2, 4, 5, 7, 9, 10, 12, 15, 19])
    for targets in (np.arange(20), base, np.array([3, 6, 18])):
        fast = code.loo_matrices(z, base, targets)
        slow = InterpolatingCode.loo_matrices(code, z, base, targets)
        np.testing.assert_allclose(fast[0], slow[0], atol=1e-13)
        np.testing.assert_allclose(fast[1], slow[1], atol=1e-13)
