"""Helpers the cluster tests share (imported by name: ``tests/`` is on ``sys.path``)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from distributed import Event, LocalCluster, Scheduler
from distributed import utils_test as _utils_test

from dask_bacc.runtime.placement import choose_workers


async def names_at(c: Any, indices: Any, n: int) -> tuple[set[str], list[str]]:
    """Names of the workers the coded tasks ``indices`` of an N=n job will be pinned to,
    and the whole placement (coded task i -> worker address)."""
    info = await c.scheduler.identity(n_workers=-1)
    placement = choose_workers(info["workers"], n)
    return {str(info["workers"][placement[i]]["name"]) for i in indices}, placement


async def until(predicate: Callable[[], bool], what: str, deadline: float = 30.0) -> None:
    """Poll ``predicate()`` until true; fail (never hang) after ``deadline`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while not predicate():
        assert loop.time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def blocker(event_name: str) -> int:
    """A plain task that occupies its worker's thread until the distributed Event
    ``event_name`` is set (to keep a worker busy with work that is not a coded eval; coded
    evals are held with ``dask_bacc.testing.gate_stragglers``)."""
    Event(event_name).wait()
    return 0


async def idle(workers: Any, deadline: float = 30.0) -> None:
    """Wait until none of the (in-process) ``workers`` executes a task: the stragglers of
    a finished job, held or cancelled, have let go of their threads."""
    await until(
        lambda: not any(w.state.executing_count for w in workers), "the workers to idle", deadline
    )


async def no_tasks(s: Any, deadline: float = 10.0) -> None:
    """Wait until the scheduler holds no task at all (polled, no ``gc.collect()``)."""
    await until(lambda: not s.tasks, f"tasks to leave the scheduler: {list(s.tasks)}", deadline)


def gen_cluster(**kwargs: Any) -> Callable[[Callable], Callable]:
    """``distributed.utils_test.gen_cluster`` with its default checks (no thread, comm,
    client or process leaked), and one more before the cluster closes: once the test body
    returns, every task leaves the scheduler by reference counting alone. A job that keeps
    its keys alive through a reference cycle, or forgets to release them, fails here."""

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        async def test(*args: Any, **kw: Any) -> Any:
            result = await func(*args, **kw)
            s = next(a for a in args if isinstance(a, Scheduler))
            await no_tasks(s)
            return result

        return _utils_test.gen_cluster(**kwargs)(test)

    return decorate


@contextlib.contextmanager
def checked_local_cluster(**kwargs: Any) -> Iterator[LocalCluster]:
    """An in-process ``LocalCluster`` for synchronous tests, with the same end checks as
    :func:`gen_cluster`: distributed's ``check_thread_leak`` around it, and no task left on
    the scheduler (polled, no ``gc.collect()``) before it closes."""
    options = {"processes": False, "dashboard_address": None, **kwargs}
    with _utils_test.check_thread_leak(), LocalCluster(**options) as lc:
        yield lc
        end = time.monotonic() + 10
        while lc.scheduler.tasks:
            assert time.monotonic() < end, (
                f"tasks left on the scheduler: {list(lc.scheduler.tasks)}"
            )
            time.sleep(0.01)
