"""Assertions about coded jobs: the decoded value against a local reference, and the
cluster left clean."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..codes import get_code
from ..codes.transform import Transform, get_transform
from ..runtime.report import JobReport

__all__ = [
    "assert_decodes_reference",
    "assert_exact",
    "assert_no_bacc_tasks",
    "reference_decode",
    "relative_error",
    "tasks_on",
]


def _blocks(data: ArrayLike | Sequence[ArrayLike], K: int) -> list[NDArray[Any]]:
    """The K blocks ``map_coded`` makes of NumPy or list input."""
    if isinstance(data, (list, tuple)):
        if len(data) != K:
            raise ValueError(f"expected a list of K={K} blocks, got {len(data)}")
        return [np.asarray(b) for b in data]
    arr = np.asarray(data)
    if arr.ndim == 0 or arr.shape[0] % K:
        raise ValueError(f"cannot split an array of shape {arr.shape} into K={K} equal blocks")
    return list(np.split(arr, K))


def _transform(report: JobReport, transform: Transform | str | None) -> Transform | None:
    if transform is not None:
        return get_transform(transform)
    if report.transform is None:
        return None
    try:
        return get_transform(report.transform)
    except ValueError:
        raise ValueError(
            f"the job decoded through the transform {report.transform!r}, which is not a "
            "registered name: pass the Transform itself as transform="
        ) from None


def reference_decode(
    report: JobReport,
    func: Callable[..., Any],
    data: ArrayLike | Sequence[ArrayLike],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    transform: Transform | str | None = None,
) -> NDArray[Any]:
    """What a coded job must have decoded, recomputed here in NumPy.

    The job's own code (``report.code``) encodes the blocks of ``data``, ``func`` runs on
    the coded shares the job used (``report.returned``, and no other) and the code decodes
    them from exactly that set; through the job's transform when it had one.

    Parameters
    ----------
    report : JobReport
        The finished job's report (``job.report``).
    func : callable
        The mapped function, as passed to ``map_coded``.
    data : array_like or list of array_like
        The job's input: an array (split along axis 0 into ``report.K`` equal blocks) or
        the list of K blocks.
    args : sequence
        More positional arguments of ``func``.
    kwargs : mapping, optional
        Keyword arguments of ``func``.
    transform : Transform or str, optional
        The job's ``transform=``; by default the registered transform ``report.transform``
        names, if any.

    Returns
    -------
    ndarray
        The K decoded blocks, stacked: shape ``(K, *output block shape)``.
    """
    code = get_code(**report.code)
    tr = _transform(report, transform)
    kw = dict(kwargs or {})
    shares = code.encode(np.stack(_blocks(data, code.K)))
    results = []
    for i in report.returned:
        out = np.asarray(func(shares[i], *args, **kw))
        results.append(tr.forward(out) if tr is not None else out)
    decoded = code.decode(np.stack(results), list(report.returned))
    return tr.inverse(decoded) if tr is not None else decoded


def _assert_blocks(value: Any, blocks: NDArray[Any], rtol: float, atol: float, what: str) -> None:
    """``value`` (a list of K arrays, or one array of the blocks concatenated or stacked,
    as the job returns them) against ``blocks`` (K, ...)."""
    if isinstance(value, (list, tuple)):
        if len(value) != len(blocks):
            raise AssertionError(f"{len(value)} output blocks, expected {len(blocks)}: {what}")
        for j, (got, want) in enumerate(zip(value, blocks, strict=True)):
            np.testing.assert_allclose(
                np.asarray(got), want, rtol=rtol, atol=atol, err_msg=f"{what}, block {j}"
            )
        return
    arr = np.asarray(value)
    # f kept its block's rows: the blocks concatenated; a reduction: stacked
    want = blocks if arr.ndim == blocks.ndim else np.concatenate(blocks)
    np.testing.assert_allclose(arr, want, rtol=rtol, atol=atol, err_msg=what)


def assert_decodes_reference(
    value: Any,
    report: JobReport,
    func: Callable[..., Any],
    data: ArrayLike | Sequence[ArrayLike],
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    transform: Transform | str | None = None,
    rtol: float = 1e-12,
    atol: float = 1e-12,
) -> None:
    """Assert that a coded job's value is its code's decode of exactly the results it used.

    Recomputes the reference with :func:`reference_decode` (the job's code, ``func`` on
    the shares in ``report.returned``, decoded from that set) and compares: an approximate
    answer is checked to rounding, not to the code's accuracy, and a job that decoded from
    other results than it reports fails.

    Parameters
    ----------
    value : ndarray or list of ndarray
        The job's result (``job.result()`` for NumPy or list input; compute a dask array
        first).
    report : JobReport
        The job's report.
    func : callable
        The mapped function.
    data : array_like or list of array_like
        The job's input (see :func:`reference_decode`).
    args : sequence
        More positional arguments of ``func``.
    kwargs : mapping, optional
        Keyword arguments of ``func``.
    transform : Transform or str, optional
        The job's ``transform=`` (see :func:`reference_decode`).
    rtol, atol : float
        Tolerances of ``numpy.testing.assert_allclose``.

    Raises
    ------
    AssertionError
        When the value differs from the reference decode.
    """
    blocks = reference_decode(report, func, data, args, kwargs, transform)
    what = f"the reference decode of {report.code} from returned={list(report.returned)}"
    _assert_blocks(value, blocks, rtol, atol, what)


def assert_exact(
    value: Any,
    func: Callable[..., Any],
    data: ArrayLike | Sequence[ArrayLike],
    *,
    n_blocks: int | None = None,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    rtol: float = 1e-9,
    atol: float = 1e-12,
) -> None:
    """Assert that a job's value is ``func`` on the uncoded blocks (an exact code's answer).

    Parameters
    ----------
    value : ndarray or list of ndarray
        The job's result, as for :func:`assert_decodes_reference`.
    func : callable
        The mapped function.
    data : array_like or list of array_like
        The job's input: an array split along axis 0 into ``n_blocks`` blocks, or the list
        of blocks.
    n_blocks : int, optional
        K, for array input. By default ``func`` runs on the whole array, which is right
        for a ``func`` that maps rows to rows (not for a reduction per block).
    args : sequence
        More positional arguments of ``func``.
    kwargs : mapping, optional
        Keyword arguments of ``func``.
    rtol, atol : float
        Tolerances of ``numpy.testing.assert_allclose`` (the defaults allow for the
        rounding of a Lagrange decode; ``rtol=0, atol=0`` asks for equality, as repetition
        gives).

    Raises
    ------
    AssertionError
        When the value differs from ``func`` on the blocks.
    """
    if isinstance(data, (list, tuple)):
        K = len(data)
    else:
        K = 1 if n_blocks is None else n_blocks
    kw = dict(kwargs or {})
    blocks = np.stack([np.asarray(func(b, *args, **kw)) for b in _blocks(data, K)])
    _assert_blocks(value, blocks, rtol, atol, "func on the uncoded blocks")


def relative_error(value: ArrayLike, reference: ArrayLike) -> float:
    """``||value - reference|| / ||reference||`` (Frobenius norms over all entries): the
    error measure of ``report.error_estimate`` and of the accuracy pages.

    Parameters
    ----------
    value, reference : array_like
        Arrays of the same shape.

    Returns
    -------
    float
        The relative error.
    """
    a, b = np.asarray(value, dtype=float), np.asarray(reference, dtype=float)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def tasks_on(report: JobReport, workers: Iterable[Any]) -> set[int]:
    """The coded tasks of a job that were placed on ``workers``.

    Parameters
    ----------
    report : JobReport
        The job's report (``report.workers[i]`` is coded task i's worker).
    workers : iterable of distributed.worker.Worker or str
        Workers, or their addresses.

    Returns
    -------
    set of int
        The indices i with ``report.workers[i]`` among them.
    """
    addresses = {w if isinstance(w, str) else str(w.address) for w in workers}
    return {i for i, a in enumerate(report.workers) if a in addresses}


async def assert_no_bacc_tasks(scheduler: Any, token: str = "", timeout: float = 20.0) -> None:
    """Wait until the scheduler holds no ``bacc-`` task (of job ``token``, if given).

    A finished or failed job keeps no reference to its futures, so the scheduler forgets
    its tasks by reference counting alone; this polls until it has, and fails after
    ``timeout`` seconds, naming the tasks left. Use it in a
    ``distributed.utils_test.gen_cluster`` test, on the scheduler it passes.

    Parameters
    ----------
    scheduler : distributed.scheduler.Scheduler
        The scheduler (in-process).
    token : str
        Only the tasks of this job (``job.token``); by default every coded job's.
    timeout : float
        Seconds to wait.

    Raises
    ------
    AssertionError
        When tasks are left after ``timeout``.
    """

    def left() -> list[Any]:
        return [k for k in scheduler.tasks if "bacc-" in str(k) and token in str(k)]

    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while left():
        if loop.time() >= end:
            raise AssertionError(f"bacc- tasks left on the scheduler after {timeout}s: {left()}")
        await asyncio.sleep(0.01)
