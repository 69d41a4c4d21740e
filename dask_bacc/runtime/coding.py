"""``with dask_bacc.coding(...):``: coded computing for Dask code as it is.

Inside the block, ``dask.compute``, ``.compute()``, ``.persist()`` and xarray's
``.compute()``/``.load()``/``.persist()`` go through :class:`_Hook`, installed as dask's
``scheduler`` setting (a callable scheduler is a documented dask protocol; ``dask.persist``
calls the ``persist`` of the object whose method the scheduler is). The hook reads the
optimized graph of each computation (:mod:`dask_bacc.collections.select`), replaces every
selected layer's tasks by one driver task that runs them as a
:class:`~.redundant.RedundantJob` (exactly what ``coded(y, code="repetition")`` runs for a
final layer) plus one ``getitem`` task per block under the block's own key, so the rest of
the graph reads them unchanged, and sends the graph to the current client. A computation
in which nothing is selected is sent exactly as dask sent it.

What is active is per thread (a context variable), so a block in one thread leaves the
computations of others alone; dask's ``scheduler`` setting is process-wide, so the hook
stays installed while any block is open and runs other threads' computations as dask
would have.
"""

from __future__ import annotations

import asyncio
import contextvars
import operator
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .. import config
from ..collections.layer import Layer, _inline_aliases, rebuild, renamed
from ..collections.select import (
    Found,
    Only,
    Selection,
    annotated_functions,
    find_layers,
    reachable,
    readers_of,
)
from . import _dist
from .driver import REPORT_TOPIC, layer_driver
from .redundant import EXACT_LAYER_CODES, policy_for
from .report import JobReport
from .wait import check_timeout

if TYPE_CHECKING:
    from dask._task_spec import GraphNode
    from dask.typing import Key
    from distributed import Client

__all__ = ["CodingLayer", "coding", "last_reports"]

#: the block active in this thread (context), if any
_ACTIVE: contextvars.ContextVar[coding | None] = contextvars.ContextVar(
    "dask_bacc_coding", default=None
)
#: the most recently opened block (for :func:`last_reports`)
_LAST: coding | None = None


@dataclass(frozen=True)
class CodingLayer:
    """A layer a ``coding()`` block selected, coded or not.

    Attributes
    ----------
    name : str
        Its tasks' key name in the optimized graph (fusion joins the names of the layers
        it merged).
    function : str
        The function that selected it (the mapped one).
    ntasks : int
        Its tasks: the blocks of the coded job.
    coded : bool
        Whether it ran through the code.
    reason : str or None
        Why not, when it was not.
    token : str or None
        The coded job's token (its driver task is ``bacc-driver-<token>``).
    """

    name: str
    function: str
    ntasks: int
    coded: bool
    reason: str | None = None
    token: str | None = None

    def __repr__(self) -> str:
        state = "coded" if self.coded else f"not coded: {self.reason}"
        return f"<CodingLayer {self.function} ({self.ntasks} tasks) {state}>"


class coding:  # lower case, as dask.config.set and dask.annotate
    """Run the map-over-chunks layers of unchanged Dask code with an exact code.

    Inside ``with dask_bacc.coding():``, every computation the block starts
    (``.compute()``, ``dask.compute``, ``.persist()``, xarray's ``.compute()``,
    ``.load()`` and ``.persist()``) runs each selected layer with a backup copy of each of
    its tasks on another worker, and takes each block from whichever copy finishes first;
    the rest of the graph runs as before. The results are exactly plain Dask's.

    Parameters
    ----------
    code : {"hedged", "repetition", "speculative"}, optional
        ``"hedged"`` launches a backup of a task once it has run past what is known of
        its function (``bacc.hedge``); ``"repetition"`` launches every backup at once (at
        a lower priority than the tasks themselves); ``"speculative"`` launches one when a
        task runs late by Spark's rule, once most tasks finished. Default: ``bacc.code``.
        The codes that mix blocks (Berrut, the splines, Lagrange) need the
        map call, which the graph dask hands the scheduler no longer shows: use
        :func:`dask_bacc.coded` on the collection for them.
    only : None, "all", str, callable, where or list, optional
        Which layers are coded. None (default): the layers whose tasks call a function
        marked with :func:`dask_bacc.codeable`, and dask array layers built under
        ``dask.annotate(bacc=True)``. ``"all"``: every layer that is a map over chunks
        (two or more tasks, each reading at most one chunk of any other layer).
        A function or its name: the layers that call it. ``dask_bacc.where(predicate)``:
        the maps over chunks for which ``predicate(candidate)`` holds.
    timeout : float, optional
        Seconds a coded layer waits for its blocks (as in :func:`dask_bacc.coded`).
    code_options : dict, optional
        The re-run rule of late copies (``rule``, ``multiplier``, ``quantile`` ...), as
        in :func:`dask_bacc.coded`.

    Attributes
    ----------
    layers : list of CodingLayer
        Every layer the block's computations selected, in order, coded or not and why.

    Notes
    -----
    It takes effect on the distributed scheduler (a :class:`distributed.Client` created
    before the block; one created inside it makes itself dask's scheduler, and the block
    then codes nothing). Without one it warns and leaves computations to dask's local
    schedulers, which have no stragglers to beat. ``dask.config.set({"bacc.coding.enabled":
    False})`` turns every block off. A block applies to the thread that opened it; it
    restores the previous state on exit, an exception included, and blocks nest (the
    innermost applies).
    """

    def __init__(
        self,
        code: str | None = None,
        *,
        only: Only = None,
        timeout: float | None = None,
        code_options: dict[str, Any] | None = None,
    ):
        name = str(code if code is not None else config.get("code")).lower()
        if name not in EXACT_LAYER_CODES:
            raise ValueError(
                f"coding() runs the exact codes {EXACT_LAYER_CODES} on the graph dask "
                f"computes; {name!r} mixes blocks and needs the map call itself: use "
                f"dask_bacc.coded(y, code={name!r}) on the collection"
            )
        policy_for(name, code_options)  # bad options raise here
        check_timeout(timeout)
        self.code = name
        self.code_options = dict(code_options or {})
        self.timeout = timeout
        self.selection = Selection(only)  # (bad only= raises here)
        self.only = only
        self.layers: list[CodingLayer] = []
        self._reports: dict[str, JobReport] = {}
        self._entered: list[contextvars.Token[coding | None]] = []
        self._warned = False
        self._computations = 0  # computations the block's hook read (coded or not)

    def __repr__(self) -> str:
        done = sum(layer.coded for layer in self.layers)
        return (
            f"<dask_bacc.coding {self.code}: {done} layer(s) coded, {len(self.layers) - done} not>"
        )

    def __enter__(self) -> coding:
        global _LAST
        _HOOK.install()
        self._entered.append(_ACTIVE.set(self))
        _LAST = self
        if _client() is None:
            self._warn_no_client()
        return self

    def __exit__(self, *exc: object) -> None:
        _ACTIVE.reset(self._entered.pop())
        _HOOK.uninstall()
        if self._computations and not self.layers and not self._entered and exc[0] is None:
            # a block that selected nothing must say so, and what to do (a layer selected
            # and refused is in .layers, with why)
            if self.only is None:
                which = (
                    "no layer calls a function marked with dask_bacc.codeable (the "
                    "default, only=None, codes those and dask array layers built under "
                    "dask.annotate(bacc=True))"
                )
            else:
                which = f"no map over chunks matched only={self.only!r}"
            warnings.warn(
                f"dask_bacc.coding(): nothing was selected in this block's "
                f"{self._computations} computation(s): {which}. Pass only='all' to code "
                "every map over chunks, or only=f for the layers that call f",
                RuntimeWarning,
                stacklevel=2,
            )

    def _warn_no_client(self) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(
                "dask_bacc.coding(): no distributed Client, so nothing is coded: dask's "
                "local schedulers have no stragglers to beat (create a "
                "distributed.Client before the block)",
                RuntimeWarning,
                stacklevel=3,
            )

    # -- the reports --------------------------------------------------------------------
    @property
    def reports(self) -> list[JobReport]:
        """The :class:`~dask_bacc.JobReport` of each coded layer of the block's
        computations, in order, read from the scheduler's event log. A driver logs its
        report as it returns, and the log may reach the scheduler just after the result
        reached the client: this waits up to 10 seconds for missing ones (a layer of a
        persisted computation still running then has none yet)."""
        tokens = [layer.token for layer in self.layers if layer.token is not None]
        missing = [t for t in tokens if t not in self._reports]
        if missing:
            client = _dist.default_client()
            self._reports.update(_dist.sync(client, _reports, client, missing))
        return [self._reports[t] for t in tokens if t in self._reports]

    # -- the rewrite --------------------------------------------------------------------
    def rewrite(self, expr: Any, outputs: Iterable[Key]) -> tuple[Any, dict[Key, Key]] | None:
        """The graph of ``expr`` (an optimized dask expression) with its selected layers
        coded, culled to ``outputs``, and the new key of each renamed one; None when no
        layer is coded (send ``expr`` as it is).

        A coded layer's tasks become one driver task and a ``getitem`` of it per block.
        Those blocks and every task downstream of them change spec, so they all get new
        keys (``<name>-bacc<tag>``): the scheduler may still know a plain key from an
        earlier computation, by the plain spec, and one key must never come with two."""
        from dask._task_spec import convert_legacy_graph

        self._computations += 1
        selection = self.selection
        if self.only is None:
            selection = Selection(None, annotated_functions(expr))
        if not selection.can_match():
            return None
        flat = _flat(outputs)
        # (no task reads an alias any more; an output that is one stays)
        graph = _inline_aliases(convert_legacy_graph(dict(expr.__dask_graph__())), set(flat))
        readers = readers_of(graph)
        found = find_layers(graph, selection, readers)
        coded = _ordered(graph, [f for f in found if f.reason is None])
        rename: dict[Key, Key] = {}
        tokens: dict[str, str] = {}
        if coded:
            tag = f"bacc{uuid.uuid4().hex[:12]}"
            changed = reachable([b for f in coded for b in f.blocks], lambda k: readers.get(k, ()))
            rename = {k: renamed(k, tag) for k in changed}
            graph = _relabelled(graph, rename)
            for f in coded:
                tokens[f.name] = self._code_layer(graph, f, [rename[b] for b in f.blocks])
        for f in found:
            self.layers.append(
                CodingLayer(
                    f.name,
                    f.function,
                    len(f.blocks),
                    f.reason is None,
                    f.reason,
                    tokens.get(f.name),
                )
            )
        if not coded:
            return None
        culled = _cull(graph, [rename.get(k, k) for k in flat])
        return _with_annotations(culled, expr.__dask_annotations__(), rename), rename

    def safe_rewrite(self, expr: Any, outputs: Iterable[Key]) -> tuple[Any, dict[Key, Key]] | None:
        """:meth:`rewrite`; a graph it fails to read runs uncoded, with a warning naming
        the failure (the computation itself must not fail for it)."""
        try:
            return self.rewrite(expr, outputs)
        except Exception as exc:
            self._computations -= 1  # not read: this warning says so, not the block's
            warnings.warn(
                f"dask_bacc.coding(): this computation runs uncoded: reading its graph "
                f"failed ({type(exc).__name__}: {exc})",
                RuntimeWarning,
                stacklevel=4,
            )
            return None

    def _code_layer(self, graph: dict[Key, GraphNode], found: Found, blocks: list[Key]) -> str:
        """Replace the tasks ``blocks`` (``found``'s, renamed) in ``graph`` by a driver
        task running them as an exact job and a ``getitem`` of it per block, under the
        block's key; return the job's token.

        A task that reads every block (the ``concatenate`` of an array's ``.compute()``,
        a frame's ``concat``) reads them out of the driver's result instead, the
        ``getitem`` inlined: the blocks are all on the driver's worker already, and K
        tasks of a millisecond each on that one worker would cost more than the layer's
        own tasks when they are short (1,000 blocks in waves)."""
        from dask._task_spec import DataNode, Task, TaskRef

        needed = _ancestors(graph, blocks)
        sub = _inline_aliases({k: graph[k] for k in graph if k in needed}, set())
        layer = Layer(
            sub,
            list(blocks),
            list(blocks),
            {b: [b] for b in blocks},
            found.function,
            found.function,
        )
        token, driver = layer_driver(layer, self.code, self.code_options, self.timeout)
        picks: dict[Key, Key | GraphNode] = {
            b: Task(b, operator.getitem, TaskRef(driver.key), DataNode(None, b)) for b in blocks
        }
        every = set(blocks)
        for key, node in list(graph.items()):
            if key not in every and every <= node.dependencies:
                graph[key] = node.substitute(picks, key)  # (an Alias keeps its key)
        graph.update(cast("dict[Key, GraphNode]", picks))  # (culled where nothing reads one)
        graph[driver.key] = driver
        return token


def last_reports() -> list[JobReport]:
    """The reports of the coded layers of the most recently opened ``coding()`` block
    (:attr:`coding.reports`).

    Raises
    ------
    LookupError
        No block has been opened in this process.
    """
    if _LAST is None:
        raise LookupError("no dask_bacc.coding() block has been opened yet")
    return _LAST.reports


#: how long :attr:`coding.reports` waits for the report of a computation that returned
_REPORT_WAIT = 10.0


async def _reports(client: Client, tokens: Sequence[str]) -> dict[str, JobReport]:
    """The reports of the jobs ``tokens`` in the scheduler's event log, waiting up to
    :data:`_REPORT_WAIT` seconds for all of them."""
    wanted = set(tokens)
    out: dict[str, JobReport] = {}
    deadline = time.monotonic() + _REPORT_WAIT
    while True:
        for _, message in await client.get_events(REPORT_TOPIC):
            if message["driver"] in wanted:
                out[message["driver"]] = JobReport.from_dict(message["report"])
        if wanted <= out.keys() or time.monotonic() > deadline:
            return out
        await asyncio.sleep(0.05)


def _client() -> Client | None:
    try:
        return _dist.default_client()
    except ValueError:
        return None


def _ancestors(graph: Mapping[Key, GraphNode], start: Iterable[Key]) -> set[Key]:
    """``start`` and every key of ``graph`` they read, directly or not."""
    return reachable(start, lambda k: graph[k].dependencies if k in graph else ())


def _relabelled(graph: Mapping[Key, GraphNode], rename: Mapping[Key, Key]) -> dict[Key, GraphNode]:
    """``graph`` with the keys in ``rename`` renamed, and every task reading one reading
    the new key."""
    from dask._task_spec import Alias

    out: dict[Key, GraphNode] = {}
    for key, node in graph.items():
        new = rename.get(key, key)
        if isinstance(node, Alias):
            target = node.target
            out[new] = Alias(new, rename.get(target, target))
        elif new != key or node.dependencies & rename.keys():
            subs: dict[Key, Key | GraphNode] = {
                d: rename[d] for d in node.dependencies if d in rename
            }
            out[new] = node.substitute(subs, key=new)
        else:
            out[key] = node
    return out


def _ordered(graph: Mapping[Key, GraphNode], layers: list[Found]) -> list[Found]:
    """``layers`` so that one whose tasks read another's (through any chain) comes after
    it: its driver then runs the other's driver, not its original tasks."""
    owner = {b: f.name for f in layers for b in f.blocks}
    after: dict[str, set[str]] = {}
    for f in layers:
        up = _ancestors(graph, [d for b in f.blocks for d in graph[b].dependencies])
        after[f.name] = {owner[k] for k in up if k in owner} - {f.name}
    out: list[Found] = []
    done: set[str] = set()
    while len(out) < len(layers):
        ready = [f for f in layers if f.name not in done and after[f.name] <= done]
        if not ready:  # (a graph has no cycles; never loop on one)
            raise RuntimeError("the coded layers read each other in a cycle")
        out.extend(ready)
        done.update(f.name for f in ready)
    return out


def _flat(outputs: Any) -> list[Key]:
    """The keys of ``outputs`` (a key or nested lists of keys), in order."""
    from dask.core import flatten

    return list(cast("Callable[[Any], Iterable[Key]]", flatten)(outputs))


def _renamed(outputs: Any, rename: Mapping[Key, Key]) -> Any:
    """``outputs`` (a key, or nested lists of keys) with the renamed keys' new names."""
    if isinstance(outputs, list):
        return [_renamed(o, rename) for o in outputs]
    return rename.get(outputs, outputs)


def _cull(graph: Mapping[Key, GraphNode], outputs: Iterable[Key]) -> dict[Key, GraphNode]:
    """The tasks ``outputs`` need: the coded layers' inputs run inside their drivers."""
    needed = _ancestors(graph, outputs)
    return {k: v for k, v in graph.items() if k in needed}


def _with_annotations(
    graph: dict[Key, GraphNode],
    annotations: Mapping[str, Mapping[Key, Any]],
    rename: Mapping[Key, Key],
) -> Any:
    """``graph`` as a high-level graph carrying dask's per-key annotations (priority,
    retries, workers...), which the expression held and a plain dict would drop; a
    renamed block keeps its plain key's."""
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    was = {new: old for old, new in rename.items()}
    # keys grouped by their annotations (compared by repr: a value may be a list)
    groups: dict[str, tuple[dict[str, Any], dict[Key, GraphNode]]] = {}
    for key, node in graph.items():
        old = was.get(key, key)
        notes = {name: values[old] for name, values in annotations.items() if old in values}
        groups.setdefault(repr(sorted(notes.items())), (notes, {}))[1][key] = node
    layers = {
        f"bacc-coding-{i}": MaterializedLayer(dsk, annotations=notes or None)
        for i, (notes, dsk) in enumerate(groups.values())
    }
    return HighLevelGraph(layers, {name: set() for name in layers})


class _Hook:
    """dask's ``scheduler`` while a block is open in any thread: ``get`` for
    ``dask.compute``, ``persist`` for ``dask.persist``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open = 0
        self._config: Any = None  # the dask.config.set that installed the hook
        self._previous: Any = None  # dask's scheduler setting before it

    def install(self) -> None:
        import dask

        with self._lock:
            if self._open == 0:
                self._previous = dask.config.get("scheduler", None)
                self._config = dask.config.set(scheduler=self.get)
            self._open += 1

    def uninstall(self) -> None:
        import dask

        with self._lock:
            self._open -= 1
            if self._open == 0:
                if dask.config.get("scheduler", None) != self.get:
                    warnings.warn(
                        "dask's scheduler setting changed inside a dask_bacc.coding() "
                        "block (a distributed.Client created there makes itself the "
                        "scheduler): the computations after that were not coded; create "
                        "the Client before the block",
                        RuntimeWarning,
                        stacklevel=3,
                    )
                self._config.__exit__(None, None, None)
                self._config = self._previous = None

    def _active(self) -> tuple[coding, Client] | None:
        block = _ACTIVE.get()
        if block is None or not config.get("coding.enabled"):
            return None
        client = _client()
        if client is None:
            block._warn_no_client()
            return None
        if client.asynchronous:
            return None  # dask's own handling of an asynchronous client (below)
        return block, client

    def _plain(self) -> Callable[..., Any]:
        """The scheduler dask would have used."""
        from dask.base import get_scheduler

        choose = cast("Callable[..., Callable[..., Any]]", get_scheduler)
        if self._previous is not None and self._previous != self.get:
            return choose(scheduler=self._previous)
        client = _client()
        return choose(scheduler=client if client is not None else "threads")

    def get(self, expr: Any, outputs: Any, **kwargs: Any) -> Any:
        """``dask.compute``'s scheduler call: ``expr`` optimized, ``outputs`` its keys."""
        active = self._active()
        if active is None:
            return self._plain()(expr, outputs, **kwargs)
        block, client = active
        run = cast("Callable[..., Any]", client.get)
        done = block.safe_rewrite(expr, outputs)
        if done is None:
            return run(expr, outputs, **kwargs)
        graph, rename = done
        return run(graph, _renamed(outputs, rename), **kwargs)

    def persist(
        self, collections: Sequence[Any], optimize_graph: bool = True, **kwargs: Any
    ) -> list[Any]:
        """``dask.persist``'s call: the collections, each backed by futures."""
        import dask
        from dask.base import collections_to_expr

        active = self._active()
        if active is None:  # (a client's get: dask calls its persist)
            persist = cast("Callable[..., tuple[Any, ...]]", dask.persist)
            return list(
                persist(
                    *collections, scheduler=self._plain(), optimize_graph=optimize_graph, **kwargs
                )
            )
        block, client = active
        to_expr = cast("Callable[..., Any]", collections_to_expr)
        expr = to_expr(list(collections), optimize_graph).optimize()
        outputs = expr.__dask_keys__()
        flat = _flat(outputs)
        done = block.safe_rewrite(expr, flat)
        graph, rename = (expr, {}) if done is None else done
        run = cast("Callable[..., list[Any]]", client.get)  # (persist's options go on)
        got = run(graph, [rename.get(k, k) for k in flat], sync=False, **kwargs)
        futures = dict(zip(flat, got, strict=True))
        out = []
        for coll, ks in zip(collections, outputs, strict=True):
            ks = _flat(ks)
            if ks and all(k in rename for k in ks):
                # a coded layer's outputs: the collection under the new names (a plain
                # computation of it may still be known to the scheduler, by other specs)
                values = {rename[k]: futures[k] for k in ks}
                out.append(rebuild(coll.__dask_postpersist__(), values, ks, rename.__getitem__))
            else:
                func, args = coll.__dask_postpersist__()
                out.append(func({k: futures[k] for k in ks}, *args))
        return out


_HOOK = _Hook()
