"""The lifecycle every kind of job shares, and what a caller holds while one runs: its
result, its warnings, cancelling it.

One order for every kind: :class:`~.job.CodedJob` (coded, speculative and hedged shares
of K blocks), :class:`~.redundant.RedundantJob` (exact copies of the tasks of any map
layer: ``coded()``, ``coding()``, dask DataFrames) and :class:`~.waves.BlocksJob` (K
blocks in waves). The kinds differ in what they launch (``_launch``) and how they watch
and decide (``_loop``), and in what they hold (``_let_go``, ``_clean_up``); how a job
starts, reports, finishes, fails, is cancelled and warns is written here once:

- launch, :meth:`JobHandle._submit`: the scheduler plugin hears of the job before any of
  its tasks (one stream), the tasks go in under the job's span, and the loop starts in
  that span too (what it launches later, a relaunch or a backup, is the job's);
- watch and decide: the kind's ``_loop`` (:meth:`JobHandle._next_arrivals` takes what
  landed), run by :meth:`JobHandle._run`, which turns how it ended into the output,
  :meth:`JobHandle._fail` or :meth:`JobHandle._set_cancelled`;
- finish, :meth:`JobHandle._finish`: the kind drops its references (``_let_go``), the
  result is handed over, the plugin and the progress bar are told, then the kind's
  clean-up round trip (``_clean_up``) runs, which nobody waits on;
- cancel (:meth:`JobHandle.cancel`, Ctrl-C in :meth:`JobHandle.result`), warn
  (:meth:`JobHandle.warn`: once, where the result is taken) and report (``report``, one
  :class:`~.report.JobReport` shape, and its :class:`~dask_bacc.diagnostics.JobMonitor`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import traceback
import warnings
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from distributed.client import FutureCancelledError

from .. import diagnostics
from ..exceptions import ClientClosedError
from . import _dist
from .wait import check_timeout

if TYPE_CHECKING:
    from distributed import Client, Future

    from .report import JobReport

__all__ = ["JobHandle", "closed", "describe", "guarded", "sync_guarded"]

T = TypeVar("T")

#: jobs of this process, numbered in the order they were made (``JobHandle.seq``)
_job_seq = itertools.count()
#: strong references to the running job loops (asyncio keeps weak ones only)
_loops: set[asyncio.Task[None]] = set()


def describe(exc: BaseException | None) -> str:
    """``"Type: message"`` of an exception, as reports write it."""
    return f"{type(exc).__name__}: {exc}"


def closed(client: Client) -> bool:
    """Whether ``client`` is closing or closed (by the user: a lost scheduler connection
    leaves it ``connecting``, and it reconnects by itself)."""
    return getattr(client, "status", None) in ("closing", "closed")


def closing_error(client: Client, what: str, exc: BaseException) -> ClientClosedError | None:
    """The :class:`ClientClosedError` that ``exc`` stands for when ``client`` is closing
    (a synchronous client's loop stops as it closes: the wait itself fails with "loop is
    closed"), else None."""
    if isinstance(exc, ClientClosedError):
        return exc
    if closed(client) or "loop is closed" in str(exc).lower():
        return client_closed(what, exc)
    return None


def client_closed(what: str, cause: BaseException | None = None) -> ClientClosedError:
    """The one error of every path that a closed client interrupts; ``what`` names the
    work ("coded job <token>", "encode") and ``cause`` is what the closing raised there."""
    exc = ClientClosedError(
        f"{what}: its client was closed before it finished; keep the client open until "
        "the result is taken"
    )
    exc.__cause__ = cause
    return exc


async def guarded(
    client: Client, what: str, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any
) -> T:
    """``await func(*args, **kwargs)``, raising :class:`ClientClosedError` for whatever
    the client's closing made it raise.

    A client closing mid-call surfaces as whatever the call was awaiting at that moment:
    a ``FutureCancelledError`` ("reason: unknown") from a gather, an ``AttributeError``
    from its RPC (``client.scheduler`` is None once closed), ``InsufficientResults``
    once every task was cancelled with it. None of those says what happened.
    """
    try:
        return await func(*args, **kwargs)
    except ClientClosedError:
        raise
    except Exception as exc:
        if closed(client):
            raise client_closed(what, exc) from exc
        raise


def sync_guarded(
    client: Client, what: str, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any
) -> T:
    """:func:`guarded` run on the client's loop (``_dist.sync``): its result with a
    synchronous client, the awaitable with an asynchronous one. A synchronous client's
    loop stops as it closes, so the wait itself may fail (``RuntimeError``: the loop is
    closed): that is the same :class:`ClientClosedError`."""
    try:
        result: T = _dist.sync(client, guarded, client, what, func, *args, **kwargs)
    except Exception as exc:
        if (error := closing_error(client, what, exc)) is not None and error is not exc:
            raise error from exc
        raise
    return result


class JobHandle:
    """A job's lifecycle (the module's text) and its user API: :meth:`result`,
    :meth:`cancel`, :meth:`done`."""

    client: Client
    token: str
    report: JobReport

    def __init__(self) -> None:
        #: this job's number among the jobs of this process
        self.seq = next(_job_seq)
        self._output: Any = None
        self._exception: BaseException | None = None
        self._finished = False
        self._cancel_requested = False
        self._done_event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._warnings: list[Warning] = []  # emitted where the result is taken
        #: its report to the scheduler plugin and the progress bar (from :meth:`_submit`)
        self._monitor: diagnostics.JobMonitor | None = None

    # -- what each kind of job writes ------------------------------------------------------
    async def _launch(self) -> None:
        """Submit the job's first tasks."""
        raise NotImplementedError

    async def _loop(self) -> Any:
        """Watch the tasks and decide until the job has its output; return it."""
        raise NotImplementedError

    def _let_go(self) -> Any:
        """Settle the report's counts and drop the job's references to its futures; return
        what :meth:`_clean_up` must still stop (the result is handed over in between)."""
        raise NotImplementedError

    async def _clean_up(self, leftover: Any) -> None:
        """Stop or hold what is left of the job on the cluster (best effort)."""
        raise NotImplementedError

    # -- the lifecycle ---------------------------------------------------------------------
    async def _submit(self) -> None:
        """Launch the job and start its loop."""
        self._monitor = await diagnostics.start_job(self)
        with self._monitor.submitting():  # a distributed.span over all the job's tasks
            await self._launch()
            self._task = task = asyncio.ensure_future(self._run())
        _loops.add(task)
        task.add_done_callback(_loops.discard)

    async def _next_arrivals(self, ac: _dist.FutureQueue, wait_for: float) -> list[Future[Any]]:
        """What landed in ``ac`` (a ``distributed.as_completed``) within ``wait_for``
        seconds, every result already in at once (one decision for a burst); [] when
        nothing did. Raises ``CancelledError`` once :meth:`cancel` was asked for."""
        if self._cancel_requested:
            raise asyncio.CancelledError
        try:
            fut = await asyncio.wait_for(ac.__anext__(), timeout=wait_for)
        except (asyncio.TimeoutError, StopAsyncIteration):
            return []
        return [fut, *ac.next_batch(block=False)]

    async def _finish(self) -> None:
        # the result is handed over before the clean-up round trip: nobody waits on it
        leftover = self._let_go()
        self._finished = True
        self._done_event.set()
        if self._monitor is not None:
            self._monitor.finished()  # progress bar, report to the scheduler plugin
        await self._clean_up(leftover)

    async def _run(self) -> None:
        try:
            self._output = await self._loop()
            self.report.status = "finished"
        except FutureCancelledError as exc:
            # a task of the job cancelled by the scheduler (e.g. its dependencies lost), not
            # by the user: an error that says so, never "cancelled by the user"
            if closed(self.client):
                self._fail(client_closed(f"coded job {self.token}", exc))
            elif self._cancel_requested:
                self._set_cancelled()
            else:  # an Exception, as callers' "except Exception" expect
                error = RuntimeError(
                    f"a task of coded job {self.token} was cancelled by the scheduler: {exc}"
                )
                error.__cause__ = exc
                self._fail(error)
        except asyncio.CancelledError:
            self._set_cancelled()
        except Exception as exc:
            # the client closed under the loop: its tasks were cancelled with it (the loop
            # gives up on them) or its RPC is gone; the same error on every path
            self._fail(
                client_closed(f"coded job {self.token}", exc) if closed(self.client) else exc
            )
        finally:
            await self._finish()

    # -- user API --------------------------------------------------------------------
    def done(self) -> bool:
        """True once the job has decoded, failed or been cancelled."""
        return self._finished

    def result(self, timeout: float | None = None, *, warn: bool = True) -> Any:
        """The decoded output (same kind as the input); raises what made the job fail.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait; raises ``TimeoutError`` after that (the job keeps running).
            An interrupt (``KeyboardInterrupt``: Ctrl-C, a notebook's stop button)
            cancels the job.
        warn : bool
            Emit the job's warnings about the answer here (once per job). False keeps
            them for :meth:`take_warnings` (the driver of a rewritten collection sends
            them to the clients instead); they stay in ``report.warnings`` either way.
        """
        return self._result_sync(timeout, stacklevel=3, warn=warn)

    def take_warnings(self) -> list[Warning]:
        """The job's warnings not emitted yet; they will not be emitted by this job."""
        queued, self._warnings = self._warnings, []
        return queued

    def _result_sync(self, timeout: float | None, stacklevel: int, warn: bool = True) -> Any:
        timeout = check_timeout(timeout)
        try:
            out = _dist.sync(self.client, self._result, callback_timeout=timeout)
        except KeyboardInterrupt:
            with contextlib.suppress(Exception):
                self.cancel()
            raise
        except Exception as exc:
            # a synchronous client's loop stops as it closes: the wait fails, not the job
            error = closing_error(self.client, f"coded job {self.token}", exc)
            if error is not None and error is not exc:
                raise error from exc
            raise
        if warn:
            self._emit(stacklevel)
        return out

    def warn(self, warning: Warning) -> None:
        """Queue a warning about the answer, emitted (once) where the result is taken, and
        keep it in the report."""
        self._warnings.append(warning)
        self.report.warnings.append(f"{type(warning).__name__}: {warning}")

    def _emit(self, stacklevel: int) -> None:
        for w in self.take_warnings():
            warnings.warn(w, stacklevel=stacklevel + 1)

    async def _result_warn(self) -> Any:
        out = await self._result()
        self._emit(2)
        return out

    def cancel(self) -> None:
        """Stop the job: cancel its tasks; :meth:`result` then raises ``CancelledError``."""
        return _dist.sync(self.client, self._cancel)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._result_warn().__await__()

    async def _result(self) -> Any:
        await self._done_event.wait()
        if self._exception is not None:
            raise self._exception
        return self._output

    async def _cancel(self) -> None:
        if self._finished or self._task is None:
            return
        # the flag as well as Task.cancel(): on Python < 3.12 asyncio.wait_for can swallow
        # a cancellation that lands as its inner future completes (CPython gh-86296)
        self._cancel_requested = True
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        if not self._finished:  # cancelled before the loop took its first step
            self._set_cancelled()
            await self._finish()

    def _fail(self, exc: BaseException) -> None:
        # the traceback's frames (the loop's included) hold the job's futures: keep the
        # lines, drop the locals, or the job <-> exception cycle keeps its tasks on the
        # scheduler until the cyclic garbage collector runs
        traceback.clear_frames(exc.__traceback__)
        self._exception = exc
        self.report.status = "error"
        self.report.error = describe(exc)

    def _set_cancelled(self) -> None:
        self._exception = concurrent.futures.CancelledError(f"coded job {self.token} was cancelled")
        self.report.status = "cancelled"
        self.report.error = "cancelled by the user"
