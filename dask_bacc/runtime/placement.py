"""Where the coded tasks run: one per distinct worker, spread over hosts."""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dask.typing import Key

__all__ = [
    "SILENT_AFTER",
    "choose_workers",
    "place_copies",
    "release_restrictions",
    "silent_workers",
    "spread_order",
    "waiting_on_silent",
]

#: seconds without a heartbeat after which a worker counts as not answering (distributed's
#: workers send one every 0.5 s to a few seconds, depending on the cluster's size)
SILENT_AFTER = 3.0


def _host(addr: str, info: Mapping[str, Any]) -> str:
    host = info.get("host")
    if host:
        return str(host)
    # "tcp://10.0.0.1:1234" -> "10.0.0.1"
    return addr.split("://", 1)[-1].rsplit(":", 1)[0]


def choose_workers(
    workers: Mapping[str, Mapping[str, Any]],
    n: int,
    *,
    spread_hosts: bool = True,
    oversubscribe: str = "raise",
    what: str = "coded tasks",
) -> list[str]:
    """Pick a worker address for each of ``n`` coded tasks.

    Workers are ordered least-busy first (tasks executing plus ready), and with
    ``spread_hosts`` the order deals one worker per host in turn, so the first picks land
    on distinct machines: stragglers on one machine are correlated.

    Parameters
    ----------
    workers : mapping
        ``scheduler.identity()["workers"]``: address -> worker info.
    n : int
        Number of coded tasks.
    spread_hosts : bool
        Interleave hosts (``bacc.spread-hosts``).
    oversubscribe : {"raise", "warn"}
        With fewer workers than tasks: raise ``ValueError``, or warn and place tasks
        round-robin (``bacc.oversubscribe``).
    """
    running = {a: info for a, info in workers.items() if info.get("status", "running") == "running"}
    if not running:
        raise ValueError("the cluster has no running workers to place coded tasks on")
    if n > len(running):
        msg = (
            f"{n} {what} need {n} distinct workers but the cluster has {len(running)}; "
            f"pass a smaller n_coded, add workers, or set bacc.oversubscribe to 'warn'"
        )
        if oversubscribe != "warn":
            raise ValueError(msg)
        warnings.warn(
            f"{n} {what} on {len(running)} workers: several tasks share a worker, so "
            "their stragglers are correlated",
            RuntimeWarning,
            stacklevel=4,
        )

    def load(addr: str) -> tuple[int, str]:
        # task counts from the worker's last heartbeat: a worker still running cancelled
        # stragglers of an earlier job goes last
        counts = running[addr].get("metrics", {}).get("task_counts", {})
        busy = sum(int(counts.get(state, 0)) for state in ("executing", "ready", "waiting"))
        return busy, addr

    ordered = sorted(running, key=load)
    if spread_hosts:
        by_host: dict[str, list[str]] = defaultdict(list)
        for addr in ordered:
            by_host[_host(addr, running[addr])].append(addr)
        queues = list(by_host.values())
        ordered = []
        while any(queues):
            for q in queues:
                if q:
                    ordered.append(q.pop(0))
    return [ordered[i % len(ordered)] for i in range(n)]


def spread_order(n: int) -> list[int]:
    """The indices ``0..n-1`` in bit-reversed order: every prefix is spread over the range.

    Tasks of equal length tend to finish in the order they were launched; launching the
    coded tasks as 0, n/2, n/4, 3n/4, ... means the results that arrive last (and are cut
    off by a first-k wait) are scattered over the worker points rather than bunched at one
    end, where they would leave a wide gap in Berrut's interpolation.
    """
    if n <= 0:
        return []
    bits = max(1, (n - 1).bit_length())
    reversed_ = (int(format(i, f"0{bits}b")[::-1], 2) for i in range(1 << bits))
    return [i for i in reversed_ if i < n]


#: how a backup's worker is chosen: most input bytes held, not yet holding a backup of the
#: same primary worker's blocks, least loaded, then the next after the primary's
Rank = tuple[int, int, int, int]


def place_copies(
    workers: Sequence[str],
    primary: Sequence[str | None],
    held: Sequence[Mapping[str, int]],
    load: Mapping[str, int] | None = None,
    exclude: Sequence[Collection[str]] | None = None,
) -> tuple[list[str], list[str | None]]:
    """Where the two copies of each block run: ``(primaries, backups)``.

    A block's primary goes where most of its input bytes are (``primary[b]`` when known,
    else the largest holder in ``held[b]``, else round-robin over ``workers``); its backup
    goes to another worker: the one holding most of its input bytes besides (a replica
    holder), then one that holds no backup of the same primary worker's blocks yet (so a
    slow worker's blocks have their backups on ``min(blocks, W - 1)`` different workers,
    replica holders aside), then the least loaded, then the next after the primary's in
    ``workers`` order shifted by how many of that primary's blocks were placed already.
    No worker gets both copies of a block; with one worker (or every other worker
    excluded) there is no backup (None).

    Parameters
    ----------
    workers : sequence of str
        The workers that may take copies, in spread order (:func:`spread_order`).
    primary : sequence of str or None
        Per block: the worker its primary is known to run on (None: not known).
    held : sequence of mapping
        Per block: worker -> bytes of the block's inputs it holds.
    load : mapping, optional
        Tasks each worker runs already (the backups placed here are added).
    exclude : sequence of collections, optional
        Per block: workers that must not get its backup (they run other copies of it);
        None when every worker is excluded.
    """
    if not workers:
        raise ValueError("no worker to place copies on")
    index = {w: i for i, w in enumerate(workers)}
    W = len(workers)
    count = {w: int((load or {}).get(w, 0)) for w in workers}
    placed_from: dict[str, int] = defaultdict(int)
    #: per primary worker, the workers its blocks' backups went to in the current round
    used: dict[str, set[str]] = defaultdict(set)
    primaries: list[str] = []
    backups: list[str | None] = []
    banned: Sequence[Collection[str]] = exclude if exclude is not None else [()] * len(primary)
    for b, (known, have, no) in enumerate(zip(primary, held, banned, strict=True)):
        p = known if known in index else None
        if p is None:
            holders = [w for w in have if w in index and have[w] > 0]
            p = max(holders, key=lambda w: (have[w], -index[w])) if holders else workers[b % W]
        primaries.append(p)
        candidates = [w for w in workers if w != p and w not in no]
        if not candidates:
            backups.append(None)
            continue
        shift = placed_from[p]
        placed_from[p] += 1
        if len(used[p]) >= W - 1:  # every other worker has one of p's backups: a new round
            used[p] = set()

        def rank(w: str, p: str = p, shift: int = shift, have: Mapping[str, int] = have) -> Rank:
            return (
                -have.get(w, 0),
                int(w in used[p]),
                count[w],
                (index[w] - index[p] - 1 - shift) % W,
            )

        q = min(candidates, key=rank)
        count[q] += 1
        used[p].add(q)
        backups.append(q)
    return primaries, backups


def _is_silent(ws: Any, now: float) -> bool:
    """A scheduler ``WorkerState`` whose last heartbeat is older than ``SILENT_AFTER``."""
    return bool(now - ws.last_seen > SILENT_AFTER)


def silent_workers(workers: list[str], dask_scheduler: Any = None) -> list[str]:
    """On the scheduler: which of ``workers`` sent no heartbeat for longer than
    ``SILENT_AFTER`` seconds (frozen, or paused for long: still counted as running until
    ``worker-ttl`` removes them)."""
    assert dask_scheduler is not None
    from distributed.metrics import time as now

    t = now()
    known = [(a, dask_scheduler.workers.get(a)) for a in workers]
    return [a for a, ws in known if ws is not None and _is_silent(ws, t)]


def waiting_on_silent(tasks: list[Key], dask_scheduler: Any = None) -> dict[Key, list[Key]]:
    """On the scheduler: those of ``tasks`` that wait for an input only silent workers hold
    (their own worker lacks it and sends heartbeats): task -> those inputs. A transfer
    from a frozen worker waits until ``worker-ttl`` removes it."""
    assert dask_scheduler is not None
    from distributed.metrics import time as now

    t = now()
    out: dict[Key, list[Key]] = {}
    for key in tasks:
        ts = dask_scheduler.tasks.get(key)
        if ts is None or ts.state != "processing" or _is_silent(ts.processing_on, t):
            continue
        stuck = [
            d.key
            for d in ts.dependencies
            if ts.processing_on not in d.who_has
            and d.who_has
            and all(_is_silent(ws, t) for ws in d.who_has)
        ]
        if stuck:
            out[key] = stuck
    return out


def release_restrictions(keys: list[Key], dask_scheduler: Any = None) -> int:
    """On the scheduler: lift the worker restrictions of the tasks ``keys`` that it still
    has (a task the job let go of is skipped); how many were lifted. A task that started
    on its worker cannot be stolen any more, and unrestricted it is recomputed anywhere
    when that worker leaves with its result."""
    assert dask_scheduler is not None
    n = 0
    for key in keys:
        ts = dask_scheduler.tasks.get(key)
        if ts is not None and ts.worker_restrictions:
            ts.worker_restrictions = None
            ts.loose_restrictions = False
            n += 1
    return n
