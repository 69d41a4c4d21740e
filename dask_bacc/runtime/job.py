"""A coded job on Dask distributed: the async shell around :class:`~.decide.Decider`.

Cost model (docs/design.md, "Design rules"): a bare futures loop sends one graph, waits on
``as_completed``, gathers k results and decodes with one matrix product. A coded job adds
as little as it can to that:

* the N eval tasks go to the scheduler in **one** graph (:func:`.graph.submit_graph`),
  each strictly pinned to its own worker; in-memory shares travel inside the task specs,
  data on the cluster is encoded inside the eval task from the input chunks;
* in-memory output below ``bacc.client-decode-limit`` is decoded **on the client**: one
  ``gather`` of the k used results and one matrix product; the error-estimate sketches are
  made from the gathered results. Output that stays on the cluster is decoded by one task
  (a tiled matrix product near the first result) that also sketches its inputs, plus one
  task per output block and one small summary task, sent as one graph;
* the job ends with **one** scheduler round trip (:func:`_job_done`): the scheduler tells
  the job's workers (``bacc-done`` on their streams, see :mod:`.worker`) and says which
  stragglers are still running; queued ones are cancelled, running ones are held until
  they end so the scheduler keeps counting their threads as busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
import time
import uuid
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from dask._task_spec import TaskRef
from distributed.client import FutureCancelledError
from numpy.typing import NDArray

from .. import config, diagnostics
from ..codes import Code
from ..codes.base import contract, decode_residual
from ..codes.registry import code_label
from ..codes.transform import Transform
from ..collections import Blocks
from ..diagnostics.monitor import JobMonitor, prune_spans
from ..exceptions import ApproximationWarning, InsufficientResults, InvalidInput
from . import _dist, auto_cache, keys
from .decide import Decider, Decode, GiveUp
from .graph import TaskSpec, submit_graph
from .handle import JobHandle, describe
from .jobview import CallArg
from .launch import CodedLaunch, Launch
from .placement import silent_workers, waiting_on_silent
from .quality import JobQuality
from .report import JobReport, split_redundant
from .savings import cpu_split, plain_ready, plain_shares, uncoded_tasks
from .sending import ClientBlocks
from .wait import WaitPolicy
from .worker import (
    DONE_OP,
    PLUGIN_NAME,
    BaccWorker,
    DecodedInfo,
    EvalFailure,
    InconsistentResults,
    ResultSpec,
    Share,
    consistent,
    decoded_block,
    decoded_info,
    eval_task,
    hold,
    majority,
    mixed_beyond_float64,
    picked_dtype,
    picks,
    spec_of,
    stack_decode_task,
)

if TYPE_CHECKING:
    from dask.typing import Key
    from distributed import Client, Future
    from distributed.scheduler import Scheduler

__all__ = ["CodedJob", "ensure_worker_plugin"]

logger = logging.getLogger(__name__)

_running: set[asyncio.Task[None]] = set()  # strong references to the job loops and clean-ups
#: seconds a transfer from the workers is given past a job's timeout (the results the
#: timeout decodes from are still to be fetched then)
TRANSFER_GRACE = 1.0
# client -> scheduler address the worker plugin is known to be on
_worker_plugin: weakref.WeakKeyDictionary[Client, tuple[str | None, str | None]] = (
    weakref.WeakKeyDictionary()
)
# client -> its registration of the worker plugin (which may outlive the job's wait)
_registering: weakref.WeakKeyDictionary[Client, asyncio.Future[Any]] = weakref.WeakKeyDictionary()


#: an eval's failure as the scheduler reports a result's type: the class, or its name
#: where the class could not be loaded
_FAILURE_TYPES = (EvalFailure, keys.FAILURE_TYPE)


def _choice(key: str, options: tuple[str, ...]) -> str:
    value = str(config.get(key)).lower()
    if value not in options:
        raise ValueError(f"bacc.{key} must be one of {options}, got {value!r}")
    return value


def _has_worker_plugin(dask_scheduler: Scheduler | None = None) -> bool:
    assert dask_scheduler is not None  # run_on_scheduler passes it
    return PLUGIN_NAME in dask_scheduler.worker_plugins


async def ensure_worker_plugin(client: Client) -> None:
    """Register dask-bacc's worker plugin once per cluster (checked once per client and
    scheduler: a scheduler restarted on the same address has no plugins).

    The scheduler stores the plugin (so workers that join later get it) before it
    broadcasts it to the running workers and waits for every one of them. A frozen worker
    (SIGSTOP, a long GC pause) would hold that wait, and with it the job, for as long as
    it is frozen: exactly the straggler a coded job exists to beat. So the job waits at
    most ``bacc.plugin-timeout`` for the broadcast; the registration goes on in the
    background, and an eval on a worker that has no plugin yet runs all the same (it
    only misses the early "job done" signal, see :func:`.worker.state`).
    """
    identity = getattr(client, "_scheduler_identity", None) or {}
    address = (_dist.scheduler(client).address, identity.get("id"))
    if _worker_plugin.get(client) == address:
        return
    if not await _dist.run_on_scheduler(client, _has_worker_plugin):
        register = asyncio.ensure_future(client.register_plugin(BaccWorker(), name=PLUGIN_NAME))
        _running.add(register)
        _registering[client] = register
        register.add_done_callback(_registered)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(register), config.seconds("plugin-timeout"))
    _worker_plugin[client] = address


def plugin_everywhere(client: Client) -> bool:
    """Whether every running worker is known to have the worker plugin: this client's own
    registration reached all of them. A client that found the plugin already on the
    scheduler cannot know (another client's broadcast may still be waiting for a frozen
    worker), nor can one whose registration is still under way."""
    register = _registering.get(client)
    return (
        register is not None
        and register.done()
        and not register.cancelled()
        and register.exception() is None
    )


def _registered(task: asyncio.Future[Any]) -> None:
    """The end of a worker plugin registration that may have outlived its job's wait."""
    from distributed.comm.core import CommClosedError

    _running.discard(task)
    if task.cancelled():
        return
    exc = task.exception()
    # a client closed (or a scheduler gone) before every worker answered: nothing is
    # wrong with the plugin, and its jobs have ended
    if exc is not None and not isinstance(exc, CommClosedError):
        logger.warning("dask-bacc: registering the worker plugin failed: %r", exc)


def _job_done(
    token: str,
    workers: list[str],
    keys: list[Key],
    everywhere: bool = True,
    view: tuple[list[str], int, int, int | None] | None = None,
    used: tuple[list[int], int] | None = None,
    dask_scheduler: Scheduler | None = None,
) -> dict[str, Any]:
    """On the scheduler: tell ``workers`` that job ``token`` is over (their evals not yet
    started skip ``func``, injected delays end) and return ``{"running": which of
    ``keys`` are being processed by a worker (stragglers still running), "cpu": the
    thread-seconds of each coded task so far, from the diagnostics plugin (None without
    it)}``.

    With ``view = (workers, draws, seed, version)`` (a client that plans auto jobs), the
    answer also carries ``"view"``: :func:`dask_bacc.diagnostics.model_view` of those
    workers, unless the model has learned nothing since ``version`` (then it is left
    out: the client's view is current).

    With ``used = (results the decode used, bytes of shares carried in the specs)``, the
    answer carries ``"bytes"``, the bytes moved for the answer (the plugin's
    ``moved_bytes``; None without the plugin).

    Unless the plugin is known to be ``everywhere``, only workers whose heartbeat says it
    is set up are told: a stream message with an op the worker has no handler for would
    close its stream (a frozen worker the registration has not reached yet).
    """
    assert dask_scheduler is not None  # run_on_scheduler passes it
    if PLUGIN_NAME in dask_scheduler.worker_plugins:
        for addr in workers:
            stream = dask_scheduler.stream_comms.get(addr)
            ws = dask_scheduler.workers.get(addr)
            ready = everywhere or (ws is not None and bool(ws.metrics.get(PLUGIN_NAME)))
            if stream is not None and ready:
                stream.send({"op": DONE_OP, "token": token})
    running = []
    for key in keys:
        ts = dask_scheduler.tasks.get(key)
        if ts is not None and ts.state == "processing":
            running.append(key)
    # the spans of long-finished jobs, or the scheduler's memory grows with every job
    from distributed.metrics import time as now

    prune_spans(
        dask_scheduler,
        keep=int(config.get("diagnostics.history")),
        ttl=config.seconds("diagnostics.span-ttl"),
        now=now(),
    )
    plugin = dask_scheduler.plugins.get(diagnostics.PLUGIN_NAME)
    cpu_of = getattr(plugin, "cpu_of", None)
    moved = getattr(plugin, "moved_bytes", None)
    answer = {
        "running": running,
        "cpu": None if cpu_of is None else cpu_of(token, now()),
        "bytes": None if moved is None or used is None else moved(token, *used),
    }
    if view is not None:
        model = getattr(plugin, "model", None)
        which, size, seed, version = view
        if model is None or model.jobs != version:
            answer["view"] = diagnostics.model_view(which, size, seed, dask_scheduler)
    return answer


def _model_quantiles(
    workers: list[str], dask_scheduler: Scheduler | None = None
) -> dict[str, list[float]] | None:
    """On the scheduler: the straggler model's relative latency quantiles (q50, q90, q99)
    of ``workers``; None when the diagnostics plugin or its model is off."""
    assert dask_scheduler is not None
    plugin = dask_scheduler.plugins.get(diagnostics.PLUGIN_NAME)
    model = getattr(plugin, "model", None)
    if model is None:
        return None
    out = {}
    for w in workers:
        ws = dask_scheduler.workers.get(w)
        p = model.predict(w, ws.host if ws is not None else None)
        if p.n_eff > 0:  # a prior is no estimate of this worker
            out[w] = [p.q50, p.q90, p.q99]
    return out


def _dashboard_link(client: Client, token: str) -> str | None:
    """The job's row on the ``/bacc`` page, if the scheduler serves a dashboard."""
    from ..diagnostics.html import dashboard_job_link

    try:
        if "dashboard" not in client.scheduler_info().get("services", {}):
            return None
        return dashboard_job_link(client.dashboard_link, token)
    except Exception:  # no scheduler info yet, or a client without one
        return None


class CodedJob(JobHandle):
    """A coded map over K blocks running on the cluster (returned by ``submit_coded``).

    Use :meth:`result` to wait for the decoded output, ``job.report`` (a
    :class:`JobReport`) for what happened, :meth:`cancel` to stop it and :meth:`done` to
    poll. With an asynchronous client, ``await job`` (or ``await job.result()``) instead.
    """

    #: show a progress bar (None: ``bacc.progress``); ``submit_coded(progress=)`` sets it
    progress: bool | None = None
    _monitor: JobMonitor | None = None  # from _submit on
    #: corrupted results to locate and exclude before decoding; ``submit_coded`` sets it
    adversaries: int = 0

    def __init__(
        self,
        client: Client,
        code: Code,
        blocks: Blocks,
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        policy: WaitPolicy,
        timeout: float | None,
        combine: str,
        workers: list[str],
        launch: Launch | None = None,
        transform: Transform | None = None,
    ):
        super().__init__()
        self.client = client
        self.launch = launch if launch is not None else CodedLaunch()
        #: coded task index -> its worker (speculative backups are added as they launch)
        self.workers: dict[int, str] = dict(enumerate(workers))
        self.code = code
        self.blocks = blocks
        self.func: Callable[..., Any] = blocks.wrap(func, args, kwargs)  # runs on a share
        #: decode ``transform.forward`` of the results (computed in the eval tasks), then
        #: map the decoded blocks back with ``transform.inverse``
        self.transform = transform
        if transform is not None:
            if code.assumption is not None:
                # the decode is exact for a polynomial f; forward(f) is not one
                raise ValueError(
                    f"transform={transform.name!r} does not apply to {code!r}: its decode is "
                    f"exact only when {code.assumption}, and forward(f) is not. Use "
                    "code='repetition' for an exact answer, or an approximate code."
                )
            self.func = transform.after(self.func)
        blocks.exact_decode = code.keeps_dtype and transform is None
        self.args = args
        self.kwargs = kwargs
        self.policy = policy
        self.timeout = timeout
        self.combine = combine
        self.token = uuid.uuid4().hex
        #: seconds each coded task ran (the scheduler plugin's, from the clean-up round trip)
        self.task_seconds: dict[int, float] = {}
        self.report = JobReport(
            token=self.token,
            func=getattr(func, "__name__", type(func).__name__),
            code=code.get_config(),
            K=code.K,
            N=code.N,
            wait_target=policy.target(code),
            workers=list(workers),
            transform=None if transform is None else transform.name,
            dashboard=_dashboard_link(client, self.token),
        )
        self.decider = Decider(code, policy, timeout)
        self._start = time.perf_counter()
        self._evals: dict[int, Future[Any]] = {}
        self._index_of: dict[Key, int] = {}
        self._chunks: list[Future[Any]] = []
        #: in-memory input sent from here (None: the input is on the cluster); the launch
        #: sets it, and a block lost or held by a silent worker is sent again
        self.sent: ClientBlocks | None = None
        #: per coded task: how many times it was launched, and the send round of each
        #: block it read then (a block sent again since means launching it again)
        self._launches: dict[int, int] = {}
        self._read_at: dict[int, list[int]] = {}
        self._replaced: list[Future[Any]] = []  # tasks launched again: not waited for
        self._silence_checked = 0.0
        self._values: dict[int, NDArray[Any]] = {}  # results gathered to the client
        self._stage: list[Future[Any]] = []  # futures of a decode on the cluster in flight
        self._round = 0
        self._cause: BaseException | None = None  # the first exception a task raised
        self._ac: _dist.FutureQueue | None = None
        self.quality = JobQuality(self)  # sketches, error estimate, corrupted results
        #: coded index -> block, for the shares that are a block's own data
        self._data_rows = code.data_rows()
        #: some share mixes blocks (a row of E that is not a unit row): NaN/inf are refused
        self.mixes = len(self._data_rows) < code.N
        #: the coded task standing for each block in an uncoded run (None: no such tasks)
        self._plain = plain_shares(self._data_rows, code.K)
        self.report.plain_shares = list(self._plain or [])
        #: the straggler model's quantiles of the workers of plain shares still out at the
        #: decode, fetched while it runs (for the uncoded counterfactual)
        self._quantiles: asyncio.Future[Any] | None = None
        self._on_error = _choice("on-error", ("raise", "erase"))
        self._on_domain = _choice("on-domain-failure", ("exact", "erase"))
        #: func's exceptions on mixed shares not judged yet (bacc.on-error: raise): the
        #: user's error unless func succeeds on a share of real data
        self._unjudged: dict[int, EvalFailure] = {}
        self._mixed_failed: list[int] = []  # mixed shares that raised or gave NaN/inf
        #: coded index -> the shape of its result, for every result a decode has seen: the
        #: shapes are judged over the whole job, not one decode attempt at a time
        self._shapes: dict[int, tuple[int, ...]] = {}
        self.domain_failure = False  # func is not defined on coded blocks (warned)

    def _repr_html_(self) -> str:
        from ..diagnostics.html import report_html

        return report_html(self.report, kind="CodedJob")

    def __repr__(self) -> str:
        status = self.report.status
        return (
            f"<CodedJob {code_label(self.report.code)} {self.report.func} K={self.code.K} "
            f"N={self.code.N} status={status} token={self.token}>"
        )

    # -- submission ---------------------------------------------------------------------
    @property
    def decode_here(self) -> bool:
        """Decode on the client: the output comes here anyway and the k results are small."""
        if not self.blocks.gather_output:
            return False
        from dask.utils import parse_bytes

        limit = parse_bytes(config.get("client-decode-limit"))
        share = int(np.prod(self.blocks.block_shape)) * max(self.blocks.dtype.itemsize, 8)
        return share * self.policy.target(self.code) <= limit

    def _call_arg(self, tasks: list[TaskSpec]) -> CallArg:
        """``(args, kwargs)`` for the eval specs: inline, or (large ones, e.g. model
        weights) one task in the same graph that every eval depends on."""
        from dask.sizeof import sizeof
        from dask.utils import parse_bytes

        call = (self.args, self.kwargs)
        limit = parse_bytes(config.get("args-inline-limit"))
        if (self.args or self.kwargs) and sizeof(call) > limit:
            key = keys.args_key(self.token)
            tasks.append(TaskSpec(key, hold, (call,)))
            return TaskRef(key)
        return call

    def eval_spec(
        self,
        i: int,
        share: Share | Future[Any],
        call: CallArg,
        backup: bool = False,
        round: int = 1,
    ) -> TaskSpec:
        """Coded task ``i``: ``func`` on ``share``, strictly pinned to its worker (NaN or
        inf in its result refused only when the code mixes blocks)."""
        return TaskSpec(
            keys.eval_key(self.token, i, backup, round),
            eval_task,
            (self.token, i, self.seq, self.func, share, call, self.mixes),
            workers=[self.workers[i]],
        )

    def _launch_graph(self, tasks: list[TaskSpec]) -> None:
        """Submit ``tasks`` as one graph and follow its eval tasks."""
        futures = submit_graph(self.client, tasks)
        for key, fut in futures.items():
            parsed = keys.parse(key)
            if parsed is not None and parsed.kind in ("eval", "backup"):
                self._track(int(parsed.index or 0), fut)

    async def _launch(self) -> None:
        tasks: list[TaskSpec] = []
        call = self._call_arg(tasks)
        tasks += await self.launch.initial(self, call)
        self._launch_graph(tasks)

    async def _submit(self) -> None:
        await ensure_worker_plugin(self.client)
        self._monitor = await diagnostics.start_job(self)
        with self._monitor.submitting():  # a distributed.span over all the job's tasks
            await self._launch()
            self._task = asyncio.ensure_future(self._run())
        _running.add(self._task)
        self._task.add_done_callback(_running.discard)

    def _track(self, i: int, fut: Future[Any]) -> None:
        """Follow coded task ``i`` in the loop (used for launches after the start, too)."""
        old = self._evals.get(i)
        if old is not None and old is not fut:
            self._replaced.append(old)
        if self.sent is not None:
            self._read_at[i] = [self.sent.rounds[j] for j in self.launch.reads(self, i)]
        self._evals[i] = fut
        self._index_of[fut.key] = i
        self.decider.launched(i)
        if self._ac is not None:
            self._ac.add(fut)
        self.quality.track(i, fut)  # sketch tasks, only where they cannot be avoided

    # -- the loop ------------------------------------------------------------------------
    def _elapsed(self) -> float:
        return time.perf_counter() - self._start

    async def _finish(self) -> None:
        # the result is handed over before the clean-up round trip: nobody waits on it
        stragglers, cancel = self._release()
        self._finished = True
        self._done_event.set()
        if self._monitor is not None:
            self._monitor.finished()  # progress bar, report to the scheduler plugin
        await self._stop_work(stragglers, cancel)

    def _tick_interval(self, poll: float) -> float:
        interval = self.launch.interval
        return poll if interval is None else min(poll, interval)

    def _sync_report(self) -> None:
        d, rep = self.decider, self.report
        rep.arrival, rep.failed = d.arrival, d.failed
        rep.workers = [self.workers.get(i, "") for i in range(max(self.workers, default=-1) + 1)]
        if d.target_met_at is not None:
            rep.target_met = d.target_met_at

    async def _loop(self) -> Any:
        poll = config.seconds("poll-interval")
        tick = self._tick_interval(poll)
        self._ac = ac = _dist.as_completed(self.client)
        fut: Future[Any] | None
        for fut in self._evals.values():
            ac.add(fut)
        d = self.decider
        self._sync_report()
        idle_since = time.perf_counter()
        while True:
            if self._cancel_requested:
                raise asyncio.CancelledError
            await self.launch.tick(self)
            await self.quality.refresh(d.usable)  # adaptive waiting: re-estimate the error
            action = d.step(self._elapsed(), error_met=self.quality.target_met(d.usable))
            if isinstance(action, GiveUp):
                self._raise_unjudged()
                raise self._insufficient(action)
            if isinstance(action, Decode):
                output = await self._decode(action)
                if output is not _NOTHING:
                    return output
                continue  # results were rejected or lost: decide again
            wait_for = tick
            wake = d.wake_in(self._elapsed())
            if wake is not None:
                wait_for = min(wait_for, wake)
            try:
                fut = await asyncio.wait_for(ac.__anext__(), timeout=wait_for)
            except (asyncio.TimeoutError, StopAsyncIteration):
                fut = None
            if fut is not None:
                idle_since = time.perf_counter()
                # every result already in, at once: one decision for a burst of arrivals
                for f in [fut, *ac.next_batch(block=False)]:
                    await self._arrived(f)
            elif time.perf_counter() - idle_since >= poll and d.pending:
                # nothing for a while: check that the pending tasks' workers are still there
                idle_since = time.perf_counter()
                await self._check_workers()

    async def _arrived(self, fut: Future[Any]) -> None:
        i = self._index_of.get(fut.key)
        if i is None or self._evals.get(i) is not fut:
            return  # not the job's, or launched again since
        d, now = self.decider, self._elapsed()
        if fut.status == "finished" and fut.type in _FAILURE_TYPES:
            # watched and bounded: a failure whose worker leaves before the transfer is
            # recomputed on that worker only, and a plain gather would wait forever
            bound = max(1.0, 4 * config.seconds("poll-interval"))
            got = (await self.watched_gather({i: fut}, timeout=bound)).get(i)
            if not isinstance(got, EvalFailure):
                got = EvalFailure("lost", f"the failure of task {i} could not be fetched")
            if not self._failed(i, now, got):
                return
        elif fut.status == "finished":
            if not d.landed(i, now):
                return
            self._judge()
        elif fut.status == "error":
            exc = await _dist.exception(fut)
            if isinstance(exc, InvalidInput):
                raise ValueError(str(exc)) from exc
            if self._cause is None:
                self._cause = exc
            if not d.erred(i, now, describe(exc)):
                return
        elif await self._relaunch_lost(i):
            return  # an input block it read was lost: sent again, and the task launched
        elif not d.erred(i, now, await self._why_cancelled(i, fut)):
            return
        assert self._monitor is not None  # set in _submit, before any task was launched
        self._monitor.arrived(len(d.usable))

    async def _why_cancelled(self, i: int, fut: Future[Any]) -> str:
        """Why eval ``i`` ended without a result or an exception: its worker left, an input
        chunk it reads went with the workers that held it, else someone else's doing."""
        if self.workers[i] not in await _dist.running_workers(self.client):
            return f"worker {self.workers[i]} left before returning"
        if any(c.status in ("lost", "cancelled") for c in self._chunks):
            return f"task {fut.status}: an input block it reads was lost with worker(s) that left"
        return f"task {fut.status} (by another client, or its input data was lost)"

    def _failed(self, i: int, now: float, failure: EvalFailure) -> bool:
        """Coded task ``i`` returned ``failure``: func raised, or its result is NaN/inf or
        not numeric. f's exception on a block's own data fails the job with it, as in
        plain Dask (``bacc.on-error``); on a mixed share it is an erasure once f is seen
        to work on real data, the user's error otherwise. False if ``i`` was written off."""
        block = self._data_rows.get(i)
        where = f"block {block}'s own data" if block is not None else "a mix of blocks"
        if failure.kind == "unsupported":  # f's output type: the same on every share
            raise TypeError(failure.reason.removeprefix("InvalidResult: "))
        reason = failure.reason
        if failure.kind in ("raised", "domain"):  # f's error, or f's output outside transform=
            if self._cause is None:
                self._cause = failure.exception
            if self._on_error == "raise" and block is not None:
                raise self._user_error(i, failure, where)
        if failure.kind == "raised":
            reason = f"func raised on coded share {i} ({where}): {failure.reason}"
        if not self.decider.erred(i, now, reason):
            return False
        # with bacc.on-error "erase" an exception is a worker's fault, not f's: only
        # NaN/inf or a value outside the transform then tells that f is not defined on
        # coded blocks
        counts = failure.kind in ("nonfinite", "domain") or (
            failure.kind == "raised" and self._on_error == "raise"
        )
        if block is None and counts:
            self._mixed_failed.append(i)
            if self.domain_failure:
                self.report.domain_failure.append(i)
            elif failure.kind == "raised":
                self._unjudged[i] = failure
                # f's error or the mixing's? Only a share of real data can tell: decode
                # from nothing but real data until one has answered (the verdict must not
                # depend on which results came first)
                self.decider.exact_only = True
        self._judge()
        return True

    def _user_error(self, i: int, failure: EvalFailure, where: str) -> BaseException:
        """func's own exception (or a ``RuntimeError`` naming it, when it did not pickle),
        with a note on where it was raised."""
        exc = failure.exception
        if failure.kind == "domain":  # f's result on real data, outside transform=
            exc = ValueError(failure.reason.removeprefix("InvalidResult: "))
        elif exc is None:
            exc = RuntimeError(f"func raised on coded share {i}: {failure.reason}")
        note = (
            f"raised by func on coded share {i} of coded job {self.token} ({where}); "
            "bacc.on-error='erase' treats an exception on a coded share as an erasure"
        )
        add_note = getattr(exc, "add_note", None)  # Python >= 3.11
        if add_note is not None and note not in getattr(exc, "__notes__", ()):
            add_note(note)
        return exc

    def _judge(self) -> None:
        """Once func succeeded on a share of real data, the mixed shares that raised or
        gave NaN/inf show that f is not defined on coded blocks: warn once, erase them,
        and (``bacc.on-domain-failure: exact``) decode only from real data."""
        if not self._mixed_failed or self.domain_failure:
            return
        if not any(i in self._data_rows for i in self.decider.usable):
            return
        self.domain_failure = True
        self._unjudged.clear()  # f works on real data: those were the mixing's doing
        covered = set(self._data_rows.values()) >= set(range(self.code.K))
        exact = self._on_domain == "exact" and covered
        self.decider.exact_only = exact  # (it held the decode while unjudged)
        what = (
            "the job decodes from the shares of real data only (exact), as "
            "bacc.on-domain-failure='exact' asks"
            if exact
            else "their results are erased and the job decodes from the rest"
        )
        self.warn(
            ApproximationWarning(
                f"func failed (raised, returned NaN/inf or a value outside transform=) on "
                f"coded share(s) {sorted(self._mixed_failed)} that mix blocks, while it "
                "succeeded on shares of real data: f is not defined on coded blocks (e.g. "
                f"log, sqrt or a division outside the data's range); {what}. Coded shares protect "
                "this f only through its exact copies: use code='repetition' or "
                "'speculative'."
            )
        )
        self.report.domain_failure = sorted(self._mixed_failed)

    async def _relaunch_lost(self, i: int) -> bool:
        """Coded task ``i`` was cancelled: if an input block sent from here was lost with
        its holder (or was sent again since ``i`` launched), launch ``i`` again."""
        sent = self.sent
        if sent is None:
            return False
        reads = self.launch.reads(self, i)
        lost = set(sent.lost(reads))
        moved = [
            j for j, r in zip(reads, self._read_at.get(i, []), strict=False) if sent.rounds[j] > r
        ]
        if not lost and not moved:
            return False
        return bool(await self._relaunch([i], lost))

    async def _relaunch_waiting_on_silent(self) -> None:
        """Launch again the pending tasks that wait for an input block only a silent
        (frozen) worker holds, once that block is sent again: a transfer from a frozen
        worker lasts until ``worker-ttl`` removes it. At most once a second."""
        if self.sent is None or time.perf_counter() - self._silence_checked < 1.0:
            return
        self._silence_checked = time.perf_counter()
        pending = {self._evals[i].key: i for i in self.decider.pending if i in self._evals}
        stuck = await _dist.run_on_scheduler(self.client, waiting_on_silent, list(pending))
        blocks: set[int] = set()
        for inputs in stuck.values():
            for key in inputs:
                parsed = keys.parse(key)
                if parsed is not None and parsed.kind == "chunk" and parsed.index is not None:
                    blocks.add(parsed.index)
        if blocks:
            await self._relaunch([pending[k] for k in stuck], blocks)

    async def _relaunch(self, indices: list[int], resend: set[int]) -> list[int]:
        """Send blocks ``resend`` again (each to a worker of a task that reads it) and
        launch coded tasks ``indices`` again, those whose worker is still there; a block
        is sent at most ``ClientBlocks.MAX_SENDS`` times. Returns the tasks launched."""
        sent = self.sent
        if sent is None or not sent.can_resend(resend):
            return []
        live = set(await _dist.running_workers(self.client))
        again = [i for i in indices if self.workers[i] in live]
        if not again:
            return []
        homes: dict[int, str] = {}
        for i in again:
            for j in self.launch.reads(self, i):
                if j in resend:
                    homes.setdefault(j, self.workers[i])
        for j in sorted(resend - set(homes)):
            homes[j] = self.workers[again[0]]
        try:
            await sent.send(list(homes), list(homes.values()))
        except Exception as exc:  # nowhere to send it: the tasks are lost, as before
            logger.debug("coded job %s: could not send blocks again: %s", self.token, exc)
            return []
        specs = []
        for i in again:
            self._launches[i] = self._launches.get(i, 1) + 1
            specs.append(self.launch.respec(self, i, self._launches[i]))
        self._launch_graph(specs)
        self.report.resent += len(homes)
        return again

    async def _check_workers(self) -> None:
        """Write off coded tasks whose worker left: a strictly pinned task would wait forever."""
        await self._relaunch_waiting_on_silent()
        live = set(await _dist.running_workers(self.client))
        d, workers = self.decider, self.workers
        for i in [i for i in d.pending if workers[i] not in live]:
            d.lost(i, f"worker {workers[i]} left before returning")
        for i in [i for i in d.usable if workers[i] not in live and i not in self._values]:
            if d.lost(i, f"worker {workers[i]} left holding the result"):
                await self._drop_stage()

    # -- decoding ------------------------------------------------------------------------
    def _raise_unjudged(self) -> None:
        """``bacc.on-error: raise``: func raised on a mixed share and no share of real data
        has shown that it works on the data: that exception is the user's."""
        if self._unjudged and not self.domain_failure:
            i, failure = next(iter(self._unjudged.items()))
            raise self._user_error(
                i, failure, "a mix of blocks, and func succeeded on no share of real data"
            )

    def _note_stragglers(self) -> None:
        """The tasks still out now, as stragglers and redundancy not needed."""
        rep = self.report
        rep.straggled, rep.not_needed = split_redundant(
            self.decider.straggled(),
            list(self.decider.usable),
            set(rep.plain_shares),
            self._data_rows,
            self.code.K,
        )

    async def _decode(self, action: Decode) -> Any:
        self._raise_unjudged()
        self.report.trigger = action.trigger
        self._sync_report()
        self._note_stragglers()
        self._fetch_quantiles()
        # adversaries=: leave out the results located as corrupted
        used = await self.quality.screen(action.used)
        if self.decode_here:
            output = await self._decode_here(used)
        else:
            output = await self._decode_on_cluster(used)
        if output is _NOTHING:
            self.decider.decode_abandoned()
            return _NOTHING
        rep = self.report
        rep.returned = list(used)
        rep.late = [i for i in self.decider.usable if i not in set(used)]
        rep.slowest_used = max(rep.arrival[i] for i in used)
        self._note_stragglers()
        await self.quality.finalize(used)  # error estimate into the report
        rep.time_to_decode = self._elapsed()
        if self._mixed_failed and not self.domain_failure:
            # no share of real data to compare with (Berrut, Lagrange): the protection
            # those shares gave is lost, and the user should know why
            self.warn(
                ApproximationWarning(
                    "func raised, returned NaN/inf or a value outside transform= on coded "
                    f"share(s) {sorted(self._mixed_failed)}, which mix blocks: they were written "
                    f"off, so the job had {len(self._mixed_failed)} fewer result(s) to "
                    "decode from. If f is not defined on mixtures of blocks (log, sqrt, a "
                    "division), use an exact code: code='repetition' or 'speculative'."
                )
            )
        return output

    def _fetch_quantiles(self) -> None:
        """Ask the scheduler's straggler model about the workers of the plain shares still
        out, in the background while the decode runs (never waited for: a reply that has
        not come by the end leaves a lower bound). Only when there are such shares and the
        diagnostics plugin is on."""
        monitor = self._monitor
        if self._quantiles is not None or self._plain is None or not monitor or not monitor.send:
            return
        arrived = self.decider.arrival
        out = sorted({self.workers[i] for i in self._plain if i not in arrived})
        if out:
            self._quantiles = asyncio.ensure_future(
                _dist.run_on_scheduler(self.client, _model_quantiles, out)
            )
            self._quantiles.add_done_callback(_quiet)

    def _fill_savings(self) -> None:
        """The uncoded counterfactual into the report (``docs/diagnostics.md``, "What a job
        saved"), from the arrivals and, if it answered already, the straggler model."""
        rep = self.report
        if rep.status != "finished" or rep.time_to_decode is None:
            return
        predictions = None
        q = self._quantiles
        if q is not None and q.done() and not q.cancelled() and q.exception() is None:
            predictions = q.result()
        # a plain share still out had not finished by the decode; one still pending now,
        # not by now (the result is being handed over)
        now = self._elapsed()
        since = {
            i: now
            if getattr(self._evals.get(i), "status", None) == "pending"
            else rep.time_to_decode
            for i in self._plain or ()
        }
        cf = plain_ready(self._plain, rep.arrival, rep.failed, since, rep.workers, predictions)
        rep.plain_ready, rep.plain_ready_source = cf.plain_ready, cf.source
        rep.plain_estimated = cf.estimated
        rep.plain_ready_estimated = bool(cf.estimated)
        if cf.plain_ready is not None:
            rep.time_saved = cf.plain_ready - rep.time_to_decode
        rep.uncoded_tasks = uncoded_tasks(self._data_rows, self._plain, rep.returned) or []

    def _fill_cpu(self, cpu: dict[Any, float] | None) -> None:
        """Thread-seconds of the coded tasks (the scheduler plugin's measure) into the
        report: in total, and beyond what an uncoded run would have spent."""
        if cpu is None:
            return
        rep = self.report
        per_task = {int(i): float(v) for i, v in cpu.items()}
        self.task_seconds = per_task
        uncoded = rep.uncoded_tasks if self._plain is not None and rep.uncoded_tasks else None
        rep.total_cpu, rep.redundant_cpu = cpu_split(per_task, self.code.K, rep.N, uncoded)

    def _out_dtype(self, dtype: str, selects: bool) -> np.dtype[Any]:
        """The output's dtype: the results' own where the decode ``selects`` them
        (:func:`.worker.picks`), float64 where it mixes integer results."""
        out = np.dtype(dtype)
        if self.transform is not None:  # what the inverse map gives, in float
            return out if out.kind == "f" else np.dtype(np.float64)
        if not selects and out.kind != "f":
            out = np.dtype(np.float64)
        return out

    def transfer_bound(self) -> float | None:
        """Seconds a transfer from the workers may still take: up to the job's timeout
        plus ``TRANSFER_GRACE`` (the results a timeout decodes from are fetched after
        it); None without a timeout.

        A frozen worker (SIGSTOP, a long pause) still counts as running on the scheduler
        until ``worker-ttl`` removes it, and a transfer from it never ends: a decode
        waiting on one would hold the job past its timeout for as long as the worker is
        frozen.
        """
        if self.timeout is None:
            return None
        return max(self.timeout - self._elapsed(), 0.0) + TRANSFER_GRACE

    async def gather_values(self, indices: list[int]) -> None:
        """Bring the results of ``indices`` to the client (those not here yet); a result
        whose worker left, or (with a timeout) did not send it in time, is written off."""
        want = {i: self._evals[i] for i in indices if i not in self._values and i in self._evals}
        if not want:
            return
        bound = self.transfer_bound()
        got = await self.watched_gather(want, timeout=bound)
        for i in want:
            if isinstance(got.get(i), EvalFailure):  # its type did not reach the client
                self.decider.rejected(i, got[i].reason)
            elif i in got and got[i] is not None:
                self._values[i] = np.asarray(got[i])
            elif self.timeout is not None and self._elapsed() >= self.timeout:
                self.decider.lost(
                    i,
                    f"result not sent by worker {self.workers[i]} within the timeout of "
                    f"{self.timeout}s (the worker does not answer: frozen?)",
                )
            else:
                self.decider.lost(i, f"result lost with worker {self.workers[i]}")

    async def watched_gather(
        self, want: dict[int, Future[Any]], timeout: float | None = None
    ) -> dict[int, Any]:
        """Gather ``want`` (coded index -> a future on that result's worker: the result or
        its sketch), skipping errors; returns what arrived.

        A result whose worker left before the transfer is recomputed by the scheduler on
        that (departed) worker only, so a plain gather would wait forever: the workers are
        watched, and once one of them is gone (or ``timeout`` seconds passed) only what is
        finished on a live worker is taken.
        """
        poll = min(config.seconds("poll-interval"), 0.25)
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        gather = asyncio.ensure_future(_dist.gather(self.client, want, errors="skip"))
        while True:
            wait = poll if end is None else max(min(poll, end - loop.time()), 0)
            done, _ = await asyncio.wait({gather}, timeout=wait)
            if done:
                # lost mid-transfer, or cancelled by the scheduler: written off
                with contextlib.suppress(Exception, FutureCancelledError):
                    return dict(gather.result())
                return {}
            live = set(await _dist.running_workers(self.client))
            lost = any(
                self.workers[i] not in live
                or "lost" in (f.status, getattr(self._evals.get(i), "status", None))
                for i, f in want.items()
            )
            if lost or (end is not None and loop.time() >= end):
                gather.cancel()
                with contextlib.suppress(BaseException):
                    await gather
                here = {
                    i: f
                    for i, f in want.items()
                    if f.status == "finished" and self.workers[i] in live
                }
                if end is not None:
                    # past the bound: leave out the results of workers that do not answer
                    # (frozen: no heartbeat), whose transfer would hold back the others'
                    # (the client batches concurrent gathers into one request)
                    silent = set(
                        await _dist.run_on_scheduler(self.client, silent_workers, sorted(live))
                    )
                    here = {i: f for i, f in here.items() if self.workers[i] not in silent}
                    with contextlib.suppress(Exception, FutureCancelledError):
                        return dict(
                            await asyncio.wait_for(
                                _dist.gather(self.client, here, errors="skip"), TRANSFER_GRACE
                            )
                        )
                    return {}
                with contextlib.suppress(Exception, FutureCancelledError):
                    return dict(await _dist.gather(self.client, here, errors="skip"))
                return {}

    def _reject(self, used: list[int], specs: list[ResultSpec]) -> bool:
        """Write off the results whose shape differs from the majority; True if any.

        The shapes are counted over every result this job's decodes have seen, whatever
        their arrival order. One odd result is an erasure (a faulty worker). Two or more
        results whose shapes differ from the majority mean f's output shape depends on
        the values in its block (a boolean mask, a groupby of mixed values): no decode can
        rebuild that, so the job fails with a ``ValueError``. Judged one decode at a time,
        each odd result arriving alone was written off as a faulty worker's, and the job
        decoded from the few that happened to agree.
        """
        self._shapes.update((i, spec[0]) for i, spec in zip(used, specs, strict=True))
        seen = sorted(self._shapes)
        expected, bad = majority([self._shapes[i] for i in seen])
        if len(bad) >= 2:
            shapes = sorted({self._shapes[seen[p]] for p in bad})
            raise ValueError(
                f"func's output shape depends on the values in its block: the coded results "
                f"have shapes {[expected, *shapes][:6]} (and {len(bad)} of {len(seen)} "
                "differ from the most common one). Coded computing decodes f's outputs "
                "from combinations of blocks, so the shape of f(block) must depend only on "
                "the block's shape (no boolean masks or value-dependent groupbys); run this "
                "f with plain Dask (e.g. map_blocks / map_partitions)."
            )
        odd = [i for i, spec in zip(used, specs, strict=True) if spec[0] != expected]
        for i in odd:
            self.decider.rejected(
                i,
                f"InvalidResult: result shape {self._shapes[i]} differs from the shape "
                f"{expected} of the other results",
            )
        return bool(odd)

    def _refuse_rounding(self, top: int | None) -> None:
        """An exact code's decode mixed f's integer results beyond 2**53 (up to ``top``)
        in float64: the answer would be rounded under an exact label (Lagrange). Refused
        with a ``ValueError``; an approximate code's answer is approximate anyway, and a
        transform's is float, exact up to rounding as documented."""
        if top is None or not self.code.exact or self.transform is not None:
            return
        raise ValueError(
            f"func returned integers beyond 2**53 (up to {top}) and {self.code!r} decodes "
            "them by float64 arithmetic, which rounds them, while its answer is labelled "
            "exact. Return floats if float64 precision is enough, or use code='repetition' "
            "(its decode selects results, keeping every digit)."
        )

    async def _decode_here(self, used: list[int]) -> Any:
        """One gather of the used results and one matrix product on the client."""
        await self.gather_values(used)
        if any(i not in self._values for i in used):
            return _NOTHING
        specs = [spec_of(self._values[i]) for i in used]
        if self._reject(used, specs):
            return _NOTHING
        (shape, _), _ = consistent(specs)
        D = self.code.decoding_matrix(used)
        cols = picks(D)
        dtype = picked_dtype(cols, [spec[1] for spec in specs]).str
        stacked = np.stack([self._values[i] for i in used])
        if self.transform is not None:
            cols = None  # the inverse map needs the decode in float
        if cols is not None:  # exact copies: selected, their dtype and digits kept
            decoded = np.stack([self._values[used[c]] for c in cols])
        else:
            self._refuse_rounding(mixed_beyond_float64([self._values[i] for i in used]))
            decoded = contract(D, stacked)  # code.decode, with the matrix already built
        self.quality.residual = decode_residual(self.code, stacked, used)
        if self.transform is not None:
            decoded = self.transform.inverse(decoded)
        out_dtype = self._out_dtype(dtype, cols is not None)
        values = list(decoded.astype(out_dtype, copy=False))
        return self.blocks.assemble(values, shape, out_dtype, self.combine)

    async def _decode_on_cluster(self, used: list[int]) -> Any:
        """One graph: a decode task next to the first used result (a tiled matrix product
        over the used results, which also sketches them), one task per output block and a
        small summary the client gathers for the shapes and the error estimate."""
        self._round += 1
        tok, r = self.token, self._round
        near = [self.workers[used[0]]]
        stack_key = keys.stack_key(tok, r)
        sketch = self.quality.decode_sketch()
        D = self.code.decoding_matrix(used)
        tasks = [
            TaskSpec(
                stack_key,
                stack_decode_task,
                (
                    D,
                    sketch,
                    self.transform,
                    self.code.check_matrix(used),
                    *[self._evals[i] for i in used],
                ),
                workers=near,
                loose=True,
                keep=False,
            ),
            TaskSpec(keys.info_key(tok, r), decoded_info, (TaskRef(stack_key),), near, True),
        ]
        tasks += [
            TaskSpec(keys.decode_key(tok, j, r), decoded_block, (TaskRef(stack_key), j), near, True)
            for j in range(self.code.K)
        ]
        futures = submit_graph(self.client, tasks)
        info_fut = futures.pop(keys.info_key(tok, r))
        blocks = list(futures.values())
        self._stage = [info_fut, *blocks]
        ac = self._ac
        assert ac is not None  # the loop that runs this decode made it
        ac.add(info_fut)
        info = await self._await_stage(info_fut, used)
        if info is _NOTHING:
            await self._drop_stage()
            return _NOTHING
        self._refuse_rounding(info.get("rounded"))
        self.quality.add_sketches(used, info.get("sketches"))
        self.quality.residual = info.get("residual")
        shape, dtype = tuple(info["shape"]), info["dtype"]
        out_dtype = self._out_dtype(dtype, picks(D) is not None and self.transform is None)
        if self.blocks.gather_output:
            values = await self._gather_from(blocks, near[0])
            if values is None:  # the decode's worker left with the blocks: decode again
                await self._check_workers()
                await self._drop_stage()
                return _NOTHING
            self._stage = []
            return self.blocks.assemble(
                [np.asarray(v).astype(out_dtype, copy=False) for v in values],
                shape,
                out_dtype,
                self.combine,
            )
        self._stage = []
        return self.blocks.assemble(blocks, shape, out_dtype, self.combine)

    async def _gather_from(self, futures: list[Future[Any]], where: str) -> list[Any] | None:
        """Gather ``futures``, computed on worker ``where``; None once that worker left.

        Bounded: were the worker to leave, the scheduler would recompute the decode from
        coded results pinned strictly to their workers, one of them the departed worker
        (the decode runs next to its first result), and a plain gather would wait for
        ever.
        """
        poll = min(config.seconds("poll-interval"), 0.25)
        gather = asyncio.ensure_future(_dist.gather(self.client, futures))
        while True:
            done, _ = await asyncio.wait({gather}, timeout=poll)
            if done:
                try:
                    return list(gather.result())
                except (Exception, FutureCancelledError):
                    if where not in set(await _dist.running_workers(self.client)):
                        return None  # lost with the worker, mid-transfer: decode again
                    raise  # any other failure ends the job (a redo would meet it again)
            if where not in set(await _dist.running_workers(self.client)):
                gather.cancel()
                with contextlib.suppress(BaseException):
                    await gather
                return None
            try:
                self._check_overdue("the transfer of the decoded blocks")
            except InsufficientResults:
                gather.cancel()
                with contextlib.suppress(BaseException):
                    await gather
                raise

    async def _await_stage(
        self, info_fut: Future[Any], used: list[int]
    ) -> DecodedInfo | Literal[_Nothing.NOTHING]:
        """Wait for the decode's summary while following the coded tasks (late results
        land, workers leave); ``_NOTHING`` when the decode must be redone."""
        poll = config.seconds("poll-interval")
        ac = self._ac
        assert ac is not None
        while True:
            if self._cancel_requested:
                raise asyncio.CancelledError
            fut: Future[Any] | None
            try:
                fut = await asyncio.wait_for(ac.__anext__(), timeout=poll)
            except (asyncio.TimeoutError, StopAsyncIteration):
                fut = None
            if fut is None:
                await self._check_workers()
                if self.decider.decoding is None:
                    return _NOTHING  # a used result was lost with its worker
                self._check_overdue("the decode on the cluster")
                continue
            if fut.key != info_fut.key:
                await self._arrived(fut)
                continue
            if fut.status == "finished":
                try:  # bounded by the timeout: the decode's worker may not answer
                    info: DecodedInfo = await asyncio.wait_for(
                        _dist.gather(self.client, fut), self.transfer_bound()
                    )
                except asyncio.TimeoutError:
                    self._check_overdue("the decode on the cluster", now=True)
                    raise
                return info
            exc = await _dist.exception(fut) if fut.status == "error" else None
            if isinstance(exc, InconsistentResults):
                failures = [p for p, spec in enumerate(exc.specs) if spec[1] == "failure"]
                for p in failures:  # evals that failed, their type unknown here
                    self.decider.rejected(used[p], "the eval failed (seen by the decode)")
                if not failures:
                    self._reject(used, exc.specs)
                return _NOTHING
            await self._check_workers()
            if self.decider.decoding is None:
                return _NOTHING
            error = RuntimeError(
                f"coded job {self.token}: decode task failed: "
                f"{describe(exc) if exc else fut.status}"
            )
            raise error from exc

    def _check_overdue(self, what: str, now: bool = False) -> None:
        """Past the timeout (and ``TRANSFER_GRACE``), a decode on the cluster still
        running ends the job: a worker it needs does not answer (frozen: the scheduler
        still counts it as running), and waiting for it would hold the job past its
        timeout for as long as that lasts. ``now``: the bound ran out already (a wait
        bounded by :meth:`transfer_bound`)."""
        if self.timeout is None:
            return
        if not now and self._elapsed() < self.timeout + TRANSFER_GRACE:
            return
        exc = InsufficientResults(
            f"coded job {self.token}: {what} did not finish within the timeout of "
            f"{self.timeout}s: a worker holding a result it decodes from, or running it, "
            f"does not answer (frozen?); results used: {self.decider.decoding}"
        )
        self._sync_report()
        exc.report = self.report
        raise exc

    async def _drop_stage(self) -> None:
        stage, self._stage = self._stage, []
        if stage:
            with contextlib.suppress(Exception):
                await _dist.cancel(self.client, stage)

    def _insufficient(self, action: GiveUp) -> Exception:
        rep, need = self.report, self.policy.target(self.code)
        self._sync_report()
        why = []
        if self.code.exact or self.decider.exact_only:
            # an exact decode needs each block's own data: say which blocks lack it
            # (repetition: "5 of 6 arrived, needs 4" reads as if enough did)
            rows = self.code.data_rows()
            if len(rows) == self.code.N or self.decider.exact_only:
                have = {rows[i] for i in action.usable if i in rows}
                if lacking := [b for b in range(self.code.K) if b not in have]:
                    blocks = ", ".join(map(str, lacking[:8])) + (
                        ", ..." if len(lacking) > 8 else ""
                    )
                    why.append(f"no usable copy of block{'s' * (len(lacking) > 1)} {blocks}")
        # one line per kind of failure ("worker <addr> left", "func raised on coded share 3
        # ...: ValueError: ..."): reasons that differ only in their numbers and addresses
        # are one kind, shown by its first reason as it was (the user's message intact)
        kinds: dict[str, list[str]] = {}
        for r in rep.failed.values():
            kind = re.sub(r"\d+", "#", re.sub(r"[a-z]+://\S+", "<addr>", r))
            kinds.setdefault(kind, []).append(r)
        for same in sorted(kinds.values(), key=len, reverse=True):
            like = "" if len(set(same)) == 1 else ", for example"
            why.append(f"{len(same)} x{like} {same[0][:300]}")
        if action.pending and self.timeout is not None:
            why.append(f"{len(action.pending)} still running at the timeout of {self.timeout}s")
        elif action.pending:
            why.append(f"{len(action.pending)} still running")
        if self.decider.exact_only:
            why.append(
                "only an exact decode would do (func failed on coded shares that mix "
                "blocks) and the shares of some block's own data are all gone"
            )
        exc = InsufficientResults(
            f"coded job {self.token}: {len(action.usable)} usable result(s) of N={self.code.N} "
            f"arrived and {type(self.code).__name__} cannot decode from them (it waits for "
            f"{need}, at least {self.code.min_results} that make a decodable set); missing: "
            + ("; ".join(why) or "none")
            + f" [{action.trigger}]"
        )
        exc.report = rep
        exc.__cause__ = self._cause
        return exc

    # -- the end ---------------------------------------------------------------------------
    def _release(self) -> tuple[dict[int, Future[Any]], list[Future[Any]]]:
        """Count the stragglers, drop every reference; return the futures left to stop:
        the straggling evals by index, and the job's other unfinished tasks."""
        self._sync_report()
        self._fill_savings()
        self.launch.finished(self)
        stragglers = {i: f for i, f in self._evals.items() if f.status == "pending"}
        self.report.cancelled += len(stragglers)
        cancel = [f for f in self._stage if f.status == "pending"]
        cancel += [f for f in self._replaced if f.status == "pending"]
        cancel += self.quality.release()
        # drop every reference, the as_completed queue included (it may hold finished
        # futures the loop never took out), so the scheduler can forget the job's tasks
        self._ac = None
        self._evals.clear()
        self._index_of.clear()
        self._chunks.clear()  # (the futures of ``sent``, too: the same list)
        self._replaced = []
        self._values.clear()
        self._stage = []
        if self.report.status != "finished":  # no output will need the resolved labels
            self.blocks.forget()
        return stragglers, cancel

    async def _stop_work(
        self, stragglers: dict[int, Future[Any]], cancel: list[Future[Any]]
    ) -> None:
        """Tell the job's workers it is over and stop the straggling tasks, in one
        scheduler round trip. Best effort: errors are ignored.

        Stragglers already running ``func`` are not cancelled but held until they end,
        their results dropped: Python cannot stop their threads, and a cancelled task no
        longer counts on the scheduler, which would then send new work to a worker whose
        only thread is still busy (where it would queue behind the straggler).
        """
        client = self.client
        running: set[Key] = set()
        try:
            workers = sorted(set(self.workers.values()))
            keys_ = [f.key for f in stragglers.values()]
            wanted = auto_cache.views.wanted(client)  # the view auto mode plans from
            view = want = None
            if wanted is not None:
                want, version = wanted
                seed = int(np.random.default_rng().integers(2**31))
                view = (want, int(config.get("auto.draws")), seed, version)
            in_specs = sum(self.launch.spec_bytes(self, i) for i in self._evals)
            used = (list(self.report.returned), in_specs)
            answer = await asyncio.wait_for(
                _dist.run_on_scheduler(
                    client,
                    _job_done,
                    self.token,
                    workers,
                    keys_,
                    plugin_everywhere(client),
                    view,
                    used,
                ),
                timeout=5,
            )
            running = set(answer["running"])
            self._fill_cpu(answer.get("cpu"))
            self.report.bytes_moved = answer.get("bytes")
            if want is not None and "view" in answer:
                auto_cache.views.put(client, want, answer["view"])
        except Exception:  # best effort: without the answer every straggler is cancelled
            pass
        cancel = cancel + [f for f in stragglers.values() if f.key not in running]
        if cancel:
            with contextlib.suppress(Exception):
                await _dist.cancel(client, cancel, reason="bacc: not needed")
        held = [(f, self.workers[i]) for i, f in stragglers.items() if f.key in running]
        self.launch.holding(self, {i: f for i, f in stragglers.items() if f.key in running})
        if held:
            task = asyncio.ensure_future(_drop_when_done(held, client))
            _running.add(task)
            task.add_done_callback(_running.discard)


async def _drop_when_done(held: list[tuple[Future[Any], str]], client: Client) -> None:
    """Hold running stragglers until they finish (so the scheduler still sees their worker
    busy), then drop their results. One whose worker left is cancelled at once: strictly
    pinned, it would wait in ``no-worker`` forever, and so would this hold."""
    poll = max(config.seconds("poll-interval"), 0.05)
    with contextlib.suppress(Exception):
        while held:
            await asyncio.sleep(poll)
            held[:] = [(f, w) for f, w in held if f.status == "pending"]
            if not held:
                break
            live = set(await _dist.running_workers(client))
            gone = [f for f, w in held if w not in live]
            if gone:
                held[:] = [(f, w) for f, w in held if w in live]
                await _dist.cancel(client, gone, reason="bacc: worker left")
    held.clear()


def _quiet(task: asyncio.Future[Any]) -> None:
    """Retrieve a background request's exception (best effort: nothing depends on it)."""
    if not task.cancelled():
        task.exception()


class _Nothing(enum.Enum):
    """No output this time: a decode's inputs were rejected or lost (decide again)."""

    NOTHING = enum.auto()


_NOTHING: Literal[_Nothing.NOTHING] = _Nothing.NOTHING
