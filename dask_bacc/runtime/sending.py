"""What travels between the client and the workers: a job's in-memory input blocks,
sent once each (:class:`ClientBlocks`, used by the launch policies of :mod:`.launch` for
input above ``bacc.data-inline-limit`` and by the job, which sends a lost block again),
and results brought back under watch (:func:`watched_gather`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from distributed.client import FutureCancelledError

from .. import config
from . import _dist, keys
from .placement import silent_workers

if TYPE_CHECKING:
    from dask.typing import Key
    from distributed import Client, Future

    from ..collections import Blocks

__all__ = ["TRANSFER_GRACE", "ClientBlocks", "detach", "local_arrays", "watched_gather"]

#: seconds a transfer from the workers is given past a job's timeout (the results the
#: timeout decodes from are still to be fetched then)
TRANSFER_GRACE = 1.0


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
                        detach(loser)
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


#: requests left to run in the background (transfers given up for a faster copy, a
#: finished job's last message), held until they end
_detached: set[asyncio.Future[Any]] = set()


def detach(task: asyncio.Future[Any]) -> None:
    """Let a request run to its end in the background, then drop it; its exception is
    retrieved (a worker that left, a closing client: no news). A transfer given up for a
    faster copy is left to land: cancelled midway, a direct scatter could leave the data
    on the worker with the scheduler never told (nothing would release it)."""
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


async def watched_gather(
    client: Client,
    want: Mapping[int, Future[Any]],
    worker_of: Mapping[int, str],
    status: Callable[[int], str | None],
    timeout: float | None = None,
) -> dict[int, Any]:
    """Gather ``want`` (index -> a future on the worker ``worker_of[index]``), skipping
    errors; returns what arrived.

    A result whose worker left before the transfer is recomputed by the scheduler on that
    (departed) worker only, so a plain gather would wait forever: the workers are watched,
    and once one of them is gone or a task is ``lost`` (``status(index)``: the job's own
    view of the task), or ``timeout`` seconds passed, only what is finished on a live
    worker is taken.
    """
    poll = min(config.seconds("poll-interval"), 0.25)
    loop = asyncio.get_running_loop()
    end = None if timeout is None else loop.time() + timeout
    gather = asyncio.ensure_future(_dist.gather(client, dict(want), errors="skip"))
    while True:
        wait = poll if end is None else max(min(poll, end - loop.time()), 0)
        done, _ = await asyncio.wait({gather}, timeout=wait)
        if done:
            # lost mid-transfer, or cancelled by the scheduler: written off
            with contextlib.suppress(Exception, FutureCancelledError):
                return dict(gather.result())
            return {}
        live = set(await _dist.running_workers(client))
        lost = any(
            worker_of[i] not in live or "lost" in (f.status, status(i)) for i, f in want.items()
        )
        if not lost and (end is None or loop.time() < end):
            continue
        gather.cancel()
        with contextlib.suppress(BaseException):
            await gather
        here = {i: f for i, f in want.items() if f.status == "finished" and worker_of[i] in live}
        bound: float | None = None
        if end is not None:
            # past the bound: leave out the results of workers that do not answer (frozen:
            # no heartbeat), whose transfer would hold back the others' (the client
            # batches concurrent gathers into one request)
            silent = set(await _dist.run_on_scheduler(client, silent_workers, sorted(live)))
            here = {i: f for i, f in here.items() if worker_of[i] not in silent}
            bound = TRANSFER_GRACE
        with contextlib.suppress(Exception, FutureCancelledError):
            return dict(await asyncio.wait_for(_dist.gather(client, here, errors="skip"), bound))
        return {}
