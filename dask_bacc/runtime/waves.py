"""Exact codes over more blocks than workers: ``map_coded``'s blocks in waves.

A coded job runs each of its N tasks on a worker of its own (a straggler must not hold
another task of the job), so K blocks under repetition need K + 1 workers and under
``"hedged"`` or ``"speculative"`` K. A code that copies blocks needs no such thing: the
K tasks of ``f`` can queue on the workers in waves, as plain Dask runs them, with a copy
of a late task on another worker (:class:`~.redundant.RedundantJob`, the engine of
``coded()`` and ``coding()``). So when the K blocks of in-memory data or a dask array
are more than that, :class:`BlocksJob` runs them as a layer of their own: one task
``f(block, *args, **kwargs)`` per block, under the layer job's copies and rule, and the
output is built as the coded job builds it (the adapter's
:meth:`~dask_bacc.collections.base.Blocks.assemble`). The report says so
(``report.code["waves"]``: the workers it ran on and the workers a coded job needed).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..collections.layer import Layer
from . import _dist
from .graph import held_apart
from .redundant import EXACT_LAYER_CODES, Policy, RedundantJob, policy_for
from .worker import check_result, consistent, hold, spec_of

if TYPE_CHECKING:
    from dask.typing import Key
    from distributed import Client, Future

    from ..collections.base import Blocks

__all__ = ["BlocksJob", "in_waves", "submit_waves"]


def in_waves(code: object, K: int, n_workers: int) -> bool:
    """Whether ``code`` over ``K`` blocks runs in waves on ``n_workers``: an exact code that
    copies blocks, with more blocks than a coded job can give a worker each (repetition
    needs K + 1 workers, hedged and speculative K)."""
    if not isinstance(code, str) or code.lower() not in EXACT_LAYER_CODES:
        return False
    return K + (code.lower() == "repetition") > n_workers


def apply(
    func: Callable[..., Any], block: Any, call: tuple[tuple[Any, ...], dict[str, Any]]
) -> Any:
    """On a worker: ``func(block, *args, **kwargs)`` for ``call = (args, kwargs)``."""
    args, kwargs = call
    return func(block, *args, **kwargs)


def result_spec(out: Any) -> tuple[tuple[int, ...], str]:
    """The ``(shape, dtype)`` of a block's output, checked as a coded result is (a real
    numeric, plain NumPy array; NaN and inf pass, as in plain Dask)."""
    return spec_of(check_result(out, finite=False))


def held_specs(
    keys: list[Key], dask_worker: Any = None
) -> dict[Key, tuple[tuple[int, ...], str] | Exception]:
    """On each worker (``client.run``): :func:`result_spec` of those of ``keys`` it holds,
    or the exception that says why the output is not an array; one message per worker
    where a task per block would be K."""
    out: dict[Key, tuple[tuple[int, ...], str] | Exception] = {}
    for key in keys:
        if key in dask_worker.data:
            try:
                out[key] = result_spec(dask_worker.data[key])
            except Exception as exc:  # InvalidResult, UnsupportedResult: raised below
                out[key] = exc
    return out


def blocks_layer(
    func: Callable[..., Any],
    chunks: Sequence[Future[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    name: str,
) -> Layer:
    """The layer of ``func`` over ``chunks`` (futures of the K blocks): task ``(name-<id>,
    j)`` is ``func(chunk j, *args, **kwargs)``. Large arguments (model weights, above
    ``bacc.args-inline-limit``) are one task of the graph that every block's task reads,
    as a coded job's are."""
    from dask._task_spec import GraphNode, Task, TaskRef

    tag = uuid.uuid4().hex
    graph: dict[Key, GraphNode] = {}
    call: Any = (args, kwargs)
    if held_apart(args, kwargs):
        call_key = f"bacc-call-{tag}"
        graph[call_key] = Task(call_key, hold, call)
        call = TaskRef(call_key)
    outputs: list[Key] = [(f"{name}-{tag}", j) for j in range(len(chunks))]
    for key, chunk in zip(outputs, chunks, strict=True):
        graph[key] = Task(key, apply, func, chunk, call)
    return Layer(graph, outputs, list(outputs), {k: [k] for k in outputs}, name, name)


class BlocksJob(RedundantJob):
    """The K blocks of a ``map_coded`` job in waves under an exact code that copies them
    (:func:`in_waves`); :meth:`result` gives what the coded job would: the adapter's
    output (a NumPy array, a dask array, a labelled object) of the K outputs of ``f``.

    Returned by :func:`~dask_bacc.submit_coded`; ``job.report`` is a layer job's
    (copy ``c`` of block ``b`` is task ``b + c * K``).
    """

    def __init__(
        self,
        client: Client,
        blocks: Blocks,
        chunks: list[Future[Any]],
        func: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        policy: Policy,
        timeout: float | None,
        workers: Mapping[str, Mapping[str, Any]],
        avoid: tuple[str, ...] = (),
        combine: str = "auto",
    ):
        from dask.utils import funcname

        wrapped = blocks.wrap(func, args, kwargs)
        layer = blocks_layer(wrapped, chunks, args, kwargs, funcname(func))
        super().__init__(client, layer, policy, timeout, workers, avoid)
        blocks.exact_decode = True  # f's own outputs: a labelled rebuild keeps their dtypes
        self.blocks = blocks
        self.combine = combine
        #: the blocks' futures, each let go once its block has a winner
        self._chunks = list(chunks)
        # what a coded job would have needed: report.waves says it ran without
        needs = self.K + (self.report.code["name"] == "repetition")
        self.report.code["waves"] = {"workers": len(workers), "needs": needs}

    def __repr__(self) -> str:
        return (
            f"<BlocksJob {self.report.code['name']} K={self.K} in waves "
            f"status={self.report.status} token={self.token}>"
        )

    async def _launch(self) -> None:
        await super()._launch()
        # the blocks are inputs of the layer's tasks, held until their block is given
        self._deps.update((c.key, c) for c in self._chunks)
        self._chunks = []

    async def _build_output(self, values: dict[Key, Future[Any]]) -> Any:
        """The adapter's output of the K winners: values gathered here (in-memory input),
        or futures of them (a dask array), after the checks a coded result gets."""
        futures = [values[k] for k in self.layer.outputs]
        if self.blocks.gather_output:
            got = await _dist.gather(self.client, futures)
            outs: list[Any] = [check_result(v, finite=False) for v in got]
            specs = [spec_of(v) for v in outs]
        else:
            specs = await self._specs_on_workers(futures)
            outs = futures
        (shape, dtype), bad = consistent(specs)
        if bad:
            shapes = sorted({specs[p][0] for p in bad})
            raise ValueError(
                f"func's output shape differs between blocks: {[shape, *shapes][:6]} "
                f"({len(bad)} of {self.K} blocks differ from the most common one); the "
                "output is built from blocks of one shape, as a coded job's is"
            )
        out_dtype = np.dtype(dtype)
        if self.blocks.gather_output:
            outs = [np.asarray(v).astype(out_dtype, copy=False) for v in outs]
        return self.blocks.assemble(outs, shape, out_dtype, self.combine)

    async def _specs_on_workers(
        self, futures: list[Future[Any]]
    ) -> list[tuple[tuple[int, ...], str]]:
        """The specs of outputs that stay on the cluster, asked of the workers holding
        them; one whose worker left meanwhile is checked by a task (recomputed)."""
        found: dict[Key, Any] = {}
        keys = [f.key for f in futures]
        replies = await self.client.run(held_specs, keys)
        for reply in replies.values():
            found.update(reply)
        missing = [f for f in futures if f.key not in found]
        if missing:
            checks = self.client.map(result_spec, missing, pure=False)
            got = await _dist.gather(self.client, checks)
            found.update(zip([f.key for f in missing], got, strict=True))
        specs = []
        for key in keys:
            spec = found[key]
            if isinstance(spec, Exception):
                raise spec
            specs.append(spec)
        return specs


async def submit_waves(
    client: Client,
    blocks: Blocks,
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    code: str,
    code_options: Mapping[str, Any] | None,
    timeout: float | None,
    workers: Mapping[str, Mapping[str, Any]],
    avoid: tuple[str, ...] = (),
    combine: str = "auto",
) -> BlocksJob:
    """Start a :class:`BlocksJob`: the blocks to the cluster (as a coded job sends
    them), then the layer of ``func`` over them under ``code``'s copies and rule."""
    policy = policy_for(code.lower(), code_options)
    chunks = await blocks.to_futures(client)
    job = BlocksJob(
        client, blocks, chunks, func, args, kwargs, policy, timeout, workers, avoid, combine
    )
    await job._submit()
    return job
