"""The final layer of any dask collection, as the exact codes copy it.

A repeated or speculative task needs none of the conditions a linear code needs (equal
blocks, one chunked input): each task of the collection's final layer keeps its own
inputs (every chunked input, ragged chunks, ``block_info``, ``partition_info``,
``map_overlap``'s overlap, delayed arguments) and is run twice. So this module reads no
map call: it takes the graph plain Dask would run (``collections_to_expr(...).optimize()``,
blockwise fusion included), the task behind each output key (aliases followed: dask
arrays end in an alias of the fused task), and rebuilds the collection from whichever copy
finished first with the collection's own ``__dask_postpersist__``. The task objects are
``dask._task_spec`` nodes (private; ``tests/test_layer.py`` checks them against the
installed Dask).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..exceptions import RewriteError

if TYPE_CHECKING:
    from dask._task_spec import GraphNode
    from dask.typing import Key

__all__ = ["Layer", "final_layer", "rebuild", "renamed"]


@dataclass
class Layer:
    """The tasks of a collection's final layer, in the graph plain Dask would run.

    Attributes
    ----------
    graph : dict
        Every task of the optimized graph (``dask._task_spec`` nodes), the final layer's
        included.
    outputs : list
        The collection's output keys (``__dask_keys__``, flattened), in order.
    blocks : list
        The keys of the tasks that do the work, one per block, in output order: an output
        key, or the task it is an alias of. Outputs whose value is already data (a
        persisted collection) have no block.
    output_of : dict
        Block key -> the output keys it gives.
    name : str
        What the collection is, for messages (``"dask.Array"`` ...).
    function : str, optional
        What its tasks do, for reports and the dashboard: the function a ``coding()``
        block selected, or the output's key name (``"sin"`` for ``x.map_blocks(np.sin)``).
    """

    graph: dict[Key, GraphNode]
    outputs: list[Key]
    blocks: list[Key]
    output_of: dict[Key, list[Key]]
    name: str
    function: str | None = None
    _postpersist: tuple[Callable[..., Any], tuple[Any, ...]] | None = field(
        default=None, repr=False
    )

    def dependencies(self, block: Key) -> frozenset[Key]:
        """The keys the task of ``block`` reads (its inputs in the graph)."""
        return frozenset(self.graph[block].dependencies)

    def renamed(self, key: Key, tag: str) -> Key:
        """``key`` under the rebuilt collection's name (``<name>-<tag>``): its keys must
        differ from the plain collection's, whose tasks have other specs (the scheduler
        warns when one key comes with two specs, and may mix them up)."""
        return renamed(key, tag)

    def rebuild(self, values: Mapping[Key, Any], tag: str) -> Any:
        """The collection, of the same type, from ``values``: output key (renamed by
        :meth:`renamed`) -> a future or a task giving it, as ``Client.persist`` rebuilds
        one."""
        if self._postpersist is None:
            raise RewriteError("this layer was sent without its collection: it cannot rebuild")
        return rebuild(self._postpersist, values, self.outputs, lambda k: self.renamed(k, tag))

    def without_collection(self) -> Layer:
        """This layer without the collection's rebuild function (what a driver task needs:
        the graph and the keys)."""
        return Layer(
            self.graph, self.outputs, self.blocks, self.output_of, self.name, self.function
        )


def renamed(key: Key, tag: str) -> Key:
    """``key`` under ``<name>-<tag>`` (a tuple key keeps its indices)."""
    if isinstance(key, tuple):
        return (f"{key[0]}-{tag}", *key[1:])
    return f"{key}-{tag}"


def rebuild(
    postpersist: tuple[Callable[..., Any], tuple[Any, ...]],
    values: Mapping[Key, Any],
    outputs: list[Key],
    new_key: Callable[[Key], Key],
) -> Any:
    """A collection from its ``__dask_postpersist__``, backed by ``values`` (each output
    key, renamed by ``new_key``, -> a future or a task giving it), as ``Client.persist``
    rebuilds one, under the new names."""
    func, args = postpersist
    if getattr(func, "__qualname__", "") == "FrameBase._postpersist":
        # dask-expr's rebuild takes every key of the graph for an output (the keys it is
        # given are its own): name them
        import dask.dataframe as dd

        meta, divisions, prefix = args
        return dd.from_graph(dict(values), meta, divisions, [new_key(k) for k in outputs], prefix)
    names = {_name(k): _name(new_key(k)) for k in outputs}
    return func(dict(values), *args, rename=names)


def _name(key: Key) -> str:
    """A key's name: the first element of a tuple key, or the key itself."""
    return str(key[0]) if isinstance(key, tuple) else str(key)


def _inline_aliases(graph: dict[Key, GraphNode], keep: set[Key]) -> dict[Key, GraphNode]:
    """``graph`` with every task reading the target of an alias it read (an alias of an
    alias followed to the end), the aliases in ``keep`` (outputs) pointing at the end of
    their chain, and every other alias dropped (no task reads it any more).

    A dask-expr collection built on a persisted one reads its partitions through alias
    tasks; on the cluster an alias is a task of its own, scheduled where its target is,
    and a worker whose thread is held by a late task would hold every copy reading it.
    """
    from dask._task_spec import Alias

    def end(key: Key) -> Key:
        seen = set()
        while isinstance(graph.get(key), Alias) and key not in seen:
            seen.add(key)
            key = graph[key].target  # type: ignore[attr-defined]
        return key

    target = {k: end(k) for k, node in graph.items() if isinstance(node, Alias)}
    target = {k: t for k, t in target.items() if t != k}
    if not target:
        return graph
    out: dict[Key, GraphNode] = {}
    for key, node in graph.items():
        if key in target:
            if key in keep:  # an output: straight to the end of its chain
                out[key] = Alias(key, target[key])
            continue  # any other alias: no task reads it any more
        subs: dict[Key, Key | GraphNode] = {d: target[d] for d in node.dependencies if d in target}
        out[key] = node.substitute(subs) if subs else node
    return out


def final_layer(collection: Any) -> Layer:
    """The final layer of ``collection`` (any dask collection).

    Raises
    ------
    RewriteError
        ``collection`` is not a dask collection, or its graph could not be read.
    """
    import dask
    from dask._task_spec import Alias, Task, convert_legacy_graph
    from dask.base import collections_to_expr
    from dask.core import flatten
    from dask.utils import key_split

    if not dask.is_dask_collection(collection):
        raise RewriteError(f"expected a dask collection, got {type(collection).__name__}")
    expr = collections_to_expr([collection], True).optimize()
    outputs = list(flatten(expr.__dask_keys__()))
    graph = _inline_aliases(convert_legacy_graph(dict(expr.__dask_graph__())), set(outputs))
    output_of: dict[Key, list[Key]] = {}
    for out in outputs:
        key, node = out, graph.get(out)
        seen = set()
        while isinstance(node, Alias) and key not in seen:  # an array's output: the fused task
            seen.add(key)
            key = node.target
            node = graph.get(key)
        if isinstance(node, Task):
            output_of.setdefault(key, []).append(out)
    kind = type(collection)
    return Layer(
        graph,
        outputs,
        list(output_of),
        output_of,
        f"{kind.__module__.split('.')[0]}.{kind.__name__}",
        key_split(outputs[0]) if outputs else None,
        collection.__dask_postpersist__(),
    )


def is_dask_frame(data: Any) -> bool:
    """A dask DataFrame or Series (without importing dask.dataframe when absent)."""
    import sys

    dd = sys.modules.get("dask.dataframe")
    return dd is not None and isinstance(data, (dd.DataFrame, dd.Series))


def partitions_layer(
    func: Callable[..., Any],
    data: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    meta: Any = None,
) -> Layer:
    """The final layer of ``data.map_partitions(func, *args, **kwargs)`` (``meta`` as in
    ``map_partitions``)."""
    options = {} if meta is None else {"meta": meta}
    return final_layer(data.map_partitions(func, *args, **options, **kwargs))
