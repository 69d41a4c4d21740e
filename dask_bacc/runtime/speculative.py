"""Backup copies of late tasks: hedged execution and speculative backups (exact results).

K uncoded tasks run, one per worker. A task still running after a threshold gets a backup
copy on another worker; the first copy to finish wins and the others are cancelled. Two
rules, one mechanism (:class:`Speculation`):

* ``code="hedged"`` (:meth:`Speculation.hedge`): a task is backed up once it ran
  ``multiplier`` times longer than this function's expected task, known from the job's
  finished tasks or, before enough of them finished, from the function's earlier jobs on
  this cluster (the scheduler plugin keeps them: :func:`task_prior`). No "most tasks done"
  gate, so the first tasks of a job are hedged too; a backup that runs late itself gets
  another copy, within a budget of extra task-seconds per job. As "The Tail at Scale"
  hedges a request once it runs past its expected latency.
* ``code="speculative"`` (:meth:`Speculation.spark`, :meth:`Speculation.cubed`): Spark's
  and cubed's rule, armed only once most tasks finished; one backup per task.

A launch policy (:class:`~.launch.SpeculativeLaunch`, its rule :func:`~.launch.plan_backups`)
for ``map_coded``, decoded as copies (task ``K + j`` is the first backup of block j, ``2K + j``
its second); the layer jobs of ``coded()`` / ``coding()`` follow the same rule
(:class:`~.redundant.RedundantJob`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from .. import config
from ..codes import RepetitionCode
from ..codes.transform import Transform
from ..collections import Blocks
from .job import CodedJob
from .keys import function_key
from .launch import SpeculativeLaunch
from .placement import choose_workers
from .rules import BACKUP_CODES, Speculation, backup_code
from .wait import FirstK

if TYPE_CHECKING:
    from distributed import Client

__all__ = [
    "BACKUP_CODES",
    "Speculation",
    "backup_code",
    "speculative_job",
    "speculative_placement",
]


def speculative_job(
    client: Client,
    blocks: Blocks,
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    speculation: Speculation,
    timeout: float | None,
    combine: str,
    workers: list[str],
    transform: Transform | None = None,
    launch: SpeculativeLaunch | None = None,
) -> CodedJob:
    """A job of K uncoded tasks with backup copies (``code="hedged"`` or ``"speculative"``).

    Its decoder is a repetition code over the copies (task ``c * K + j`` is copy ``c`` of
    block j, the first copy of a block to land gives it); the backups are launched by
    :class:`~.launch.SpeculativeLaunch` (``launch``, or one of ``speculation``) only
    when its rule fires.
    """
    K = blocks.K
    job = CodedJob(
        client,
        RepetitionCode(K, speculation.copies * K),
        blocks,
        func,
        args,
        kwargs,
        FirstK(K),
        timeout,
        combine,
        workers,
        launch=launch or SpeculativeLaunch(speculation, function_key(func)),
        transform=transform,
    )
    name = "hedged" if speculation.hedges else "speculative"
    job.report.code = {"name": name, "K": K, **asdict(speculation)}
    job.report.N = K
    return job


def speculative_placement(workers: Mapping[str, Mapping[str, Any]], K: int) -> list[str]:
    """One worker per primary task (they must be distinct, as for coded tasks)."""
    return choose_workers(
        workers,
        K,
        spread_hosts=bool(config.get("spread-hosts")),
        oversubscribe=str(config.get("oversubscribe")),
        what="speculative tasks",
    )
