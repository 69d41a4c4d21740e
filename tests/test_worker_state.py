"""The worker-side registry of finished jobs and the task functions, called directly."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dask_bacc.exceptions import InvalidResult
from dask_bacc.runtime import worker


def test_eval_after_done_returns_without_calling_func():
    calls = []

    def func(x):
        calls.append(x)
        return x

    token = "test-eval-after-done"
    assert worker.eval_task(token, 0, 0, func, np.ones(2), ((), {})) is not None
    worker.mark_done(token)
    assert worker.is_done(token)
    assert worker.eval_task(token, 1, 0, func, np.ones(2), ((), {})) is None
    assert len(calls) == 1


def test_wait_done_wakes_when_marked():
    token = "test-wait-done"
    woke = []
    t = threading.Thread(target=lambda: woke.append(worker.wait_done(token, 3600)))
    t.start()
    worker.mark_done(token)
    t.join(timeout=60)
    assert woke == [True]
    assert worker.wait_done("never-marked", 0) is False


def test_registry_is_bounded():
    for i in range(worker._MAX_TOKENS + 10):
        worker.mark_done(f"bounded-{i}")
    assert len(worker._done) <= worker._MAX_TOKENS
    assert worker.is_done(f"bounded-{worker._MAX_TOKENS + 9}")


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (np.array([1.0, np.nan]), "NaN/inf"),
        (np.array([np.inf]), "NaN/inf"),
        (None, "real numeric"),
        ("text", "real numeric"),
        (np.ones(2, complex), "real numeric"),
    ],
)
def test_check_result_rejects(value, match):
    with pytest.raises(InvalidResult, match=match):
        worker.check_result(value)


def test_check_result_accepts_scalars_and_ints():
    assert worker.check_result(3).shape == ()
    assert worker.check_result([1, 2]).dtype.kind == "i"


def test_encode_and_decode_tasks():
    a, b = np.ones((2, 2)), np.full((2, 2), 3.0)
    np.testing.assert_allclose(worker.encode_task(np.array([0.25, 0.75]), a, b), 2.5)
    ints = np.arange(4)
    assert worker.encode_task(np.array([1.0]), ints) is not None
    assert worker.encode_task(np.array([1.0]), ints).dtype == ints.dtype  # a copy keeps dtype
    with pytest.raises(worker.InvalidInput, match="NaN or inf"):
        worker.encode_task(np.array([0.5, 0.5]), a, np.full((2, 2), np.nan))
    np.testing.assert_allclose(worker.decode_task(np.array([0.5, 0.5]), a, b), 2.0)
    assert worker.decode_task(np.array([1.0]), ints) is ints
    assert worker.inspect_task(a, ints) == [((2, 2), "<f8"), ((4,), ints.dtype.str)]


def test_weighted_sum_matches_tensordot_across_tiles_and_dtypes():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((5, 7)) for _ in range(4)]
    w = rng.standard_normal(4)
    expected = np.tensordot(w, np.stack(arrays), axes=1)
    for tile in (1, 3, 35, 1 << 16):  # tiles smaller than, dividing and exceeding the size
        np.testing.assert_allclose(worker.weighted_sum(w, arrays, tile=tile), expected, rtol=1e-13)
    f32 = worker.weighted_sum(w, [a.astype(np.float32) for a in arrays])
    assert f32.dtype == np.float32
    ints = worker.weighted_sum(np.array([0.5, 0.5]), [np.arange(3), np.arange(3) + 1])
    assert ints.dtype == np.float64
    np.testing.assert_allclose(ints, [0.5, 1.5, 2.5])
