"""What the hedging rule knows before a job's own tasks finish, kept on the scheduler.

A hedged job (``code="hedged"``, :meth:`~.rules.Speculation.hedge`) backs a task up
once it has run ``multiplier`` times its function's expected task. Until ``known`` of the
job's own tasks finished, that expectation is the median run time of the function's recent
tasks on this cluster, and backups avoid the workers the straggler model holds slow. Both
live in the scheduler plugin (:class:`~dask_bacc.diagnostics.plugin.BaccDiagnostics`:
``task_times``, ``model``); a job asks for them when it starts, in the background (the
first check that finds the answer uses it), and tells its tasks' run times and its
backups' outcomes when it ends, without waiting for the reply. Without the plugin
(``bacc.diagnostics.enabled: false``) a job hedges from its own tasks only.

Both kinds of job use it: :class:`~.launch.SpeculativeLaunch` (``map_coded``) and
:class:`~.redundant.RedundantJob` (``coded()``, ``coding()``, dask DataFrames).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import diagnostics
from . import _dist

if TYPE_CHECKING:
    from distributed import Client
    from distributed.scheduler import Scheduler

    from .report import JobReport

__all__ = ["Prior", "close_backups", "learn", "new_record", "settle", "task_prior", "tell"]

#: a worker whose probability of a late task is above this gets no backup
SLOW = 0.5


def task_prior(func: str, dask_scheduler: Scheduler | None = None) -> dict[str, Any] | None:
    """On the scheduler: ``{"seconds": median run time of func's recent tasks or None,
    "slow": the workers the straggler model holds slow}`` (any worker may get a backup);
    None without the diagnostics plugin."""
    assert dask_scheduler is not None
    plugin: Any = dask_scheduler.plugins.get(diagnostics.PLUGIN_NAME)  # BaccDiagnostics
    if plugin is None:
        return None
    model = getattr(plugin, "model", None)
    slow = []
    if model is not None:
        for w, ws in dask_scheduler.workers.items():
            p = model.predict(w, ws.host)
            if p.n_eff > 0 and p.p_late > SLOW:
                slow.append(w)
    return {"seconds": plugin.task_times.expected(func), "slow": slow}


def learn(
    func: str,
    seconds: list[float],
    hedge: dict[str, Any],
    dask_scheduler: Scheduler | None = None,
) -> None:
    """On the scheduler: a finished job's task run times and backup outcomes."""
    assert dask_scheduler is not None
    plugin: Any = dask_scheduler.plugins.get(diagnostics.PLUGIN_NAME)  # BaccDiagnostics
    if plugin is not None:
        plugin.learn_backups(func, seconds, hedge)


def new_record(rule: str, budget: int | None) -> dict[str, Any]:
    """A job's ``report.hedge`` before any check: the rule's name and budget."""
    return {
        "rule": rule,
        "threshold": None,
        "expected": None,
        "source": "none",
        "budget": budget,
        "launched": 0,
        "won": 0,
        "cancelled": 0,
    }


def settle(report: JobReport) -> None:
    """The backups' outcomes into ``report.hedge`` at the job's end: those launched,
    those that gave their block (a returned task ``>= K``) and the others, cancelled
    (failed ones aside)."""
    hedge, K = report.hedge, report.K
    assert hedge is not None
    won = sum(i >= K for i in report.returned)
    failed = sum(i >= K for i in report.failed)
    launched = len(report.backups)
    hedge.update(launched=launched, won=won, cancelled=max(launched - won - failed, 0))


def close_backups(
    report: JobReport,
    prior: Prior | None,
    client: Client,
    func: str | None,
    seconds: Callable[[], list[float]],
) -> None:
    """A hedging job's end, for every kind of job: the backups' outcomes into
    ``report.hedge`` (:func:`settle`); the run times of its tasks that gave their block
    (``seconds()``) and those outcomes to the scheduler, the prior of the function's next
    jobs (when it asked for one: ``prior``)."""
    if report.hedge is None:
        return
    settle(report)
    if prior is not None:
        prior.close()
        if func is not None:
            tell(client, func, seconds(), report.hedge)


#: learn() calls on their way (a strong reference until each ends)
_sending: set[asyncio.Future[Any]] = set()


class Prior:
    """The scheduler's answer to :func:`task_prior`, asked for on creation (on the client's
    loop) and read when it has come: ``seconds`` (None: nothing known yet) and ``slow``."""

    def __init__(self, client: Client, func: str):
        self.func = func
        self.seconds: float | None = None
        self.slow: set[str] = set()
        self._asked: asyncio.Future[Any] | None = asyncio.ensure_future(
            _dist.run_on_scheduler(client, task_prior, func)
        )
        self._asked.add_done_callback(_retrieve)

    def poll(self) -> None:
        """Take the answer if it has come (never waits)."""
        asked = self._asked
        if asked is None or not asked.done():
            return
        self._asked = None
        if asked.cancelled() or asked.exception() is not None:
            return
        answer = asked.result()
        if answer:
            self.seconds = answer.get("seconds")
            self.slow = set(answer.get("slow") or ())

    def close(self) -> None:
        if self._asked is not None:
            self._asked.cancel()
            self._asked = None


def tell(client: Client, func: str, seconds: list[float], hedge: dict[str, Any]) -> None:
    """Send a finished job's run times and backup outcomes to the scheduler (no reply
    waited for; a cluster that is going loses them)."""
    sent = asyncio.ensure_future(_dist.run_on_scheduler(client, learn, func, seconds, hedge))
    _sending.add(sent)
    sent.add_done_callback(_sending.discard)
    sent.add_done_callback(_retrieve)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # a scheduler that is gone is no news
