"""Bad input is rejected with a clear error before anything reaches the cluster."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from cluster_helpers import gen_cluster

import dask_bacc
from dask_bacc.codes import BerrutCode

FOUR = [("127.0.0.1", 1)] * 4
X = np.arange(24.0).reshape(8, 3)

BAD_INPUTS = [
    # (description, args, kwargs, error type, message fragment)
    ("n_coded equal to K", (np.tanh, X), {"n_blocks": 2, "n_coded": 2}, ValueError, "must exceed"),
    ("n_coded below K", (np.tanh, X), {"n_blocks": 4, "n_coded": 3}, ValueError, "must exceed"),
    ("n_coded not int", (np.tanh, X), {"n_blocks": 2, "n_coded": 3.0}, TypeError, "n_coded"),
    ("K < 1", (np.tanh, X), {"n_blocks": 0}, ValueError, "n_blocks must be >= 1"),
    ("uneven split", (np.tanh, X), {"n_blocks": 3}, ValueError, "equal blocks"),
    (
        "more tasks than workers",
        (np.tanh, X),
        {"n_blocks": 2, "n_coded": 5},
        ValueError,
        "distinct workers",
    ),
    ("ragged list", (np.tanh, [np.ones(3), np.ones(4)]), {}, ValueError, "same shape"),
    (
        "ragged dask chunks",
        (np.tanh, da.ones((10, 2), chunks=((4, 6), 2))),
        {},
        ValueError,
        "ragged",
    ),
    (
        "object dtype",
        (np.tanh, np.array([[object()]] * 4)),
        {"n_blocks": 2},
        TypeError,
        "real numeric",
    ),
    (
        "complex dtype",
        (np.tanh, np.ones((4, 2), complex)),
        {"n_blocks": 2},
        TypeError,
        "real numeric",
    ),
    ("string dtype", (np.tanh, np.array([["a"]] * 4)), {"n_blocks": 2}, TypeError, "real numeric"),
    (
        "datetime dtype",
        (np.tanh, np.array(["2020-01-01"] * 4, dtype="M8[D]")),
        {"n_blocks": 2},
        TypeError,
        "real numeric",
    ),
    (
        "NaN in input",  # (a code that mixes blocks; those that copy them pass NaN on)
        (np.tanh, np.array([[1.0], [np.nan], [2.0], [3.0]])),
        {"n_blocks": 2, "code": "berrut"},
        ValueError,
        "NaN or inf",
    ),
    (
        "inf in list",
        (np.tanh, [np.ones(2), np.array([np.inf, 1])]),
        {"code": "berrut"},
        ValueError,
        "NaN or inf",
    ),
    ("non-callable func", ("tanh", X), {"n_blocks": 2}, TypeError, "callable"),
    ("empty array", (np.tanh, np.empty((0, 3))), {}, ValueError, "empty"),
    ("empty list", (np.tanh, []), {}, ValueError, "empty"),
    ("empty dask array", (np.tanh, da.ones((0, 3), chunks=1)), {}, ValueError, "empty"),
    ("scalar data", (np.tanh, np.float64(3.0)), {}, ValueError, "dimension"),
    ("unsupported type", (np.tanh, {"a": 1}), {}, TypeError, "cannot map over"),
    ("unknown code", (np.tanh, X), {"n_blocks": 2, "code": "fountain"}, ValueError, "unknown code"),
    (  # D5: the list has every name map_coded takes, and the nearest one is suggested
        "misspelt code",
        (np.tanh, X),
        {"n_blocks": 2, "code": "berut"},
        ValueError,
        r"did you mean 'berrut'.*'speculative', 'spline', 'systematic-berrut'",
    ),
    (  # D7: the user chose K, not n_coded: say to use fewer blocks (an exact code that
        # copies blocks runs them in waves instead: tests/test_waves.py)
        "more blocks than the workers can code",
        (np.tanh, X),
        {"n_blocks": 4, "code": "lagrange", "code_options": {"degree": 2}},
        ValueError,
        r"K=4 data blocks need at least N=\d+ .* but the cluster has 4 workers; use fewer blocks",
    ),
    ("code not str", (np.tanh, X), {"n_blocks": 2, "code": 3}, TypeError, "code"),
    (
        "code instance with wrong K",
        (np.tanh, X),
        {"n_blocks": 2, "code": BerrutCode(3, 4)},
        ValueError,
        "K=3",
    ),
    (
        "code instance with N <= K",
        (np.tanh, X),
        {"n_blocks": 2, "code": BerrutCode(2, 2)},
        ValueError,
        "N <= K",
    ),
    ("wait zero", (np.tanh, X), {"n_blocks": 2, "wait": 0}, ValueError, "wait must be >= 1"),
    ("wait above N", (np.tanh, X), {"n_blocks": 2, "n_coded": 4, "wait": 5}, ValueError, "exceeds"),
    ("wait fraction above 1", (np.tanh, X), {"n_blocks": 2, "wait": 1.5}, ValueError, r"\(0, 1\]"),
    ("wait of wrong type", (np.tanh, X), {"n_blocks": 2, "wait": "all"}, TypeError, "wait"),
    ("wait bool", (np.tanh, X), {"n_blocks": 2, "wait": True}, TypeError, "bool"),
    (
        "wait below Lagrange threshold",
        (np.tanh, X),
        {"n_blocks": 2, "code": "lagrange", "code_options": {"degree": 2}, "wait": 2},
        ValueError,
        "needs at least 3",
    ),
    (
        "wait below repetition's K",
        (np.tanh, X),
        {"n_blocks": 2, "code": "repetition", "wait": 1},
        ValueError,
        "needs at least 2",
    ),
    (
        "wait fraction below uncoded's K",
        (np.tanh, X),
        {"n_blocks": 2, "code": "uncoded", "wait": 0.5},
        ValueError,
        "needs at least 2",
    ),
    ("timeout negative", (np.tanh, X), {"n_blocks": 2, "timeout": -1}, ValueError, "positive"),
    ("combine unknown", (np.tanh, X), {"n_blocks": 2, "combine": "glue"}, ValueError, "combine"),
    ("n_blocks for a list", (np.tanh, [np.ones(2)] * 2), {"n_blocks": 2}, ValueError, "n_blocks"),
    ("blocks not dividing", (np.tanh, X), {"blocks": 3}, ValueError, "divide"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [pytest.param(a, k, e, m, id=d) for d, a, k, e, m in BAD_INPUTS],
)
@gen_cluster(client=True, nthreads=FOUR)
async def test_bad_input_rejected_before_submission(c, s, *workers, args, kwargs, error, match):
    with pytest.raises(error, match=match):
        await dask_bacc.submit_coded(*args, client=c, **kwargs)
    assert not s.tasks  # nothing reached the scheduler


@pytest.mark.slow
@gen_cluster(client=True, nthreads=FOUR)
async def test_oversubscribe_warns_when_configured(c, s, *workers):
    import dask

    with dask.config.set({"bacc.oversubscribe": "warn"}):
        with pytest.warns(RuntimeWarning, match="correlated"):
            job = await dask_bacc.submit_coded(
                np.square, X, n_blocks=2, n_coded=6, client=c, code="repetition"
            )
    out = await job
    np.testing.assert_array_equal(out, X**2)
    assert len(job.report.workers) == 6 and len(set(job.report.workers)) == 4


@pytest.mark.slow
@gen_cluster(client=True, nthreads=FOUR)
async def test_nan_in_dask_array_fails_with_value_error(c, s, *workers):
    """Under a code that mixes blocks (the exact codes that copy them pass NaN through:
    test_exact.py)."""
    x = da.from_array(np.array([[1.0], [np.nan], [2.0], [3.0]]), chunks=(2, 1))
    job = await dask_bacc.submit_coded(np.tanh, x, client=c, n_coded=3, code="berrut")
    with pytest.raises(ValueError, match="NaN or inf"):
        await job
