"""Find the map over chunks at the end of a lazy collection: its function, arguments and input.

Supported final operations:

- ``x.map_blocks(f, ...)`` / ``da.map_blocks(f, x, ...)`` and other per-block operations on
  one chunked dask array (``da.blockwise`` with a single chunked input, ``x + 1`` ...);
- ``ddf.map_partitions(f, ...)`` on one dask DataFrame/Series;
- ``xr.apply_ufunc(f, da, dask="parallelized")`` on one chunked DataArray;
- ``xr.map_blocks(f, obj)`` on one DataArray/Dataset chunked along one dimension.

Dask and xarray have no public API that hands back the function of a graph layer, so
three private structures are read, each in one function: the tasks of a dask array's
final Blockwise layer (:func:`_task_call`, ``dask._task_spec``), dask-expr's
``MapPartitions`` expression (:func:`_map_partitions_expr`) and the tasks
``xr.map_blocks`` writes (:func:`_xarray_map_blocks_parts`). ``tests/test_rewrite.py``
checks each against the installed versions so that a change there fails loudly.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ..exceptions import RewriteError
from .rewrite_kinds import APPLY_UFUNC, ARRAY, FRAME, XARRAY_MAP_BLOCKS, RewriteKind

__all__ = ["MapCall", "RewriteError", "find_map"]


class MapCall:
    """``func(block, *args, **kwargs)`` over the chunks of ``data``, as found in ``result``.

    Attributes
    ----------
    adapter : RewriteKind
        What ``coded`` does for this kind of map (:mod:`.rewrite_kinds`): one of
        ``ARRAY``, ``APPLY_UFUNC``, ``FRAME``, ``XARRAY_MAP_BLOCKS``.
    kind : str
        The adapter's printable name: ``"dask.array"``, ``"dask.dataframe"``,
        ``"xarray.apply_ufunc"`` or ``"xarray.map_blocks"``.
    func : callable
    data : dask array, dask DataFrame/Series, or xarray object
        The chunked input (for ``xarray.apply_ufunc``, the DataArray's dask array).
    args : tuple
    kwargs : dict
    result : the collection that was rewritten (its chunks, dtypes and labels describe the
        output), or None in the driver task (:meth:`without_result`).

    dim : str or None
        ``xarray.map_blocks``: the chunked dimension.
    deps : dict
        Values ``args``/``kwargs`` read from the graph under their own keys (a
        ``dask.delayed`` argument, or a large array dask stores once), each a ``Delayed``
        keyed by the key it stands for; ``args``/``kwargs`` hold a :class:`Dependency` in
        their place until :meth:`resolve` puts the computed values in.

    Deliberately not a dataclass: ``dask.delayed`` unpacks dataclasses and would compute
    ``data`` before the driver task sees it.
    """

    __slots__ = ("adapter", "args", "data", "deps", "dim", "func", "kwargs", "result")

    def __init__(
        self,
        adapter: RewriteKind[Any],
        func: Callable[..., Any],
        data: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
        dim: str | None = None,
        deps: dict[Any, Any] | None = None,
    ):
        self.adapter, self.func, self.data = adapter, func, data
        self.args, self.kwargs, self.result = tuple(args), dict(kwargs), result
        self.dim = dim
        self.deps: dict[Any, Any] = dict(deps or {})

    @property
    def kind(self) -> str:
        """The kind's printable name (``adapter.name``)."""
        return self.adapter.name

    def without_result(self) -> MapCall:
        """This call without ``result``: what the driver task takes (it needs no output
        graph, and must not hold the plain map's). ``deps`` keeps only its keys: the driver
        task takes their values as inputs of its own."""
        deps = dict.fromkeys(self.deps)
        return MapCall(
            self.adapter, self.func, self.data, self.args, self.kwargs, None, self.dim, deps
        )

    def resolve(self, values: dict[Any, Any]) -> MapCall:
        """This call with each :class:`Dependency` in ``args``/``kwargs`` replaced by its
        computed value (``values``: the computed :attr:`deps`, which the driver task
        receives as its own dependencies)."""
        missing = set(self.deps) - set(values)
        if missing:
            raise RewriteError(f"the driver task did not receive the argument(s) {sorted(missing)}")
        args = tuple(_substitute(a, values) for a in self.args)
        kwargs = {k: _substitute(v, values) for k, v in self.kwargs.items()}
        return MapCall(self.adapter, self.func, self.data, args, kwargs, self.result, self.dim)

    def __repr__(self) -> str:
        name = getattr(self.func, "__name__", type(self.func).__name__)
        return f"<MapCall {self.kind} {name} over {type(self.data).__name__}>"


class Dependency:
    """Placeholder for an argument of the mapped function that the graph holds under its own
    key (``key``): a ``dask.delayed`` value, or a large array dask stores once."""

    __slots__ = ("key",)

    def __init__(self, key: Any):
        self.key = key

    def __reduce__(self) -> tuple[Any, ...]:
        return (Dependency, (self.key,))

    def __dask_tokenize__(self) -> tuple[str, Any]:
        return ("bacc-dependency", self.key)

    def __repr__(self) -> str:
        return f"Dependency({self.key!r})"


def _substitute(obj: Any, values: dict[Any, Any]) -> Any:
    """``obj`` with every :class:`Dependency` (also inside lists, tuples, dicts) replaced."""
    if isinstance(obj, Dependency):
        return values[obj.key]
    if type(obj) in (list, tuple, set):
        return type(obj)(_substitute(o, values) for o in obj)
    if type(obj) is dict:
        return {k: _substitute(v, values) for k, v in obj.items()}
    return obj


def find_map(collection: Any) -> MapCall:
    """The map over chunks that produces ``collection``; raises :class:`RewriteError`."""
    import dask.array as da
    import dask.dataframe as dd
    import xarray as xr

    if isinstance(collection, (xr.DataArray, xr.Dataset)):
        parts = _xarray_map_blocks_parts(collection)
        if parts is not None:
            func, data, args, kwargs, dim = parts
            return MapCall(XARRAY_MAP_BLOCKS, func, data, args, kwargs, collection, dim)
    if isinstance(collection, xr.DataArray):
        if not isinstance(collection.data, da.Array):
            raise RewriteError("the DataArray is not dask-backed: there is no lazy map to code")
        call = _map_blocks_call(collection.data)
        return MapCall(APPLY_UFUNC, call.func, call.data, call.args, call.kwargs, collection)
    if isinstance(collection, xr.Dataset):
        raise RewriteError(
            "cannot rewrite this Dataset: its final operation is not xr.map_blocks (a "
            "Dataset from arithmetic, apply_ufunc, full_like or a constructor has one "
            "graph per data variable, and no map over chunks to code); call "
            "dask_bacc.map_coded(f, ds, dim=...) instead"
        )
    if isinstance(collection, da.Array):
        return _map_blocks_call(collection)
    if isinstance(collection, (dd.DataFrame, dd.Series)):
        return _map_partitions_call(collection)
    raise RewriteError(
        f"cannot rewrite a {type(collection).__module__}.{type(collection).__name__}: pass a "
        "lazy dask array, dask DataFrame/Series or dask-backed xarray DataArray"
    )


# -- dask arrays --------------------------------------------------------------------------
def _map_blocks_call(x: Any) -> MapCall:
    from dask.blockwise import Blockwise
    from dask.highlevelgraph import HighLevelGraph

    graph = x.__dask_graph__()
    if not isinstance(graph, HighLevelGraph):
        raise RewriteError(f"the array's graph is a {type(graph).__name__}, not a layered graph")
    name = _skip_passthrough(graph, x.name)
    layer = graph.layers[name]
    _refuse_overlap(graph, name)
    if not isinstance(layer, Blockwise):
        if not graph.dependencies.get(name) and name.startswith(("array-", "xarray-")):
            # (the names da.from_array and xarray give a chunked array's data; a graph
            # fused by optimization has no dependencies either, under the last op's name)
            raise RewriteError(
                f"the array's final operation {name!r} holds its data (da.from_array, "
                "xarray's .chunk(), an array loaded or persisted): there is no map over "
                "its blocks to code; apply coded() to a map of it (x.map_blocks(f))"
            )
        relabelled = _relabelled_map(graph, name)
        if relabelled is not None:
            raise RewriteError(
                f"the array's final operation {name!r} only relabels the blocks of the map "
                f"{relabelled!r}, under other indices (apply_gufunc's output layer, e.g. for "
                "a signature whose core dimensions span the whole array): the rewrite "
                "finds no map over the output's blocks. Map the function with "
                "x.map_blocks(f) over blocks along axis 0"
            )
        picked = _picked_output(graph, name)
        if picked is not None:
            raise RewriteError(
                f"the array's final operation {name!r} takes output {picked[1]} of the map "
                f"{picked[0]!r}, which returns several arrays per block (apply_gufunc, "
                "xr.apply_ufunc with several outputs): a coded map decodes one array per "
                "block. Map a function that returns that output alone"
            )
        raise RewriteError(
            f"the array's final operation {name!r} is a {type(layer).__name__} layer, not a "
            "map over blocks (x.map_blocks / da.blockwise); reductions, rechunks, slicing, "
            "concatenations and graphs fused by optimization cannot be rewritten"
        )
    _refuse_masked(x)
    # (dask allows a TaskRef name only for a broadcast input, whose index is None)
    inputs = sorted({n for n, ind in layer.indices if ind is not None and isinstance(n, str)})
    if not any(n in graph.layers for n in inputs):  # only block_id/array creation deps
        raise RewriteError(
            f"the map {name!r} has no chunked input array: an array creation (da.ones, "
            "da.full...) or da.map_blocks without array arguments makes its blocks itself, "
            "so there are no blocks to code; code the map that reads them"
        )
    if len(inputs) != 1:
        raise RewriteError(
            f"the map {name!r} has {len(inputs)} chunked inputs ({', '.join(inputs) or 'none'}); "
            "a coded map needs exactly one (block_id/block_info arguments add one)"
        )
    in_name = inputs[0]
    ann = graph.layers[in_name].collection_annotations or {}
    if "chunks" not in ann or "dtype" not in ann:
        raise RewriteError(f"the input layer {in_name!r} does not record its chunks and dtype")
    chunks = ann["chunks"]
    chunk_type = str(ann.get("chunk_type", "numpy.ndarray"))
    if chunk_type != "numpy.ndarray":
        raise RewriteError(
            f"the map's input blocks are {chunk_type}, not plain NumPy arrays: coded blocks "
            "are plain arrays, so f would not see a mask (or any other array type); run it "
            "with plain Dask: y.compute()"
        )
    if any(len(c) > 1 for c in chunks[1:]):
        raise RewriteError(
            f"the map is chunked along axes other than 0 (input chunks {chunks}); coded "
            "blocks are rows: rechunk to one chunk along the other axes before mapping"
        )
    if any(len(c) > 1 for c in x.chunks[1:]):
        # the input is blocked along axis 0 only, so f's output puts its blocks elsewhere
        axis = next(i for i, c in enumerate(x.chunks) if len(c) > 1)
        raise RewriteError(
            f"the map's output has its blocks along axis {axis} (output chunks "
            f"{x.chunks}, input chunks {chunks}): the final operation moves the axis its "
            "input is blocked along (new_axis=0, b[None], a transpose, apply_gufunc(..., "
            "axis=...)), and a coded map decodes blocks along axis 0. Code a map that "
            "keeps them along axis 0 and move the axis after coding (for a new axis: "
            "x.map_blocks(lambda b: b[:, None], new_axis=1), then "
            "da.moveaxis(coded(y), 1, 0))"
        )
    calls = [_task_call(graph, layer[key]) for key in sorted(k for k in layer)]
    func, args, kwargs, _ = calls[0]
    for j, (f_j, a_j, kw_j, dep_j) in enumerate(calls):
        if f_j is not func or not _same((a_j, kw_j), (args, kwargs)):
            raise RewriteError(
                f"the map {name!r} does not call one function with the same arguments on "
                "every block (block-dependent arguments such as block_info/block_id, or a "
                "fused graph)"
            )
        if dep_j[0] != in_name or dep_j[1] != j or any(i != 0 for i in dep_j[2:]):
            raise RewriteError(f"block {j} of {name!r} does not read input block {j}")
    if len(calls) != len(chunks[0]):
        raise RewriteError(f"{name!r} has {len(calls)} blocks but its input has {len(chunks[0])}")
    import dask.array as da

    dtype = np.dtype(ann["dtype"])
    data = da.Array(
        graph.cull_layers([in_name]),
        in_name,
        chunks=chunks,
        meta=np.empty((0,) * len(chunks), dtype=dtype),
    )
    deps = _dependencies(graph, (args, kwargs))
    return MapCall(ARRAY, func, data, args, kwargs, x, deps=deps)


def _refuse_overlap(graph: Any, name: str) -> None:
    """``x.map_overlap(f, ...)``: its last layer (``_trim-<token>``) trims the overlap off
    blocks that read their neighbours' rows, or (``trim=False``) ``f`` maps straight over
    the overlapping blocks. A coded block has no neighbours: refuse it by name."""
    message = (
        "the map reads overlapping blocks (x.map_overlap / da.overlap: each block sees "
        "rows of its neighbours, which a coded block does not have); run it with plain "
        "Dask: x.map_overlap(f, depth=..., boundary=...).compute()"
    )
    if name.startswith("_trim-"):
        raise RewriteError(message)
    for dep in graph.dependencies.get(name, ()):
        if "Overlap" in type(graph.layers[dep]).__name__ or dep.startswith("overlap-"):
            raise RewriteError(message)


def _refuse_masked(x: Any) -> None:
    """The map's meta says its blocks are not plain NumPy arrays (``np.ma.MaskedArray``,
    sparse, CuPy...): coded blocks are plain arrays, and the mask would be lost."""
    meta = getattr(x, "_meta", None)
    if meta is None or type(meta) is np.ndarray:
        return
    what = f"{type(meta).__module__}.{type(meta).__name__}"
    if isinstance(meta, np.ma.MaskedArray):
        what = "numpy.ma.MaskedArray (masked arrays)"
    raise RewriteError(
        f"the map's blocks are {what}, not plain NumPy arrays: coded blocks are plain "
        "arrays, so a mask (or any other array type) would be lost; run it with plain "
        "Dask: y.compute()"
    )


def _dependencies(graph: Any, obj: Any) -> dict[Any, Any]:
    """A ``Delayed`` of each :class:`Dependency` in ``obj`` (args and kwargs), its graph
    culled to the layer that holds it: the driver task takes them as its own inputs."""
    from dask.delayed import Delayed

    found: dict[Any, Any] = {}

    def walk(o: Any) -> None:
        if isinstance(o, Dependency):
            found.setdefault(o.key, None)
        elif isinstance(o, (list, tuple, set)):
            for item in o:
                walk(item)
        elif isinstance(o, dict):
            for item in o.values():
                walk(item)

    walk(obj)
    deps = {}
    for key in found:
        layer = key if key in graph.layers else None
        if layer is None:
            layer = next((n for n, lay in graph.layers.items() if key in lay), None)
        if layer is None:
            raise RewriteError(
                f"the mapped function reads {key!r}, which is not in the collection's graph"
            )
        deps[key] = Delayed(key, graph.cull_layers([layer]))
    return deps


def _only_map_dependency(graph: Any, name: str) -> str | None:
    """The one layer ``name`` depends on, when it is a map over blocks (Blockwise)."""
    from dask.blockwise import Blockwise

    deps = graph.dependencies.get(name, set())
    if len(deps) != 1:
        return None
    (dep,) = deps
    return str(dep) if isinstance(graph.layers[dep], Blockwise) else None


def _relabelled_map(graph: Any, name: str) -> str | None:
    """The map over blocks whose blocks layer ``name`` only aliases under other indices
    (``apply_gufunc``'s output layer when the map's keys have another layout), or None."""
    from dask._task_spec import Alias

    dep = _only_map_dependency(graph, name)
    if dep is None:
        return None
    # apply_gufunc names output i of map "<f>-<token>" "<f>_<i>-<token>" (a slice also
    # aliases whole blocks, under another name)
    head, _, token = str(name).rpartition("-")
    dep_head, _, dep_token = str(dep).rpartition("-")
    if token != dep_token or not re.fullmatch(re.escape(dep_head) + r"_\d+", head):
        return None
    for task in graph.layers[name].values():
        target = task.target if isinstance(task, Alias) else task
        if not (isinstance(target, tuple) and target and target[0] == dep):
            return None
    return dep


def _picked_output(graph: Any, name: str) -> tuple[str, int] | None:
    """``(map, i)`` when layer ``name`` is ``getitem(block, i)`` of every block of one map
    over blocks (how ``apply_gufunc`` splits the outputs of a function that returns
    several), else None."""
    import operator

    dep = _only_map_dependency(graph, name)
    if dep is None:
        return None

    def is_getitem(func: Any) -> bool:  # operator's, or dask's own of that name
        return func is operator.getitem or getattr(func, "__name__", None) == "getitem"

    picks = set()
    for task in graph.layers[name].values():
        if isinstance(task, tuple) and len(task) == 3 and is_getitem(task[0]):
            picks.add(task[2])
        elif is_getitem(getattr(task, "func", None)) and len(task.args) == 2:
            picks.add(getattr(task.args[1], "value", task.args[1]))
        else:
            return None
    return (dep, picks.pop()) if len(picks) == 1 else None


def _skip_passthrough(graph: Any, name: str) -> str:
    """Step back over layers that only alias their input (what ``apply_ufunc`` adds: a
    getitem of its single output and an identity transpose)."""
    while True:
        layer = graph.layers[name]
        deps = graph.dependencies.get(name, set())
        if len(deps) != 1:
            return name
        (dep,) = deps
        tasks = [(key, layer[key]) for key in layer]
        # every block of the input, each under its own index (a slice would drop some)
        if len(tasks) == len(graph.layers[dep]) and all(
            _is_alias(key, task, dep) for key, task in tasks
        ):
            name = dep
        else:
            return name


def _is_alias(key: Any, task: Any, dep: str) -> bool:
    from dask._task_spec import Alias, Task, TaskRef

    target: object = None
    if isinstance(task, tuple) and len(task) > 1 and task[0] == dep:  # legacy key alias
        target = task
    elif isinstance(task, Alias):
        target = task.target
    elif isinstance(task, Task) and task.func is np.transpose:
        (arg,) = task.args or (None,)
        axes = task.kwargs.get("axes")
        ndim = len(key) - 1
        if isinstance(arg, TaskRef) and tuple(axes or ()) == tuple(range(ndim)):
            target = arg.key
    return isinstance(target, tuple) and target[0] == dep and tuple(target[1:]) == tuple(key[1:])


def _concatenate_axes() -> Callable[..., Any]:
    from dask.array.core import concatenate_axes

    return concatenate_axes


def _only_chunk(node: Any) -> Any:
    """The one chunk (a ``TaskRef``) of the nested list ``concatenate_axes`` joins, or
    None when it joins several."""
    from dask._task_spec import List

    while isinstance(node, List):
        if len(node.args) != 1:
            return None
        node = node.args[0]
    return node


def _task_call(graph: Any, task: Any) -> tuple[Callable, tuple, dict, tuple]:
    """``(func, args, kwargs, input key)`` of one block's task, the block as first argument.

    Private API: ``dask._task_spec`` (``Task``, ``TaskRef``, ``DataNode``).
    """
    from dask._task_spec import DataNode, Dict, GraphNode, List, Set, Task, TaskRef, Tuple

    if not isinstance(task, Task):
        raise RewriteError(f"the block task is a {type(task).__name__}, not a function call")
    first = task.args[0] if task.args else None
    if isinstance(first, Task) and first.func is _concatenate_axes():
        # what blockwise builds for an axis the map contracts (drop_axis=, or
        # concatenate=True): f gets the chunks along it joined; one chunk joined is that
        # chunk itself (the callers refuse an input chunked along the other axes)
        chunk = _only_chunk(first.args[0])
        if chunk is None:
            raise RewriteError(
                "the mapped function is called on several chunks along an axis it drops "
                "joined together (map_blocks(..., drop_axis=...) or concatenate=True), not "
                "on one chunk each: rechunk that axis to one chunk before the map"
            )
        task = Task(task.key, task.func, chunk, *task.args[1:], **task.kwargs)
    if not task.args or not isinstance(task.args[0], TaskRef):
        raise RewriteError(
            "the mapped function does not take the chunk as its first argument "
            "(x.map_blocks(f, ...) calls f(block, ...))"
        )
    key = task.args[0].key
    if not isinstance(key, tuple):  # a block's key is (name, *index)
        raise RewriteError(f"the mapped function's first argument {key!r} is not a block")

    def value(node: Any) -> Any:
        if isinstance(node, DataNode):
            return node.value
        if isinstance(node, TaskRef) and not isinstance(node.key, tuple):
            # a dask.delayed argument, or a large array dask stores once under its own key
            return Dependency(node.key)
        if isinstance(node, GraphNode):
            deps = node.dependencies
            if any(isinstance(d, tuple) for d in deps) or (
                deps and not isinstance(node, (List, Tuple, Dict, Set))
            ):
                raise RewriteError(
                    "the mapped function takes another dask collection as an argument "
                    f"({sorted(map(str, deps))[:2]}): several chunked inputs "
                    "cannot be coded together; compute it first, or run it with plain Dask"
                )
            # a nested call of literals, or a container of them and of keyed values
            return node({d: Dependency(d) for d in deps})
        if isinstance(node, TaskRef):
            raise RewriteError(
                f"the mapped function takes the block {node.key!r} of another dask "
                "collection as an argument: several chunked inputs cannot be coded together"
            )
        return node

    args = tuple(value(a) for a in task.args[1:])
    kwargs = {k: value(v) for k, v in task.kwargs.items()}
    return task.func, args, kwargs, key


def _same(a: Any, b: Any) -> bool:
    from dask.base import tokenize

    return a is b or tokenize(a) == tokenize(b)


# -- dask dataframes -----------------------------------------------------------------------
def _map_partitions_call(obj: Any) -> MapCall:
    expr = _map_partitions_expr(obj)
    if expr is None:
        kind = type(obj.expr).__name__
        raise RewriteError(
            f"the DataFrame's final operation is {_FRAME_OPERATIONS.get(kind, kind)} "
            f"(dask-expr's {kind}), not map_partitions; only ddf.map_partitions(f, ...) "
            "can be rewritten"
        )
    func, frame, args, kwargs = expr
    return MapCall(FRAME, func, frame, args, kwargs, obj)


#: what a user wrote to get these final dask-expr expressions (named in refusals)
_FRAME_OPERATIONS = {
    "MapOverlapAlign": "dd.map_overlap over several DataFrames (each partition reads rows of "
    "its neighbours, which a coded partition does not have)",
    "FromGraph": "a DataFrame made from another collection's graph (e.g. an array's "
    "x.map_blocks(pd.Series), dd.from_delayed or a persisted collection)",
}


def _map_partitions_expr(obj: Any) -> tuple[Callable, Any, tuple, dict] | None:
    """``(func, input collection, args, kwargs)`` of a ``map_partitions`` result, or None.

    Private API: dask-expr's ``MapPartitions`` expression and its operands.
    """
    from dask.dataframe.dask_expr import new_collection
    from dask.dataframe.dask_expr._expr import Expr, MapPartitions

    expr = obj.expr
    if not isinstance(expr, MapPartitions):
        return None
    # UFuncElemwise: np.sqrt(ddf) and other NumPy ufuncs, one call per partition
    if type(expr) is not MapPartitions and type(expr).__name__ != "UFuncElemwise":
        if type(expr).__name__ == "MapOverlap":
            raise RewriteError(
                "the final operation is ddf.map_overlap, not map_partitions: each partition "
                "reads rows of its neighbours (before/after), which a coded partition does "
                "not have; run it with plain Dask: ddf.map_overlap(f, before, after).compute()"
            )
        raise RewriteError(
            f"the final operation is {type(expr).__name__}, a variant of map_partitions "
            "that the rewrite does not know; write it as ddf.map_partitions(f, ...), or run "
            "it with plain Dask: y.compute()"
        )
    if expr._has_partition_info:
        raise RewriteError(
            "the mapped function takes partition_info (each partition's number and "
            "division): a coded partition mixes several partitions and has none; run it "
            "with plain Dask: ddf.map_partitions(f, ...).compute()"
        )
    frame, *args = expr.args
    if any(isinstance(a, Expr) for a in args):
        raise RewriteError(
            "map_partitions takes another dask collection as an argument: several chunked "
            "inputs cannot be coded together"
        )
    kwargs = dict(expr.operand("kwargs") or {})
    if any(isinstance(v, Expr) for v in kwargs.values()):
        raise RewriteError("map_partitions takes a dask collection as a keyword argument")
    return expr.func, new_collection(frame), tuple(args), kwargs


# -- xr.map_blocks ---------------------------------------------------------------------------
def _xarray_map_blocks_parts(obj: Any) -> tuple[Callable, Any, tuple, dict, str] | None:
    """``(func, input object, args, kwargs, dim)`` of an ``xr.map_blocks`` result, or None.

    Private API: the tasks ``xr.map_blocks`` writes. Each output block is
    ``(_wrapper, func, [block, *args], kwargs, is_array, expected, ...)`` where ``block``
    builds a Dataset from ``(dims, input chunk key, attrs)`` entries per variable and
    ``(dims, index values, attrs)`` per index coordinate; the input's variables are dask
    arrays whose layers record their chunks and dtype.
    """
    import dask.array as da
    import xarray as xr
    from dask.highlevelgraph import HighLevelGraph

    if isinstance(obj, xr.DataArray):
        candidates = [obj.variable, *(c.variable for c in obj.coords.values())]
    else:
        candidates = list(obj.variables.values())
    variables = [v for v in candidates if isinstance(v.data, da.Array)]
    if not variables:
        return None
    graph = obj.__dask_graph__()
    if not isinstance(graph, HighLevelGraph):
        return None
    first = variables[0].data
    probe = graph.get((first.name, *(0,) * first.ndim))
    # an output variable of map_blocks is (getitem, (main layer, *block index), name)
    if not (isinstance(probe, tuple) and len(probe) == 3 and isinstance(probe[1], tuple)):
        return None
    main = probe[1][0]
    if main not in graph.layers:
        return None
    layer = graph.layers[main]
    wrappers = {
        k: t
        for k, t in layer.items()
        if isinstance(k, tuple)
        and k[0] == main
        and isinstance(t, tuple)
        and getattr(t[0], "__qualname__", "") == "map_blocks.<locals>._wrapper"
    }
    if not wrappers:
        return None
    keys = sorted(wrappers)
    _, func, arg_list, kwargs, is_array, *_ = wrappers[keys[0]]
    if any(is_array[1:]) or any(_is_xarray_block(a) for a in arg_list[1:]):
        raise RewriteError("xr.map_blocks maps over several xarray objects: cannot code them")
    blocks = [wrappers[k][2][0] for k in keys]
    kind, data_vars, coords, attrs = blocks[0]
    if kind is not xr.Dataset:
        raise RewriteError(f"unexpected xr.map_blocks block structure ({kind!r})")
    built: dict[Any, Any] = {}
    index_coords = []
    for name, sub in data_vars[1] + coords[1]:
        dims, ref, var_attrs = graph[sub][1]
        if not (isinstance(ref, tuple) and ref and ref[0] in graph.layers):
            index_coords.append((name, dims, var_attrs))  # its values sit in each block's task
            continue
        ann = graph.layers[ref[0]].collection_annotations or {}
        if "chunks" not in ann or "dtype" not in ann:
            raise RewriteError(f"the input layer {ref[0]!r} does not record its chunks")
        arr = da.Array(
            graph.cull_layers([ref[0]]),
            ref[0],
            chunks=ann["chunks"],
            meta=np.empty((0,) * len(ann["chunks"]), dtype=ann["dtype"]),
        )
        built[name] = (dims, arr, var_attrs)
    chunked = sorted(
        {
            d
            for dims, data, _ in built.values()
            for d, c in zip(dims, data.chunks, strict=True)
            if len(c) > 1
        }
    )
    if len(chunked) != 1:
        raise RewriteError(
            f"xr.map_blocks maps over chunks along {len(chunked)} dimensions {chunked}; a "
            "coded map needs the object chunked along exactly one"
        )
    for name, dims, var_attrs in index_coords:
        pieces = [np.asarray(graph[dict(b[2][1])[name]][1][1]) for b in blocks]
        values = np.concatenate(pieces) if chunked[0] in dims else pieces[0]
        built[name] = (dims, values, var_attrs)
    names = {n for n, _ in data_vars[1]}
    ds = xr.Dataset(
        {n: v for n, v in built.items() if n in names},
        coords={n: v for n, v in built.items() if n not in names},
        attrs=attrs,
    )
    data: Any = ds
    if is_array[0]:
        (name,) = names
        data = ds[name]
        if not isinstance(name, str):  # xarray's placeholder for an unnamed DataArray
            data = data.rename(None)
    return func, data, tuple(arg_list[1:]), dict(kwargs), chunked[0]


def _is_xarray_block(arg: Any) -> bool:
    import xarray as xr

    return isinstance(arg, tuple) and bool(arg) and arg[0] in (xr.Dataset, xr.DataArray)
