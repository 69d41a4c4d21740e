"""Exceptions raised by dask-bacc (no dependency on dask, so ``codes`` can use them)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApproximationWarning",
    "ClientClosedError",
    "InexactDecode",
    "InsufficientResults",
    "InvalidInput",
    "InvalidResult",
    "OutsideTransform",
    "RewriteError",
    "SuspectResultsWarning",
    "UnknownCodeError",
]


class InsufficientResults(RuntimeError):
    """Too few usable coded results exist to decode the output.

    Raised by a code's ``decode`` when the returned set cannot be decoded, and by a
    coded job when the wait policy can no longer be met: every worker that could still
    answer has failed, left or straggled past the timeout.
    """

    #: the job's :class:`~dask_bacc.JobReport` when a coded job raised it (None from a
    #: code's ``decode``)
    report: Any = None


class ClientClosedError(RuntimeError):
    """The client a coded job (or :func:`~dask_bacc.encode`) runs on was closed before it
    finished: the job's tasks are gone with the client, and no answer will come.

    Raised the same way on every path (``map_coded``, ``submit_coded(...).result()``,
    ``encode``, ``CodedData.map``, with a synchronous or an asynchronous client), whatever
    the closing interrupted (a submission, a gather, the job's wait). A ``RuntimeError``,
    as dask-bacc raised before it had a type of its own; keep the client open until the
    result is taken.
    """


class UnknownCodeError(ValueError):
    """No code is registered under the name given as ``code=`` (the message lists the
    registered ones and the closest match)."""


class InvalidInput(ValueError):
    """The input chunks cannot be encoded (NaN/inf or non-numeric data found on a worker).

    Raised inside coded tasks and adapters; a coded job turns it into a plain ``ValueError``
    for the caller, as any bad argument is.
    """


class InvalidResult(ValueError):
    """A coded task's result cannot be decoded (not numeric, NaN/inf, wrong shape)."""


class OutsideTransform(InvalidResult):
    """A result of ``func`` that its job's ``transform=`` does not map back:
    ``inverse(forward(y))`` differs from ``y`` (e.g. a value that is not positive under
    ``"log"``), so even an exact code would decode an altered answer."""


class RewriteError(ValueError):
    """``dask_bacc.coded`` cannot rewrite the collection: its final operation is not a map
    over chunks it can code (several chunked inputs, a reduction, a fused graph...)."""


class ApproximationWarning(UserWarning):
    """A decoded answer may be far from ``f`` on the uncoded blocks: its estimated relative
    error exceeds ``bacc.warn-error``, or a ``wait=until(error=...)`` target was not met.

    The answer is still returned; ``job.report`` has the figures. For an exact answer use
    an exact code (``code="repetition"``, or ``"lagrange"`` for polynomial f), or wait for
    every result (``wait=1.0``) with a systematic code.
    """


class InexactDecode(ValueError):
    """An exact code's decode failed its check against the spare results: ``f`` is not
    what the code assumes (Lagrange: a polynomial of at most the code's degree).

    Attributes ``residual`` (the relative residual of the results against the code's
    assumption) and ``report`` (the job's report) say how far off it was. Use an
    approximate code, or Lagrange with the right ``degree``.
    """

    #: the relative residual of the results against the code's assumption
    residual: float = float("nan")
    #: the job's :class:`~dask_bacc.JobReport`
    report: Any = None


class SuspectResultsWarning(UserWarning):
    """Some coded results are inconsistent with the others (``report.suspects``) and were
    decoded in: a worker may have returned a corrupted result. The warning names them and
    how far they moved the answer, which ``report.error_estimate`` includes; pass
    ``adversaries=k`` to locate and exclude up to k corrupted results.
    """
