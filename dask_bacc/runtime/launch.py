"""Launch policies: which coded tasks a job starts, and when (the job itself is one class).

* :class:`CodedLaunch`: all N coded tasks at once (every code), each share encoded inside
  its eval task from the input blocks on the cluster (in-memory blocks are sent there
  first, once each: :class:`ClientBlocks`), or, for small in-memory input (:func:`inline`),
  encoded here and carried in the eval task's spec;
* :class:`SharedLaunch`: all N at once on the shares a :class:`~.coded_data.CodedData`
  keeps on the workers;
* :class:`SpeculativeLaunch`: K uncoded tasks, then a backup copy of a slow or failed one
  (the classic alternative; :func:`plan_backups` is its rule, a pure function).

A policy builds :class:`~.graph.TaskSpec` objects through the job
(:meth:`~.job.CodedJob.eval_spec`); the job submits them and runs the loop.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .. import config
from ..codes.base import refuse_rounded_integers
from . import _dist, keys
from .graph import TaskSpec
from .hedge import Prior, close_backups, new_record
from .placement import choose_workers
from .rules import share_backups
from .sending import ClientBlocks, local_arrays
from .worker import encode_eval_task

if TYPE_CHECKING:
    from distributed import Future

    from ..codes import Code
    from .jobview import CallArg, JobView, SharesView
    from .rules import Speculation

__all__ = [
    "BackupPlan",
    "CodedLaunch",
    "Launch",
    "SharedLaunch",
    "SpeculativeLaunch",
    "backup_workers",
    "mixes_exactly",
    "plan_backups",
]


class Launch:
    """All of a job's coded tasks at the start; nothing later."""

    #: seconds between the loop's calls of :meth:`tick` (None: the poll interval)
    interval: float | None = None

    async def initial(self, job: JobView, call: CallArg) -> list[TaskSpec]:
        raise NotImplementedError

    def reads(self, job: JobView, i: int) -> list[int]:
        """The input blocks coded task ``i`` reads."""
        return []

    def spec_bytes(self, job: JobView, i: int) -> int:
        """Bytes of input coded task ``i`` carries inside its spec (not a dependency the
        scheduler sizes): small in-memory input's share."""
        return 0

    def respec(self, job: JobView, i: int, round: int) -> TaskSpec:
        """Coded task ``i`` again, under round ``round``'s key, on the blocks as they are
        now (some sent again): see :meth:`~.job.CodedJob._relaunch`."""
        raise NotImplementedError(f"{type(self).__name__} does not launch a task again")

    async def tick(self, job: JobView) -> None:
        """Called on every turn of the job's loop (launch more, stop losers)."""

    def holding(self, job: JobView, running: dict[int, Future[Any]]) -> None:
        """The job ended with these stragglers still running ``func`` (held till they end)."""

    def finished(self, job: JobView) -> None:
        """The job ended (its report complete but for the clean-up round trip's figures)."""


class CodedLaunch(Launch):
    """The N coded tasks of the job's code, at once, each encoding its share from the
    input blocks on the cluster (small in-memory input: each carrying its share)."""

    _call: CallArg | None = None
    _E: NDArray[Any] | None = None  # the code's encoding matrix
    _shares: list[Any] | None = None  # small in-memory input: the shares, in the specs

    async def initial(self, job: JobView, call: CallArg) -> list[TaskSpec]:
        code, blocks = job.code, job.blocks
        self._call = call
        E = self._E = code.encoding_matrix()
        if job.mixes:
            blocks.check_finite()
        if inline(job):
            self._shares = code.shares(blocks.stacked())
            if job.mixes:
                check_encoded(self._shares)
        elif blocks.local:
            arrays = local_arrays(blocks)
            exact = mixes_exactly(code)
            if exact is not None and len(code.data_rows()) < code.N:
                for a in arrays:  # here, before anything is sent (the workers check too)
                    refuse_rounded_integers(a, exact)
            # each block to the worker of the share that weighs it most (it then reads
            # it in place; repetition: the block's first copy)
            homes = [job.workers[int(np.argmax(np.abs(E[:, j])))] for j in range(code.K)]
            job.sent = ClientBlocks(job.client, arrays, job.token)
            await job.sent.send(range(code.K), homes)
            job._chunks = job.sent.futures
        else:
            job._chunks = await blocks.to_futures(job.client)
        return [self.respec(job, i, 1) for i in range(code.N)]

    def reads(self, job: JobView, i: int) -> list[int]:
        assert self._E is not None  # initial() ran first
        return [int(j) for j in np.flatnonzero(self._E[i])]

    def spec_bytes(self, job: JobView, i: int) -> int:
        return 0 if self._shares is None else int(np.asarray(self._shares[i]).nbytes)

    def respec(self, job: JobView, i: int, round: int) -> TaskSpec:
        assert self._call is not None and self._E is not None  # initial() ran first
        if self._shares is not None:
            return job.eval_spec(i, self._shares[i], self._call, round=round)
        nz = self.reads(job, i)
        args = (
            job.token,
            i,
            job.seq,
            job.func,
            self._E[i, nz],
            [job._chunks[j] for j in nz],
            self._call,
            mixes_exactly(job.code),
            job.sent is not None,  # private: a block sent from here, read by other shares
            job.mixes,  # finite: NaN/inf refused in the share and the result
        )
        key = keys.eval_key(job.token, i, round=round)
        return TaskSpec(key, encode_eval_task, args, [job.workers[i]])


def inline(job: JobView) -> bool:
    """Whether the job's input is in memory and its coded shares (N of them, a speculative
    job's K and their backups) come to at most ``bacc.data-inline-limit``: they then travel
    inside the eval specs, one message, where a scatter would add its round trips (13-21%
    of a small job, docs/benchmarks.md)."""
    from dask.utils import parse_bytes

    blocks = job.blocks
    if not blocks.local:
        return False
    share = int(np.prod(blocks.block_shape)) * max(blocks.dtype.itemsize, 8)
    return share * max(job.code.N, 2 * job.code.K) <= parse_bytes(config.get("data-inline-limit"))


def mixes_exactly(code: Code) -> str | None:
    """The name of ``code`` if it is exact while its shares mix blocks in float64
    (Lagrange: integers beyond 2**53 must be refused where they are encoded), else None."""
    return code.name if code.exact and not code.keeps_dtype else None


def mixes_blocks(code: Code) -> bool:
    """Whether some share of ``code`` mixes blocks (a row of E that is not a unit row):
    NaN or inf in a block would spread to the others through it, and a mixed result with
    NaN cannot be decoded. A code that only copies blocks (repetition, the backup codes)
    passes NaN and inf through, in the data and in f's output, as plain Dask does."""
    return len(code.data_rows()) < code.N


def check_encoded(shares: list[NDArray[Any]]) -> None:
    """Encoding finite data can overflow to inf (huge values times the weights)."""
    if any(s.dtype.kind == "f" and not np.isfinite(s).all() for s in shares):
        raise ValueError("encoding overflowed to inf: rescale the data")


class SharedLaunch(Launch):
    """The N eval tasks on the shares of a :class:`~.coded_data.CodedData`."""

    def __init__(self, data: SharesView):
        self.data = data

    async def initial(self, job: JobView, call: CallArg) -> list[TaskSpec]:
        return [job.eval_spec(i, self.data.shares[i], call) for i in range(job.code.N)]

    def holding(self, job: JobView, running: dict[int, Future[Any]]) -> None:
        self.data.hold_for_next_call(job, running)


@dataclass
class BackupPlan:
    """What :func:`plan_backups` decided at one check.

    Attributes
    ----------
    losers : list of int
        Pending copies of blocks another copy already gave (to cancel).
    blocks : list of int
        Blocks to copy now: those with no copy running (it failed), then the late ones,
        the latest first, as many as the budget allows.
    late : int
        How many of ``blocks`` are late (charged to the budget), not failed.
    threshold, expected : float or None
        The rule's threshold and the expected task it rests on (seconds; None: not armed).
    source : str
        Where ``expected`` came from: ``"job"``, ``"prior"`` or ``"none"``.
    """

    losers: list[int]
    blocks: list[int]
    late: int
    threshold: float | None
    expected: float | None
    source: str


def plan_backups(
    K: int,
    rule: Speculation,
    usable: list[int],
    pending: list[int],
    launched_at: dict[int, float],
    arrival: dict[int, float],
    now: float,
    prior: float | None = None,
    hedged: int = 0,
) -> BackupPlan:
    """The backup rule of hedged and speculative jobs, a pure function.

    Task ``i`` computes block ``i % K`` (``K + j`` is the first backup of block j, ``2K + j``
    its second). A block not given yet gets a copy when none of its copies is running (they
    failed), or when its newest running copy has run longer than ``rule``'s threshold
    (:meth:`~.rules.Speculation.threshold`, from the finished tasks' run times and
    ``prior``): then as many as it may still have (fewer than ``rule.copies`` in all), at
    once, a round at a time across the late blocks, a further round only when the budget
    holds it for every late block besides a first backup for each block still on time
    (:func:`~.rules.share_backups`). Late backups are charged to the rule's budget
    (``hedged``: late backups launched so far), the latest blocks first.
    """
    covered = {i % K for i in usable}
    losers = [i for i in pending if i % K in covered]
    durations = [arrival[i] - launched_at[i] for i in usable if i in launched_at]
    threshold, expected, source = rule.assess(K, durations, prior)
    copies: dict[int, list[int]] = {}
    for i in launched_at:
        copies.setdefault(i % K, []).append(i)
    running = set(pending)
    failed: list[int] = []
    late: list[tuple[float, int]] = []
    on_time = 0  # blocks running, not late yet: each may need a first backup later
    for j in range(K):
        mine = copies.get(j, [])
        if j in covered or len(mine) >= rule.copies:
            continue  # done, or as many copies as the rule allows
        alive = [launched_at[i] for i in mine if i in running]
        if not alive:
            failed.append(j)
        elif threshold is not None and now - max(alive) > threshold:
            late.append((now - max(alive), j))
        else:
            on_time += 1
    late.sort(reverse=True)
    budget = rule.budget_tasks(K)
    backups = share_backups(
        [j for _, j in late],
        lambda j: rule.copies - len(copies[j]),
        None if budget is None else max(budget - hedged, 0),
        reserve=on_time,
    )
    return BackupPlan(losers, failed + backups, len(backups), threshold, expected, source)


def backup_workers(
    workers: Mapping[str, Mapping[str, Any]], busy: Collection[str], slow: Collection[str]
) -> list[str]:
    """Where backups may go, best first: running workers that run no copy of the job's
    tasks (``busy``), least busy first and hosts interleaved, and none the straggler model
    holds ``slow`` while another is free (a late copy there beats none)."""
    free = {
        a: w
        for a, w in workers.items()
        if a not in busy and w.get("status", "running") == "running"
    }
    if any(a not in slow for a in free):
        free = {a: w for a, w in free.items() if a not in slow}
    return choose_workers(free, len(free)) if free else []


class SpeculativeLaunch(Launch):
    """K uncoded tasks; a backup copy of block j (task ``c * K + j``, its copy ``c``) once
    :func:`plan_backups` says so, on an idle worker: one running no copy of the job's
    tasks, least busy first, never one the straggler model holds slow while another is
    free (hedged jobs: :class:`~.hedge.Prior`).

    With ``data`` (a :class:`~.coded_data.CodedData` encoded with a backup code), the
    blocks are its shares, already on their workers: a backup reads its block's share
    (Dask copies it to the backup's worker), and the stragglers a call leaves running
    are evaluated elsewhere by the next call, as :class:`SharedLaunch`'s are.
    """

    def __init__(
        self, rule: Speculation, func_key: str | None = None, data: SharesView | None = None
    ):
        self.rule = rule
        self.data = data
        self.interval = rule.interval
        self.func_key = func_key
        self.launched_at: dict[int, float] = {}
        self.hedged = 0  # backups of late tasks launched (charged to the budget)
        #: workers still running a copy this job cancelled (a thread cannot be stopped:
        #: a backup sent there would queue behind it)
        self.stuck: set[str] = set()
        self.prior: Prior | None = None
        self._call: CallArg | None = None
        self._shares: list[Any] | None = None  # small in-memory input: the blocks

    async def initial(self, job: JobView, call: CallArg) -> list[TaskSpec]:
        self._call = call
        K = job.code.K
        if self.rule.hedges and self.func_key is not None:
            self.prior = Prior(job.client, self.func_key)
        job.report.hedge = new_record(self.rule.rule, self.rule.budget_tasks(K))
        if self.data is not None:
            job._chunks = list(self.data.shares)
        elif inline(job):
            self._shares = local_arrays(job.blocks)
        elif job.blocks.local:  # each block to its first copy's worker
            job.sent = ClientBlocks(job.client, local_arrays(job.blocks), job.token)
            await job.sent.send(range(K), [job.workers[j] for j in range(K)])
            job._chunks = job.sent.futures
        else:
            job._chunks = await job.blocks.to_futures(job.client)
        self.launched_at = dict.fromkeys(range(K), job._elapsed())
        return [self.respec(job, j, 1) for j in range(K)]

    def reads(self, job: JobView, i: int) -> list[int]:
        return [i % job.code.K]

    def spec_bytes(self, job: JobView, i: int) -> int:
        shares = self._shares
        return 0 if shares is None else int(np.asarray(shares[i % job.code.K]).nbytes)

    def respec(self, job: JobView, i: int, round: int) -> TaskSpec:
        """Copy ``i // K`` of block ``i % K`` (``i >= K``: a backup)."""
        assert self._call is not None  # initial() ran first
        K = job.code.K
        if self._shares is not None:
            return job.eval_spec(i, self._shares[i % K], self._call, backup=i >= K, round=round)
        chunk = job._chunks[i % K]
        if job.sent is None:
            return job.eval_spec(i, chunk, self._call, backup=i >= K, round=round)
        # a block sent from here: its own copy, as CodedLaunch's (encode_eval_task)
        args = (
            job.token, i, job.seq, job.func, np.ones(1), [chunk], self._call, None, True, False
        )  # fmt: skip
        key = keys.eval_key(job.token, i, backup=i >= K, round=round)
        return TaskSpec(key, encode_eval_task, args, [job.workers[i]])

    async def tick(self, job: JobView) -> None:
        d, K = job.decider, job.code.K
        prior = None
        if self.prior is not None:
            self.prior.poll()
            prior = self.prior.seconds
        plan = plan_backups(
            K,
            self.rule,
            d.usable,
            list(d.pending),
            self.launched_at,
            d.arrival,
            job._elapsed(),
            prior,
            self.hedged,
        )
        hedge = job.report.hedge
        assert hedge is not None  # initial() ran first
        if plan.blocks or not job.report.backups:  # the rule the last backup went by
            hedge.update(threshold=plan.threshold, expected=plan.expected, source=plan.source)
        if plan.losers:  # another copy won: stop this one
            for i in plan.losers:
                d.withdraw(i)
            futures = [job._evals[i] for i in plan.losers]
            running = [
                i for i, f in zip(plan.losers, futures, strict=True) if f.status == "pending"
            ]
            self.stuck.update(job.workers[i] for i in running)
            if self.data is None:
                job.report.cancelled += len(plan.losers)
                await _dist.cancel(job.client, futures, reason="bacc: other copy won")
            # a call of a CodedData leaves them to the job's end, which holds those still
            # running func (the next call then evaluates their shares elsewhere) and
            # cancels the others
        if plan.blocks:
            late = set(plan.blocks[len(plan.blocks) - plan.late :]) if plan.late else set()
            self.hedged += await self._back_up(job, plan.blocks, late)

    async def _back_up(self, job: JobView, blocks: list[int], late: set[int]) -> int:
        """Launch a copy of each of ``blocks`` on a free worker; returns how many of the
        ``late`` ones got one."""
        K, rep, call = job.code.K, job.report, self._call
        assert call is not None  # initial() ran first
        info = await _dist.identity(job.client)
        busy = {job.workers[i] for i in job.decider.pending} | self.stuck
        slow = self.prior.slow if self.prior is not None else set()
        ordered = backup_workers(info.get("workers", {}), busy, slow)
        if not ordered:
            return 0  # every worker runs a copy; try again at the next check
        specs = []
        charged = 0
        for j in blocks:
            mine = [i for i in self.launched_at if i % K == j]
            # not where a copy of this block ran (it may have failed or be stuck there)
            addr = next((a for a in ordered if a not in {job.workers[i] for i in mine}), None)
            if addr is None:
                continue
            ordered.remove(addr)
            i = len(mine) * K + j
            job.workers[i] = addr
            rep.backups.append(i)
            rep.N += 1
            self.launched_at[i] = job._elapsed()
            specs.append(self.respec(job, i, 1))
            charged += j in late
        if rep.hedge is not None:
            rep.hedge["launched"] = len(rep.backups)
        job._launch_graph(specs)
        return charged

    def holding(self, job: JobView, running: dict[int, Future[Any]]) -> None:
        if self.data is not None:
            self.data.hold_for_next_call(job, running)

    def finished(self, job: JobView) -> None:
        """Settle the backups' outcomes in the report and tell the scheduler the run times
        of the finished tasks (the prior of the function's next jobs)."""
        d = job.decider

        def seconds() -> list[float]:
            return [d.arrival[i] - self.launched_at[i] for i in d.usable if i in self.launched_at]

        close_backups(job.report, self.prior, job.client, self.func_key, seconds)
