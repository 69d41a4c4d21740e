"""Straggler injection for tests, demos and benchmarks.

A :class:`StragglerPlugin` installed on the workers adds a delay to dask-bacc's coded eval
tasks, drawn from a straggler model with a seeded generator: the draw for coded task ``i``
of a client's ``s``-th job depends only on ``(seed, s, i)`` (and, for
:class:`SlowWorkers`, the worker's name), so a script that runs the same jobs in the
same order sees the same stragglers. The delay is interruptible: it ends as soon as its
job has decoded or been cancelled, so cancelled stragglers do not keep occupying workers.

>>> from dask_bacc.stragglers import Bimodal, inject_stragglers
>>> with inject_stragglers(Bimodal(p=0.1, delay=2.0), seed=0):  # doctest: +SKIP
...     dask_bacc.map_coded(f, X)
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from distributed import WorkerPlugin, default_client

from .runtime.worker import STRAGGLER_PLUGIN_NAME, straggle

__all__ = [
    "PLAIN_SEQ_BASE",
    "Bimodal",
    "ShiftedExponential",
    "SlowWorkers",
    "StragglerInjection",
    "StragglerModel",
    "StragglerPlugin",
    "clear_stragglers",
    "draw_delay",
    "inject_stragglers",
    "plain_task",
    "task_seconds",
]


#: Baseline (plain Dask) jobs draw their stragglers with ``seq = PLAIN_SEQ_BASE + job number``,
#: far above the ``seq`` numbers dask-bacc's coded jobs use (0, 1, 2, ... per client process).
PLAIN_SEQ_BASE = 1_000_000_000


class StragglerModel:
    """Extra seconds a coded eval task waits after ``func`` returned."""

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        """The delay for one task; ``elapsed`` is how long ``func`` itself took."""
        raise NotImplementedError


def _nonneg(name: str, value: float) -> None:
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")


@dataclass(frozen=True)
class SlowWorkers(StragglerModel):
    """A fixed set of slow workers (by name): each of their tasks is delayed.

    The delay is ``delay + (factor - 1) * elapsed`` seconds.
    """

    names: tuple[str, ...]
    delay: float = 1.0
    factor: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "names", tuple(str(n) for n in self.names))
        _nonneg("delay", self.delay)
        if self.factor < 1:
            raise ValueError(f"factor must be >= 1, got {self.factor}")

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        if str(worker_name) not in self.names:
            return 0.0
        return self.delay + (self.factor - 1) * elapsed


@dataclass(frozen=True)
class Bimodal(StragglerModel):
    """Each task straggles with probability ``p``: ``delay + (factor - 1) * elapsed`` more."""

    p: float
    delay: float = 1.0
    factor: float = 1.0

    def __post_init__(self):
        if not 0 <= self.p <= 1:
            raise ValueError(f"p must lie in [0, 1], got {self.p}")
        _nonneg("delay", self.delay)
        if self.factor < 1:
            raise ValueError(f"factor must be >= 1, got {self.factor}")

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        if rng.random() >= self.p:
            return 0.0
        return self.delay + (self.factor - 1) * elapsed


@dataclass(frozen=True)
class ShiftedExponential(StragglerModel):
    """Every task waits ``shift + Exp(scale)`` seconds (the classic straggler model)."""

    scale: float
    shift: float = 0.0

    def __post_init__(self):
        _nonneg("scale", self.scale)
        _nonneg("shift", self.shift)

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        return self.shift + (rng.exponential(self.scale) if self.scale > 0 else 0.0)


@dataclass
class StragglerPlugin(WorkerPlugin):
    """Worker plugin that delays dask-bacc eval tasks according to ``model``.

    Parameters
    ----------
    model : StragglerModel
        :class:`SlowWorkers`, :class:`Bimodal` or :class:`ShiftedExponential`.
    seed : int
        Seed of the per-task generators.
    """

    model: StragglerModel
    seed: int = 0
    name: str = STRAGGLER_PLUGIN_NAME
    log: deque = field(default_factory=lambda: deque(maxlen=100_000), repr=False)
    busy: deque = field(default_factory=lambda: deque(maxlen=100_000), repr=False)

    def __post_init__(self):
        if not isinstance(self.model, StragglerModel):
            raise TypeError(f"model must be a StragglerModel, got {type(self.model).__name__}")

    def record(self, *, seq: int, index: int, seconds: float, worker_name: str) -> None:
        """Note that task ``index`` of job ``seq`` occupied a thread for ``seconds``."""
        self.busy.append((seq, index, worker_name, seconds))

    def delay(self, *, index: int, seq: int, elapsed: float, worker_name: str) -> float:
        """Seconds to delay coded task ``index`` of job number ``seq`` on this worker."""
        d = draw_delay(self.model, self.seed, seq, index, worker_name, elapsed)
        self.log.append((seq, index, worker_name, d))
        return d


def draw_delay(
    model: StragglerModel,
    seed: int,
    seq: int,
    index: int,
    worker_name: str = "",
    elapsed: float = 0.0,
) -> float:
    """The delay a :class:`StragglerPlugin` with ``seed`` draws for task ``index`` of job ``seq``.

    Benchmarks call it to replay the draws off the cluster (which tasks straggled).
    """
    return float(model.draw(np.random.default_rng([seed, seq, index]), worker_name, elapsed))


def inject_stragglers(
    model: StragglerModel, seed: int = 0, client: Any = None
) -> StragglerInjection:
    """Install a :class:`StragglerPlugin` on every worker (and on workers that join later).

    The stragglers stay on for every later job until :func:`clear_stragglers`, or until
    the end of a ``with`` block::

        with inject_stragglers(Bimodal(p=0.1, delay=2.0)):
            dask_bacc.map_coded(f, X)  # some coded tasks straggle
        dask_bacc.map_coded(f, X)  # none do

    With an asynchronous client, ``await inject_stragglers(...)`` or
    ``async with inject_stragglers(...)``.

    Parameters
    ----------
    model : StragglerModel
        Which tasks straggle and by how much.
    seed : int
        Seed of the draws (the same jobs in the same order straggle alike).
    client : distributed.Client, optional
        Defaults to the current client.

    Returns
    -------
    StragglerInjection
        A context manager that removes the stragglers on exit.
    """
    client = client if client is not None else default_client()
    registered = client.register_plugin(StragglerPlugin(model, seed), name=STRAGGLER_PLUGIN_NAME)
    return StragglerInjection(client, registered if client.asynchronous else None)


class StragglerInjection:
    """Injected stragglers (from :func:`inject_stragglers`): ``with`` / ``async with``
    removes them on exit; :meth:`clear` removes them at once."""

    def __init__(self, client: Any, pending: Any = None):
        self.client = client
        self._pending = pending  # an asynchronous client's registration, to await

    async def _registered(self) -> StragglerInjection:
        pending, self._pending = self._pending, None
        if pending is not None:
            await pending
        return self

    def __await__(self) -> Any:
        return self._registered().__await__()

    def clear(self) -> Any:
        """Remove the stragglers (with an asynchronous client, await the result)."""
        return clear_stragglers(self.client)

    def __enter__(self) -> StragglerInjection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    async def __aenter__(self) -> StragglerInjection:
        return await self._registered()

    async def __aexit__(self, *exc: object) -> None:
        await self.clear()


def clear_stragglers(client: Any = None) -> Any:
    """Remove the straggler plugin from the workers (with an asynchronous client, await
    the result)."""
    client = client if client is not None else default_client()
    return client.unregister_worker_plugin(STRAGGLER_PLUGIN_NAME)


def plain_task(
    block: Any, seq: int, index: int, func: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """An uncoded baseline task that meets the same injected stragglers as coded ones.

    Runs ``func(block, *args, **kwargs)``, then sleeps the delay the worker's
    :class:`StragglerPlugin` draws for task ``index`` of job ``seq``. The sleep is not
    interruptible: plain Dask cannot stop a running task. Give baseline jobs ``seq``
    numbers disjoint from dask-bacc's (which count 0, 1, 2, ... per client process), e.g.
    ``client.map(plain_task, blocks, [PLAIN_SEQ_BASE + r] * K, range(K), [func] * K)``.
    """
    start = time.perf_counter()
    out = func(block, *args, **kwargs)
    straggle(index, seq, start, time.sleep)
    return out


def task_seconds(client: Any = None) -> list[tuple[int, int, str, float]]:
    """Thread-seconds each instrumented task occupied: ``(seq, index, worker, seconds)``.

    Recorded by the :class:`StragglerPlugin` for every dask-bacc eval task and every
    :func:`plain_task` that ran to the end on a worker, including cancelled stragglers
    (their delay counts until it was interrupted). Benchmarks sum it as compute spent.
    """
    client = client if client is not None else default_client()

    def collect(dask_worker: Any) -> list:
        plugin = dask_worker.plugins.get(STRAGGLER_PLUGIN_NAME)
        return list(plugin.busy) if plugin is not None else []

    async def gather() -> list[tuple[int, int, str, float]]:
        per_worker = await client.run(collect, asynchronous=True)
        return [tuple(entry) for entries in per_worker.values() for entry in entries]

    return client.sync(gather)
