"""Launch policies: which coded tasks a job starts, and when (the job itself is one class).

* :class:`CodedLaunch`: all N coded tasks at once (every code), each share encoded inside
  its eval task from the input blocks on the cluster (in-memory blocks are scattered there
  first, once each: :func:`scatter_blocks`);
* :class:`SharedLaunch`: all N at once on the shares a :class:`~.coded_data.CodedData`
  keeps on the workers;
* :class:`SpeculativeLaunch`: K uncoded tasks, then a backup copy of a slow or failed one
  (the classic alternative; :func:`plan_backups` is its rule, a pure function).

A policy builds :class:`~.graph.TaskSpec` objects through the job
(:meth:`~.job.CodedJob.eval_spec`); the job submits them and runs the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from ..codes.base import refuse_rounded_integers
from . import _dist, keys
from .graph import TaskSpec
from .placement import SILENT_AFTER, choose_workers, silent_workers
from .worker import Share, encode_eval_task, eval_task, state

T = TypeVar("T")

if TYPE_CHECKING:
    from dask.typing import Key
    from distributed import Client, Future

    from ..codes import Code
    from ..collections import Blocks
    from .coded_data import CodedData
    from .job import CallArg, CodedJob
    from .speculative import Speculation

__all__ = [
    "CodedLaunch",
    "Launch",
    "SharedLaunch",
    "SpeculativeLaunch",
    "block_eval_task",
    "mixes_exactly",
    "plan_backups",
    "scatter_blocks",
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
        E = code.encoding_matrix()
        data_rows = code.data_rows()
        if blocks.local:
            arrays = local_arrays(blocks)
            exact = mixes_exactly(code)
            if exact is not None and len(data_rows) < code.N:
                for a in arrays:  # here, before anything is sent (the workers check too)
                    refuse_rounded_integers(a, exact)
            homes = [readers(E[:, j], job.workers) for j in range(code.K)]
            chunks = await scatter_blocks(job.client, arrays, homes, job.token)
        else:
            chunks = await blocks.to_futures(job.client)
        job._chunks = chunks
        specs = []
        for i in range(code.N):
            task: Callable[..., Any]
            args: tuple[Any, ...]
            if blocks.local and i in data_rows:
                # the share is the block itself: read where it was scattered, no encode
                task, args = block_eval_task, (job.func, chunks[data_rows[i]], call)
            else:
                nz = np.flatnonzero(E[i])
                task = encode_eval_task
                args = (
                    job.func,
                    E[i, nz],
                    [chunks[j] for j in nz],
                    call,
                    mixes_exactly(code),
                )
            spec = TaskSpec(
                keys.eval_key(job.token, i), task, (job.token, i, job.seq, *args), [job.workers[i]]
            )
            specs.append(spec)
        return specs


def readers(weights: NDArray[Any], workers: Sequence[str] | Mapping[int, str]) -> list[str]:
    """Where to scatter a block: the worker of the share weighing it most (``weights``:
    its column of the encoding matrix), which then reads it in place, and, if another
    worker's share reads it too, the worker of the next heaviest such share."""
    order = [int(i) for i in np.argsort(-np.abs(weights), kind="stable") if weights[i] != 0]
    first = workers[order[0]]
    second = next((workers[i] for i in order[1:] if workers[i] != first), None)
    return [first] if second is None else [first, second]


async def scatter_blocks(
    client: Client, arrays: Sequence[Any], homes: Sequence[Sequence[str]], token: str
) -> list[Future[Any]]:
    """Send the K in-memory blocks ``arrays`` to the cluster, from here straight to the
    workers of ``homes[j]`` (one or two readers of the block), before the tasks that read
    them are submitted; under the keys ``("bacc-chunk-<token>", j)``.

    Scattered, not held in task specs: a task spec travels inside the graph, through the
    scheduler, which keeps it for as long as the task exists (distributed warns of any
    graph above 10 MB), and a job of N > K shares made the graph N/K times the data and
    held a pickled copy of it on the client. A second reader gets its copy from the
    client too, not worker to worker: one lost worker then does not lose the block (a
    scattered block is not recomputed), and repetition's second copy of a block does not
    wait on the first's worker (``Client.replicate``, worker to worker, crashed a worker
    in the freeze soak when a job released the key mid-transfer). The tasks that still
    needed a block lost with all its copies are erasures ("an input block it reads was
    lost with worker(s) that left"). A transfer to a worker found silent (no heartbeat:
    frozen) is given up; the first copy then goes to a live worker.

    Parameters
    ----------
    client : distributed.Client
        The job's client (on its loop).
    arrays : sequence of numpy.ndarray
        The blocks (:func:`local_arrays` of a ``local`` adapter).
    homes : sequence of sequences of str
        One or two worker addresses per block (:func:`readers`).
    token : str
        The job's token.

    Returns
    -------
    list of distributed.Future
        The K blocks' futures, in order.
    """
    name = f"bacc-chunk-{token}"  # keys.KINDS' "chunk", as Blocks.to_futures names it
    by_workers: dict[tuple[str, ...], dict[Key, Any]] = {}
    for j, (block, home) in enumerate(zip(arrays, homes, strict=True)):
        by_workers.setdefault(tuple(home), {})[(name, j)] = block

    async def send(workers: tuple[str, ...], data: dict[Key, Any]) -> dict[Key, Future[Any]]:
        try:
            out = await _unless_silent(
                client,
                client.scatter(  # type: ignore[no-untyped-call]
                    data, workers=[workers[0]], hash=False, direct=True, asynchronous=True
                ),
                workers[:1],
            )
        except Exception:  # a worker left or froze since it was placed: any live one
            live = await _dist.running_workers(client)
            silent = await _dist.run_on_scheduler(client, silent_workers, sorted(live))
            alive = [w for w in live if w not in silent and w != workers[0]]
            out = await client.scatter(  # type: ignore[no-untyped-call]
                data, workers=alive or None, hash=False, direct=True, asynchronous=True
            )
            return dict(out)
        if len(workers) > 1:
            # the second reader's copy from here too: one lost worker does not lose the
            # block, and that share does not wait on the first worker (a straggler, or
            # frozen); without it the job still runs
            with contextlib.suppress(Exception):
                await _unless_silent(
                    client,
                    client.scatter(  # type: ignore[no-untyped-call]
                        data, workers=[workers[1]], hash=False, direct=True, asynchronous=True
                    ),
                    workers[1:],
                )
        return dict(out)

    sent: dict[Key, Future[Any]] = {}
    for part in await asyncio.gather(*(send(w, d) for w, d in by_workers.items())):
        sent.update(part)
    return [sent[(name, j)] for j in range(len(arrays))]


class _Silent(Exception):
    """A worker a transfer waits for sends no heartbeat (frozen)."""


async def _unless_silent(client: Client, transfer: Awaitable[T], workers: Sequence[str]) -> T:
    """``await transfer``, given up (``_Silent``) once one of ``workers`` is found to send
    no heartbeat: a frozen worker accepts the connection and never answers, and a
    transfer to it would hold the job back until ``worker-ttl`` removes it. A live worker
    that is slow to take a large block keeps its heartbeat, so no size limit applies."""
    task = asyncio.ensure_future(transfer)
    while True:
        done, _ = await asyncio.wait({task}, timeout=SILENT_AFTER)
        if done:
            return task.result()
        if await _dist.run_on_scheduler(client, silent_workers, list(workers)):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise _Silent(f"worker(s) {list(workers)} send no heartbeat")


def local_arrays(blocks: Blocks) -> list[Any]:
    """The K blocks of a ``local`` adapter as arrays of its dtype, views where they can be
    (a list's own arrays: ``stacked()`` would copy them all into one)."""
    from ..collections.numpy import ListBlocks

    if isinstance(blocks, ListBlocks):
        return [np.asarray(a, dtype=blocks.dtype) for a in blocks.arrays]
    return list(blocks.stacked())


def block_eval_task(
    token: str,
    index: int,
    seq: int,
    func: Callable[..., Any],
    block: Share,
    call: tuple[tuple[Any, ...], dict[str, Any]],
) -> Any:
    """:func:`~.worker.eval_task` on a private copy of a scattered in-memory block.

    The scattered block is also read by the other shares that mix it (and by a
    repetition's other copies, fetched from here later): an ``f`` that writes to its
    input in place must not change what they read, as when every task got its own copy
    of its share from its spec."""
    if state().is_done(token):
        return None
    return eval_task(token, index, seq, func, np.array(block, copy=True), call)


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
        self._call: CallArg | None = None

    async def initial(self, job: CodedJob, call: CallArg) -> list[TaskSpec]:
        self._call = call
        K = job.code.K
        if job.blocks.local:
            # block j's first copy and, elsewhere, its backup's likely worker
            homes = [[job.workers[j], job.workers[(j + 1) % K]][: min(K, 2)] for j in range(K)]
            arrays = local_arrays(job.blocks)
            chunks = await scatter_blocks(job.client, arrays, homes, job.token)
        else:
            chunks = await job.blocks.to_futures(job.client)
        # held by the job alone, which drops them when it ends (the launch may outlive it,
        # e.g. in a traceback, and must not keep the blocks on the cluster)
        job._chunks = list(chunks)
        self.launched_at = dict.fromkeys(range(K), job._elapsed())
        return [self._spec(job, j, j, call) for j in range(K)]

    def _spec(self, job: CodedJob, i: int, j: int, call: CallArg) -> TaskSpec:
        """Copy ``i`` of block ``j`` (``i >= K``: a backup)."""
        spec = job.eval_spec(i, job._chunks[j], call, backup=i >= job.code.K)
        if job.blocks.local:  # its own copy of the scattered block, as block_eval_task says
            spec.func = block_eval_task
        return spec

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
            specs.append(self._spec(job, i, j, call))
        job._launch_graph(specs)
