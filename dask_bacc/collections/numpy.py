"""NumPy arrays (split along axis 0) and lists of equal-shape arrays."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import (
    Blocks,
    beyond_float64,
    check_dtype,
    combine_rule,
    refuse_nonfinite,
    rounding_message,
)

__all__ = ["ListBlocks", "NumpyBlocks", "default_n_blocks"]


def default_n_blocks(rows: int, max_blocks: int) -> int:
    """The largest K <= ``max_blocks`` that divides ``rows`` (so the blocks are equal)."""
    for k in range(max(1, min(rows, max_blocks)), 0, -1):
        if rows % k == 0:
            return k
    return 1


class NumpyBlocks(Blocks):
    """A NumPy array split along axis 0 into K equal blocks; the output is NumPy too."""

    kind = "numpy"
    local = True

    def __init__(
        self,
        data: np.ndarray,
        n_blocks: int | None = None,
        blocks: int | None = None,
        max_blocks: int | None = None,
    ):
        arr = np.asarray(data)
        check_dtype(arr.dtype)
        if arr.ndim == 0:
            raise ValueError("data must have at least one dimension to split into blocks")
        rows = arr.shape[0]
        if rows == 0 or arr.size == 0:
            raise ValueError(f"data is empty (shape {arr.shape})")
        K = _resolve_k(rows, n_blocks, blocks, max_blocks)
        super().__init__(K, (rows // K, *arr.shape[1:]), arr.dtype)
        self.data = arr

    def split(self) -> list[np.ndarray]:
        b = self.block_shape[0]
        return [self.data[j * b : (j + 1) * b] for j in range(self.K)]

    def stacked(self) -> np.ndarray:
        return self.data.reshape((self.K, *self.block_shape))

    def assemble(
        self,
        decoded: Sequence[np.ndarray],
        out_shape: tuple[int, ...],
        out_dtype: np.dtype,
        combine: str = "auto",
    ) -> np.ndarray:
        how = combine_rule(combine, out_shape, self.block_rows)
        values = [np.asarray(v) for v in decoded]
        return np.concatenate(values, axis=0) if how == "concat" else np.stack(values)


class ListBlocks(NumpyBlocks):
    """A list or tuple of K equal-shape arrays; the output is a list of K arrays."""

    kind = "list"

    def __init__(self, data: Sequence[Any]):
        if len(data) == 0:
            raise ValueError("data is an empty list: there are no blocks to map over")
        arrays = [np.asarray(b) for b in data]
        shapes = {a.shape for a in arrays}
        if len(shapes) > 1:
            raise ValueError(
                f"blocks must all have the same shape (ragged blocks cannot be mixed), got "
                f"{sorted(shapes)}; pad or split them to one shape"
            )
        for j, a in enumerate(arrays):
            check_dtype(a.dtype, f"block {j}")
        dtype = np.result_type(*arrays)
        if dtype.kind == "f":
            _refuse_rounding(arrays)
        Blocks.__init__(self, len(arrays), arrays[0].shape, dtype)
        self.arrays = arrays

    def split(self) -> list[np.ndarray]:
        return self.arrays

    def check_finite(self) -> None:
        for j, a in enumerate(self.arrays):
            refuse_nonfinite(a, f"block {j}")

    def stacked(self) -> np.ndarray:
        return np.stack(self.arrays)

    # a list in, a list out: by design not NumpyBlocks' array (whose local handling it shares)
    def assemble(  # type: ignore[override]
        self,
        decoded: Sequence[np.ndarray],
        out_shape: tuple[int, ...],
        out_dtype: np.dtype,
        combine: str = "auto",
    ) -> list[np.ndarray]:
        return [np.asarray(v) for v in decoded]


def _refuse_rounding(arrays: Sequence[np.ndarray]) -> None:
    """Refuse a 64-bit integer block holding integers beyond 2**53 stacked as float64
    beside blocks of other dtypes (an exact decode would return rounded integers)."""
    for j, a in enumerate(arrays):
        top = beyond_float64(a)
        if top is None:
            continue
        others = sorted({str(b.dtype) for b in arrays if b.dtype != a.dtype})
        fix = (
            "Cast the blocks explicitly if float64 precision is enough "
            "([np.asarray(b, dtype='float64') for b in blocks]), or pass blocks of one "
            "integer dtype: they are coded in it."
        )
        raise ValueError(
            rounding_message(f"block {j}", a.dtype, top, f"blocks of {', '.join(others)}", fix)
        )


def _resolve_k(rows: int, n_blocks: int | None, blocks: int | None, max_blocks: int | None) -> int:
    for name, value in (("n_blocks", n_blocks), ("blocks", blocks)):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, (int, np.integer))
        ):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
        if value is not None and value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    if blocks is not None:
        if rows % blocks:
            raise ValueError(
                f"blocks={blocks} rows does not divide the {rows} rows into equal blocks"
            )
        K = rows // blocks
        if n_blocks is not None and n_blocks != K:
            raise ValueError(f"n_blocks={n_blocks} and blocks={blocks} disagree for {rows} rows")
        return K
    if n_blocks is not None:
        if n_blocks > rows or rows % n_blocks:
            raise ValueError(
                f"cannot split {rows} rows into {n_blocks} equal blocks; choose n_blocks "
                f"that divides {rows}"
            )
        return int(n_blocks)
    return default_n_blocks(rows, max_blocks or 1)
