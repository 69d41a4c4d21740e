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

import asyncio
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from .. import config
from ..codes.base import refuse_rounded_integers
from . import _dist, keys
from .graph import TaskSpec
from .hedge import Prior, new_record, settle, tell
from .placement import choose_workers
from .worker import encode_eval_task

if TYPE_CHECKING:
    from dask.typing import Key
    from distributed import Client, Future

    from ..codes import Code
    from ..collections import Blocks
    from .coded_data import CodedData
    from .job import CallArg, CodedJob
    from .speculative import Speculation

__all__ = [
    "BackupPlan",
    "ClientBlocks",
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

    async def initial(self, job: CodedJob, call: CallArg) -> list[TaskSpec]:
        raise NotImplementedError

    def reads(self, job: CodedJob, i: int) -> list[int]:
        """The input blocks coded task ``i`` reads."""
        return []

    def spec_bytes(self, job: CodedJob, i: int) -> int:
        """Bytes of input coded task ``i`` carries inside its spec (not a dependency the
        scheduler sizes): small in-memory input's share."""
        return 0

    def respec(self, job: CodedJob, i: int, round: int) -> TaskSpec:
        """Coded task ``i`` again, under round ``round``'s key, on the blocks as they are
        now (some sent again): see :meth:`~.job.CodedJob._relaunch`."""
        raise NotImplementedError(f"{type(self).__name__} does not launch a task again")

    async def tick(self, job: CodedJob) -> None:
        """Called on every turn of the job's loop (launch more, stop losers)."""

    def holding(self, job: CodedJob, running: dict[int, Future[Any]]) -> None:
        """The job ended with these stragglers still running ``func`` (held till they end)."""

    def finished(self, job: CodedJob) -> None:
        """The job ended (its report complete but for the clean-up round trip's figures)."""


class CodedLaunch(Launch):
    """The N coded tasks of the job's code, at once, each encoding its share from the
    input blocks on the cluster (small in-memory input: each carrying its share)."""

    _call: CallArg | None = None
    _E: NDArray[Any] | None = None  # the code's encoding matrix
    _shares: list[Any] | None = None  # small in-memory input: the shares, in the specs

    async def initial(self, job: CodedJob, call: CallArg) -> list[TaskSpec]:
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

    def reads(self, job: CodedJob, i: int) -> list[int]:
        assert self._E is not None  # initial() ran first
        return [int(j) for j in np.flatnonzero(self._E[i])]

    def spec_bytes(self, job: CodedJob, i: int) -> int:
        return 0 if self._shares is None else int(np.asarray(self._shares[i]).nbytes)

    def respec(self, job: CodedJob, i: int, round: int) -> TaskSpec:
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


def inline(job: CodedJob) -> bool:
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


class ClientBlocks:
    """A job's in-memory input blocks, sent from the client to the cluster once each.

    Scattered straight to a worker, not held in task specs: a spec travels inside the graph,
    through the scheduler, which keeps it for as long as the task exists (distributed
    warns of any graph above 10 MB); N coded shares in the specs made the graph N/K times
    the data, and held a pickled copy of it on the client. The other workers whose shares
    read a block fetch it from its holder.

    A scattered block cannot be recomputed, but the client still has it: a block whose
    holder left (its readers are cancelled) or stopped answering (its readers wait on a
    transfer) is sent again, to another worker and under a new key
    (:func:`~.keys.chunk_key`'s round), and the job launches its readers again
    (:meth:`~.job.CodedJob._relaunch`). A new key each time, so that no late copy ever
    lands on a worker fetching the same key (distributed's worker fails hard on that). A
    transfer that is slow (:meth:`hedge_after`: a frozen worker accepts the connection and
    never answers) is sent to another worker too, and the first to land is used.

    Attributes
    ----------
    futures : list of distributed.Future
        The K blocks' current futures, in order (replaced when a block is sent again).
    holder : list of str
        The worker each block was last sent to.
    rounds : list of int
        How many times each block was sent (hedged transfers included).
    """

    #: a block is sent at most this many times (then its readers are lost, as before)
    MAX_SENDS = 4

    def __init__(self, client: Client, arrays: Sequence[Any], token: str):
        self.client = client
        self.arrays = arrays
        self.token = token
        self.futures: list[Future[Any]] = []
        self.holder: list[str] = [""] * len(arrays)
        self.rounds: list[int] = [0] * len(arrays)

    def lost(self, js: Collection[int]) -> list[int]:
        """Those of blocks ``js`` whose data the cluster no longer has."""
        return [j for j in js if self.futures[j].status != "finished"]

    def can_resend(self, js: Collection[int]) -> bool:
        return all(self.rounds[j] < self.MAX_SENDS for j in js)

    async def send(self, js: Collection[int], homes: Sequence[str]) -> None:
        """Send blocks ``js`` to ``homes`` (one worker each, in order), each under a key of
        its own next round; a transfer that fails, or is slow (:meth:`_send_to`), goes to
        another worker too."""
        by_worker: dict[str, list[int]] = {}
        for j, home in zip(js, homes, strict=True):
            by_worker.setdefault(home, []).append(j)
        sent = await asyncio.gather(*(self._send_to(w, b) for w, b in by_worker.items()))
        while len(self.futures) < len(self.arrays):
            self.futures.append(None)  # type: ignore[arg-type]  # filled just below
        for part in sent:
            for j, (worker, fut) in part.items():
                self.futures[j], self.holder[j] = fut, worker

    def hedge_after(self, js: Collection[int]) -> float:
        """Seconds after which a transfer of blocks ``js`` to one worker is also sent to
        another: 1 s plus their size at 50 MB/s (a slow network), so a live worker is
        rarely hedged while a frozen one (it accepts the connection, then never answers)
        delays the job by about that much, not until ``worker-ttl``."""
        nbytes = sum(int(getattr(self.arrays[j], "nbytes", 0)) for j in js)
        return 1.0 + nbytes / 50e6

    async def _send_to(self, worker: str, js: list[int]) -> dict[int, tuple[str, Future[Any]]]:
        first = asyncio.ensure_future(self._scatter(worker, js))
        done, _ = await asyncio.wait({first}, timeout=self.hedge_after(js))
        if first in done and first.exception() is None:
            return first.result()
        # failed (the worker left), or slow (frozen?): another live worker as well
        live = await _dist.running_workers(self.client)
        others = [w for w in live if w != worker]
        if not others:
            return await first
        second = asyncio.ensure_future(self._scatter(others[0], js))
        tries = {second} if first in done else {first, second}  # (first failed)
        while tries:
            done, tries = await asyncio.wait(tries, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t.exception() is None:
                    for loser in tries:  # let it land and go: its keys are never read
                        _detach(loser)
                    return t.result()
        return await second  # both failed: its exception

    async def _scatter(self, worker: str, js: list[int]) -> dict[int, tuple[str, Future[Any]]]:
        data: dict[Key, Any] = {}
        for j in js:
            self.rounds[j] += 1
            data[keys.chunk_key(self.token, j, self.rounds[j])] = self.arrays[j]
        out = await self.client.scatter(  # type: ignore[no-untyped-call]
            data, workers=[worker], hash=False, direct=True, asynchronous=True
        )
        return {keys.parse(k).index: (worker, f) for k, f in out.items()}  # type: ignore[union-attr, misc]


#: transfers given up for a faster copy, held until they end (then their futures go)
_detached: set[asyncio.Future[Any]] = set()


def _detach(task: asyncio.Future[Any]) -> None:
    """Let a transfer run to its end in the background, then drop what it sent: cancelled
    midway, a direct scatter could leave the data on the worker with the scheduler never
    told (nothing would release it)."""
    _detached.add(task)

    def done(t: asyncio.Future[Any]) -> None:
        _detached.discard(t)
        if not t.cancelled():
            t.exception()  # retrieved: a worker that left is no news

    task.add_done_callback(done)


def local_arrays(blocks: Blocks) -> list[Any]:
    """The K blocks of a ``local`` adapter as arrays of its dtype, views where they can be
    (a list's own arrays: ``stacked()`` would copy them all into one)."""
    from ..collections.numpy import ListBlocks

    if isinstance(blocks, ListBlocks):
        return [np.asarray(a, dtype=blocks.dtype) for a in blocks.arrays]
    return list(blocks.stacked())


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

    def __init__(self, data: CodedData):
        self.data = data

    async def initial(self, job: CodedJob, call: CallArg) -> list[TaskSpec]:
        return [job.eval_spec(i, self.data.shares[i], call) for i in range(job.code.N)]

    def holding(self, job: CodedJob, running: dict[int, Future[Any]]) -> None:
        hold_for_next_call(self.data, job, running)


def hold_for_next_call(data: CodedData, job: CodedJob, running: dict[int, Future[Any]]) -> None:
    """A call of ``data`` ended with these evals still running ``func``: the next call
    evaluates their shares elsewhere (:meth:`~.coded_data.CodedData._placement`)."""
    if data._released:
        # released while this call ran: no next call to reroute, and a held eval would
        # keep its share on the scheduler until func returns; cancelled as release()
        # cancels the others (the job's hold then lets go of them)
        data._cancel_late(list(running.values()))
        return
    # the next call reroutes around them, with no message
    for i, fut in running.items():
        data._held.setdefault(job.workers[i], []).append((job._start, fut))


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
    (:meth:`~.speculative.Speculation.threshold`, from the finished tasks' run times and
    ``prior``), while it has fewer than ``rule.copies`` copies. Late blocks are charged to
    the rule's budget (``hedged``: late backups launched so far), the latest first.
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
    for j in range(K):
        mine = copies.get(j, [])
        if j in covered or len(mine) >= rule.copies:
            continue  # done, or as many copies as the rule allows
        alive = [launched_at[i] for i in mine if i in running]
        if not alive:
            failed.append(j)
        elif threshold is not None and now - max(alive) > threshold:
            late.append((now - max(alive), j))
    late.sort(reverse=True)
    budget = rule.budget_tasks(K)
    if budget is not None:
        late = late[: max(budget - hedged, 0)]
    return BackupPlan(losers, failed + [j for _, j in late], len(late), threshold, expected, source)


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
        self, rule: Speculation, func_key: str | None = None, data: CodedData | None = None
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

    async def initial(self, job: CodedJob, call: CallArg) -> list[TaskSpec]:
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

    def reads(self, job: CodedJob, i: int) -> list[int]:
        return [i % job.code.K]

    def spec_bytes(self, job: CodedJob, i: int) -> int:
        shares = self._shares
        return 0 if shares is None else int(np.asarray(shares[i % job.code.K]).nbytes)

    def respec(self, job: CodedJob, i: int, round: int) -> TaskSpec:
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

    async def tick(self, job: CodedJob) -> None:
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

    async def _back_up(self, job: CodedJob, blocks: list[int], late: set[int]) -> int:
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

    def holding(self, job: CodedJob, running: dict[int, Future[Any]]) -> None:
        if self.data is not None:
            hold_for_next_call(self.data, job, running)

    def finished(self, job: CodedJob) -> None:
        """Settle the backups' outcomes in the report and tell the scheduler the run times
        of the finished tasks (the prior of the function's next jobs)."""
        hedge = job.report.hedge
        if hedge is None:
            return
        settle(job.report)
        if self.prior is not None:
            self.prior.close()
            d = job.decider
            seconds = [
                d.arrival[i] - self.launched_at[i] for i in d.usable if i in self.launched_at
            ]
            if self.func_key is not None:
                tell(job.client, self.func_key, seconds, hedge)
