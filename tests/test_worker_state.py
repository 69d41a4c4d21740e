"""The worker-side registry of finished jobs and the task functions, called directly."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dask_bacc.exceptions import InvalidInput, InvalidResult
from dask_bacc.runtime import worker


def test_eval_after_done_returns_without_calling_func():
    calls = []

    def func(x):
        calls.append(x)
        return x

    token = "test-eval-after-done"
    assert worker.eval_task(token, 0, 0, func, np.ones(2), ((), {})) is not None
    assert worker.mark_done(token) == []  # nothing of the job executing here
    assert worker.is_done(token)
    assert worker.eval_task(token, 1, 0, func, np.ones(2), ((), {})) is None
    assert worker.encode_eval_task(token, 2, 0, func, np.ones(1), [np.ones(2)], ((), {})) is None
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
    st = worker.WorkerState(max_tokens=16)
    for i in range(16 + 10):
        st.mark_done(f"bounded-{i}")
    assert len(st._done) <= 16
    assert st.is_done("bounded-25")
    assert not st.is_done("bounded-0")  # the oldest were dropped


def test_running_and_stale_evals_are_counted_per_state():
    st, other = worker.WorkerState(), worker.WorkerState()
    start = st.started("tok", 3)
    assert st.running("tok") == [3] and other.running("tok") == []
    assert st.stale() == 0  # its job is not done yet
    st.mark_done("tok")
    assert st.stale() == 1 and st.stale(min_age=3600) == 0
    st.ended("tok", 3, start)
    assert st.running("tok") == [] and st.stale() == 0


def test_plugin_marks_done_from_the_scheduler_stream():
    class FakeWorker:
        def __init__(self):
            self.stream_handlers: dict = {}
            self.metrics: dict = {}

    plugin, w = worker.BaccWorker(), FakeWorker()
    plugin.setup(w)
    assert w.metrics[worker.PLUGIN_NAME](w) == 1  # the heartbeat says it is set up
    w.stream_handlers[worker.DONE_OP](token="from-stream")
    assert plugin.state.is_done("from-stream")
    assert not worker.state().is_done("from-stream")  # not the process-wide registry
    plugin.teardown(w)
    # a late bacc-done finds a handler that does nothing (an unknown op closes a stream)
    w.stream_handlers[worker.DONE_OP](token="late")
    assert not plugin.state.is_done("late")
    assert worker.PLUGIN_NAME not in w.metrics


def test_stack_decode_matches_the_code_and_reports_bad_shapes():
    rng = np.random.default_rng(1)
    results = [rng.standard_normal((6, 2)) for _ in range(5)]
    D = rng.standard_normal((3, 5))
    out = worker.stack_decode_task(D, (8, 0), None, None, *results)
    np.testing.assert_allclose(out.blocks, np.tensordot(D, np.stack(results), axes=1))
    assert out.info["shape"] == (6, 2) and out.info["dtype"] == "<f8"
    assert len(out.info["sketches"]) == 5
    np.testing.assert_allclose(worker.decoded_block(out, 1), out.blocks[1])
    assert worker.decoded_info(out) is out.info
    bad = [*results[:2], results[2][:-1], *results[3:]]
    with pytest.raises(worker.InconsistentResults) as info:
        worker.stack_decode_task(D, None, None, None, *bad)
    assert info.value.bad == [2]
    # the error pickles with its positions (it crosses from the worker to the client)
    import pickle

    assert pickle.loads(pickle.dumps(info.value)).bad == [2]


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
    with pytest.raises(InvalidInput, match="NaN or inf"):
        worker.encode_task(np.array([0.5, 0.5]), a, np.full((2, 2), np.nan))
    np.testing.assert_allclose(worker.decode_task(np.array([0.5, 0.5]), a, b), 2.0)
    assert worker.decode_task(np.array([1.0]), ints) is ints
    assert worker.spec_of(a) == ((2, 2), "<f8")
    assert worker.consistent([((2,), "<f8"), ((3,), "<f8"), ((2,), "<f8")]) == (((2,), "<f8"), [1])


def test_weighted_sum_matches_tensordot_across_tiles_and_dtypes():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((5, 7)) for _ in range(4)]
    w = rng.standard_normal(4)
    expected = np.tensordot(w, np.stack(arrays), axes=1)
    for tile in (1, 3, 35, 1 << 16):  # tiles smaller than, dividing and exceeding the size
        np.testing.assert_allclose(worker.weighted_sum(w, arrays, tile=tile), expected, rtol=1e-13)
    f32 = worker.weighted_sum(w, [a.astype(np.float32) for a in arrays])
    assert f32.dtype == np.float32
    M = rng.standard_normal((3, 4))
    for tile in (1, 7, 1 << 16):
        np.testing.assert_allclose(
            worker.matmul_tiled(M, arrays, tile=tile),
            np.tensordot(M, np.stack(arrays), axes=1),
            rtol=1e-13,
        )
    ints = worker.weighted_sum(np.array([0.5, 0.5]), [np.arange(3), np.arange(3) + 1])
    assert ints.dtype == np.float64
    np.testing.assert_allclose(ints, [0.5, 1.5, 2.5])
