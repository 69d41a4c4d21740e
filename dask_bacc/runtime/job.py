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
import logging
import time
import uuid
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from dask._task_spec import TaskRef
from numpy.typing import NDArray

from .. import config, diagnostics
from ..codes import Code
from ..codes.registry import code_label
from ..codes.transform import Transform
from ..collections import Blocks
from ..diagnostics.monitor import prune_finished_spans
from ..exceptions import InvalidInput
from . import _dist, auto_cache, keys
from .decide import Decider, Decode, GiveUp
from .decoding import _NOTHING, DecodingJob
from .graph import TaskSpec, held_apart, submit_graph
from .handle import describe
from .jobview import CallArg
from .launch import CodedLaunch, Launch
from .placement import waiting_on_silent
from .quality import JobQuality
from .report import JobReport
from .savings import plain_shares
from .sending import ClientBlocks
from .wait import WaitPolicy
from .worker import (
    DONE_OP,
    PLUGIN_NAME,
    BaccWorker,
    EvalFailure,
    Share,
    eval_task,
    hold,
)

if TYPE_CHECKING:
    from dask.typing import Key
    from distributed import Client, Future
    from distributed.scheduler import Scheduler

__all__ = ["CodedJob", "ensure_worker_plugin"]

logger = logging.getLogger(__name__)

_running: set[asyncio.Task[None]] = set()  # strong references to the job loops and clean-ups
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
    prune_finished_spans(dask_scheduler)
    from distributed.metrics import time as now

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


def _dashboard_link(client: Client, token: str) -> str | None:
    """The job's row on the ``/bacc`` page, if the scheduler serves a dashboard."""
    from ..diagnostics.html import dashboard_job_link

    try:
        if "dashboard" not in client.scheduler_info().get("services", {}):
            return None
        return dashboard_job_link(client.dashboard_link, token)
    except Exception:  # no scheduler info yet, or a client without one
        return None


class CodedJob(DecodingJob):
    """A coded map over K blocks running on the cluster (returned by ``submit_coded``).

    Use :meth:`result` to wait for the decoded output, ``job.report`` (a
    :class:`JobReport`) for what happened, :meth:`cancel` to stop it and :meth:`done` to
    poll. With an asynchronous client, ``await job`` (or ``await job.result()``) instead.
    """

    #: show a progress bar (None: ``bacc.progress``); ``submit_coded(progress=)`` sets it
    progress: bool | None = None
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
        #: f on block 0, when the job needs its output length on real data
        #: (``DecodingJob._probe_block``)
        self._probe: Future[Any] | None = None
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
        call = (self.args, self.kwargs)
        if held_apart(self.args, self.kwargs):
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
        if self.mixes and self.blocks.length_varies and not self._data_rows:
            # no share of real data will tell f's output length there: f on block 0,
            # beside the coded tasks, so that the decode need not wait for it
            self._probe_block()

    async def _submit(self) -> None:
        await ensure_worker_plugin(self.client)
        await super()._submit()

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
            arrivals = await self._next_arrivals(ac, wait_for)
            if arrivals:
                idle_since = time.perf_counter()
                for f in arrivals:
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

    # -- the end ---------------------------------------------------------------------------
    def _let_go(self) -> tuple[dict[int, Future[Any]], list[Future[Any]]]:
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
        self._probe = None
        self._replaced = []
        self._values.clear()
        self._stage = []
        if self.report.status != "finished":  # no output will need the resolved labels
            self.blocks.forget()
        return stragglers, cancel

    async def _clean_up(self, leftover: tuple[dict[int, Future[Any]], list[Future[Any]]]) -> None:
        """Tell the job's workers it is over and stop the straggling tasks, in one
        scheduler round trip. Best effort: errors are ignored.

        Stragglers already running ``func`` are not cancelled but held until they end,
        their results dropped: Python cannot stop their threads, and a cancelled task no
        longer counts on the scheduler, which would then send new work to a worker whose
        only thread is still busy (where it would queue behind the straggler).
        """
        stragglers, cancel = leftover
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
