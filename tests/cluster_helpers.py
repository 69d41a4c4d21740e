"""Helpers the cluster tests share (imported by name: ``tests/`` is on ``sys.path``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

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


async def no_bacc_tasks(s: Any, token: str = "", deadline: float = 20.0) -> None:
    """Wait until the scheduler holds no ``bacc-`` task (of job ``token``, if given);
    polled with a deadline, never after a ``gc.collect()``."""

    def left() -> list[Any]:
        return [k for k in s.tasks if "bacc-" in str(k) and token in str(k)]

    await until(lambda: not left(), f"bacc- tasks to leave the scheduler: {left()}", deadline)
