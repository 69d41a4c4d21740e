"""A coded job on Dask distributed: encode, coded eval, first-k wait, decode, cancel."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
from distributed import as_completed

from .. import config, diagnostics
from ..codes import Code
from ..collections import Blocks
from ..exceptions import InsufficientResults
from .placement import spread_order
from .quality import JobQuality
from .report import JobReport
from .wait import WaitPolicy
from .worker import (
    InvalidInput,
    decode_task,
    encode_task,
    eval_task,
    hold,
    inspect_task,
    mark_done,
)

__all__ = ["CodedJob"]

_job_seq = itertools.count()
_running: set[asyncio.Task] = set()  # strong references to the job loops


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


class CodedJob:
    """A coded map over K blocks running on the cluster (returned by ``submit_coded``).

    Use :meth:`result` to wait for the decoded output, :attr:`report` for what happened,
    :meth:`cancel` to stop it and :meth:`done` to poll. With an asynchronous client,
    ``await job`` (or ``await job.result()``) instead.
    """

    #: show a progress bar (None: ``bacc.progress``); ``submit_coded(progress=)`` sets it
    progress: bool | None = None
    _monitor: Any = None  # diagnostics.JobMonitor, from _submit on
    #: corrupted results to locate and exclude before decoding; ``submit_coded`` sets it
    adversaries: int = 0

    def __init__(
        self,
        client: Any,
        code: Code,
        blocks: Blocks,
        func: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        policy: WaitPolicy,
        timeout: float | None,
        combine: str,
        workers: list[str],
    ):
        self.client = client
        self.code = code
        self.blocks = blocks
        self.func = blocks.wrap(func, args, kwargs)  # what runs on a coded share
        self.args = args
        self.kwargs = kwargs
        self.policy = policy
        self.timeout = timeout
        self.combine = combine
        self.token = uuid.uuid4().hex
        self.seq = next(_job_seq)
        self.report = JobReport(
            token=self.token,
            func=getattr(func, "__name__", type(func).__name__),
            code=code.get_config(),
            K=code.K,
            N=code.N,
            wait_target=policy.target(code),
            workers=list(workers),
        )
        self._start = time.perf_counter()
        self._call: Any = (args, kwargs)  # or a future of it: see _ship_arguments
        self._evals: dict[int, Any] = {}
        self._chunks: list[Any] = []
        self._stage: list[Any] = []  # inspect and decode futures in flight (empty: waiting)
        self._stage_used: list[int] = []
        self._specs: dict[int, tuple[tuple[int, ...], str]] = {}
        self._inspect_indices: list[int] = []
        self._inspect: Any = None
        self._decodes: list[Any] = []
        self._decode_error: Any = None
        self._attempt = 0
        self._output: Any = None
        self._exception: BaseException | None = None
        self._finished = False
        self._cancel_requested = False
        self._done_event = asyncio.Event()
        self._task: asyncio.Task | None = None
        # loop state: coded tasks not yet finished, and finished valid ones in arrival order
        self._pending: dict[int, Any] = {}
        self._usable: list[int] = []
        self._index_of: dict[Any, int] = {}
        self._ac: as_completed | None = None
        self._grace_until: float | None = None  # perf_counter time the grace period ends
        self.quality = JobQuality(self)  # sketches, error estimate, corrupted results

    # -- user API --------------------------------------------------------------------
    def done(self) -> bool:
        """True once the job has decoded, failed or been cancelled."""
        return self._finished

    def result(self, timeout: float | None = None) -> Any:
        """The decoded output (same kind as the input); raises what made the job fail.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait; raises ``TimeoutError`` after that (the job keeps running).
        """
        return self.client.sync(self._result, callback_timeout=timeout)

    def cancel(self) -> None:
        """Stop the job: cancel its tasks; :meth:`result` then raises ``CancelledError``."""
        return self.client.sync(self._cancel)

    def __await__(self):
        return self._result().__await__()

    def __repr__(self) -> str:
        status = self.report.status
        return (
            f"<CodedJob {self.report.code.get('name')} {self.report.func} K={self.code.K} "
            f"N={self.code.N} status={status} token={self.token}>"
        )

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

    # -- submission ---------------------------------------------------------------------
    def _submit_eval(self, i: int, addr: str, share: Any, name: str = "bacc-eval") -> Any:
        """Coded task ``i``: ``func`` on ``share``, strictly pinned to worker ``addr``."""
        return self.client.submit(
            eval_task,
            self.token,
            i,
            self.seq,
            self.func,
            share,
            self._call,
            key=(f"{name}-{self.token}", i),
            workers=[addr],
            allow_other_workers=False,
        )

    async def _launch(self) -> None:
        """Submit the encode and eval tasks (and the chunk tasks, for data on the cluster)."""
        client, tok = self.client, self.token
        if self.blocks.local:
            # NumPy data is here: one matmul encodes it, and each pinned encode task just
            # holds its share (kept in the task spec, so a lost share is recomputed)
            shares = self.code.encode(self.blocks.stacked())
            if shares.dtype.kind == "f" and not np.isfinite(shares).all():
                raise ValueError("encoding overflowed to inf: rescale the data")
            encode = [(np.asarray, (shares[i],)) for i in range(self.code.N)]
        else:
            self._chunks = await self.blocks.to_futures(client)
            E = self.code.encoding_matrix()
            encode = []
            for i in range(self.code.N):
                nz = np.flatnonzero(E[i])
                encode.append((encode_task, (E[i, nz], *[self._chunks[j] for j in nz])))
        for i in spread_order(self.code.N):  # see spread_order: who finishes last matters
            addr = self.report.workers[i]
            fn, args = encode[i]
            share = client.submit(
                fn,
                *args,
                key=(f"bacc-encode-{tok}", i),
                workers=[addr],
                allow_other_workers=False,
            )
            self._evals[i] = self._submit_eval(i, addr, share)

    def _ship_arguments(self) -> None:
        """Send large ``args``/``kwargs`` (e.g. model weights) once, as one task the eval
        tasks depend on, instead of once inside each of the N task specs."""
        from dask.sizeof import sizeof
        from dask.utils import parse_bytes

        limit = parse_bytes(config.get("args-inline-limit", "64 kiB"))
        if (self.args or self.kwargs) and sizeof((self.args, self.kwargs)) > limit:
            self._call = self.client.submit(
                hold, (self.args, self.kwargs), key=f"bacc-args-{self.token}"
            )

    async def _submit(self) -> None:
        self._monitor = await diagnostics.start_job(self)
        with self._monitor.submitting():  # a distributed.span over all the job's tasks
            self._ship_arguments()
            await self._launch()
            self._task = asyncio.ensure_future(self._run())
        _running.add(self._task)
        self._task.add_done_callback(_running.discard)

    # -- the loop ------------------------------------------------------------------------
    def _elapsed(self) -> float:
        return time.perf_counter() - self._start

    async def _run(self) -> None:
        try:
            self._output = await self._loop()
            self.report.status = "finished"
        except asyncio.CancelledError:
            self._set_cancelled()
        except Exception as exc:
            self._exception = exc
            self.report.status = "error"
            self.report.error = _describe(exc)
        finally:
            await self._finish()

    def _set_cancelled(self) -> None:
        self._exception = concurrent.futures.CancelledError(f"coded job {self.token} was cancelled")
        self.report.status = "cancelled"
        self.report.error = "cancelled by the user"

    async def _finish(self) -> None:
        # the result is handed over before the clean-up round trips: nobody waits on them
        stragglers, cancel = self._release()
        self._finished = True
        self._done_event.set()
        if self._monitor is not None:
            self._monitor.finished()  # progress bar, report to the scheduler plugin
        await self._stop_work(stragglers, cancel)

    def _track(self, i: int, fut: Any) -> None:
        """Follow coded task ``i`` in the loop (used for launches after the start, too)."""
        self._evals[i] = fut
        self._pending[i] = fut
        self._index_of[fut.key] = i
        if self._ac is not None:
            self._ac.add(fut)
        self.quality.track(i, fut)  # its sketch, next to it (approximate codes)

    async def _tick(self) -> None:
        """Called on every turn of the loop; strategies that launch tasks late override it."""

    def _tick_interval(self, poll: float) -> float:
        return poll

    def _after_grace(self, usable: list[int], pending: dict[int, Any]) -> str | None:
        """The wait target is met: ``"wait"`` once its grace period (if any) is over."""
        now = time.perf_counter()
        if self.report.target_met is None:
            self.report.target_met = now - self._start
        grace = self.policy.grace_for(self.code)
        if not grace or not pending or self.code.is_exact(usable):
            return "wait"
        if self._grace_until is None:
            self._grace_until = now + grace * self.report.target_met
        return "wait" if now >= self._grace_until else None

    async def _loop(self) -> Any:
        poll = float(_seconds(config.get("poll-interval", "500ms")))
        tick = self._tick_interval(poll)
        deadline = None if self.timeout is None else self._start + self.timeout
        self._ac = ac = as_completed(loop=self.client.loop, raise_errors=False)
        for i, fut in list(self._evals.items()):
            self._track(i, fut)
        pending, usable, index_of = self._pending, self._usable, self._index_of
        last_check = 0.0
        rep = self.report

        while True:
            if self._cancel_requested:
                raise asyncio.CancelledError
            if not self._stage:
                await self._tick()
                await self.quality.refresh(usable)  # adaptive waiting: re-estimate the error
            if not self._stage:
                trigger = None
                if self.policy.is_met(usable, self.code):
                    trigger = self._after_grace(usable, pending)
                    if trigger == "wait":  # until(): met only once every result is in
                        trigger = getattr(self.policy, "met_trigger", "wait")
                elif self.quality.target_met(usable):
                    trigger = "error"
                elif not pending:
                    trigger = "exhausted"
                elif deadline is not None and time.perf_counter() >= deadline:
                    trigger = "timeout"
                if trigger is not None:
                    if not usable or not self.code.can_decode(usable):
                        raise self._insufficient(usable, pending, trigger)
                    rep.trigger = trigger
                    # adversaries=: leave out the results located as corrupted
                    self._start_stage(await self.quality.screen(usable), ac)

            wait_for = tick
            if not self._stage:
                for end in (deadline, self._grace_until):
                    if end is not None:
                        wait_for = max(0.0, min(wait_for, end - time.perf_counter()))
            try:
                fut = await asyncio.wait_for(ac.__anext__(), timeout=wait_for)
            except (asyncio.TimeoutError, StopAsyncIteration):
                fut = None

            if fut is not None:
                if fut.key in index_of:
                    i = index_of[fut.key]
                    if i not in pending:
                        continue  # already written off (worker left) or unexpected repeat
                    del pending[i]
                    rep.arrival[i] = self._elapsed()
                    if fut.status == "finished":
                        usable.append(i)
                    else:
                        reason = await self._reason(fut)
                        rep.failed[i] = reason
                    self._monitor.arrived(len(usable))
                else:
                    output = await self._stage_event(fut, usable, ac)
                    if output is not _NOTHING:
                        return output

            if time.perf_counter() - last_check >= poll:
                last_check = time.perf_counter()
                await self._check_workers()

    # -- the decode stage: inspect the new results and decode, concurrently ------------
    def _start_stage(self, usable: list[int], ac: as_completed) -> None:
        """Submit the decode tasks, and an inspect task for results whose shape is unknown.

        Both run at once: if the inspection finds inconsistent results, the decode is
        cancelled and redone without them (rare), so the common case costs one hop.
        """
        self._attempt += 1
        used = self._stage_used = list(usable)
        new = [i for i in used if i not in self._specs]
        # every decode task needs every used result: run them where the first result is,
        # so each result crosses the network once (loosely: elsewhere if that worker goes)
        near = [self.report.workers[used[0]]]
        self._inspect = None
        if new:
            self._inspect = self.client.submit(
                inspect_task,
                *[self._evals[i] for i in new],
                key=(f"bacc-inspect-{self.token}", self._attempt),
                workers=near,
                allow_other_workers=True,
            )
            self._inspect_indices = new
        D = self.code.decoding_matrix(used)
        name = f"bacc-decode-{self.token}" + (f"-r{self._attempt}" if self._attempt > 1 else "")
        self._decodes = []
        for j in range(self.code.K):
            nz = np.flatnonzero(D[j])
            self._decodes.append(
                self.client.submit(
                    decode_task,
                    D[j, nz],
                    *[self._evals[used[col]] for col in nz],
                    key=(name, j),
                    workers=near,
                    allow_other_workers=True,
                )
            )
        self._decode_error = None
        self._stage = ([self._inspect] if self._inspect is not None else []) + self._decodes
        self.report.straggled = sorted(
            i for i in self._evals if i not in self.report.arrival and i not in self.report.failed
        )
        ac.update(self._stage)

    async def _stage_event(self, fut: Any, usable: list[int], ac: as_completed) -> Any:
        if not any(fut is f for f in self._stage):
            return _NOTHING  # from an abandoned stage
        if fut is self._inspect:
            if fut.status != "finished":
                raise await self._stage_failure(fut, "inspect")
            self._inspect = None
            specs = await self.client.gather(fut, asynchronous=True)
            self._specs.update(zip(self._inspect_indices, specs, strict=True))
            inspected = [i for i in usable if i in self._specs]
            expected = Counter(self._specs[i] for i in inspected).most_common(1)[0][0]
            bad = [i for i in inspected if self._specs[i] != expected]
            if bad:
                for i in bad:
                    shape, dtype = self._specs[i]
                    self.report.failed[i] = (
                        f"InvalidResult: result shape {shape} dtype {dtype} differs from the "
                        f"shape {expected[0]} dtype {expected[1]} of the other results"
                    )
                    usable.remove(i)
                decodes, self._stage = self._decodes, []
                await self.client.cancel(decodes, asynchronous=True)
                return _NOTHING  # the loop re-checks the wait policy
        elif fut.status != "finished" and self._decode_error is None:
            self._decode_error = fut  # maybe from the inconsistent shapes: await the verdict
        if self._inspect is not None:
            return _NOTHING
        if self._decode_error is not None:
            raise await self._stage_failure(self._decode_error, "decode")
        if not all(f.status == "finished" for f in self._decodes):
            return _NOTHING
        self.report.returned = list(self._stage_used)
        self.report.late = [i for i in usable if i not in set(self._stage_used)]
        self.report.slowest_used = max(self.report.arrival[i] for i in self._stage_used)
        shape, dtype = self._specs[self._stage_used[0]]
        out_dtype = np.dtype(dtype)
        if not self.code.keeps_dtype and out_dtype.kind != "f":
            out_dtype = np.dtype(np.float64)
        if self.blocks.gather_output:
            values = await self.client.gather(self._decodes, asynchronous=True)
            output = self.blocks.assemble(values, shape, out_dtype, self.combine)
        else:
            output = self.blocks.assemble(self._decodes, shape, out_dtype, self.combine)
        await self.quality.finalize(self._stage_used)  # error estimate into the report
        self.report.time_to_decode = self._elapsed()
        return output

    async def _stage_failure(self, fut: Any, what: str) -> Exception:
        exc = await fut.exception(asynchronous=True) if fut.status == "error" else None
        error = RuntimeError(
            f"coded job {self.token}: {what} task failed: {_describe(exc) if exc else fut.status}"
        )
        error.__cause__ = exc
        return error

    async def _check_workers(self) -> None:
        """Write off coded tasks whose worker left: a strictly pinned task would wait forever."""
        pending, usable = self._pending, self._usable
        info = await self.client.scheduler.identity(n_workers=-1)
        live = set(info.get("workers", {}))
        for i in [i for i in pending if self.report.workers[i] not in live]:
            del pending[i]
            self.report.failed[i] = f"worker {self.report.workers[i]} left before returning"
        lost = [i for i in usable if self.report.workers[i] not in live]
        for i in lost:
            usable.remove(i)
            self.report.failed[i] = f"worker {self.report.workers[i]} left holding the result"
        if lost and self._stage and set(lost) & set(self._stage_used):
            stage, self._stage = self._stage, []
            await self.client.cancel(stage, asynchronous=True)

    async def _reason(self, fut: Any) -> str:
        if fut.status == "error":
            exc = await fut.exception(asynchronous=True)
            if isinstance(exc, InvalidInput):
                raise ValueError(str(exc)) from exc
            return _describe(exc)
        return f"task {fut.status} (by another client, or its input data was lost)"

    def _insufficient(self, usable: list[int], pending: dict[int, Any], trigger: str) -> Exception:
        rep, need = self.report, self.policy.target(self.code)
        # "worker tcp://1.2.3.4:567 left ..." and "ValueError: ..." -> one line per kind
        reasons = Counter(
            re.sub(r"[a-z]+://\S+", "<addr>", r).split(": ")[0] for r in rep.failed.values()
        )
        why = [f"{n} x {r}" for r, n in reasons.most_common()]
        if pending:
            why.append(f"{len(pending)} still running at the timeout of {self.timeout}s")
        return InsufficientResults(
            f"coded job {self.token}: {len(usable)} usable result(s) of N={self.code.N} "
            f"arrived, {type(self.code).__name__} needs {need} (at least "
            f"{self.code.min_results} and a decodable set); missing: "
            + ("; ".join(why) or "none")
            + f" [{trigger}]"
        )

    def _release(self) -> tuple[dict[int, Any], list[Any]]:
        """Count the stragglers, drop every reference; return the futures left to stop:
        the straggling evals by index, and the job's other unfinished tasks."""
        stragglers = {i: f for i, f in self._evals.items() if f.status == "pending"}
        self.report.cancelled += len(stragglers)
        cancel = [f for f in self._stage if f.status == "pending"]
        cancel += self.quality.release()
        # drop every reference, the as_completed queue included (it may hold finished
        # futures the loop never took out), so the scheduler can forget the job's tasks
        self._ac = None
        self._evals.clear()
        self._pending.clear()
        self._index_of.clear()
        self._chunks.clear()
        self._call = None
        self._stage, self._decodes, self._inspect, self._decode_error = [], [], None, None
        return stragglers, cancel

    async def _stop_work(self, stragglers: dict[int, Any], cancel: list[Any]) -> None:
        """Tell the job's workers it is over (evals not yet started skip ``func``, injected
        delays end) and stop the straggling tasks. Best effort: errors are ignored.

        Stragglers still executing ``func`` are not cancelled but left to finish, their
        results dropped: Python cannot stop their threads, and a cancelled task no longer
        counts on the scheduler, which would then send new work to a worker whose only
        thread is still busy (where it would queue behind the straggler).
        """
        client = self.client
        executing: set[int] = set()
        try:
            # only live workers: a broadcast to a dead one waits for its connect timeout
            info = await client.scheduler.identity(n_workers=-1)
            workers = sorted(set(self.report.workers) & set(info.get("workers", {})))
            if workers:
                running = await asyncio.wait_for(
                    client.run(
                        mark_done, self.token, workers=workers, on_error="ignore", asynchronous=True
                    ),
                    timeout=5,
                )
                executing = {
                    i
                    for addr, indices in running.items()
                    for i in indices or ()
                    if self.report.workers[i] == addr
                }
        except Exception:  # best effort: without the answer every straggler is cancelled
            pass
        cancel = cancel + [f for i, f in stragglers.items() if i not in executing]
        if cancel:
            with contextlib.suppress(Exception):
                await client.cancel(cancel, asynchronous=True, reason="bacc: not needed")
        running = [f for i, f in stragglers.items() if i in executing]
        if running:
            task = asyncio.ensure_future(_drop_when_done(running))
            _running.add(task)
            task.add_done_callback(_running.discard)


async def _drop_when_done(futures: list[Any]) -> None:
    """Hold running stragglers until they finish (so the scheduler still sees their worker
    busy), then drop their results."""
    with contextlib.suppress(Exception):
        async for _ in as_completed(futures):
            pass
    futures.clear()


class _Nothing:
    pass


_NOTHING = _Nothing()


def _seconds(value: Any) -> float:
    from dask.utils import parse_timedelta

    return parse_timedelta(value, default="s")
