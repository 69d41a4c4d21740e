"""One graph submission for many tasks, each with its own worker restriction.

``Client.submit`` sends one ``update-graph`` message per task and ``Client.map`` gives
every task the same restrictions; a coded job needs N tasks each strictly pinned to its
own worker, in one message. Dask's public annotations are per layer, so this builds one
``MaterializedLayer`` whose ``workers`` annotation is a function of the key (evaluated on
the client, per key, when the graph is packed) and submits it with ``Client.get(...,
sync=False)``. Tasks are ``dask._task_spec.Task`` objects: a private module, read only here;
``tests/test_graph.py`` checks the whole path against the installed Dask (a canary).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dask._task_spec import Task
    from dask.typing import Key
    from distributed import Client, Future

__all__ = ["TaskSpec", "held_apart", "submit_graph"]


@dataclass
class TaskSpec:
    """One task: ``func(*args)`` under ``key``; ``args`` may hold futures (dependencies),
    also inside lists and tuples. ``workers``: where it may run (None: anywhere);
    ``loose``: elsewhere too when those workers are gone or busy."""

    key: Key
    func: Callable[..., Any]
    args: tuple[Any, ...]
    workers: Sequence[str] | None = None
    loose: bool = False
    #: a future is returned for it (False: an intermediate the scheduler releases once
    #: the tasks that need it are done)
    keep: bool = True


def submit_graph(client: Client, tasks: Sequence[TaskSpec]) -> dict[Key, Future[Any]]:
    """Submit ``tasks`` in one ``update-graph`` message; return ``{key: Future}`` for
    those with ``keep``.

    Strictly pinned and loose tasks may be mixed: ``allow_other_workers`` is annotated
    per key too.
    """
    from dask._task_spec import Task, parse_input
    from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

    from ._dist import get

    if not tasks:
        return {}
    # one layer per kind of restriction: annotations are per layer (a function of the key)
    groups: dict[tuple[bool, bool], dict[Key, Task]] = {}
    workers: dict[Key, list[str]] = {}
    for t in tasks:
        pinned = bool(t.workers)
        groups.setdefault((pinned, pinned and t.loose), {})[t.key] = Task(
            t.key, t.func, *map(parse_input, t.args)
        )
        if pinned:
            workers[t.key] = list(t.workers or ())
    layers: dict[str, MaterializedLayer] = {}
    deps: dict[str, set[str]] = {}
    for n, ((pinned, loose), dsk) in enumerate(groups.items()):
        annotations: dict[str, Any] | None = None
        if pinned:
            annotations = {"workers": workers.__getitem__, "allow_other_workers": loose}
        name = f"bacc-graph-{n}-{id(dsk):x}"
        layers[name] = MaterializedLayer(dsk, annotations=annotations)
        deps[name] = set()
    keys = [t.key for t in tasks if t.keep]
    futures = get(client, HighLevelGraph(layers, deps), keys)
    return dict(zip(keys, futures, strict=True))


def held_apart(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether f's arguments go to the cluster as one task that every task of the job
    reads (above ``bacc.args-inline-limit``: model weights, say), not inside each task's
    spec."""
    from dask.sizeof import sizeof
    from dask.utils import parse_bytes

    from .. import config

    limit = parse_bytes(config.get("args-inline-limit"))
    return bool(args or kwargs) and sizeof((args, kwargs)) > limit
