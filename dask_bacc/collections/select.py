"""Which layers of a task graph :func:`dask_bacc.coding` codes, read from the graph alone.

Under ``coding()`` dask hands the scheduler hook the optimized graph of a computation, not
its collections (``dask.compute`` passes a callable ``scheduler=`` the optimized expression
and its keys). So a layer is found here by what its tasks call: the tasks of the optimized
graph are grouped by key name (blockwise fusion has merged a ``map_blocks`` with its
neighbours: the group is the fused task, and copying it copies them all), and a group is
*selected* when one of the functions its first task calls (nested tasks, fused subgraphs,
``functools.partial``, ``__wrapped__``) matches :class:`Selection`. A selected group is then
*coded* unless its tasks cannot be copied exactly (:func:`refusal`).

This module reads graphs only: it runs nothing and imports nothing from distributed.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dask._task_spec import GraphNode
    from dask.typing import Key

__all__ = [
    "Candidate",
    "Selection",
    "codeable",
    "find_layers",
    "is_codeable",
    "reachable",
    "readers_of",
    "refusal",
    "where",
]

#: functions marked by :func:`codeable` (id -> the function: some callables, NumPy's
#: ufuncs among them, take no attributes)
_MARKED: dict[int, Callable[..., Any]] = {}


def codeable(func: Callable[..., Any]) -> Callable[..., Any]:
    """Mark ``func`` as one :func:`dask_bacc.coding` codes by default; return it unchanged.

    Use it as a decorator on the function you map (``@dask_bacc.codeable``) or call it on
    one you did not write (``dask_bacc.codeable(np.fft.fft)``). Inside a ``coding()`` block
    every layer whose tasks call a marked function runs through the chosen code; outside
    one, marking changes nothing.

    Parameters
    ----------
    func : callable
        The function passed to ``map_blocks``, ``map_partitions``, ``xr.map_blocks``,
        ``xr.apply_ufunc`` or ``blockwise``.

    Returns
    -------
    callable
        ``func`` itself.
    """
    if not callable(func):
        raise TypeError(f"codeable marks a function, not {type(func).__name__}")
    _MARKED[id(func)] = func
    return func


def is_codeable(func: Any) -> bool:
    """Whether ``func`` was marked with :func:`codeable`."""
    return _MARKED.get(id(func)) is func


@dataclass(frozen=True)
class Candidate:
    """A group of tasks of the optimized graph, as a ``where`` predicate sees it.

    Attributes
    ----------
    name : str
        The tasks' key name (``"score-1f3a..."``; a fused name joins its layers').
    functions : tuple of callable
        What the group's tasks call (dask's own helpers included), outermost first.
    ntasks : int
        How many tasks (blocks) it has.
    """

    name: str
    functions: tuple[Callable[..., Any], ...]
    ntasks: int


@dataclass(frozen=True)
class where:  # lower case: used as ``only=dask_bacc.where(...)``, like a function
    """``only=dask_bacc.where(predicate)``: code the layers for which ``predicate`` holds.

    ``predicate`` takes a :class:`~dask_bacc.collections.select.Candidate` (its key
    name, the functions its tasks call, its number of tasks) and returns a bool. A bare
    callable passed as ``only=`` is the mapped function to look for, never a predicate.
    """

    predicate: Callable[[Candidate], bool]


Only = str | Callable[..., Any] | where | Iterable[str | Callable[..., Any] | where] | None


class Selection:
    """What ``only=`` selects: a group is selected when this returns a function for it.

    Parameters
    ----------
    only : None, "all", str, callable, where or iterable
        None: the functions marked with :func:`codeable` and those of the array layers
        built under ``dask.annotate(bacc=True)`` (``annotated``). ``"all"``: every group
        of two or more tasks that is a map over chunks (:func:`refusal` with
        ``maps_only``). A str: a function's ``__name__`` or the key name's prefix
        (``"score"`` selects ``score-1f3a...``). A callable: that function.
        :class:`where`: a predicate.
    annotated : iterable of callable
        The functions of the layers annotated ``bacc=True`` (read from the graph's
        array layers by the caller).
    """

    def __init__(self, only: Only, annotated: Iterable[Callable[..., Any]] = ()):
        self.all = False
        self.names: set[str] = set()
        self.functions: dict[int, Callable[..., Any]] = {}
        self.predicates: list[Callable[[Candidate], bool]] = []
        self.default = only is None
        for f in annotated:
            self.functions[id(f)] = f
        items: Iterable[Any]
        if only is None:
            items = ()
        elif isinstance(only, (str, where)) or callable(only):
            items = (only,)
        elif isinstance(only, Iterable):
            items = only
        else:
            items = (only,)  # (refused below)
        for item in items:
            if item == "all":
                self.all = True
            elif isinstance(item, str):
                self.names.add(item)
            elif isinstance(item, where):
                self.predicates.append(item.predicate)
            elif callable(item):
                self.functions[id(item)] = item
            else:
                raise TypeError(
                    "only= takes 'all', a function's name, a function, "
                    f"dask_bacc.where(predicate), or a list of them; got {type(item).__name__}"
                )

    @property
    def maps_only(self) -> bool:
        """Whether what is selected must also be a map over chunks (selected by pattern,
        not by naming its function)."""
        return self.all or bool(self.predicates)

    def can_match(self) -> bool:
        """False when nothing can be selected (the default, no marked function, nothing
        annotated): the graph need not be read at all."""
        return bool(self.all or self.names or self.predicates or self.functions or _MARKED)

    def match(self, candidate: Candidate) -> str | None:
        """What selects ``candidate``, as its reports name it: the first selected function
        it calls, or (selected by its key name, ``"all"`` or a predicate) the first it
        calls that is not dask's, NumPy's, pandas' or xarray's own, else its key name's
        prefix. None: not selected."""
        for f in candidate.functions:
            if id(f) in self.functions or (self.default and is_codeable(f)):
                return label(f)
            if getattr(f, "__name__", None) in self.names:
                return label(f)
        if (
            _prefix(candidate.name) in self.names
            or self.all
            or any(p(candidate) for p in self.predicates)
        ):
            mapped = _user_function(candidate.functions)
            return label(mapped) if mapped is not None else _prefix(candidate.name)
        return None


def label(f: Callable[..., Any]) -> str:
    """A function's name, for reports."""
    return str(getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or f)


def _prefix(name: str) -> str:
    from dask.utils import key_split

    return str(key_split(name))


#: modules whose functions are the libraries' own plumbing, never the mapped function
_OWN = (
    "dask",
    "distributed",
    "pandas",
    "numpy",
    "xarray",
    "toolz",
    "tlz",
    "operator",
    "_operator",
    "builtins",
    "functools",
)


def _is_own(f: Callable[..., Any]) -> bool:
    module = getattr(f, "__module__", None) or ""
    return module.split(".")[0] in _OWN


def _user_function(functions: tuple[Callable[..., Any], ...]) -> Callable[..., Any] | None:
    """The first function that is not the libraries' own: the mapped one."""
    return next((f for f in functions if not _is_own(f)), None)


#: how many items of one container are looked into (a fused subgraph has a few; a list
#: of a million numbers passed as an argument holds no function worth the time)
_WIDEST = 64


def calls(node: Any, depth: int = 0) -> Iterator[Callable[..., Any]]:
    """Every function ``node`` (a task-spec node, or what one holds) calls or passes on,
    outermost first: task functions, callables among the arguments (``map_partitions``
    passes ``f`` as ``_func=``; a fused task holds its subgraph in a dict), partials'
    and ``__wrapped__`` functions, ``np.vectorize``'s ``pyfunc``."""
    from dask._task_spec import DataNode, GraphNode, Task

    if depth > 12:
        return
    if isinstance(node, Task):
        yield from calls(node.func, depth + 1)
        for a in node.args:
            yield from calls(a, depth + 1)
        for a in node.kwargs.values():
            yield from calls(a, depth + 1)
    elif isinstance(node, DataNode):
        yield from calls(node.value, depth + 1)
    elif isinstance(node, GraphNode):
        return  # a reference to another task (an alias, a task ref): not a call here
    elif isinstance(node, (list, tuple, set, frozenset)):
        for a in itertools.islice(node, _WIDEST):
            yield from calls(a, depth + 1)
    elif isinstance(node, dict):
        for a in itertools.islice(node.values(), _WIDEST):
            yield from calls(a, depth + 1)
    elif isinstance(node, functools.partial):
        yield from calls(node.func, depth + 1)
        for a in (*node.args, *node.keywords.values()):
            yield from calls(a, depth + 1)
    elif callable(node) and not isinstance(node, type):
        yield node
        for attr in ("__wrapped__", "pyfunc", "func", "funcs", "first"):
            inner = getattr(node, attr, None)
            if inner is not None and inner is not node and not isinstance(inner, type):
                yield from calls(inner, depth + 1)


def _name(key: Key) -> str | None:
    return key[0] if isinstance(key, tuple) and key and isinstance(key[0], str) else None


def groups(graph: Mapping[Key, GraphNode]) -> dict[str, list[Key]]:
    """The graph's tasks with tuple keys, grouped by key name, in graph order."""
    from dask._task_spec import Task

    out: dict[str, list[Key]] = {}
    for key, node in graph.items():
        name = _name(key)
        if name is not None and isinstance(node, Task):
            out.setdefault(name, []).append(key)
    return out


def refusal(
    graph: Mapping[Key, GraphNode],
    blocks: list[Key],
    functions: tuple[Callable[..., Any], ...],
    readers: Mapping[Key, list[Key]],
    *,
    maps_only: bool,
) -> str | None:
    """Why the tasks ``blocks`` cannot be coded as copies of themselves, or None.

    Never coded: tasks of a P2P shuffle or rechunk (they send and receive data through
    the workers' shuffle extension around a barrier task, once per task: a second copy
    would send it twice), and tasks that read each other (a scan: each copy would wait
    for the other layer's winner). With ``maps_only`` (``only="all"`` or a predicate) a
    group must also be a map over chunks: two or more tasks, each reading at most one
    chunk of any other group (an aggregation, a rechunk or an overlap reads several).
    ``readers``: key -> the keys that read it.
    """
    p2p = any(
        (getattr(f, "__module__", None) or "").startswith("distributed.shuffle") for f in functions
    )
    for key in blocks:
        near = [*graph[key].dependencies, *readers.get(key, ())]
        if p2p or any(_is_barrier(k) for k in near):
            return "a P2P shuffle or rechunk (its tasks exchange data through the workers)"
    if any(_is_barrier(k) for k in reachable(blocks, lambda k: readers.get(k, ()))):
        return (
            "a P2P shuffle or rechunk reads its output (its tasks would be renamed, and "
            "the shuffle's barrier names them)"
        )
    own = set(blocks)
    for key in blocks:
        if graph[key].dependencies & own:
            return "its tasks read each other (a scan or a tree reduction)"
    if not maps_only:
        return None
    if len(blocks) < 2:
        return "a single task, not a map over chunks"
    for key in blocks:
        seen: dict[str | None, int] = {}
        for d in graph[key].dependencies:
            n = _name(d)
            seen[n] = seen.get(n, 0) + 1
            if n is not None and seen[n] > 1:
                return (
                    f"each task reads several chunks of {n} (an aggregation, a rechunk or "
                    "an overlap: name its function in only= to code it anyway)"
                )
    return None


def _is_barrier(key: Key) -> bool:
    """A P2P shuffle's or rechunk's barrier task (``shuffle-barrier-<id>``...)."""
    return "barrier" in _prefix(_name(key) or str(key))


def readers_of(graph: Mapping[Key, GraphNode]) -> dict[Key, list[Key]]:
    """Key -> the keys of ``graph`` that read it."""
    readers: dict[Key, list[Key]] = {}
    for key, node in graph.items():
        for d in node.dependencies:
            readers.setdefault(d, []).append(key)
    return readers


def reachable(start: Iterable[Key], step: Callable[[Key], Iterable[Key]]) -> set[Key]:
    """``start`` and every key reached from them by ``step`` (a key's dependencies: its
    ancestors; ``readers_of(graph).get``: its descendants)."""
    seen: set[Key] = set()
    stack = list(start)
    while stack:
        key = stack.pop()
        if key not in seen:
            seen.add(key)
            stack.extend(step(key))
    return seen


@dataclass(frozen=True)
class Found:
    """A selected group: its tasks (``blocks``), what selected it (``function``: a
    function's name, or the key name's prefix) and why it is not coded (None: it is)."""

    name: str
    blocks: list[Key]
    function: str
    reason: str | None


def find_layers(
    graph: Mapping[Key, GraphNode], selection: Selection, readers: Mapping[Key, list[Key]]
) -> list[Found]:
    """The selected groups of ``graph``, in graph order, each with its refusal (if any);
    ``readers``: :func:`readers_of` ``graph``."""
    found: list[Found] = []
    for name, blocks in groups(graph).items():
        functions = tuple({id(f): f for f in calls(graph[blocks[0]])}.values())
        if not functions:
            continue
        f = selection.match(Candidate(name, functions, len(blocks)))
        if f is None:
            continue
        reason = refusal(graph, blocks, functions, readers, maps_only=selection.maps_only)
        found.append(Found(name, blocks, f, reason))
    return found


def annotated_functions(expr: Any) -> list[Callable[..., Any]]:
    """The functions of the array layers built under ``dask.annotate(bacc=True)`` in
    ``expr`` (a dask expression). Blockwise fusion drops a layer's annotations from the
    graph it builds; the expression still holds the layers as built."""
    from dask._expr import HLGExpr
    from dask.highlevelgraph import HighLevelGraph

    out: list[Callable[..., Any]] = []
    for node in expr.walk():
        hlg = node.dsk if isinstance(node, HLGExpr) else None
        if not isinstance(hlg, HighLevelGraph):
            continue
        for layer in hlg.layers.values():
            if (layer.annotations or {}).get("bacc"):
                inner = getattr(layer, "dsk", None)  # a Blockwise layer's one task
                out.extend(calls(inner if inner is not None else dict(layer)))
    return [f for f in out if not _is_own(f)]
