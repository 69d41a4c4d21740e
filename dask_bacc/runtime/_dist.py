"""Typed calls into distributed, for the ones it leaves unannotated.

``dask_bacc.runtime`` is type-checked strictly (``pyproject.toml``), and distributed ships
partial types: ``Client.sync``, ``gather``, ``cancel``, ``get``, ``run_on_scheduler``,
``default_client``, ``secede``, ``as_completed`` and ``Future.exception``/``release`` have
no annotations, and the scheduler's RPC methods are looked up dynamically. Each function
here is that same call with the types the runtime relies on, and nothing else: no
behaviour of its own.

The awaitable ones (``gather``, ``cancel``, ``run_on_scheduler``, ``exception`` and the
scheduler's RPCs) return distributed's own awaitable unchanged: the runtime awaits them on
the client's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, overload

import distributed

if TYPE_CHECKING:
    from dask.typing import Key
    from distributed import Client, Future
    from distributed.core import PooledRPCCall, rpc

__all__ = [
    "FutureQueue",
    "as_completed",
    "cancel",
    "default_client",
    "exception",
    "gather",
    "get",
    "identity",
    "release",
    "run_on_scheduler",
    "running_workers",
    "scheduler",
    "secede",
    "sync",
    "who_has",
]

T = TypeVar("T")
H = TypeVar("H", bound=Hashable)


class FutureQueue(Protocol):
    """What the job uses of a ``distributed.as_completed`` made by :func:`as_completed`:
    futures (no results), in the order they finish, errors not raised."""

    def add(self, future: Future[Any]) -> None: ...

    async def __anext__(self) -> Future[Any]: ...

    def next_batch(self, block: bool = True) -> list[Future[Any]]: ...


def default_client() -> Client:
    """``distributed.default_client()``: the current client (``ValueError`` without one)."""
    current = cast("Callable[[], Client]", distributed.default_client)
    return current()


def secede() -> None:
    """``distributed.secede()``: leave this worker's thread pool (in a task)."""
    leave = cast("Callable[[], None]", distributed.secede)
    leave()


def sync(client: Client, func: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """``client.sync(func, *args, **kwargs)``: ``func``'s result, run on the client's loop.

    With an asynchronous client (or called on its loop) ``Client.sync`` returns the
    awaitable instead; the public functions that allow an asynchronous client say so.
    """
    run = cast("Callable[..., T]", client.sync)
    return run(func, *args, **kwargs)


@overload
def gather(client: Client, futures: Future[T], errors: str = ...) -> Awaitable[T]: ...
@overload
def gather(
    client: Client, futures: Mapping[H, Future[Any]], errors: str = ...
) -> Awaitable[dict[H, Any]]: ...
@overload
def gather(
    client: Client, futures: Sequence[Future[T]], errors: str = ...
) -> Awaitable[list[T]]: ...
def gather(client: Client, futures: Any, errors: str = "raise") -> Awaitable[Any]:
    """``client.gather(futures, errors=errors, asynchronous=True)``: the result of one
    future, or the results in the same structure (a mapping gives a dict with its keys;
    ``errors="skip"`` leaves None for the futures that failed)."""
    run = cast("Callable[..., Awaitable[Any]]", client.gather)
    return run(futures, errors=errors, asynchronous=True)


def cancel(
    client: Client, futures: Sequence[Future[Any]], reason: str | None = None
) -> Awaitable[None]:
    """``client.cancel(futures, asynchronous=True, reason=reason)``."""
    run = cast("Callable[..., Awaitable[None]]", client.cancel)
    return run(futures, asynchronous=True, reason=reason)


def run_on_scheduler(client: Client, function: Callable[..., T], *args: Any) -> Awaitable[T]:
    """``client.run_on_scheduler(function, *args)`` (awaited: the client's loop)."""
    run = cast("Callable[..., Awaitable[T]]", client.run_on_scheduler)
    return run(function, *args)


def get(client: Client, graph: Mapping[Key, Any], keys: Sequence[Key]) -> list[Future[Any]]:
    """``client.get(graph, keys, sync=False)``: a future for each of ``keys``."""
    run = cast("Callable[..., list[Future[Any]]]", client.get)
    return run(graph, keys, sync=False)


def exception(future: Future[Any]) -> Awaitable[BaseException | None]:
    """``future.exception(asynchronous=True)``: what the task raised."""
    run = cast("Callable[..., Awaitable[BaseException | None]]", future.exception)
    return run(asynchronous=True)


def wait_first(futures: list[Future[Any]]) -> Awaitable[tuple[set[Future[Any]], set[Future[Any]]]]:
    """``distributed.wait(futures, return_when="FIRST_COMPLETED")`` on an asynchronous
    client's loop: ``(done, not_done)``."""
    run = cast(
        "Callable[..., Awaitable[tuple[set[Future[Any]], set[Future[Any]]]]]", distributed.wait
    )
    return run(futures, return_when="FIRST_COMPLETED")


def release(future: Future[Any]) -> None:
    """``future.release()``: drop this reference to the task now."""
    run = cast("Callable[[], None]", future.release)
    run()


def as_completed(client: Client) -> FutureQueue:
    """An empty ``distributed.as_completed`` on the client's loop that hands back failed
    futures too (``raise_errors=False``); futures are added as they are launched."""
    make = cast("Callable[..., FutureQueue]", distributed.as_completed)
    return make(loop=client.loop, raise_errors=False)


def scheduler(client: Client) -> rpc | PooledRPCCall:
    """``client.scheduler``, the scheduler's RPC (None only once the client closed: a call
    on it then fails on None, as it always did)."""
    return cast("rpc | PooledRPCCall", client.scheduler)


def identity(client: Client) -> Awaitable[dict[str, Any]]:
    """The scheduler's ``identity`` with every worker (``"workers"``: address -> its
    ``WorkerState.identity()``, a dict of heterogeneous values)."""
    reply: Awaitable[dict[str, Any]] = scheduler(client).identity(n_workers=-1)
    return reply


def running_workers(client: Client) -> Awaitable[dict[str, int]]:
    """The scheduler's ``ncores_running``: address -> threads of each running worker."""
    reply: Awaitable[dict[str, int]] = scheduler(client).ncores_running()
    return reply


def who_has(client: Client, keys: list[Key]) -> Awaitable[dict[Key, list[str]]]:
    """The scheduler's ``who_has``: key -> addresses of the workers holding it."""
    reply: Awaitable[dict[Key, list[str]]] = scheduler(client).who_has(keys=keys)
    return reply


def subscribe_topic(client: Client, topic: str, handler: Callable[[Any], None]) -> None:
    """``client.subscribe_topic(topic, handler)``: ``handler(event)`` for each event the
    scheduler's log gets under ``topic``, on the client's loop."""
    run = cast("Callable[[str, Callable[[Any], None]], None]", client.subscribe_topic)
    run(topic, handler)


def unsubscribe_topic(client: Client, topic: str, linger: float = 30.0) -> None:
    """``client.unsubscribe_topic(topic)``, and the handler dropped.

    distributed (2026.8) tells the scheduler but keeps the handler in
    ``client._event_handlers`` for ever (a bound method there would keep its job, and the
    futures it returned, alive); and an event still in flight for a topic with no handler
    makes the client call ``unsubscribe_topic`` again, which raises and is logged as an
    error. So the handler is replaced by one that drops events, itself removed ``linger``
    seconds later.
    """
    if client.status == "running":  # a closed client has no subscription left
        run = cast("Callable[[str], None]", client.unsubscribe_topic)
        run(topic)
    handlers = getattr(client, "_event_handlers", None)
    if not isinstance(handlers, dict) or topic not in handlers:
        return
    handlers[topic] = _drop_event

    def forget() -> None:
        if handlers.get(topic) is _drop_event:
            del handlers[topic]

    try:
        asyncio.get_running_loop().call_later(linger, forget)
    except RuntimeError:  # no loop running here: forget now
        forget()


def _drop_event(event: Any) -> None:
    """The handler of a topic unsubscribed from: events still in flight are dropped."""
