"""Launch policies: which coded tasks a job starts, and when (the job itself is one class).

* :class:`CodedLaunch`: all N coded tasks at once (every code), shares in the task specs
  for in-memory data, encoded inside the eval tasks for data on the cluster;
* :class:`SharedLaunch`: all N at once on the shares a :class:`~.coded_data.CodedData`
  keeps on the workers;
* :class:`SpeculativeLaunch`: K uncoded tasks, then a backup copy of a slow or failed one
  (the classic alternative; :func:`plan_backups` is its rule, a pure function).

A policy builds :class:`~.graph.TaskSpec` objects through the job
(:meth:`~.job.CodedJob.eval_spec`); the job submits them and runs the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from . import _dist, keys
from .graph import TaskSpec
from .placement import choose_workers
from .worker import Share, encode_eval_task

if TYPE_CHECKING:
    from distributed import Future

    from ..codes import Code
    from .coded_data import CodedData
    from .job import CallArg, CodedJob
    from .speculative import Speculation

__all__ = [
    "CodedLaunch",
    "Launch",
    "SharedLaunch",
    "SpeculativeLaunch",
    "mixes_exactly",
    "plan_backups",
]


class Launch:
    """All of a job's coded tasks at the start; nothing later."""

    #: seconds between the loop's calls of :meth:`tick` (None: the poll interval)
    interval: float | None = None

    async def initial(self, job: CodedJob, call: CallArg) -> list[TaskSpec]:
        raise NotImplementedError

    async def tick(self, job: CodedJob) -> None:
        """Called on every turn of the job's loop (launch more, stop losers)."""

    def holding(self, job: CodedJob, running: dict[int, Future[Any]]) -> None:
        """The job ended with these stragglers still running ``func`` (held till they end)."""


class CodedLaunch(Launch):
    """The N coded tasks of the job's code, at once."""

    async def initial(self, job: CodedJob, call: CallArg) -> list[TaskSpec]:
        code, blocks = job.code, job.blocks
        if blocks.local:
            shares = code.shares(blocks.stacked())
            check_encoded(shares)
            return [job.eval_spec(i, shares[i], call) for i in range(code.N)]
        chunks = job._chunks = await blocks.to_futures(job.client)
        E = code.encoding_matrix()
        specs = []
        for i in range(code.N):
            nz = np.flatnonzero(E[i])
            args = (
                job.token,
                i,
                job.seq,
                job.func,
                E[i, nz],
                [chunks[j] for j in nz],
                call,
                mixes_exactly(code),
            )
            specs.append(
                TaskSpec(keys.eval_key(job.token, i), encode_eval_task, args, [job.workers[i]])
            )
        return specs


def mixes_exactly(code: Code) -> str | None:
    """The name of ``code`` if it is exact while its shares mix blocks in float64
    (Lagrange: integers beyond 2**53 must be refused where they are encoded), else None."""
    return code.name if code.exact and not code.keeps_dtype else None


def check_encoded(shares: list[NDArray[Any]]) -> None:
    """Encoding finite data can overflow to inf (huge values times the weights)."""
    if any(s.dtype.kind == "f" and not np.isfinite(s).all() for s in shares):
        raise ValueError("encoding overflowed to inf: rescale the data")


class SharedLaunch(Launch):
    """The N eval tasks on the shares of a :class:`~.coded_data.CodedData`."""

    def __init__(self, data: CodedData):
        self.data = data

    async def initial(self, job: CodedJob, call: CallArg) -> list[TaskSpec]:
        return [job.eval_spec(i, self.data.shares[i], call) for i in range(job.code.N)]

    def holding(self, job: CodedJob, running: dict[int, Future[Any]]) -> None:
        if self.data._released:
            # released while this call ran: no next call to reroute, and a held eval would
            # keep its share on the scheduler until func returns; cancelled as release()
            # cancels the others (the job's hold then lets go of them)
            self.data._cancel_late(list(running.values()))
            return
        # the next call reroutes around them (CodedData._placement), with no message
        for i, fut in running.items():
            self.data._held.setdefault(job.workers[i], []).append((job._start, fut))


def plan_backups(
    K: int,
    rule: Speculation,
    usable: list[int],
    pending: list[int],
    launched_at: dict[int, float],
    arrival: dict[int, float],
    now: float,
) -> tuple[list[int], list[int]]:
    """The speculative rule: ``(losers, blocks)``.

    Task ``i`` computes block ``i % K`` (``K + j`` is the backup of block j). Losers are
    pending copies of blocks another copy already gave; ``blocks`` are those to back up
    now: not covered, not backed up yet, and either with no copy running (it failed) or
    running longer than the rule's threshold.
    """
    covered = {i % K for i in usable}
    losers = [i for i in pending if i % K in covered]
    threshold = rule.threshold(K, [arrival[i] - launched_at[i] for i in usable])
    blocks = []
    for j in range(K):
        if j in covered or K + j in launched_at:
            continue  # done, or already backed up (one backup per block)
        running = j in pending
        if not running or (threshold is not None and now - launched_at[j] > threshold):
            blocks.append(j)
    return losers, blocks


class SpeculativeLaunch(Launch):
    """K uncoded tasks; a backup copy (task ``K + j``) of block j once :func:`plan_backups`
    says so, on a worker running no copy of the job's tasks."""

    def __init__(self, rule: Speculation):
        self.rule = rule
        self.interval = rule.interval
        self.launched_at: dict[int, float] = {}
        self._blocks: Sequence[Share | Future[Any]] = []  # arrays held here, or chunks
        self._call: CallArg | None = None

    async def initial(self, job: CodedJob, call: CallArg) -> list[TaskSpec]:
        self._call = call
        if job.blocks.local:
            self._blocks = list(job.blocks.stacked())
        else:
            self._blocks = job._chunks = await job.blocks.to_futures(job.client)
        self.launched_at = dict.fromkeys(range(job.code.K), job._elapsed())
        return [job.eval_spec(j, self._blocks[j], call) for j in range(job.code.K)]

    async def tick(self, job: CodedJob) -> None:
        d, K = job.decider, job.code.K
        losers, blocks = plan_backups(
            K, self.rule, d.usable, list(d.pending), self.launched_at, d.arrival, job._elapsed()
        )
        if losers:  # the other copy won: stop this one
            for i in losers:
                d.withdraw(i)
            job.report.cancelled += len(losers)
            futures = [job._evals[i] for i in losers]
            await _dist.cancel(job.client, futures, reason="bacc: other copy won")
        if blocks:
            await self._back_up(job, blocks)

    async def _back_up(self, job: CodedJob, blocks: list[int]) -> None:
        K, rep, call = job.code.K, job.report, self._call
        assert call is not None  # initial() ran first
        info = await _dist.identity(job.client)
        busy = {job.workers[i] for i in job.decider.pending}
        free = {
            a: w
            for a, w in info.get("workers", {}).items()
            if a not in busy and w.get("status", "running") == "running"
        }
        if not free:
            return  # every worker runs a copy; try again at the next tick
        ordered = choose_workers(free, len(free))  # least busy first, hosts interleaved
        specs = []
        for j in blocks:
            # not where this block's first copy ran (it may have failed or be stuck there)
            addr = next((a for a in ordered if a != job.workers[j]), None)
            if addr is None:
                continue
            ordered.remove(addr)
            i = K + j
            job.workers[i] = addr
            rep.backups.append(i)
            rep.N += 1
            self.launched_at[i] = job._elapsed()
            specs.append(job.eval_spec(i, self._blocks[j], call, backup=True))
        job._launch_graph(specs)
