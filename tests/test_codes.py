"""Tests for ``dask_bacc.codes`` (docs/design.md, "The formulas" and "Adding a code").

The file is organised like numcodecs' test-suite: one shared harness (``code`` / ``exact_code``
fixtures) that every code runs through, then code-specific tests (Berrut maths, Lagrange
exactness, repetition / uncoded bookkeeping), the registry, and import hygiene (``codes`` is
pure NumPy and must never import dask or distributed).
"""

from __future__ import annotations

import ast
import itertools
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dask_bacc.codes as codes
from dask_bacc.codes import (
    BerrutCode,
    BSplineCode,
    Code,
    InsufficientResults,
    LagrangeCode,
    RepetitionCode,
    SplineCode,
    Uncoded,
    get_code,
    register_code,
    registered_codes,
)
from dask_bacc.codes import registry as codes_registry
from dask_bacc.codes.base import AMPLIFICATION_LIMIT
from dask_bacc.codes.berrut import berrut_matrix
from dask_bacc.exceptions import InsufficientResults as InsufficientResultsFromExceptions
from dask_bacc.testing import relative_error

PROPERTY_SETTINGS = settings(deadline=None, max_examples=50, database=None)

# Two points closer than this are "the same point": the coincidence rule of docs/design.md,
# "The formulas".
TOL = 1e-12

# --------------------------------------------------------------------------------------------
# the shared harness
# --------------------------------------------------------------------------------------------

# (class, positional args, keyword args); every code runs through the generic tests below.
CODE_SPECS = [
    (BerrutCode, (1, 2), {}),
    (BerrutCode, (1, 5), {}),
    (BerrutCode, (3, 7), {}),
    (BerrutCode, (4, 9), {}),
    (BerrutCode, (5, 11), {}),  # every data point coincides with a worker point
    (BerrutCode, (8, 20), {}),
    (BerrutCode, (1, 3), {"systematic": True}),
    (BerrutCode, (4, 4), {"systematic": True}),
    (BerrutCode, (4, 9), {"systematic": True}),
    (BerrutCode, (7, 16), {"systematic": True}),
    (SplineCode, (1, 2), {}),
    (SplineCode, (1, 4), {"systematic": True}),
    (SplineCode, (3, 7), {}),
    (SplineCode, (4, 9), {"smoothing": 0.01}),
    (SplineCode, (8, 16), {}),
    (SplineCode, (4, 4), {"systematic": True}),
    (SplineCode, (7, 16), {"systematic": True}),
    (SplineCode, (5, 12), {"systematic": True, "smoothing": 0.001}),
    (BSplineCode, (1, 2), {}),
    (BSplineCode, (2, 4), {}),
    (BSplineCode, (3, 7), {}),
    (BSplineCode, (4, 9), {"support": 2}),
    (BSplineCode, (8, 16), {}),
    (BSplineCode, (4, 4), {"systematic": True}),
    (BSplineCode, (7, 16), {"systematic": True}),
    (BSplineCode, (5, 12), {"systematic": True, "support": 2}),
    (LagrangeCode, (1, 2), {}),
    (LagrangeCode, (4, 6), {"degree": 1}),
    (LagrangeCode, (3, 7), {"degree": 2}),
    (LagrangeCode, (5, 11), {"degree": 2}),
    (LagrangeCode, (1, 3), {"degree": 3}),
    (LagrangeCode, (4, 12), {"degree": 3}),
    (RepetitionCode, (1, 3), {}),
    (RepetitionCode, (3, 7), {}),
    (RepetitionCode, (4, 8), {}),
    (RepetitionCode, (2, 2), {}),
    (Uncoded, (1,), {}),
    (Uncoded, (4,), {}),
    (Uncoded, (6, 6), {}),
]


def _spec_id(spec) -> str:
    cls, args, kwargs = spec
    return "-".join([cls.__name__, *map(str, args), *(f"{k}={v}" for k, v in kwargs.items())])


def _build(spec) -> Code:
    cls, args, kwargs = spec
    return cls(*args, **kwargs)


@pytest.fixture(params=CODE_SPECS, ids=_spec_id)
def code(request) -> Code:
    return _build(request.param)


EXACT_SPECS = [s for s in CODE_SPECS if s[0].exact]


@pytest.fixture(params=EXACT_SPECS, ids=_spec_id)
def exact_code(request) -> Code:
    return _build(request.param)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20240917)


def random_decodable(code: Code, rng: np.random.Generator) -> list[int]:
    """The shortest decodable prefix of a random permutation of the workers."""
    perm = rng.permutation(code.N).tolist()
    for size in range(1, code.N + 1):
        if code.can_decode(perm[:size]):
            return perm[:size]
    raise AssertionError(f"{code!r}: not even the full worker set is decodable")


def decodable_sets(code: Code, rng: np.random.Generator) -> list[list[int]]:
    """Several decodable returned sets, in different orders, for the harness."""
    everything = list(range(code.N))
    sets = [everything, everything[::-1], rng.permutation(code.N).tolist()]
    for _ in range(4):
        sets.append(random_decodable(code, rng))
    for ret in sets:
        assert code.can_decode(ret), (code, ret)
    return sets


# --- generic tests every code runs through -----------------------------------------------


def test_points_shapes(code):
    assert code.data_points.shape == (code.K,)
    assert code.worker_points.shape == (code.N,)
    assert np.isfinite(code.data_points).all()
    assert np.isfinite(code.worker_points).all()
    # the properties hand out copies: scribbling on them must not change the code
    before = code.encoding_matrix()
    code.data_points[...] = 123.0
    code.worker_points[...] = -7.0
    np.testing.assert_array_equal(code.encoding_matrix(), before)


def test_encoding_matrix_shape_finite_rows_sum_to_one(code):
    E = code.encoding_matrix()
    assert E.shape == (code.N, code.K)
    assert np.isfinite(E).all()
    np.testing.assert_allclose(E.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_encode_is_E_times_flattened_multidim_blocks(code, rng):
    blocks = rng.normal(size=(code.K, 3, 2))
    coded = code.encode(blocks)
    assert coded.shape == (code.N, 3, 2)
    expected = (code.encoding_matrix() @ blocks.reshape(code.K, -1)).reshape(code.N, 3, 2)
    np.testing.assert_allclose(coded, expected, rtol=1e-12, atol=1e-12)
    # a list of K equal-shape blocks is the same as the stacked array
    np.testing.assert_array_equal(code.encode(list(blocks)), coded)


def test_encode_rejects_wrong_number_of_blocks(code, rng):
    with pytest.raises(ValueError, match="blocks"):
        code.encode(rng.normal(size=(code.K + 1, 3)))
    with pytest.raises(ValueError, match="blocks"):
        code.encode(np.float64(1.0))


def test_decoding_matrix_shape_finite_rows_sum_to_one(code, rng):
    for returned in decodable_sets(code, rng):
        D = code.decoding_matrix(returned)
        assert D.shape == (code.K, len(returned))
        assert np.isfinite(D).all()
        np.testing.assert_allclose(D.sum(axis=1), 1.0, rtol=0, atol=1e-9)


def test_decode_is_D_times_flattened_results(code, rng):
    for returned in decodable_sets(code, rng):
        results = rng.normal(size=(len(returned), 3, 2))
        decoded = code.decode(results, returned)
        assert decoded.shape == (code.K, 3, 2)
        D = code.decoding_matrix(returned)
        expected = (D @ results.reshape(len(returned), -1)).reshape(code.K, 3, 2)
        np.testing.assert_allclose(decoded, expected, rtol=1e-12, atol=1e-12)


def test_constant_blocks_are_reproduced(code, rng):
    blocks = np.full((code.K, 3, 2), 3.25)
    coded = code.encode(blocks)
    np.testing.assert_allclose(coded, 3.25, rtol=1e-12)
    for returned in decodable_sets(code, rng):
        decoded = code.decode(coded[returned], returned)
        np.testing.assert_allclose(decoded, 3.25, rtol=1e-12)


def test_decode_independent_of_order(code, rng):
    for returned in decodable_sets(code, rng):
        results = rng.normal(size=(len(returned), 3, 2))
        perm = rng.permutation(len(returned))
        shuffled = [returned[p] for p in perm]
        np.testing.assert_allclose(
            code.decode(results[perm], shuffled),
            code.decode(results, returned),
            rtol=1e-12,
            atol=1e-12,
        )
        # the columns of D follow `returned` as given
        np.testing.assert_allclose(
            code.decoding_matrix(shuffled),
            code.decoding_matrix(returned)[:, perm],
            rtol=1e-12,
            atol=1e-12,
        )


def test_config_round_trip(code):
    config = code.get_config()
    assert config["name"] == code.name
    assert config["K"] == code.K
    # JSON-serialisable, and equal after a trip through JSON
    assert json.loads(json.dumps(config)) == config
    rebuilt = type(code).from_config(json.loads(json.dumps(config)))
    assert type(rebuilt) is type(code)
    assert rebuilt == code
    assert hash(rebuilt) == hash(code)
    assert rebuilt.get_config() == config
    np.testing.assert_array_equal(rebuilt.encoding_matrix(), code.encoding_matrix())
    via_registry = get_code(**config)
    assert type(via_registry) is type(code)
    assert via_registry == code
    np.testing.assert_array_equal(via_registry.worker_points, code.worker_points)
    assert type(code).__name__ in repr(code)


def test_from_config_rejects_other_codes_config(code):
    other = "lagrange" if code.name != "lagrange" else "berrut"
    with pytest.raises(ValueError, match="config"):
        type(code).from_config({**code.get_config(), "name": other})


def test_codes_with_different_parameters_differ(code):
    config = code.get_config()
    bigger = get_code(**{**config, "K": code.K + 1, **({"N": code.N + 2} if "N" in config else {})})
    assert bigger != code


def test_bad_returned(code):
    everything = list(range(code.N))
    for method in (code.decoding_matrix, lambda r: code.decode(np.zeros((len(r), 2)), r)):
        with pytest.raises(ValueError, match="distinct"):
            method([*everything, 0])
        with pytest.raises(ValueError, match=r"\[0, "):
            method([*everything[:-1], code.N])
        with pytest.raises(ValueError, match=r"\[0, "):
            method([-1, *everything[1:]])
        with pytest.raises(InsufficientResults):
            method([])
        with pytest.raises(ValueError, match="1-d"):
            method(np.array([everything]))
        with pytest.raises(TypeError, match="integer"):
            method([float(i) for i in everything])
    assert not code.can_decode([])


def test_decode_rejects_wrong_number_of_results(code, rng):
    returned = list(range(code.N))
    with pytest.raises(ValueError, match="results"):
        code.decode(rng.normal(size=(code.N + 1, 2)), returned)


def test_min_results_and_can_decode(code, rng):
    assert 1 <= code.min_results <= code.N
    assert code.can_decode(list(range(code.N)))
    assert len(random_decodable(code, rng)) >= code.min_results
    # anything smaller than min_results is undecodable, and decoding says so
    for size in range(1, code.min_results):
        returned = rng.choice(code.N, size=size, replace=False).tolist()
        assert not code.can_decode(returned)
        with pytest.raises(InsufficientResults):
            code.decoding_matrix(returned)
        with pytest.raises(InsufficientResults):
            code.decode(np.ones((size, 2)), returned)


def test_exact_flag():
    assert BerrutCode.exact is False
    for cls in (LagrangeCode, RepetitionCode, Uncoded):
        assert cls.exact is True


@pytest.mark.parametrize("scale", [1.0, -2.5])
def test_exact_codes_reproduce_linear_f(exact_code, rng, scale):
    code = exact_code
    assert code.exact
    blocks = rng.normal(size=(code.K, 4, 3))
    results = scale * code.encode(blocks)  # f(x) = scale * x, evaluated on every coded block
    for returned in decodable_sets(code, rng):
        decoded = code.decode(results[returned], returned)
        np.testing.assert_allclose(decoded, scale * blocks, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------------------------
# points
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("K", [1, 2, 5, 8, 21])
def test_data_points_are_chebyshev_first_kind(K):
    for code in (BerrutCode(K, K + 3), LagrangeCode(K, 2 * K), BerrutCode(K, K, systematic=True)):
        alpha = code.data_points
        expected = np.array([np.cos((2 * j + 1) * np.pi / (2 * K)) for j in range(K)])
        np.testing.assert_allclose(alpha, expected, rtol=0, atol=1e-15)
        assert np.all(np.diff(alpha) < 0)


@pytest.mark.parametrize("N", [1, 2, 3, 10, 41])
def test_worker_points_are_chebyshev_second_kind(N):
    for code in (BerrutCode(1, N), LagrangeCode(1, N)):
        z = code.worker_points
        if N == 1:
            np.testing.assert_array_equal(z, [0.0])
        else:
            expected = np.array([np.cos(i * np.pi / (N - 1)) for i in range(N)])
            np.testing.assert_allclose(z, expected, rtol=0, atol=1e-15)
            assert np.all(np.diff(z) < 0)


@pytest.mark.parametrize(("K", "N"), [(1, 1), (1, 2), (3, 3), (3, 4), (4, 13), (7, 30), (20, 80)])
def test_systematic_points(K, N):
    code = BerrutCode(K, N, systematic=True)
    z, sys_workers = code.worker_points, code.systematic_workers
    assert z.shape == (N,)
    assert np.all(np.diff(z) < 0)
    assert np.all(np.abs(z) <= 1.0)
    assert sys_workers.shape == (K,)
    assert np.all(np.diff(sys_workers) > 0)
    np.testing.assert_array_equal(z[sys_workers], code.data_points)
    # the N-K further points are all different from the data points
    others = np.delete(z, sys_workers)
    assert others.size == N - K
    if others.size:
        assert np.abs(others[:, None] - code.data_points[None, :]).min() > TOL


# --------------------------------------------------------------------------------------------
# Berrut: reference implementation of docs/design.md, "The formulas" (deliberately plain loops)
# --------------------------------------------------------------------------------------------


def reference_encoding(code: BerrutCode) -> np.ndarray:
    """E[i, j] = ((-1)^j / (z_i - alpha_j)) / sum_k ((-1)^k / (z_i - alpha_k)); hits: unit rows."""
    alpha, z = code.data_points, code.worker_points
    E = np.zeros((code.N, code.K))
    for i in range(code.N):
        hits = [j for j in range(code.K) if abs(z[i] - alpha[j]) <= TOL]
        if hits:
            E[i, hits[0]] = 1.0
            continue
        terms = [(-1.0) ** j / (z[i] - alpha[j]) for j in range(code.K)]
        total = sum(terms)
        for j in range(code.K):
            E[i, j] = terms[j] / total
    return E


def reference_decoding(code: BerrutCode, returned, parity: str = "rank") -> np.ndarray:
    """D[j, l] from docs/design.md, "The formulas"; signs by rank among the sorted returned workers.

    ``parity="index"`` uses the original worker index instead: the wrong variant, kept to
    show why the design forbids it.
    """
    alpha, z = code.data_points, code.worker_points
    rank = {w: r for r, w in enumerate(sorted(returned))}
    D = np.zeros((code.K, len(returned)))
    for j in range(code.K):
        hits = [col for col, w in enumerate(returned) if abs(alpha[j] - z[w]) <= TOL]
        if hits:
            D[j, hits[0]] = 1.0
            continue
        sign = {w: (-1.0) ** (rank[w] if parity == "rank" else w) for w in returned}
        terms = [sign[w] / (alpha[j] - z[w]) for w in returned]
        total = sum(terms)
        for col in range(len(returned)):
            D[j, col] = terms[col] / total
    return D


@st.composite
def berrut_cases(draw):
    K = draw(st.integers(1, 20), label="K")
    N = draw(st.integers(K + 1, 80), label="N")
    systematic = draw(st.booleans(), label="systematic")
    returned = draw(
        st.lists(st.integers(0, N - 1), min_size=1, max_size=N, unique=True), label="returned"
    )
    perm = draw(st.permutations(range(len(returned))), label="perm")
    return BerrutCode(K, N, systematic=systematic), returned, list(perm)


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(case=berrut_cases())
def test_berrut_properties(case):
    code, returned, perm = case
    K, N = code.K, code.N
    alpha, z = code.data_points, code.worker_points

    E = code.encoding_matrix()
    assert E.shape == (N, K)
    assert np.isfinite(E).all()
    np.testing.assert_allclose(E.sum(axis=1), 1.0, rtol=0, atol=1e-9)
    np.testing.assert_allclose(E, reference_encoding(code), rtol=1e-9, atol=1e-12)

    # the encoder's interpolant at the data points is the identity
    np.testing.assert_array_equal(berrut_matrix(alpha, alpha), np.eye(K))
    # coincidence rule: a worker sitting on a data point gets exactly that block
    for i, j in zip(*np.nonzero(np.abs(z[:, None] - alpha[None, :]) <= TOL), strict=True):
        np.testing.assert_array_equal(E[i], np.eye(K)[j])
    if code.systematic:
        for j, w in enumerate(code.systematic_workers):
            np.testing.assert_array_equal(E[w], np.eye(K)[j])

    D = code.decoding_matrix(returned)
    assert D.shape == (K, len(returned))
    assert np.isfinite(D).all()
    np.testing.assert_allclose(D.sum(axis=1), 1.0, rtol=0, atol=1e-9)
    np.testing.assert_allclose(D, reference_decoding(code, returned), rtol=1e-9, atol=1e-12)
    if code.systematic:
        # a returned systematic worker gives its block exactly
        for j, w in enumerate(code.systematic_workers):
            if w in returned:
                np.testing.assert_array_equal(D[j], np.eye(len(returned))[returned.index(w)])

    # constants are reproduced, through encode and decode
    coded = code.encode(np.full((K, 2), -1.5))
    np.testing.assert_allclose(coded, -1.5, rtol=1e-12)
    np.testing.assert_allclose(code.decode(coded[returned], returned), -1.5, rtol=1e-9)

    # decoding does not depend on the order the results arrived in
    results = np.cos(3.0 * coded[returned] + np.arange(len(returned))[:, None])
    shuffled = [returned[p] for p in perm]
    np.testing.assert_allclose(
        code.decode(results[perm], shuffled), code.decode(results, returned), rtol=1e-12, atol=1e-12
    )


def test_berrut_matrix_identity_at_nodes_and_unit_rows():
    alpha = BerrutCode(6, 7).data_points
    np.testing.assert_array_equal(berrut_matrix(alpha, alpha), np.eye(6))
    # nodes in increasing order work too (the formula only needs monotone nodes)
    np.testing.assert_array_equal(berrut_matrix(alpha[::-1], alpha[::-1]), np.eye(6))
    targets = np.array([0.95, alpha[2], -0.3])
    M = berrut_matrix(targets, alpha)
    np.testing.assert_array_equal(M[1], np.eye(6)[2])
    np.testing.assert_allclose(M.sum(axis=1), 1.0, atol=1e-12)


def test_berrut_coincidence_K5_N11(rng):
    code = BerrutCode(5, 11)
    alpha, z = code.data_points, code.worker_points
    assert abs(z[5] - alpha[2]) <= TOL
    # in fact all of workers 1, 3, 5, 7, 9 sit on the data points: (2j+1)/10 == i/10
    for j in range(5):
        assert abs(z[2 * j + 1] - alpha[j]) <= TOL
    E = code.encoding_matrix()
    assert np.isfinite(E).all()
    np.testing.assert_array_equal(E[5], np.eye(5)[2])
    for j in range(5):
        np.testing.assert_array_equal(E[2 * j + 1], np.eye(5)[j])

    blocks = rng.normal(size=(5, 6))
    coded = code.encode(blocks)
    np.testing.assert_array_equal(coded[5], blocks[2])
    results_all = np.sin(2.0 * coded) + coded**2  # any f
    for _ in range(20):
        others = rng.permutation([i for i in range(11) if i != 5])
        returned = [5, *others[: rng.integers(0, 10, endpoint=True)].tolist()]
        returned = rng.permutation(returned).tolist()
        D = code.decoding_matrix(returned)
        assert np.isfinite(D).all()
        col = returned.index(5)
        np.testing.assert_array_equal(D[2], np.eye(len(returned))[col])
        estimate = code.decode(results_all[returned], returned)
        assert np.isfinite(estimate).all()
        np.testing.assert_allclose(estimate[2], results_all[5], rtol=0, atol=1e-12)


def test_berrut_first_order_convergence():
    rng = np.random.default_rng(0)
    K = 8
    blocks = rng.normal(size=(K, 64))
    truth = np.tanh(blocks)
    errors = {}
    for N in (40, 80, 160):
        code = BerrutCode(K, N)
        straggler = N // 2
        returned = [i for i in range(N) if i != straggler]
        results = np.tanh(code.encode(blocks))[returned]
        errors[N] = relative_error(code.decode(results, returned), truth)
    assert errors[40] > errors[80] > errors[160]
    # first order: 4x the workers gives about 1/4 the error (measured ratio ~0.2)
    assert errors[160] < errors[40] / 3
    assert errors[40] < 0.1  # and the approximation is useful in the first place


def test_berrut_systematic_is_exact_when_systematic_workers_return(rng):
    code = BerrutCode(5, 12, systematic=True)
    blocks = rng.normal(size=(5, 4))
    results = np.tanh(code.encode(blocks))
    others = [i for i in range(12) if i not in set(code.systematic_workers)]
    returned = rng.permutation([*code.systematic_workers.tolist(), *others[:3]]).tolist()
    estimate = code.decode(results[returned], returned)
    np.testing.assert_allclose(estimate, np.tanh(blocks), rtol=0, atol=1e-14)


def test_berrut_systematic_N_equals_K_is_the_identity():
    code = BerrutCode(4, 4, systematic=True)
    np.testing.assert_array_equal(code.encoding_matrix(), np.eye(4))
    np.testing.assert_array_equal(code.decoding_matrix([0, 1, 2, 3]), np.eye(4))


@pytest.mark.parametrize(("K", "N"), [(1, 1), (1, 2), (3, 4), (8, 9), (20, 80)])
def test_berrut_any_single_result_decodes(K, N):
    code = BerrutCode(K, N)
    assert code.min_results == 1
    for w in range(N):
        assert code.can_decode([w])
        D = code.decoding_matrix([w])
        np.testing.assert_allclose(D, 1.0, rtol=0, atol=1e-12)  # one result: a constant


def test_berrut_option_validation():
    with pytest.raises(TypeError, match="systematic"):
        BerrutCode(3, 5, systematic="yes")
    with pytest.raises(ValueError, match="N >= K"):
        BerrutCode(5, 4, systematic=True)


# --- the decoder's signs alternate by rank among the returned points --------------------


@pytest.mark.parametrize("systematic", [False, True])
def test_berrut_decoder_matches_reference_on_random_subsets(systematic):
    rng = np.random.default_rng(7)
    for K, N in [(1, 4), (3, 10), (8, 41), (12, 30)]:
        code = BerrutCode(K, N, systematic=systematic)
        for _ in range(15):
            size = int(rng.integers(1, N, endpoint=True))
            returned = rng.choice(N, size=size, replace=False).tolist()
            np.testing.assert_allclose(
                code.decoding_matrix(returned),
                reference_decoding(code, returned),
                rtol=1e-9,
                atol=1e-12,
            )


def test_berrut_decoder_signs_alternate_by_rank():
    """Sorted by worker index, row j of D alternates in sign except across alpha_j.

    With nodes n_0 > n_1 > ... and weights (-1)^l / (x - n_l), consecutive terms have opposite
    signs except for the one pair of nodes that brackets x. With original-index parity the
    removed straggler (worker 20) would put a second same-sign pair at the gap.
    """
    code = BerrutCode(8, 41)
    stragglers = {20, 33}
    returned = [i for i in range(41) if i not in stragglers]
    z = code.worker_points[returned]
    D = code.decoding_matrix(returned)  # returned is ascending, so columns are sorted already
    wrong = reference_decoding(code, returned, parity="index")
    for j, a in enumerate(code.data_points):
        signs = np.sign(D[j])
        assert np.all(signs != 0)
        same = np.flatnonzero(signs[:-1] == signs[1:])
        bracket = np.flatnonzero((z[:-1] > a) & (z[1:] < a))
        assert bracket.size == 1
        np.testing.assert_array_equal(same, bracket)
        # the original-index parity breaks this pattern at the stragglers' gaps
        wrong_signs = np.sign(wrong[j])
        wrong_same = np.flatnonzero(wrong_signs[:-1] == wrong_signs[1:])
        assert not np.array_equal(wrong_same, bracket)


def _lebesgue(D: np.ndarray) -> np.ndarray:
    return np.abs(D).sum(axis=1)


def test_original_index_parity_is_much_worse():
    """Why the signs alternate by rank: index parity puts a real pole in a straggler's gap.

    A straggler next to a data point alpha_j leaves two neighbours with equal sign under
    index parity; the denominator then changes sign between them (a real pole), so the
    decoder's Lebesgue constant at alpha_j and the error on a smooth f blow up.
    """
    K = 8
    worst_ratio = 0.0
    for N in (20, 40, 80, 160):
        code = BerrutCode(K, N)
        z, alpha = code.worker_points, code.data_points
        for j in range(K):
            straggler = int(np.argmin(np.abs(z - alpha[j])))
            returned = [i for i in range(N) if i != straggler]
            right = _lebesgue(code.decoding_matrix(returned))[j]
            wrong = _lebesgue(reference_decoding(code, returned, parity="index"))[j]
            assert right < 10  # rank parity: no poles, small Lebesgue constant
            assert wrong > right
            worst_ratio = max(worst_ratio, wrong / right)
    assert worst_ratio > 50

    # on a smooth f the error grows by orders of magnitude (measured ~0.04 vs ~11)
    rng = np.random.default_rng(0)
    blocks = rng.normal(size=(K, 64))
    code = BerrutCode(K, 40)
    straggler = int(np.argmin(np.abs(code.worker_points - code.data_points[3])))
    returned = [i for i in range(40) if i != straggler]
    results = np.tanh(code.encode(blocks))[returned]
    err_rank = relative_error(code.decode(results, returned), np.tanh(blocks))
    by_index = reference_decoding(code, returned, "index") @ results
    err_index = relative_error(by_index, np.tanh(blocks))
    assert err_rank < 0.1
    assert err_index > 20 * err_rank

    # the pole itself: under index parity the denominator changes sign inside the gap
    lo, hi = code.worker_points[straggler + 1], code.worker_points[straggler - 1]
    xs = np.linspace(lo, hi, 2001)[1:-1]
    nodes = code.worker_points[returned]

    def denominator(signs):
        return (signs[None, :] / (xs[:, None] - nodes[None, :])).sum(axis=1)

    by_rank = denominator((-1.0) ** np.arange(len(returned)))
    by_index = denominator((-1.0) ** np.asarray(returned))
    assert np.all(np.sign(by_rank) == np.sign(by_rank[0]))
    assert np.any(np.sign(by_index) != np.sign(by_index[0]))


# --------------------------------------------------------------------------------------------
# Lagrange
# --------------------------------------------------------------------------------------------


def _poly(coefficients):
    def f(x):
        return sum(c * x**p for p, c in enumerate(coefficients))

    return f


@st.composite
def lagrange_cases(draw):
    K = draw(st.integers(1, 8), label="K")
    degree = draw(st.integers(1, 3), label="degree")
    threshold = degree * (K - 1) + 1
    N = threshold + draw(st.integers(0, 4), label="extra workers")
    perm = draw(st.permutations(range(N)), label="arrival order")
    f_degree = draw(st.integers(1, degree), label="degree of f")
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    return LagrangeCode(K, N, degree=degree), list(perm), f_degree, seed


@pytest.mark.slow
@PROPERTY_SETTINGS
@given(case=lagrange_cases())
def test_lagrange_exact_from_any_threshold_subset(case):
    code, perm, f_degree, seed = case
    rng = np.random.default_rng(seed)
    threshold = code.degree * (code.K - 1) + 1
    assert code.min_results == threshold
    f = _poly(rng.normal(size=f_degree + 1))
    blocks = rng.normal(size=(code.K, 4, 3))
    results = f(code.encode(blocks))

    returned = perm[:threshold]
    assert code.can_decode(returned)
    estimate = code.decode(results[returned], returned)
    assert relative_error(estimate, f(blocks)) < 1e-8

    if threshold > 1:
        short = perm[: threshold - 1]
        assert not code.can_decode(short)
        with pytest.raises(InsufficientResults):
            code.decode(results[short], short)
        with pytest.raises(InsufficientResults):
            code.decoding_matrix(short)


@pytest.mark.parametrize("degree", [1, 2, 3])
@pytest.mark.parametrize("K", range(1, 9))
def test_lagrange_exact_on_random_polynomials(K, degree):
    rng = np.random.default_rng(1000 * K + degree)
    threshold = degree * (K - 1) + 1
    N = threshold + 3
    code = LagrangeCode(K, N, degree=degree)
    f = _poly(rng.normal(size=degree + 1))
    blocks = rng.normal(size=(K, 5, 2))
    results = f(code.encode(blocks))
    for size in (threshold, threshold, threshold + 1, N):
        returned = rng.choice(N, size=size, replace=False).tolist()
        assert relative_error(code.decode(results[returned], returned), f(blocks)) < 1e-8


@pytest.mark.slow
@pytest.mark.parametrize(("K", "N"), [(16, 64), (32, 128)])
def test_lagrange_with_a_gap_stays_bounded_and_is_flagged(K, N):
    """Adjacent stragglers leave a gap: the least-squares decode stays bounded (interpolating
    through a subset of the points gave relative errors of 18 and 2.5 here), and the decode's
    amplification says it is not exact."""
    rng = np.random.default_rng(K)
    code = LagrangeCode(K, N, degree=2)
    blocks = rng.normal(size=(K, 10))
    results = code.encode(blocks) ** 2
    returned = list(range(code.min_results + 2))  # the other N - 2K - 1 tasks straggle
    error = relative_error(code.decode(results[returned], returned), blocks**2)
    assert error < 1.0
    assert code.amplification(returned) > AMPLIFICATION_LIMIT
    # every task back: well spread points, an exact decode
    everything = list(range(N))
    assert code.amplification(everything) < AMPLIFICATION_LIMIT
    assert relative_error(code.decode(results, everything), blocks**2) < 1e-8


def test_amplification_of_every_code():
    assert RepetitionCode(3, 9).amplification([0, 4, 8, 1]) == 1.0
    assert Uncoded(4).amplification(range(4)) == 1.0
    code = LagrangeCode(4, 10, degree=2)
    matrix = code.decoding_matrix([9, 0, 2, 4, 5, 7, 8])
    assert code.amplification([9, 0, 2, 4, 5, 7, 8]) == pytest.approx(
        np.abs(matrix).sum(axis=1).max()
    )
    assert BerrutCode(4, 8).amplification(range(8)) >= 1.0


def test_lagrange_threshold_is_needed():
    """A degree-2 f through a degree-1 code: the threshold of the code is too small."""
    rng = np.random.default_rng(3)
    code = LagrangeCode(4, 10, degree=1)
    blocks = rng.normal(size=(4, 20))
    results = code.encode(blocks) ** 2
    returned = [0, 3, 6, 9]
    assert relative_error(code.decode(results[returned], returned), blocks**2) > 1e-3
    # while the degree-2 code with its own threshold (7) is exact
    code2 = LagrangeCode(4, 10, degree=2)
    results2 = code2.encode(blocks) ** 2
    returned2 = [9, 0, 2, 4, 5, 7, 8]
    assert relative_error(code2.decode(results2[returned2], returned2), blocks**2) < 1e-8


@pytest.mark.parametrize(
    ("K", "N", "degree"), [(2, 1, 1), (4, 3, 1), (4, 9, 3), (3, 4, 2), (8, 21, 3)]
)
def test_lagrange_needs_threshold_many_workers(K, N, degree):
    with pytest.raises(ValueError, match="needs N >="):
        LagrangeCode(K, N, degree=degree)
    LagrangeCode(K, degree * (K - 1) + 1, degree=degree)  # the threshold itself is fine


def test_lagrange_degree_validation():
    with pytest.raises(ValueError):
        LagrangeCode(3, 10, degree=0)
    with pytest.raises(TypeError):
        LagrangeCode(3, 10, degree=True)
    with pytest.raises(TypeError):
        LagrangeCode(3, 10, degree=2.0)
    assert LagrangeCode(3, 10, degree=np.int64(2)).degree == 2


def test_lagrange_encoder_interpolates_the_data_points(rng):
    code = LagrangeCode(5, 9)
    blocks = rng.normal(size=(5, 3))
    # u(z) is the degree K-1 polynomial through (alpha_j, X_j): check against numpy.polyfit
    coefficients = np.polynomial.polynomial.polyfit(code.data_points, blocks, deg=4)
    expected = np.polynomial.polynomial.polyval(code.worker_points, coefficients).T
    np.testing.assert_allclose(code.encode(blocks), expected, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------------------------
# Repetition and uncoded
# --------------------------------------------------------------------------------------------


def test_repetition_assignment():
    code = RepetitionCode(3, 8)
    E = code.encoding_matrix()
    for i in range(8):
        np.testing.assert_array_equal(E[i], np.eye(3)[i % 3])
    blocks = np.arange(3 * 2).reshape(3, 2)
    np.testing.assert_array_equal(code.encode(blocks), blocks[np.arange(8) % 3])


def test_repetition_exact_with_one_copy_of_each_block(rng):
    code = RepetitionCode(3, 8)
    blocks = rng.normal(size=(3, 4))
    results = np.exp(np.sin(code.encode(blocks)))  # exact for any f, not only linear ones
    copies = [[i for i in range(8) if i % 3 == j] for j in range(3)]
    for choice in itertools.product(*copies):
        returned = rng.permutation(choice).tolist()
        assert code.can_decode(returned)
        np.testing.assert_array_equal(
            code.decode(results[returned], returned), np.exp(np.sin(blocks))
        )
        D = code.decoding_matrix(returned)
        # every row selects one returned copy of its own block
        for j in range(3):
            (col,) = np.flatnonzero(D[j])
            assert D[j, col] == 1.0
            assert returned[col] % 3 == j


def test_repetition_missing_block(rng):
    code = RepetitionCode(3, 8)
    returned = [i for i in range(8) if i % 3 != 1]  # no copy of block 1
    assert not code.can_decode(returned)
    with pytest.raises(InsufficientResults, match=r"\[1\]"):
        code.decode(np.ones((len(returned), 2)), returned)
    with pytest.raises(InsufficientResults):
        code.decoding_matrix(returned)
    assert code.can_decode([*returned, 4])
    assert not code.can_decode([0, 3, 6])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
@pytest.mark.parametrize(
    "spec", [(3, 7), (4, 4), (4, None)], ids=["rep-3-7", "rep-4-4", "uncoded-4"]
)
def test_repetition_preserves_integer_dtype(dtype, spec):
    K, N = spec
    code = RepetitionCode(K, N) if N is not None else Uncoded(K)
    blocks = np.arange(code.K * 6, dtype=dtype).reshape(code.K, 2, 3)
    coded = code.encode(blocks)
    assert coded.dtype == dtype
    returned = list(range(code.N))[::-1]
    decoded = code.decode(coded[returned], returned)
    assert decoded.dtype == dtype
    np.testing.assert_array_equal(decoded, blocks)


def test_repetition_needs_N_at_least_K():
    with pytest.raises(ValueError, match="N >= K"):
        RepetitionCode(4, 3)


def test_uncoded_N_must_be_K():
    assert Uncoded(3).N == 3
    assert Uncoded(3, 3).N == 3
    for N in (2, 4):
        with pytest.raises(ValueError):
            Uncoded(3, N)


def test_uncoded_needs_all(rng):
    code = Uncoded(4)
    assert code.min_results == 4
    blocks = rng.normal(size=(4, 3))
    returned = [2, 0, 3, 1]
    np.testing.assert_array_equal(code.decode(code.encode(blocks)[returned], returned), blocks)
    for size in range(1, 4):
        for subset in itertools.combinations(range(4), size):
            assert not code.can_decode(list(subset))
            with pytest.raises(InsufficientResults):
                code.decode(np.ones((size, 3)), list(subset))


# --------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------


def test_registered_names():
    assert set(registered_codes()) >= {"berrut", "spline", "lagrange", "repetition", "uncoded"}


@pytest.mark.parametrize(
    ("name", "args", "options", "cls", "attrs"),
    [
        ("berrut", (3, 7), {}, BerrutCode, {"systematic": False}),
        ("berrut", (3, 7), {"systematic": True}, BerrutCode, {"systematic": True}),
        ("systematic-berrut", (3, 7), {}, BerrutCode, {"systematic": True}),
        ("spline", (3, 7), {}, SplineCode, {"systematic": False, "smoothing": 0.0}),
        ("systematic-spline", (3, 7), {}, SplineCode, {"systematic": True}),
        ("systematic_spline", (3, 7), {"smoothing": 0.5}, SplineCode, {"smoothing": 0.5}),
        ("lagrange", (3, 7), {"degree": 3}, LagrangeCode, {"degree": 3}),
        ("lagrange", (3, 7), {}, LagrangeCode, {"degree": 1}),
        ("repetition", (3, 7), {}, RepetitionCode, {}),
        ("uncoded", (3,), {}, Uncoded, {"N": 3}),
        ("uncoded", (3, 3), {}, Uncoded, {"N": 3}),
    ],
)
def test_get_code(name, args, options, cls, attrs):
    code = get_code(name, *args, **options)
    assert type(code) is cls
    assert code.K == args[0]
    for attr, value in attrs.items():
        assert getattr(code, attr) == value
    assert code == get_code(**code.get_config())


def test_get_code_unknown_name():
    with pytest.raises(ValueError, match="unknown code"):
        get_code("reed-solomon", 3, 7)
    with pytest.raises(TypeError):
        get_code(None, 3, 7)


@pytest.mark.parametrize("name", ["berrut", "lagrange", "repetition", "systematic-berrut"])
def test_get_code_needs_N(name):
    with pytest.raises(ValueError, match="N"):
        get_code(name, 3)


@pytest.mark.parametrize("name", ["berrut", "lagrange", "repetition", "systematic-berrut"])
@pytest.mark.parametrize(
    ("K", "N", "error"),
    [
        (0, 5, ValueError),
        (3, 0, ValueError),
        (-1, 5, ValueError),
        (3, -5, ValueError),
        (True, 5, TypeError),
        (3, True, TypeError),
        (3.0, 5, TypeError),
        (3, 5.0, TypeError),
        ("3", 5, TypeError),
        (None, 5, TypeError),
    ],
)
def test_get_code_bad_K_N(name, K, N, error):
    with pytest.raises(error):
        get_code(name, K, N)


@pytest.mark.parametrize(
    ("K", "error"), [(0, ValueError), (True, TypeError), (2.5, TypeError), ("4", TypeError)]
)
def test_get_code_uncoded_bad_K(K, error):
    with pytest.raises(error):
        get_code("uncoded", K)


def test_numpy_integers_are_accepted():
    code = get_code("berrut", np.int64(3), np.int32(7))
    assert (code.K, code.N) == (3, 7)
    assert type(code.K) is int and type(code.N) is int
    assert json.loads(json.dumps(code.get_config())) == code.get_config()


def test_register_code(monkeypatch):
    monkeypatch.setattr(codes_registry, "_REGISTRY", dict(codes_registry._REGISTRY))

    class Doubled(RepetitionCode):
        name = "doubled"

    assert register_code(Doubled) is Doubled
    assert "doubled" in registered_codes()
    code = get_code("doubled", 2, 4)
    assert type(code) is Doubled
    assert get_code(**code.get_config()) == code
    with pytest.raises(TypeError):
        register_code(dict)

    class Nameless(RepetitionCode):
        name = ""

    with pytest.raises(TypeError):
        register_code(Nameless)


def test_insufficient_results_is_the_package_exception():
    assert InsufficientResults is InsufficientResultsFromExceptions
    assert codes.InsufficientResults is InsufficientResultsFromExceptions
    assert issubclass(InsufficientResults, Exception)


# --------------------------------------------------------------------------------------------
# import hygiene: codes/ is pure NumPy and never imports dask or distributed
# --------------------------------------------------------------------------------------------

PACKAGE_DIR = Path(codes.__file__).resolve().parent.parent  # .../dask_bacc
ALLOWED_TOP_LEVEL = set(sys.stdlib_module_names) | {"numpy", "__future__"}


def import_violations(package_dir: Path) -> list[str]:
    """Every import in ``package_dir/codes/*.py`` (and the package modules they import
    relatively) that is not stdlib, numpy, or a relative import inside the package."""
    package = package_dir.name
    problems: list[str] = []
    todo = sorted((package_dir / "codes").glob("*.py"))
    assert todo, f"no modules found under {package_dir / 'codes'}"
    seen: set[Path] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        rel = path.relative_to(package_dir.parent).with_suffix("")
        parts = list(rel.parts)
        current_package = parts[:-1]  # for __init__ too: level 1 is the package itself
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(package_dir.parent)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] not in ALLOWED_TOP_LEVEL:
                        problems.append(f"{where}: import {alias.name}")
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    if (node.module or "").split(".")[0] not in ALLOWED_TOP_LEVEL:
                        problems.append(f"{where}: from {node.module} import ...")
                    continue
                if node.level - 1 >= len(current_package):
                    problems.append(f"{where}: relative import escapes {package}")
                    continue
                base = current_package[: len(current_package) - (node.level - 1)]
                targets = (
                    [[*base, *node.module.split(".")]]
                    if node.module
                    else [[*base, alias.name] for alias in node.names]
                )
                for target in targets:
                    if target == [package]:
                        problems.append(f"{where}: imports the top-level {package} package")
                        continue
                    file = package_dir.parent.joinpath(*target)
                    if file.with_suffix(".py").is_file():
                        todo.append(file.with_suffix(".py"))
                    elif (file / "__init__.py").is_file():
                        todo.append(file / "__init__.py")
                        if target[:2] != [package, "codes"]:
                            todo.extend(file.glob("*.py"))
                    elif not (file.parent / "__init__.py").is_file():
                        problems.append(f"{where}: cannot resolve {'.'.join(target)}")
    return problems


@pytest.mark.slow
def test_codes_modules_import_only_stdlib_numpy_and_the_package():
    assert import_violations(PACKAGE_DIR) == []


BLOCKED_IMPORT_SCRIPT = textwrap.dedent(
    """
    import importlib.abc
    import sys
    import types

    BLOCKED = ("dask", "distributed")

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"blocked import of {name!r}")
            return None

    sys.meta_path.insert(0, Blocker())
    for blocked in BLOCKED:
        try:
            __import__(blocked)
        except ImportError:
            pass
        else:
            raise SystemExit(f"the blocker failed to block {blocked}")

    # stub the top-level package: dask_bacc/__init__.py may import dask (public API)
    package = types.ModuleType("dask_bacc")
    package.__path__ = [PACKAGE_DIR]
    sys.modules["dask_bacc"] = package

    import numpy as np
    import dask_bacc.codes as codes

    assert codes.__file__.startswith(PACKAGE_DIR), codes.__file__
    for name in codes.registered_codes():
        code = codes.get_code(name, 3, 3 if name == "uncoded" else 7)
        blocks = np.arange(6.0).reshape(3, 2)
        returned = list(range(code.N))
        decoded = code.decode(code.encode(blocks)[returned], returned)
        assert np.allclose(decoded, blocks), name
    codes.get_code("systematic-berrut", 3, 7).decoding_matrix([0, 2, 5])
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    assert not loaded, loaded
    print("codes imported without dask")
    """
)


def run_without_dask(package_dir: Path, cwd: Path) -> subprocess.CompletedProcess:
    script = f"PACKAGE_DIR = {str(package_dir)!r}\n" + BLOCKED_IMPORT_SCRIPT
    return subprocess.run(
        [sys.executable, "-I", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_codes_import_without_dask(tmp_path):
    proc = run_without_dask(PACKAGE_DIR, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "codes imported without dask" in proc.stdout


@pytest.mark.slow
def test_import_checks_catch_a_dask_import(tmp_path):
    """Negative control: the two checks above fail for a copy of codes that imports dask."""
    copy = tmp_path / "dask_bacc"
    shutil.copytree(PACKAGE_DIR / "codes", copy / "codes", ignore=shutil.ignore_patterns("*.pyc"))
    shutil.copy(PACKAGE_DIR / "exceptions.py", copy / "exceptions.py")
    (copy / "__init__.py").write_text("")
    assert import_violations(copy) == []
    assert run_without_dask(copy, tmp_path).returncode == 0

    points = copy / "codes" / "points.py"
    points.write_text(points.read_text() + "\nimport dask.array  # noqa\n")
    assert import_violations(copy) == [
        f"dask_bacc/codes/points.py:{len(points.read_text().splitlines())}: import dask.array"
    ]
    proc = run_without_dask(copy, tmp_path)
    assert proc.returncode != 0
    assert "blocked import of 'dask" in proc.stderr

    # a lazy import inside a function is invisible to the subprocess check, not to the AST one
    points.write_text(points.read_text().replace("\nimport dask.array  # noqa\n", "\n"))
    base = copy / "codes" / "base.py"
    base.write_text(base.read_text() + "\n\ndef _lazy():\n    from distributed import Client\n")
    assert len(import_violations(copy)) == 1
    assert "from distributed import" in import_violations(copy)[0]


def test_can_decode_validates_like_decode():
    from dask_bacc.codes import BerrutCode, LagrangeCode, RepetitionCode

    with pytest.raises(ValueError, match="lie in"):
        BerrutCode(3, 5).can_decode([7])
    with pytest.raises(ValueError, match="lie in"):
        RepetitionCode(2, 3).can_decode([0, 5])
    with pytest.raises(ValueError, match="distinct"):
        LagrangeCode(2, 3).can_decode([0, 1, 1])
    assert BerrutCode(3, 5).can_decode([]) is False


def test_systematic_berrut_name_rejects_systematic_false():
    with pytest.raises(ValueError, match="systematic=False"):
        get_code("systematic-berrut", 3, 5, systematic=False)


def test_is_exact():
    from dask_bacc.codes import BerrutCode, LagrangeCode, RepetitionCode

    sysb = BerrutCode(3, 6, systematic=True)
    others = [i for i in range(6) if i not in set(sysb.systematic_workers.tolist())]
    assert sysb.is_exact(sysb.systematic_workers.tolist())
    assert not sysb.is_exact(sysb.systematic_workers.tolist()[:-1] + others)
    assert not BerrutCode(3, 6).is_exact(list(range(6)))  # plain Berrut is never exact
    assert RepetitionCode(2, 4).is_exact([2, 1]) and not RepetitionCode(2, 4).is_exact([0, 2])
    assert LagrangeCode(3, 6, 1).is_exact([0, 4, 5]) and not LagrangeCode(3, 6, 1).is_exact([1])
