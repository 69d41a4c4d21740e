"""Straggler injection for tests, demos and benchmarks.

A :class:`StragglerPlugin` installed on the workers adds a delay to dask-bacc's coded eval
tasks, drawn from a straggler model with a seeded generator: the draw for coded task ``i``
of a client's ``s``-th job depends only on ``(seed, s, i)`` (and, for
:class:`SlowWorkers`, the worker's name), so a script that runs the same jobs in the
same order sees the same stragglers. The delay is interruptible: it ends as soon as its
job has decoded or been cancelled, so cancelled stragglers do not keep occupying workers.

For tests that must not depend on the clock, :func:`gate_stragglers` holds chosen coded
tasks (by index or by worker) until a :class:`distributed.Event` is set, again letting go
when the job no longer needs them.

Both are eval hooks (:class:`dask_bacc.runtime.worker.EvalHook`): worker plugins that each
coded eval calls once ``func`` has returned.

>>> from dask_bacc.testing import Bimodal, inject_stragglers
>>> with inject_stragglers(Bimodal(p=0.1, delay=2.0), seed=0):  # doctest: +SKIP
...     dask_bacc.map_coded(f, X)
"""

from __future__ import annotations

import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from distributed import Client, Event, default_client

from ..runtime.worker import EvalCall, EvalHook, eval_hooks

__all__ = [
    "PLAIN_SEQ_BASE",
    "STRAGGLER_PLUGIN_NAME",
    "Bimodal",
    "CorrelatedHosts",
    "EventGate",
    "MovingSlowSet",
    "Pareto",
    "ShiftedExponential",
    "SlowHosts",
    "SlowWorkers",
    "StragglerGate",
    "StragglerInjection",
    "StragglerModel",
    "StragglerPlugin",
    "clear_stragglers",
    "draw_delay",
    "gate_stragglers",
    "host_of",
    "inject_stragglers",
    "plain_task",
    "task_seconds",
]

#: The name :func:`inject_stragglers` registers its :class:`StragglerPlugin` under.
STRAGGLER_PLUGIN_NAME = "bacc-stragglers"


#: Baseline (plain Dask) jobs draw their stragglers with ``seq = PLAIN_SEQ_BASE + job number``,
#: far above the ``seq`` numbers dask-bacc's coded jobs use (0, 1, 2, ... per client process).
PLAIN_SEQ_BASE = 1_000_000_000


class StragglerModel:
    """Extra seconds a coded eval task waits after ``func`` returned.

    Subclasses give :meth:`draw` (and override ``task_delay`` when tasks share a draw);
    :class:`SlowWorkers`, :class:`Bimodal`, :class:`ShiftedExponential`, ``Pareto``,
    ``SlowHosts``, ``CorrelatedHosts`` and ``MovingSlowSet`` are the built-in models.
    """

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        """The delay for one task.

        Parameters
        ----------
        rng : numpy.random.Generator
            The task's own generator, seeded with ``(seed, seq, index)``.
        worker_name : str
            The name of the worker running the task.
        elapsed : float
            How long ``func`` itself took, in seconds.

        Returns
        -------
        float
            Seconds to wait, >= 0.
        """
        raise NotImplementedError

    def task_delay(
        self, seed: int, seq: int, index: int, worker_name: str = "", elapsed: float = 0.0
    ) -> float:
        """The delay of task ``index`` of job ``seq`` under ``seed`` (what
        :func:`draw_delay` returns).

        By default :meth:`draw` with a generator seeded by ``[seed, seq, index]``, so each
        task's draw is independent of the others; models whose tasks share a draw (per
        host, per period of jobs) override it. (It is not called ``delay``: several models
        have a ``delay`` field.)

        Parameters
        ----------
        seed, seq, index : int
            The plugin's seed, the job's number and the task's index.
        worker_name : str
            The name of the worker running the task.
        elapsed : float
            How long ``func`` itself took, in seconds.

        Returns
        -------
        float
            Seconds to wait, >= 0.
        """
        return float(self.draw(np.random.default_rng([seed, seq, index]), worker_name, elapsed))


def _nonneg(name: str, value: float) -> None:
    if not np.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")


def _factor(name: str, value: float) -> None:
    if not value >= 1:
        raise ValueError(f"{name} must be >= 1, got {value}")


@dataclass(frozen=True)
class SlowWorkers(StragglerModel):
    """A fixed set of slow workers (by name): each of their tasks is delayed.

    The delay is ``delay + (factor - 1) * elapsed`` seconds.

    Parameters
    ----------
    names : tuple of str
        The slow workers' names (compared as strings).
    delay : float
        Seconds added to each of their tasks.
    factor : float
        At least 1: how many times ``func``'s own time each of their tasks takes in all.
    """

    names: tuple[str, ...]
    delay: float = 1.0
    factor: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(str(n) for n in self.names))
        _nonneg("delay", self.delay)
        _factor("factor", self.factor)

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        if str(worker_name) not in self.names:
            return 0.0
        return self.delay + (self.factor - 1) * elapsed


@dataclass(frozen=True)
class Bimodal(StragglerModel):
    """Each task straggles with probability ``p``: ``delay + (factor - 1) * elapsed`` more.

    Parameters
    ----------
    p : float
        Probability in [0, 1] that a task straggles.
    delay : float
        Seconds added to a straggling task.
    factor : float
        At least 1: how many times ``func``'s own time a straggling task takes in all.
    """

    p: float
    delay: float = 1.0
    factor: float = 1.0

    def __post_init__(self) -> None:
        if not 0 <= self.p <= 1:
            raise ValueError(f"p must lie in [0, 1], got {self.p}")
        _nonneg("delay", self.delay)
        _factor("factor", self.factor)

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        if rng.random() >= self.p:
            return 0.0
        return self.delay + (self.factor - 1) * elapsed


@dataclass(frozen=True)
class ShiftedExponential(StragglerModel):
    """Every task waits ``shift + Exp(scale)`` seconds (the classic straggler model).

    Parameters
    ----------
    scale : float
        Mean of the exponential part, in seconds (0: none).
    shift : float
        Seconds every task waits.
    """

    scale: float
    shift: float = 0.0

    def __post_init__(self) -> None:
        _nonneg("scale", self.scale)
        _nonneg("shift", self.shift)

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        return self.shift + (float(rng.exponential(self.scale)) if self.scale > 0 else 0.0)


def host_of(worker_name: str) -> str:
    """The host a worker runs on, by the test bed's naming convention.

    ``dask_bacc.bench.testbed.Testbed`` names its workers ``h<host>-w<i>``: the host
    is the part of the name before the first ``"-"``. A name without ``"-"`` is its own
    host.

    Parameters
    ----------
    worker_name : str
        A worker's name.

    Returns
    -------
    str
        Its host, e.g. ``"h0"`` for ``"h0-w3"``.

    Examples
    --------
    >>> host_of("h0-w3")
    'h0'
    >>> host_of("alice")
    'alice'
    """
    return str(worker_name).split("-", 1)[0]


def _hosts(name: str, hosts: Iterable[Any]) -> tuple[str, ...]:
    if isinstance(hosts, str):
        raise TypeError(f"{name} must be a tuple of host names, not a string: ({hosts!r},)")
    out = tuple(str(h) for h in hosts)
    for h in out:
        if not h or "-" in h:
            raise ValueError(f"{name}: a host name is non-empty and has no '-', got {h!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"{name} has duplicates: {out}")
    return out


def _int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return int(value)


@dataclass(frozen=True)
class Pareto(StragglerModel):
    """Heavy-tailed delays: every task waits ``scale * (X - 1)`` seconds, independently,
    where ``X`` is Pareto distributed with minimum 1 and shape ``alpha``.

    ``P(delay > t) = (1 + t / scale) ** -alpha``: the median is
    ``scale * (2 ** (1 / alpha) - 1)``; the mean, ``scale / (alpha - 1)``, is infinite for
    ``alpha <= 1``.

    Parameters
    ----------
    alpha : float
        Shape (tail index), > 0: the smaller, the heavier the tail.
    scale : float
        Seconds, >= 0 (0: no delay).
    """

    alpha: float
    scale: float

    def __post_init__(self) -> None:
        if not (np.isfinite(self.alpha) and self.alpha > 0):
            raise ValueError(f"alpha must be a finite number > 0, got {self.alpha}")
        _nonneg("scale", self.scale)

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        return self.scale * float(rng.pareto(self.alpha))


@dataclass(frozen=True)
class SlowHosts(StragglerModel):
    """Persistently slow hosts: every task on a worker of one of ``hosts`` (by
    :func:`host_of`) waits ``delay + (factor - 1) * elapsed`` seconds.

    Parameters
    ----------
    hosts : tuple of str
        The slow hosts, e.g. ``("h1",)`` for the workers ``h1-w*`` of the test bed.
    factor : float
        At least 1: how many times ``func``'s own time each of their tasks takes in all.
    delay : float
        Seconds added to each of their tasks.
    """

    hosts: tuple[str, ...]
    factor: float = 10.0
    delay: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "hosts", _hosts("hosts", self.hosts))
        _factor("factor", self.factor)
        _nonneg("delay", self.delay)

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        if host_of(worker_name) not in self.hosts:
            return 0.0
        return self.delay + (self.factor - 1) * elapsed


@dataclass(frozen=True)
class CorrelatedHosts(StragglerModel):
    """Hosts that are slow for a whole job: in each job, each host is slow with probability
    ``p``, independently of the other hosts and jobs, and then every task of that job on
    that host waits ``delay + (factor - 1) * elapsed`` seconds.

    The verdict for host ``h`` (:func:`host_of` the worker's name) in job ``seq`` is drawn
    by :meth:`task_delay` with a generator seeded by ``[seed, seq, zlib.crc32(h)]``, the
    same for every task of the job on that host. (:meth:`draw` alone, with a per-task
    generator, would give each task its own verdict.)

    Parameters
    ----------
    p : float
        Probability in [0, 1] that a host is slow in a job.
    factor : float
        At least 1: how many times ``func``'s own time a task on a slow host takes in all.
    delay : float
        Seconds added to each task on a slow host.
    """

    p: float
    factor: float = 10.0
    delay: float = 0.0

    def __post_init__(self) -> None:
        if not 0 <= self.p <= 1:
            raise ValueError(f"p must lie in [0, 1], got {self.p}")
        _factor("factor", self.factor)
        _nonneg("delay", self.delay)

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        if rng.random() >= self.p:
            return 0.0
        return self.delay + (self.factor - 1) * elapsed

    def host_slow(self, seed: int, seq: int, host: str) -> bool:
        """Whether ``host`` is slow in job ``seq`` under ``seed``."""
        return bool(self._host_rng(seed, seq, host).random() < self.p)

    @staticmethod
    def _host_rng(seed: int, seq: int, host: str) -> np.random.Generator:
        return np.random.default_rng([seed, seq, zlib.crc32(str(host).encode())])

    def task_delay(
        self, seed: int, seq: int, index: int, worker_name: str = "", elapsed: float = 0.0
    ) -> float:
        rng = self._host_rng(seed, seq, host_of(worker_name))
        return float(self.draw(rng, worker_name, elapsed))


@dataclass(frozen=True)
class MovingSlowSet(StragglerModel):
    """``count`` of ``hosts`` are slow, and which ones changes every ``period`` jobs.

    For job ``seq`` the slow set is
    ``np.random.default_rng([seed, seq // period]).choice(sorted(hosts), count,
    replace=False)``; every task on a worker of a slow host (by :func:`host_of`) waits
    ``delay + (factor - 1) * elapsed`` seconds.

    Parameters
    ----------
    hosts : tuple of str
        The hosts, e.g. ``("h0", "h1", "h2", "h3")``.
    count : int
        How many of them are slow at a time, in ``[0, len(hosts)]``.
    period : int
        Jobs (>= 1) between two redraws of the slow set.
    factor : float
        At least 1: how many times ``func``'s own time a task on a slow host takes in all.
    delay : float
        Seconds added to each task on a slow host.
    """

    hosts: tuple[str, ...]
    count: int
    period: int
    factor: float = 10.0
    delay: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "hosts", _hosts("hosts", self.hosts))
        if not self.hosts:
            raise ValueError("hosts must name at least one host")
        count = _int("count", self.count, 0)
        if count > len(self.hosts):
            raise ValueError(f"count must be <= len(hosts) = {len(self.hosts)}, got {count}")
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "period", _int("period", self.period, 1))
        _factor("factor", self.factor)
        _nonneg("delay", self.delay)

    def slow_hosts(self, seed: int, seq: int) -> frozenset[str]:
        """The slow hosts in job ``seq`` under ``seed``."""
        return self._pick(np.random.default_rng([seed, seq // self.period]))

    def _pick(self, rng: np.random.Generator) -> frozenset[str]:
        chosen = rng.choice(sorted(self.hosts), self.count, replace=False)
        return frozenset(str(h) for h in chosen)

    def draw(self, rng: np.random.Generator, worker_name: str, elapsed: float) -> float:
        if host_of(worker_name) not in self._pick(rng):
            return 0.0
        return self.delay + (self.factor - 1) * elapsed

    def task_delay(
        self, seed: int, seq: int, index: int, worker_name: str = "", elapsed: float = 0.0
    ) -> float:
        rng = np.random.default_rng([seed, seq // self.period])
        return float(self.draw(rng, worker_name, elapsed))


#: ``(seq, index, worker name, seconds)``: one entry of a plugin's logs
LogEntry = tuple[int, int, str, float]


def _log() -> deque[LogEntry]:
    return deque(maxlen=100_000)


def _worker_name(worker: Any) -> str:
    return "" if worker is None else str(worker.name)


@dataclass
class StragglerPlugin(EvalHook):
    """Worker plugin that delays dask-bacc eval tasks according to ``model``.

    An eval hook (:class:`~dask_bacc.runtime.worker.EvalHook`): each coded eval on its
    worker waits the drawn delay once ``func`` has returned, interrupted when the job is
    done. Install it with :func:`inject_stragglers`.

    Parameters
    ----------
    model : StragglerModel
        :class:`SlowWorkers`, :class:`Bimodal` or :class:`ShiftedExponential`.
    seed : int
        Seed of the per-task generators.
    name : str
        The plugin's name on the workers.

    Attributes
    ----------
    log : collections.deque
        ``(seq, index, worker name, delay drawn)`` of each task it delayed (or not).
    busy : collections.deque
        ``(seq, index, worker name, seconds)``: the thread time each task occupied, its
        delay included (what :func:`task_seconds` collects).
    """

    model: StragglerModel
    seed: int = 0
    name: str = STRAGGLER_PLUGIN_NAME
    log: deque[LogEntry] = field(default_factory=_log, repr=False)
    busy: deque[LogEntry] = field(default_factory=_log, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.model, StragglerModel):
            raise TypeError(f"model must be a StragglerModel, got {type(self.model).__name__}")

    def after_eval(self, call: EvalCall) -> None:
        """Delay the eval by the drawn delay (ending early when its job is done)."""
        self.straggle(
            seq=call.seq,
            index=call.index,
            start=call.start,
            worker_name=_worker_name(call.worker),
            wait=call.wait,
        )

    def straggle(
        self,
        *,
        seq: int,
        index: int,
        start: float,
        worker_name: str,
        wait: Callable[[float], object],
    ) -> None:
        """Delay task ``index`` of job ``seq``, which started at ``start``, and record the
        thread time it occupied.

        Parameters
        ----------
        seq, index : int
            The job's number and the task's index (the draw's seed with ``seed``).
        start : float
            When the task started (:func:`time.perf_counter`).
        worker_name : str
            The worker's name (for :class:`SlowWorkers`).
        wait : callable
            ``wait(seconds)`` does the waiting (interruptible for coded tasks).
        """
        d = self.delay(
            index=index, seq=seq, elapsed=time.perf_counter() - start, worker_name=worker_name
        )
        if d > 0:
            wait(d)
        self.record(
            seq=seq, index=index, seconds=time.perf_counter() - start, worker_name=worker_name
        )

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

    Parameters
    ----------
    model : StragglerModel
        The straggler model.
    seed, seq, index : int
        The plugin's seed, the job's number and the task's index.
    worker_name : str
        The worker's name.
    elapsed : float
        How long ``func`` took.

    Returns
    -------
    float
        The delay in seconds.
    """
    return model.task_delay(seed, seq, index, worker_name, elapsed)


_Injection = TypeVar("_Injection", bound="StragglerInjection")


class StragglerInjection:
    """Injected stragglers (from :func:`inject_stragglers` or :func:`gate_stragglers`):
    ``with`` / ``async with`` removes them on exit; :meth:`clear` removes them at once.

    With an asynchronous client, ``await`` it to wait for the plugin to be registered.

    Parameters
    ----------
    client : distributed.Client
        The client that registered the plugin.
    pending : object, optional
        An asynchronous client's registration, to await.
    name : str
        The plugin's name on the workers.
    """

    def __init__(self, client: Client, pending: Any = None, name: str = STRAGGLER_PLUGIN_NAME):
        self.client = client
        self.name = name
        self._pending = pending  # an asynchronous client's registration, to await

    async def _registered(self: _Injection) -> _Injection:
        pending, self._pending = self._pending, None
        if pending is not None:
            await pending
        return self

    def __await__(self: _Injection) -> Generator[Any, None, _Injection]:
        return self._registered().__await__()

    def clear(self) -> Any:
        """Remove the plugin from the workers (with an asynchronous client, await the
        result)."""
        return self.client.unregister_worker_plugin(self.name)

    def __enter__(self: _Injection) -> _Injection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear()

    async def __aenter__(self: _Injection) -> _Injection:
        return await self._registered()

    async def __aexit__(self, *exc: object) -> None:
        await self.clear()


def inject_stragglers(
    model: StragglerModel, seed: int = 0, client: Client | None = None
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


def clear_stragglers(client: Client | None = None) -> Any:
    """Remove the :class:`StragglerPlugin` from the workers (with an asynchronous client,
    await the result).

    Parameters
    ----------
    client : distributed.Client, optional
        Defaults to the current client.

    Returns
    -------
    object
        What ``client.unregister_worker_plugin`` returns (awaitable with an asynchronous
        client).
    """
    client = client if client is not None else default_client()
    return client.unregister_worker_plugin(STRAGGLER_PLUGIN_NAME)


# -- Event-gated stragglers --------------------------------------------------------------------
@dataclass
class EventGate(EvalHook):
    """Worker plugin that holds chosen coded evals until a :class:`distributed.Event` is set.

    An eval hook (:class:`~dask_bacc.runtime.worker.EvalHook`): an eval it selects, once
    ``func`` has returned, waits until the event named ``event`` is set, or (when
    ``interruptible``) until its job no longer needs the result, whichever comes first. Install
    it with :func:`gate_stragglers`.

    Parameters
    ----------
    event : str
        Name of the :class:`distributed.Event` that releases the held evals.
    indices : frozenset of int
        Coded task indices to hold (in every job while the gate is installed).
    workers : frozenset of str
        Names or addresses of workers whose evals to hold.
    interruptible : bool
        True: a held eval lets go as soon as its job has decoded or been cancelled, like an
        injected delay. False: it holds its thread until the event is set, like a ``func``
        that cannot be stopped (the straggler then stays running after the decode).
    poll : float
        Seconds between two checks whether the job is done, while waiting for the event.
    name : str
        The plugin's name on the workers (default ``bacc-gate-<event>``).

    Attributes
    ----------
    held : collections.deque
        ``(seq, index, worker name)`` of each eval it held, in the order they were held.
    """

    event: str
    indices: frozenset[int] = frozenset()
    workers: frozenset[str] = frozenset()
    interruptible: bool = True
    poll: float = 0.05
    name: str = ""
    held: deque[tuple[int, int, str]] = field(
        default_factory=lambda: deque(maxlen=100_000), repr=False
    )

    def __post_init__(self) -> None:
        self.indices = frozenset(_index(i) for i in self.indices)
        self.workers = frozenset(str(w) for w in self.workers)
        if not self.indices and not self.workers:
            raise ValueError("say which evals to hold: indices=, workers= or both")
        if not (np.isfinite(self.poll) and self.poll > 0):
            raise ValueError(f"poll must be a finite number > 0, got {self.poll}")
        self.name = self.name or f"bacc-gate-{self.event}"

    def holds(self, index: int, worker: Any) -> bool:
        """Whether the eval of coded task ``index`` on ``worker`` is held."""
        if index in self.indices:
            return True
        if worker is None or not self.workers:
            return False
        return str(worker.name) in self.workers or str(worker.address) in self.workers

    def after_eval(self, call: EvalCall) -> None:
        """Hold the eval until the event is set (or its job is done, if interruptible)."""
        if not self.holds(call.index, call.worker):
            return
        self.held.append((call.seq, call.index, _worker_name(call.worker)))
        event = Event(self.event)  # through the worker's client
        while not (self.interruptible and call.wait(0)):
            if event.wait(timeout=self.poll):  # returns at once when the event is set
                return


def _index(i: Any) -> int:
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
        raise TypeError(f"indices must be integers, got {i!r}")
    return int(i)


class StragglerGate(StragglerInjection):
    """Evals held by an :class:`EventGate` (from :func:`gate_stragglers`).

    :meth:`release` sets the event and lets them go; :meth:`clear` removes the gate. On
    leaving a ``with`` / ``async with`` block it does both. With an asynchronous client,
    await the results of :meth:`release` and :meth:`clear`.

    Parameters
    ----------
    client : distributed.Client
        The client that registered the gate.
    event : str
        Name of the :class:`distributed.Event` that releases the held evals.
    pending : object, optional
        An asynchronous client's registration, to await.
    name : str
        The gate's plugin name on the workers.
    """

    def __init__(self, client: Client, event: str, pending: Any = None, name: str = ""):
        super().__init__(client, pending, name or f"bacc-gate-{event}")
        self.event = event

    def release(self) -> Any:
        """Set the event: every held eval lets go, and later ones pass (with an
        asynchronous client, await the result)."""
        return Event(self.event, client=self.client).set()

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.clear()

    async def __aexit__(self, *exc: object) -> None:
        await self.release()
        await self.clear()


def gate_stragglers(
    indices: Iterable[int] = (),
    workers: Iterable[Any] = (),
    *,
    event: str | None = None,
    interruptible: bool = True,
    client: Client | None = None,
) -> StragglerGate:
    """Make chosen coded tasks straggle until released: no wall-clock in the test.

    Installs an :class:`EventGate` on every worker (and on workers that join later): in
    every coded job from then on, the evals of the coded tasks in ``indices``, and every
    eval on the ``workers``, wait after ``func`` until the gate is released (or, when
    ``interruptible``, until their job no longer needs them)::

        with gate_stragglers(indices=[3, 5]) as gate:
            job = dask_bacc.submit_coded(f, X, n_blocks=4, n_coded=8, wait=6)
            job.result()  # decoded from the other six
            assert sorted(job.report.straggled) == [3, 5]

    With an asynchronous client, ``async with gate_stragglers(...)`` or
    ``gate = await gate_stragglers(...)``, then ``await gate.release()`` and
    ``await gate.clear()``.

    Parameters
    ----------
    indices : iterable of int
        Coded task indices to hold (task i of a job is ``report.workers[i]``'s task).
    workers : iterable of str
        Names or addresses of workers whose evals to hold.
    event : str, optional
        Name of the :class:`distributed.Event` that releases them; by default a fresh
        name (``gate.event``).
    interruptible : bool
        False: a held eval keeps its thread after its job is done, until the release, like
        a ``func`` that cannot be stopped.
    client : distributed.Client, optional
        Defaults to the current client.

    Returns
    -------
    StragglerGate
        The gate: ``release()`` lets the held evals go; leaving a ``with`` block releases
        and removes it.
    """
    client = client if client is not None else default_client()
    name = event if event is not None else f"bacc-gate-{uuid.uuid4().hex}"
    gate = EventGate(
        name,
        indices=frozenset(indices),
        workers=frozenset(str(w) for w in workers),
        interruptible=interruptible,
    )
    registered = client.register_plugin(gate, name=gate.name)
    return StragglerGate(client, name, registered if client.asynchronous else None, gate.name)


# -- the uncoded baseline and the accounting ---------------------------------------------------
def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False


def _this_worker() -> Any:
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:  # not in a task on a worker
        return None


def plain_task(
    block: Any, seq: int, index: int, func: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """An uncoded baseline task that meets the same injected stragglers as coded ones.

    Runs ``func(block, *args, **kwargs)``, then calls the worker's eval hooks as a coded
    task ``index`` of job ``seq`` would: the delay its :class:`StragglerPlugin` draws, the
    hold of an :class:`EventGate`. The wait is not interruptible: plain Dask cannot stop a
    running task. Give baseline jobs ``seq`` numbers disjoint from dask-bacc's (which count
    0, 1, 2, ... per client process), e.g.
    ``client.map(plain_task, blocks, [PLAIN_SEQ_BASE + r] * K, range(K), [func] * K)``.

    Parameters
    ----------
    block : object
        The block ``func`` maps.
    seq, index : int
        The baseline job's number and the task's index (the straggler draw's seed).
    func : callable
        The mapped function.
    *args, **kwargs
        More arguments of ``func``.

    Returns
    -------
    object
        ``func(block, *args, **kwargs)``.
    """
    start = time.perf_counter()
    out = func(block, *args, **kwargs)
    worker = _this_worker()
    if worker is not None:
        call = EvalCall(token="", seq=seq, index=index, start=start, worker=worker, wait=_sleep)
        for hook in eval_hooks(worker):
            hook.after_eval(call)
    return out


def task_seconds(client: Client | None = None) -> list[LogEntry]:
    """Thread-seconds each instrumented task occupied: ``(seq, index, worker, seconds)``.

    Recorded by the :class:`StragglerPlugin` for every dask-bacc eval task and every
    :func:`plain_task` that ran to the end on a worker, including cancelled stragglers
    (their delay counts until it was interrupted). Benchmarks sum it as compute spent.

    Parameters
    ----------
    client : distributed.Client, optional
        Defaults to the current client.

    Returns
    -------
    list of tuple
        One ``(seq, index, worker name, seconds)`` per task, from every worker (with an
        asynchronous client, await the result).
    """
    client = client if client is not None else default_client()

    def collect(dask_worker: Any) -> list[LogEntry]:
        plugin = dask_worker.plugins.get(STRAGGLER_PLUGIN_NAME)
        return list(plugin.busy) if plugin is not None else []

    async def gather() -> list[LogEntry]:
        per_worker = await client.run(collect, asynchronous=True)
        return [
            (int(s), int(i), str(w), float(t))
            for entries in per_worker.values()
            for s, i, w, t in entries
        ]

    result: list[LogEntry] = client.sync(gather)
    return result
