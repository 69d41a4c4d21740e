"""Functions that run on the workers: encode, coded eval, inspect and decode tasks.

Kept free of client-side state so they pickle by reference; dask-bacc must be installed
on the workers. The registry of finished jobs is per worker process: ``mark_done`` is
broadcast with ``Client.run`` when a job decodes or is cancelled, and eval tasks that start
afterwards return at once; injected straggler delays wait on the same event, so they end
as soon as the job no longer needs them.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from ..exceptions import InvalidResult

__all__ = [
    "InvalidInput",
    "cancelled",
    "decode_task",
    "encode_task",
    "eval_task",
    "hold",
    "inspect_task",
    "is_done",
    "mark_done",
    "sketch_task",
    "wait_done",
]

STRAGGLER_PLUGIN_NAME = "bacc-stragglers"

_lock = threading.Lock()
_done: OrderedDict[str, threading.Event] = OrderedDict()
_MAX_TOKENS = 4096
# (worker address, job token, index) of the evals executing in this process -> their
# start times; keyed by worker too, as in-process clusters share one module
_running: dict[tuple[str | None, str, int], list[float]] = {}
_current = threading.local()  # the job token of the eval task this thread runs


class InvalidInput(ValueError):
    """The input chunks cannot be encoded (NaN/inf or non-numeric data found on a worker)."""


def _event(token: str) -> threading.Event:
    with _lock:
        ev = _done.get(token)
        if ev is None:
            ev = _done[token] = threading.Event()
            while len(_done) > _MAX_TOKENS:
                _done.popitem(last=False)
        return ev


def _address(worker: Any = None) -> str | None:
    """The address of ``worker``, or of the worker running this task (None outside one)."""
    if worker is None:
        from distributed import get_worker

        try:
            worker = get_worker()
        except ValueError:
            return None
    return worker.address


def mark_done(token: str, dask_worker: Any = None) -> list[int]:
    """Record on this worker that job ``token`` needs no more coded results.

    Returns the indices of the job's eval tasks still executing on this worker
    (``dask_worker``, passed by ``Client.run``; every worker of the process without it):
    their threads stay busy until ``func`` returns, so the job keeps them visible to the
    scheduler.
    """
    _event(token).set()
    here = None if dask_worker is None else dask_worker.address
    with _lock:
        return sorted(i for (a, t, i) in _running if t == token and here in (None, a))


def is_done(token: str) -> bool:
    """Whether job ``token`` has decoded or been cancelled (as far as this worker knows)."""
    with _lock:
        ev = _done.get(token)
    return ev is not None and ev.is_set()


def wait_done(token: str, timeout: float) -> bool:
    """Sleep up to ``timeout`` seconds, waking early when job ``token`` is done."""
    if timeout <= 0:
        return is_done(token)
    return _event(token).wait(timeout)


def cancelled() -> bool:
    """Whether the coded job that called this function no longer needs its result.

    Call it from a long-running ``func`` (e.g. between iterations) and return early when
    it is True: the job has decoded without this task or was cancelled. Python cannot
    stop a running thread, so a cancelled straggler otherwise keeps its worker's thread
    until ``func`` returns, and the next job's task on that worker waits behind it.
    Outside a coded task it returns False.
    """
    token = getattr(_current, "token", None)
    return token is not None and is_done(token)


def hold(value: Any) -> Any:
    """A task that holds ``value`` (in its spec, so it is recomputable): e.g. the arguments
    every eval task of a job shares, shipped once."""
    return value


def stale_evals(min_age: float = 0.0, dask_worker: Any = None) -> int:
    """Eval tasks of finished jobs that have been executing on this worker for ``min_age``
    seconds or more: stragglers whose ``func`` has not returned yet (each holds a thread
    until it does). Younger ones are about to end, like most late results.

    ``dask_worker`` (passed by ``Client.run``) restricts the count to that worker; without
    it every worker of this process counts.
    """
    now = time.perf_counter()
    here = None if dask_worker is None else dask_worker.address
    with _lock:
        running = [
            (t, now - start)
            for (a, t, _), starts in _running.items()
            if here in (None, a)
            for start in starts
        ]
    return sum(1 for t, age in running if age >= min_age and is_done(t))


def weighted_sum(weights: np.ndarray, arrays: tuple[Any, ...], tile: int = 1 << 16) -> np.ndarray:
    """``sum_l weights[l] * arrays[l]`` for equal-shape arrays, without stacking them.

    Copies column tiles of the inputs into one small reused ``(L, tile)`` buffer and calls
    BLAS on each tile: about 2-3x faster than ``np.stack`` + ``tensordot`` on large
    blocks, with the same result. Float dtypes are kept; other numbers become float64.
    """
    arrs = [np.asarray(a) for a in arrays]
    dtype = np.result_type(*arrs)
    if dtype.kind != "f":
        dtype = np.dtype(np.float64)
    flat = [a.reshape(-1) for a in arrs]
    n = flat[0].size
    out = np.empty(n, dtype=dtype)
    w = np.asarray(weights, dtype=dtype)
    buf = np.empty((len(flat), max(1, min(tile, n))), dtype=dtype)
    for start in range(0, n, tile):
        stop = min(start + tile, n)
        block = buf[:, : stop - start]
        for row, f in enumerate(flat):
            block[row] = f[start:stop]
        np.dot(w, block, out=out[start:stop])
    return out.reshape(arrs[0].shape)


def encode_task(weights: np.ndarray, *chunks: np.ndarray) -> np.ndarray:
    """One coded share: ``sum_j weights[j] * chunks[j]`` (only nonzero weights are passed)."""
    if len(chunks) == 1 and weights[0] == 1.0:
        share = np.asarray(chunks[0])  # a copy of X_j: keep its dtype, no arithmetic
    else:
        share = weighted_sum(weights, chunks)
    if share.dtype.kind not in "biuf":
        raise InvalidInput(f"input chunks must be real numeric, got dtype {share.dtype}")
    if share.dtype.kind == "f" and not np.isfinite(share).all():
        raise InvalidInput("input chunks contain NaN or inf; coded computing needs finite data")
    return share


def eval_task(
    token: str,
    index: int,
    seq: int,
    func: Callable[..., Any],
    share: np.ndarray,
    call: tuple[tuple, dict],
) -> np.ndarray | None:
    """Evaluate ``func(share, *args, **kwargs)`` for ``call = (args, kwargs)`` and check
    that the result can be decoded.

    Returns ``None`` without calling ``func`` when the job already decoded. A straggler
    plugin (see :mod:`dask_bacc.stragglers`) may add a delay, which ends early when the job
    is done.
    """
    if is_done(token):
        return None
    start = time.perf_counter()
    key = (_address(), token, index)
    with _lock:
        _running.setdefault(key, []).append(start)
    _current.token = token
    args, kwargs = call
    try:
        out = func(share, *args, **kwargs)
        straggle(index, seq, start, lambda delay: wait_done(token, delay))
    finally:
        _current.token = None
        with _lock:
            starts = _running[key]
            starts.remove(start)
            if not starts:
                del _running[key]
    return check_result(out)


def straggle(index: int, seq: int, start: float, sleep: Callable[[float], Any]) -> None:
    """Apply the straggler plugin's delay to a task that started at ``start``, if any.

    ``sleep(seconds)`` does the waiting (interruptible for coded tasks); the plugin also
    records the thread time the task occupied, for compute-spent accounting.
    """
    plugin, name = straggler_plugin()
    if plugin is None:
        return
    delay = plugin.delay(
        index=index, seq=seq, elapsed=time.perf_counter() - start, worker_name=name
    )
    if delay > 0:
        sleep(delay)
    plugin.record(seq=seq, index=index, seconds=time.perf_counter() - start, worker_name=name)


def straggler_plugin() -> tuple[Any, str]:
    """This worker's straggler plugin (or None) and the worker's name."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except ValueError:  # not on a worker (e.g. a test calling the task directly)
        return None, ""
    return worker.plugins.get(STRAGGLER_PLUGIN_NAME), str(worker.name)


def check_result(out: Any) -> np.ndarray:
    """A result is decodable when it is a real numeric array with finite entries."""
    try:
        arr = np.asarray(out)
    except Exception as exc:  # e.g. ragged lists
        raise InvalidResult(f"result of type {type(out).__name__} is not an array: {exc}") from exc
    if arr.dtype.kind not in "biuf":
        raise InvalidResult(f"result has dtype {arr.dtype}; coded results must be real numeric")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise InvalidResult(f"result contains {bad} NaN/inf value(s)")
    return arr


def inspect_task(*results: np.ndarray) -> list[tuple[tuple[int, ...], str]]:
    """Shape and dtype of each result, so the client can drop inconsistent ones."""
    return [(tuple(np.shape(r)), np.asarray(r).dtype.str) for r in results]


def sketch_task(result: np.ndarray | None, size: int, seed: int) -> np.ndarray | None:
    """A norm-preserving linear sketch of one coded result (``codes.estimate.count_sketch``).

    Runs next to the result; only ``size`` numbers go to the client, which estimates the
    decoding error and screens for corrupted results from the sketches.
    """
    if result is None:  # the eval returned at once: its job had already decoded
        return None
    from ..codes.estimate import count_sketch

    return count_sketch(result, size, seed)


def decode_task(weights: np.ndarray, *results: np.ndarray) -> np.ndarray:
    """One decoded block: ``sum_l weights[l] * results[l]`` (only nonzero weights passed)."""
    if len(results) == 1 and weights[0] == 1.0:
        return np.asarray(results[0])  # exact copy (repetition, coincident points)
    return weighted_sum(weights, results)
