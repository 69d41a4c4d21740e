"""Dask arrays: the blocks along axis 0 are the K data blocks; the output is a dask array."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np

from .base import Blocks, check_dtype, combine_rule

__all__ = ["DaskArrayBlocks"]


class DaskArrayBlocks(Blocks):
    """A dask array whose chunks along axis 0 are the K blocks.

    Other axes are rechunked to a single chunk (a coded share mixes whole blocks). The
    chunks along axis 0 must be equal; ``x.rechunk({0: rows})`` makes them so. The output
    is a dask array backed by the decoded futures, chunked by block.
    """

    kind = "dask.array"
    gather_output = False

    def __init__(self, data: da.Array):
        check_dtype(data.dtype)
        if data.ndim == 0:
            raise ValueError("data must have at least one dimension to split into blocks")
        if any(math.isnan(c) for cs in data.chunks for c in cs):
            raise ValueError("dask array has unknown chunk sizes; call x.compute_chunk_sizes()")
        if data.size == 0:
            raise ValueError(f"data is empty (shape {data.shape})")
        rows = data.chunks[0]
        if len(set(rows)) > 1:
            raise ValueError(
                f"the chunks along axis 0 must be equal (ragged blocks), got {rows}; rechunk "
                f"with x.rechunk({{0: size}}) where size divides {data.shape[0]}"
            )
        if any(len(c) > 1 for c in data.chunks[1:]):
            data = data.rechunk({i: -1 for i in range(1, data.ndim)})
        super().__init__(len(rows), (rows[0], *data.shape[1:]), data.dtype)
        self.data = data

    async def to_futures(self, client: Any) -> list[Any]:
        delayed = self.data.to_delayed().ravel().tolist()
        return client.compute(delayed)

    def assemble(
        self,
        decoded: Sequence[Any],
        out_shape: tuple[int, ...],
        out_dtype: np.dtype,
        combine: str = "auto",
    ) -> da.Array:
        from dask._task_spec import Task

        how = combine_rule(combine, out_shape, self.block_rows)
        K = len(decoded)
        name = f"decoded-{uuid.uuid4().hex}"
        # one layer whose chunks are the futures themselves (stacked: each with a new
        # leading axis of 1): computing it costs a third of K from_delayed arrays
        # concatenated, K layers that dask optimizes one by one
        graph: dict[Any, Any] = {}
        if how == "concat":
            rest = tuple((s,) for s in out_shape[1:])
            chunks = ((out_shape[0],) * K, *rest)
            for i, f in enumerate(decoded):
                graph[(name, i) + (0,) * len(rest)] = f
        else:
            chunks = ((1,) * K, *((s,) for s in out_shape))
            for i, f in enumerate(decoded):
                key = (name, i) + (0,) * len(out_shape)
                graph[key] = Task(key, np.expand_dims, f, 0)
        return da.Array(graph, name, chunks, dtype=out_dtype)
