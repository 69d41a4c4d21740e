"""Exact redundancy for any map layer: each task gets a backup copy; the first copy wins.

The exact rungs of the redundancy ladder (``code="repetition"``, ``code="speculative"``)
on a dask collection. Each task of the collection's final layer
(:func:`~dask_bacc.collections.layer.final_layer`) keeps its own inputs and runs as the
*primary* (``("bacc-primary-<token>", i)``, placed by Dask: next to its data, work stealing
intact) and a backup under ``("bacc-copy-<token>", i)`` on another worker
(:func:`~.placement.place_copies`):

* :class:`Repetition` launches every backup at once, at a lower priority than the
  primaries, so a worker runs its own primaries first and a backup whose primary won
  meanwhile is cancelled before it starts (with many blocks per worker the backups wait
  in the queues: the work is at most doubled, and mostly not);
* :class:`~.rules.Speculation` launches a backup once a primary has run longer than
  its rule's threshold (every copy reports when it starts: :func:`~.worker.run_started`).

Under both, a block whose copies all run late by the rule gets one more copy, on a worker
holding none of its copies (repetition "plus a re-run of a late copy"; a copy stuck on a
frozen worker never holds the job), and in the tail (no more blocks than workers left) a
primary that has not started a threshold later counts as late: it waits behind a late task
on its worker.

The first copy of a block to finish gives it, the other is cancelled. No decode, no
conversion: the output is the blocks that came back, each the object ``f`` returned
(pandas stays pandas), under the collection's keys renamed (:meth:`~.Layer.rebuild`). f's
exception is raised as plain Dask would raise it.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from distributed.client import FutureCancelledError

from .. import config
from ..collections.layer import Layer
from ..diagnostics.monitor import prune_finished_spans
from ..exceptions import InsufficientResults
from . import _dist, keys
from .handle import JobHandle, describe
from .hedge import Prior, close_backups, new_record
from .placement import choose_workers, place_copies, release_restrictions
from .report import JobReport
from .rules import Speculation, late_blocks, share_backups
from .savings import copy_savings
from .sending import detach
from .worker import run_started

if TYPE_CHECKING:
    from dask._task_spec import GraphNode, Task
    from dask.typing import Key
    from distributed import Client, Future

__all__ = ["EXACT_LAYER_CODES", "RedundantJob", "Repetition", "policy_for"]

#: the codes that run as copies of the layer's own tasks
EXACT_LAYER_CODES = ("hedged", "repetition", "speculative")


@dataclass(frozen=True)
class Repetition:
    """Two copies of every task at once (the backups at a lower priority), and a further
    copy of a task whose copies all run late by ``rule``."""

    rule: Speculation = field(default_factory=lambda: Speculation.spark(copies=3))
    #: Dask priority of the backups (the primaries have 0: a worker runs those first)
    priority: int = -1

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Repetition:
        """The re-run rule from ``code_options`` over ``bacc.speculative``."""
        return cls(rule=Speculation.from_options({"copies": 3, **options}))


Policy = Repetition | Speculation


def policy_for(code: str, options: Mapping[str, Any] | None = None) -> Policy:
    """The policy of an exact layer code (``"hedged"``, ``"repetition"`` or
    ``"speculative"``); ``options``: the rule for late copies (``rule``, ``multiplier``,
    ``quantile`` ...)."""
    options = dict(options or {})
    if code in ("hedged", "speculative"):
        return Speculation.from_options(options, code)
    if code == "repetition":
        return Repetition.from_options(options)
    raise ValueError(f"not an exact layer code: {code!r}; use one of {EXACT_LAYER_CODES}")


class RedundantJob(JobHandle):
    """Every task of a collection's final layer with a backup copy; first copy wins.

    Returned by :func:`~dask_bacc.submit_coded` for ``code="repetition"``, ``"hedged"``
    or ``"speculative"`` on a dask DataFrame/Series, and (a ``BlocksJob``, in waves) for
    K blocks of any input more than the workers a coded job would need (the driver task
    of :func:`~dask_bacc.coded` runs one for any collection). :meth:`result` gives the
    collection, of the same type, backed by the winning copies; ``job.report`` says what
    ran (:class:`~dask_bacc.JobReport`).

    Copy ``c`` of block ``b`` is ``b + c * K`` in the report: ``b`` its primary, ``K + b``
    its first backup, ``2K + b`` a further copy launched when both ran late.
    """

    def __init__(
        self,
        client: Client,
        layer: Layer,
        policy: Policy,
        timeout: float | None,
        workers: Mapping[str, Mapping[str, Any]],
        avoid: tuple[str, ...] = (),
        gather: bool = False,
    ):
        super().__init__()
        self.client = client
        self.layer = layer
        self.policy = policy
        self.rule = policy.rule if isinstance(policy, Repetition) else policy
        self.timeout = timeout
        self.gather = gather
        self.token = uuid.uuid4().hex
        self.K = K = len(layer.blocks)
        # off the avoided workers (a driver task's: its output chunks read the blocks
        # there, and must not queue behind a late copy) unless that leaves fewer than two
        others = {a: w for a, w in workers.items() if a not in avoid}
        pool = others if len(others) >= 2 else dict(workers)
        #: every copy waits for its planned worker, strictly (else the primaries go where
        #: Dask puts them, and a copy is loose): a loose copy may be stolen onto the avoided
        #: worker, whose seceded driver leaves it idle to the scheduler, and a straggling
        #: copy there holds the output chunks. Once a copy held to one worker starts, its
        #: restriction is lifted (:meth:`_unpin_started`: no longer stealable; its result
        #: recomputable anywhere); a primary held to the pool keeps it until the job ends
        #: (:meth:`_clean_up`); a copy queued on a worker that left is re-run elsewhere
        #: (:func:`_stranded`)
        self._fenced = len(pool) < len(workers)
        self._unpin: list[Key] = []  # started copies whose restriction is still to lift
        self._pooled: list[Key] = []  # winners held to the pool (lifted at the end)
        self._unpinning: asyncio.Task[None] | None = None
        self._live_at: tuple[float, set[str]] | None = None  # when asked, the workers
        self.workers = choose_workers(
            pool, len(pool), spread_hosts=bool(config.get("spread-hosts"))
        )
        if isinstance(policy, Repetition):
            name = "repetition"
        else:
            name = "hedged" if policy.hedges else "speculative"
        #: backups of late copies launched (charged to the rule's budget; not
        #: repetition's copies launched at once)
        self.hedged = 0
        self.prior: Prior | None = None  # hedging: what earlier jobs of the function took
        self.report = JobReport(
            token=self.token,
            func=layer.function or layer.name,
            code={"name": name, "K": K, "layer": True, **asdict(policy)},
            K=K,
            N=K,
            wait_target=K,
            workers=[""] * K,
            plain_shares=list(range(K)),  # the primaries: what plain Dask runs
        )
        if not isinstance(policy, Repetition):
            self.report.hedge = new_record(policy.rule, policy.budget_tasks(K))
        self._start = time.perf_counter()
        self._copies: dict[int, dict[int, Future[Any]]] = {b: {} for b in range(K)}
        self._index_of: dict[Key, tuple[int, int]] = {}  # future key -> (block, copy)
        self._winner: dict[int, Future[Any]] = {}
        self._deps: dict[Key, Future[Any]] = {}  # inputs held for copies not launched yet
        self._users: Counter[Key] = Counter()  # input key -> blocks still needing it
        self._held: list[dict[str, int]] = []  # per block: worker -> input bytes held
        #: per block: copy -> the worker it runs on (a primary's once it started)
        self._on: dict[int, dict[int, str]] = {b: {} for b in range(K)}
        self._started_at: dict[tuple[int, int], float] = {}  # (block, copy) -> its start
        self._since: dict[int, float] = {}  # per block: when its newest copy started
        self._busy: Counter[str] = Counter()  # copies of this job in flight, per worker
        #: workers still running a copy that lost (a thread cannot be stopped: a copy
        #: sent there would queue behind it until it ends)
        self._stuck: set[str] = set()
        self._durations: list[float] = []  # run times of the copies that won
        self._tail_since: float | None = None  # when no more blocks than workers were left
        self._open = set(range(K))  # blocks with no winner yet
        self._checked = -math.inf  # when the late-copy rule last looked
        self._ac: _dist.FutureQueue | None = None
        self._data: dict[Key, Future[Any]] = {}  # outputs that are data already

    def __repr__(self) -> str:
        return (
            f"<RedundantJob {self.report.code['name']} {self.layer.name} K={self.K} "
            f"status={self.report.status} token={self.token}>"
        )

    def _repr_html_(self) -> str:
        from ..diagnostics.html import report_html

        return report_html(self.report, kind="RedundantJob")

    def _elapsed(self) -> float:
        return time.perf_counter() - self._start

    # -- submission ---------------------------------------------------------------------
    async def _launch(self) -> None:
        layer, K = self.layer, self.K
        if self.rule.hedges:
            self.prior = Prior(self.client, self.func_key)
        block_set = set(layer.blocks)
        inputs = {b: layer.dependencies(key) - block_set for b, key in enumerate(layer.blocks)}
        needed = sorted({d for deps in inputs.values() for d in deps}, key=str)
        where = await self._where(needed)
        self._held = [
            dict(
                Counter(
                    {w: n for d in inputs[b] for w, n in where.get(d, {}).items()}
                ).most_common()
            )
            for b in range(K)
        ]
        primaries, backups = place_copies(self.workers, [None] * K, self._held)
        # an output that is an alias of a block (a dask array's) is given by the block's
        # winner (``output_of``): not a task, and no reader that keeps the block's key
        given = {out for outs in layer.output_of.values() for out in outs}
        nodes: dict[Key, GraphNode] = {
            k: v for k, v in layer.graph.items() if k not in block_set and k not in given
        }
        # the primaries run under keys of their own: the plain collection's keys may be
        # computed by another graph with another spec (a primary is wrapped to say when
        # it starts), and the scheduler must never see one key with two specs. A block
        # another task of the graph reads keeps its key.
        read = {d for node in nodes.values() for d in node.dependencies}
        primary_key = [
            key if key in read else keys.primary_key(self.token, b)
            for b, key in enumerate(layer.blocks)
        ]
        at_once = isinstance(self.policy, Repetition)
        free, pinned, where_to = _primaries(
            [
                _timed(layer.graph[k], pk, self.token, b, 0)  # type: ignore[arg-type]
                for b, (k, pk) in enumerate(zip(layer.blocks, primary_key, strict=True))
            ],
            primaries,
            self._held,
            list(self.workers),
            fenced=self._fenced,
            at_once=at_once,
        )
        self.report.workers[:K] = primaries
        copies, planned = self._copy_nodes(
            [(b, 1, str(q)) for b, q in enumerate(backups) if at_once and q is not None],
            where_to,
        )
        for b in range(K):
            for d in inputs[b]:
                self._users[d] += 1
        # data outputs (a persisted collection's keys) and the inputs a late copy reads
        of_blocks = {out for outs in layer.output_of.values() for out in outs}
        data_outputs = [k for k in layer.outputs if k not in of_blocks]
        # (an output that is data and also another block's input is kept for the output:
        # one future, never released with the inputs)
        keep_inputs = [d for d in needed if d in layer.graph and d not in data_outputs]
        # repetition's backups wait behind the primaries on their worker
        graph = _graph(
            nodes, free, pinned, copies, where_to, Repetition.priority, loose=not self._fenced
        )
        # before the graph, on the same stream: no start event is missed
        _dist.subscribe_topic(self.client, keys.start_topic(self.token), self._on_start)
        wanted = [*primary_key, *copies, *data_outputs, *keep_inputs]
        futures = dict(zip(wanted, _dist.get(self.client, graph, wanted), strict=True))
        for b, key in enumerate(primary_key):
            self._track(b, 0, futures[key])
        for ck, (b, c, q) in planned.items():
            self._launched(b, c, q, futures[ck])
        self._data = {k: futures[k] for k in data_outputs}
        self._deps = {d: futures[d] for d in keep_inputs}

    def _copy_nodes(
        self, plan: list[tuple[int, int, str]], where_to: dict[Key, list[str]]
    ) -> tuple[dict[Key, GraphNode], dict[Key, tuple[int, int, str]]]:
        """The tasks of copies ``(block, copy, worker)``: the block's task under the copy's
        key, to run on that worker (noted in ``where_to``); and key -> its plan entry."""
        nodes: dict[Key, GraphNode] = {}
        planned: dict[Key, tuple[int, int, str]] = {}
        for b, c, q in plan:
            ck = keys.copy_key(self.token, b, round=c)
            task: Task = self.layer.graph[self.layer.blocks[b]]  # type: ignore[assignment]
            nodes[ck] = _timed(task, ck, self.token, b, c)
            where_to[ck] = [q]
            planned[ck] = (b, c, q)
        return nodes, planned

    def _launched(self, b: int, c: int, worker: str, fut: Future[Any]) -> None:
        self._track(b, c, fut)
        self._on[b][c] = worker
        self._busy[worker] += 1
        self._note_worker(b + c * self.K, worker)
        self.report.backups.append(b)
        self.report.N = self.K + len(self.report.backups)

    def _note_worker(self, i: int, worker: str) -> None:
        workers = self.report.workers
        workers.extend([""] * (i + 1 - len(workers)))
        workers[i] = worker

    async def _where(self, needed: list[Key]) -> dict[Key, dict[str, int]]:
        """Input key -> {worker: its bytes} for the inputs already in memory."""
        if not needed:
            return {}
        # one call that reads both: between a who_has and an nbytes call a key may be
        # released (the scheduler's nbytes raises for it)
        return await _dist.run_on_scheduler(self.client, _holders, needed)

    def _track(self, b: int, copy: int, fut: Future[Any]) -> None:
        self._copies[b][copy] = fut
        self._index_of[fut.key] = (b, copy)

    def _on_start(self, event: tuple[float, Any]) -> None:
        b, c, worker = int(event[1][0]), int(event[1][1]), str(event[1][2])
        if b in self._winner:
            return
        now = self._elapsed()
        self._since[b] = max(self._since.get(b, now), now)
        self._started_at[b, c] = now
        if c == 0:  # a backup was counted busy where it was placed
            self._busy[worker] += 1
        self._on[b][c] = worker
        self._note_worker(b + c * self.K, worker)
        fut = self._copies[b].get(c)
        # a primary held to the whole pool (hedged, speculative) stays so while the job
        # runs: within the pool it is as free as a plain task, and lifting each one's
        # restriction as it starts cost a scheduler call per batch of starts, in waves a
        # steady stream of them (the winners' are lifted together at the end: _clean_up)
        if self._fenced and fut is not None and (c > 0 or isinstance(self.policy, Repetition)):
            self._unpin.append(fut.key)
            if self._unpinning is None:
                self._unpinning = asyncio.ensure_future(self._unpin_started())

    async def _unpin_started(self) -> None:
        """Lift the restrictions of the copies that started, a batch per scheduler call."""
        try:
            while self._unpin and not self._finished:
                batch, self._unpin = self._unpin, []
                await _dist.run_on_scheduler(self.client, release_restrictions, batch)
        except Exception:  # the cluster is going: the job itself sees and reports that
            pass
        finally:
            self._unpinning = None

    # -- the loop -----------------------------------------------------------------------

    async def _loop(self) -> Any:
        self._ac = ac = _dist.as_completed(self.client)
        for copies in self._copies.values():
            for fut in copies.values():
                ac.add(fut)
        while len(self._winner) < self.K:
            await self._rerun_late()  # a late copy may be launched on each turn
            wait_for = self.rule.interval
            if self.timeout is not None:
                left = self.timeout - self._elapsed()
                if left <= 0:
                    raise self._timed_out()
                wait_for = min(wait_for, left)
            losers: list[Future[Any]] = []
            for f in await self._next_arrivals(ac, wait_for):
                losers += await self._arrived(f)
            if losers:
                self.report.cancelled += len(losers)
                await _dist.cancel(self.client, losers, reason="bacc: the other copy won")
        self.report.time_to_decode = self._elapsed()
        self._fill_savings()
        self._settle_backups()
        self.report.trigger = "wait"
        self.report.error_estimate = 0.0
        self.report.estimate_method = "exact"
        values = {
            out: self._winner[b]
            for b, key in enumerate(self.layer.blocks)
            for out in self.layer.output_of[key]
        }
        values.update(self._data)
        return await self._build_output(values)

    async def _build_output(self, values: dict[Key, Future[Any]]) -> Any:
        """The job's output from ``values`` (each output key of the layer -> the future
        that gives it): their values (``gather``), or the collection rebuilt on them."""
        if self.gather:
            got = await _dist.gather(self.client, list(values.values()))
            return dict(zip(values, got, strict=True))
        tag = f"bacc{self.token[:12]}"
        renamed = {self.layer.renamed(k, tag): v for k, v in values.items()}
        # outside the job's span: a dask-expr collection built under its annotations
        # would warn that it ignores them
        return contextvars.Context().run(self.layer.rebuild, renamed, tag)

    def _fill_savings(self) -> None:
        copy_savings(self.report, self._started_at)

    @property
    def func_key(self) -> str:
        """The name the hedging rule's prior is kept under: the layer's function."""
        return f"layer:{self.report.func}"

    def _settle_backups(self) -> None:
        """The backups' outcomes into ``report.hedge``; the winners' run times and those
        outcomes to the scheduler (the prior of the function's next jobs)."""
        hedge = self.report.hedge
        if hedge is not None and not self.report.backups:  # the rule as it stood at the end
            prior = self.prior.seconds if self.prior is not None else None
            assessed = self.rule.assess(self.K, self._durations, prior)
            hedge.update(zip(("threshold", "expected", "source"), assessed, strict=True))
        close_backups(self.report, self.prior, self.client, self.func_key, self._durations.copy)

    async def _arrived(self, fut: Future[Any]) -> list[Future[Any]]:
        """Take one finished copy; return the other copies to cancel."""
        found = self._index_of.get(fut.key)
        if found is None:
            return []
        b, copy = found
        if b in self._winner:
            return []
        if fut.status == "finished":
            now = self._elapsed()
            self._winner[b] = fut
            self._open.discard(b)
            if self._fenced and copy == 0 and not isinstance(self.policy, Repetition):
                self._pooled.append(fut.key)
            i = b + copy * self.K
            self.report.returned.append(i)
            self.report.arrival[i] = now
            self.report.slowest_used = now
            if self._monitor is not None:
                self._monitor.arrived(len(self._winner))
            if (b, copy) in self._started_at:  # the winner's run time, whichever copy
                self._durations.append(now - self._started_at[b, copy])
            for w in self._on[b].values():
                self._busy[w] -= 1
            self._release_inputs(b)
            losers = [f for c, f in self._copies[b].items() if c != copy]
            self._stuck.update(
                self._on[b][c]
                for c, f in self._copies[b].items()
                if c != copy and (b, c) in self._started_at and f.status == "pending"
            )
            # a primary beaten by another copy straggled; a backup that lost was not needed
            lost = [b + c * self.K for c in self._copies[b] if c != copy]
            self.report.straggled += [i for i in lost if i < self.K]
            self.report.not_needed += [i for i in lost if i >= self.K]
            return losers
        others = [f for c, f in self._copies[b].items() if c != copy and f.status == "pending"]
        if fut.status == "error":
            exc = await _dist.exception(fut)
            self.report.failed[b + copy * self.K] = describe(exc)
            if others and _lost_worker(exc):
                return []  # another copy may still give the block
            assert exc is not None
            raise exc
        self.report.failed[b + copy * self.K] = f"task {fut.status}"
        if others:
            return []
        raise FutureCancelledError(fut.key, reason=f"task {fut.status} and no other copy")

    def _release_inputs(self, b: int) -> None:
        for d in self.layer.dependencies(self.layer.blocks[b]):
            if d in self._users:
                self._users[d] -= 1
                if self._users[d] <= 0:
                    del self._users[d]
                    held = self._deps.pop(d, None)
                    if held is not None:
                        _dist.release(held)

    async def _live(self) -> set[str] | None:
        """The running workers (asked of the scheduler at most once a second), when the
        copies are held to their workers; else None (Dask moves a loose copy whose worker
        left). Not the client's ``scheduler_info()``: an asynchronous client's (the
        driver's, on its loop) lists no workers."""
        if not self._fenced:
            return None
        now = self._elapsed()
        if self._live_at is None or now - self._live_at[0] >= 1.0:
            self._live_at = (now, set(await _dist.running_workers(self.client)))
        return self._live_at[1] or None

    def _where_pending(self) -> dict[int, set[str]]:
        """Per block with no winner: the workers its pending copies may run on (a primary
        that has not started, of a job whose primaries may run on any of the pool: all)."""
        pooled = not isinstance(self.policy, Repetition)
        return {
            b: {
                w
                for c, f in copies.items()
                if f.status == "pending"
                for w in (
                    self.workers
                    if pooled and c == 0 and (b, 0) not in self._started_at
                    else [self.report.workers[b + c * self.K]]
                )
            }
            for b, copies in self._copies.items()
            if b not in self._winner
        }

    async def _rerun_late(self) -> None:
        """Launch the copies the rule still allows each block whose copies all run late
        by it, together, in whole rounds within the budget and the idle workers
        (:func:`~.rules.share_backups`): late when its newest copy started longer than the
        threshold ago (every copy says when it starts), or, in the tail, none of its
        copies started; and a copy at once of a block whose copies are all held to
        workers that left (:func:`_stranded`)."""
        if self._elapsed() - self._checked < self.rule.interval:
            return  # at most once an interval, not on every arrival: K may be thousands
        self._checked = self._elapsed()
        live = await self._live()
        late = [] if live is None else _stranded(self._where_pending(), live)
        prior = None
        if self.prior is not None:
            self.prior.poll()
            prior = self.prior.seconds
        rule_used = self.rule.assess(self.K, self._durations, prior)
        threshold = rule_used[0]
        now = self._elapsed()
        # the tail: no more blocks left than workers, so each should be running
        if self._tail_since is None and self.K - len(self._winner) <= len(self.workers):
            self._tail_since = now

        def started(b: int) -> int:
            # copies that started count against the rule's limit; one queued on a worker
            # that never starts it (frozen, or held by a task that never ends) does not
            return sum((b, c) in self._started_at for c in self._copies[b])

        def may_copy(b: int) -> bool:
            return (
                b not in late
                and len(self._on[b]) < len(self.workers)
                and started(b) < self.rule.copies
            )

        def room(b: int) -> int:
            # the copies b may still have; at least one more when may_copy allows it
            # (its copies queued where they never start)
            return min(
                max(self.rule.copies - len(self._copies[b]), 1),
                len(self.workers) - len(self._on[b]),
            )

        # the blocks that may get a copy, once per check (K may be thousands)
        copyable = [b for b in self._open if may_copy(b)]
        overdue = (
            []
            if threshold is None
            else late_blocks(copyable, self._since, self._tail_since, now, threshold, _always)
        )
        workers = [w for w in self.workers if live is None or w in live]
        if any(w not in self._stuck for w in workers):  # none behind a loser that runs on
            workers = [w for w in workers if w not in self._stuck]
        slots: list[int] = []
        budget = None if isinstance(self.policy, Repetition) else self.rule.budget_tasks(self.K)
        if budget is not None:
            slots.append(max(budget - self.hedged, 0))
        if self.rule.hedges:
            # a hedge never displaces a primary: only as many as there are idle workers
            # (none of the job's copies running or placed there); in waves, the tail
            slots.append(sum(self._busy[w] <= 0 for w in workers))
        # a block still open and not late may turn late: keep a first backup for each
        on_time = len(copyable) - len(overdue)
        overdue = share_backups(overdue, room, min(slots) if slots else None, on_time)
        late += overdue
        slow = self.prior.slow if self.prior is not None else set()
        if len(workers) > len(slow & set(workers)) + 1:  # none the model holds slow
            workers = [w for w in workers if w not in slow]
        if not late or not workers:
            return
        plan = self._place_late(late, workers)
        if not plan:
            return
        where_to: dict[Key, list[str]] = {}
        nodes, planned = self._copy_nodes(plan, where_to)
        # a late copy goes first on its worker
        graph = _graph({}, {}, {}, nodes, where_to, 1, loose=not self._fenced)
        futures = _dist.get(self.client, graph, list(nodes))
        assert self._ac is not None
        charged = set(overdue)
        hedge = self.report.hedge
        if hedge is not None:  # the rule the last backup went by
            hedge.update(zip(("threshold", "expected", "source"), rule_used, strict=True))
        for ck, fut in zip(nodes, futures, strict=True):
            b, c, q = planned[ck]
            self._launched(b, c, q, fut)
            self._since[b] = now
            self._ac.add(fut)
            self.hedged += b in charged

    def _place_late(self, late: list[int], workers: list[str]) -> list[tuple[int, int, str]]:
        """Where the late copies go, ``(block, copy, worker)``: a block listed twice gets
        two copies, each on a worker holding none of its copies, placed a round at a time
        (:func:`~.placement.place_copies`)."""
        plan: list[tuple[int, int, str]] = []
        load = Counter(self._busy)
        taken: dict[int, set[str]] = defaultdict(set)
        todo = list(late)
        while todo:
            round_ = list(dict.fromkeys(todo))
            for b in round_:
                todo.remove(b)
            _, chosen = place_copies(
                workers,
                [self._on[b].get(0) if self._on[b].get(0) in workers else None for b in round_],
                [self._held[b] for b in round_],
                load,
                exclude=[set(self._on[b].values()) | taken[b] for b in round_],
            )
            for b, q in zip(round_, chosen, strict=True):
                if q is not None:
                    plan.append((b, max(self._copies[b]) + 1 + len(taken[b]), q))
                    taken[b].add(q)
                    load[q] += 1
        return plan

    def _timed_out(self) -> Exception:
        missing = self.K - len(self._winner)
        return InsufficientResults(
            f"coded job {self.token}: {missing} of {self.K} blocks had no copy finished "
            f"within timeout={self.timeout:g}s (an exact code has no answer without them)"
        )

    def _let_go(self) -> tuple[list[Future[Any]], list[Future[Any]]]:
        """Drop every reference (the result holds the winners); return the copies still
        running and the inputs held for copies never launched."""
        pending = [
            f
            for copies in self._copies.values()
            for f in copies.values()
            if f.status == "pending" and f is not self._winner.get(self._index_of[f.key][0])
        ]
        held = list(self._deps.values())
        self._deps, self._copies, self._winner, self._data = {}, {}, {}, {}
        self._index_of = {}
        self._ac = None
        return pending, held

    async def _clean_up(self, leftover: tuple[list[Future[Any]], list[Future[Any]]]) -> None:
        pending, held = leftover
        if self._monitor is not None and self._monitor.send:
            # its span, like every job's, is pruned in time (a CodedJob's in _job_done)
            detach(asyncio.ensure_future(_dist.run_on_scheduler(self.client, prune_finished_spans)))
        if self._unpinning is not None:
            self._unpinning.cancel()
        if self._pooled:  # their results recomputable anywhere should their worker leave
            detach(
                asyncio.ensure_future(
                    _dist.run_on_scheduler(self.client, release_restrictions, self._pooled)
                )
            )
            self._pooled = []
        _dist.unsubscribe_topic(self.client, keys.start_topic(self.token))
        if pending and self.report.status != "finished":
            await _dist.cancel(self.client, pending, reason="bacc: the job ended")
        for fut in held:
            _dist.release(fut)


def _always(b: int) -> bool:
    return True


def _holders(keys: list[Key], dask_scheduler: Any = None) -> dict[Key, dict[str, int]]:
    """On the scheduler: input key -> {worker: its bytes} for the keys in memory."""
    out = {}
    for key in keys:
        ts = dask_scheduler.tasks.get(key)
        if ts is not None and ts.who_has:
            size = max(int(ts.nbytes), 1)
            out[key] = {ws.address: size for ws in ts.who_has}
    return out


def _lost_worker(exc: BaseException | None) -> bool:
    """An error that says where the copy ran, not what f does: the other copy may give it."""
    from distributed.scheduler import KilledWorker

    return isinstance(exc, KilledWorker)


def _stranded(where: dict[int, set[str]], live: set[str]) -> list[int]:
    """The blocks whose every pending copy is held to a worker that left the cluster
    (``where``: block -> the workers its pending copies may run on): none of them can run,
    as a strict restriction waits for its worker."""
    return [b for b, workers in where.items() if not workers & live]


def _primaries(
    tasks: list[Task],
    placed: list[str],
    held: list[dict[str, int]],
    pool: list[str],
    *,
    fenced: bool,
    at_once: bool,
) -> tuple[dict[Key, GraphNode], dict[Key, GraphNode], dict[Key, list[str]]]:
    """Where each primary (``tasks``, block order) may run: ``(free, pinned, where_to)``,
    the primaries Dask places next to their data, those held to workers, and those
    workers. ``placed``: the planned worker of each, by its input bytes ``held``."""
    free: dict[Key, GraphNode] = {}
    pinned: dict[Key, GraphNode] = {}
    where_to: dict[Key, list[str]] = {}
    for b, task in enumerate(tasks):
        if not at_once and fenced:
            # backups come later, onto idle workers: the scheduler balances the primaries
            # over the pool as it would plain tasks (stealing among them); pinned one by
            # one they would wait in one worker's queue each, in waves
            pinned[task.key] = task
            where_to[task.key] = pool
        elif (held[b] or not at_once) and not fenced:
            free[task.key] = task  # Dask puts it next to its input, or spreads it
        else:
            # next to its input within the pool, or spread when it has none there
            pinned[task.key] = task
            where_to[task.key] = [placed[b]]
    return free, pinned, where_to


def _timed(task: Task, key: Key, token: str, b: int, c: int) -> Task:
    """``task`` as copy ``c`` of block ``b`` under ``key``, run through
    :func:`~.worker.run_started` (same inputs) so that the job learns when it started."""
    from dask._task_spec import Task

    return Task(key, run_started, token, b, c, task.func, *task.args, **task.kwargs)


def _graph(
    nodes: dict[Key, GraphNode],
    free: dict[Key, GraphNode],
    pinned: dict[Key, GraphNode],
    copies: dict[Key, GraphNode],
    where_to: dict[Key, list[str]],
    priority: int,
    *,
    loose: bool,
) -> Any:
    """One graph for one ``update-graph`` message: the layer's inputs, the primaries
    (pinned where Dask has no data to place them by) and the backups (on their worker;
    when ``loose``, a copy whose worker left runs elsewhere rather than never)."""
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    layers: dict[str, MaterializedLayer] = {}
    parts: list[tuple[str, dict[Key, GraphNode], dict[str, Any] | None]] = [
        ("inputs", nodes, None),
        ("primaries", free, None),
        ("pinned", pinned, {"workers": where_to.__getitem__, "allow_other_workers": loose}),
        (
            "copies",
            copies,
            {
                "workers": where_to.__getitem__,
                "allow_other_workers": loose,
                "priority": priority,
            },
        ),
    ]
    for name, dsk, notes in parts:
        if dsk:
            layers[f"bacc-layer-{name}-{id(dsk):x}"] = MaterializedLayer(dsk, annotations=notes)
    return HighLevelGraph(layers, {name: set() for name in layers})
