"""Repetition and uncoded computing: exact codes that copy blocks instead of mixing them."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..exceptions import InsufficientResults
from ._types import Blocks, CodeConfig, FloatArray, IndexArray, Returned
from .base import Code, as_returned

__all__ = ["RepetitionCode", "Uncoded"]


class RepetitionCode(Code):
    """Repetition: coded task i computes block ``i mod K``; a block is exact once any copy returns.

    Encoding and decoding select blocks (``numpy.take``) rather than multiply, so the
    dtype of the data and of f's output are kept.
    """

    name = "repetition"
    exact = True
    keeps_dtype = True

    def __init__(self, K: int, N: int):
        super().__init__(K, N)
        if self.N < self.K:
            raise ValueError(f"{type(self).__name__} needs N >= K, got K={self.K}, N={self.N}")
        # nominal points: block j sits at j, coded task i at the block it copies
        self._alpha = np.arange(self.K, dtype=float)
        self._z = (np.arange(self.N) % self.K).astype(float)

    @property
    def min_results(self) -> int:
        return self.K

    def can_decode(self, returned: Returned) -> bool:
        if len(returned) == 0:
            return False
        return len({int(i) % self.K for i in as_returned(returned, self.N)}) == self.K

    def _sources(self, returned: Returned) -> IndexArray:
        """Column of ``returned`` that supplies each block: its lowest-index returned copy."""
        idx = as_returned(returned, self.N)
        source = np.full(self.K, -1, dtype=np.intp)
        for col in np.argsort(idx, kind="stable")[::-1]:
            source[idx[col] % self.K] = col
        missing = np.flatnonzero(source < 0)
        if missing.size:
            raise InsufficientResults(
                f"{type(self).__name__} (K={self.K}, N={self.N}): no copy of blocks "
                f"{missing.tolist()} returned"
            )
        return source

    def encoding_matrix(self) -> FloatArray:
        out = np.zeros((self.N, self.K))
        out[np.arange(self.N), np.arange(self.N) % self.K] = 1.0
        return out

    def decoding_matrix(self, returned: Returned) -> FloatArray:
        source = self._sources(returned)
        out = np.zeros((self.K, len(returned)))
        out[np.arange(self.K), source] = 1.0
        return out

    def encode(self, blocks: Blocks) -> NDArray[Any]:
        blocks = self._stack(blocks, self.K, "blocks")
        return np.take(blocks, np.arange(self.N) % self.K, axis=0)

    def decode(self, results: Blocks, returned: Returned) -> NDArray[Any]:
        source = self._sources(returned)
        results = self._stack(results, len(returned), "results")
        return np.take(results, source, axis=0)


class Uncoded(RepetitionCode):
    """No redundancy: N = K tasks, every one of them must return."""

    name = "uncoded"

    def __init__(self, K: int, N: int | None = None):
        super().__init__(K, K if N is None else N)
        if self.N != self.K:
            raise ValueError(
                f"uncoded computing runs exactly N = K tasks, got K={self.K}, N={self.N}"
            )

    def get_config(self) -> CodeConfig:
        return {"name": self.name, "K": self.K}
