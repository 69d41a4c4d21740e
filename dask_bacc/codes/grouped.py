"""Grouped coding: many blocks, coded a group at a time (for K well above the workers).

An approximate code needs one worker per share, so K blocks with N > K shares need more
than K workers: a DataFrame of 200 partitions on 20 workers could not be coded. A
:class:`GroupedCode` splits the K blocks into G contiguous groups and codes each group on
its own with an inner approximate code (``n_g`` shares for its ``k_g`` blocks). Its
encoding matrix is block-diagonal, so a share reads only blocks of its group; each group
decodes from its own returned shares, so a slow worker costs each group it serves one
share, which that group's decode absorbs. The runtime places the shares of a group on
distinct workers, each worker serving several groups (:func:`cyclic_placement`, as in
gradient coding), and waits until every group has enough results (:meth:`GroupedCode.enough`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..exceptions import InsufficientResults
from ._types import CodeConfig, FloatArray, IndexArray, Returned
from .base import Code, InterpolatingCode, as_returned

__all__ = [
    "Group",
    "GroupedCode",
    "cyclic_placement",
    "group_of_shares",
    "plan_groups",
    "split_evenly",
]


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` sizes differing by at most one (larger ones first)."""
    base, extra = divmod(total, parts)
    return [base + (1 if g < extra else 0) for g in range(parts)]


def group_of_shares(config: dict[str, Any]) -> list[int] | None:
    """The group of each share of a grouped code's ``get_config()`` (None for any other
    code's): what the dashboard shows per coded task."""
    if config.get("name") != GroupedCode.name:
        return None
    shares = config.get("shares") or []
    return [g for g, n in enumerate(shares) for _ in range(int(n))]


def cyclic_placement(shares: Sequence[int], n_workers: int) -> list[int]:
    """The worker (an index into ``n_workers``) of each share of groups with ``shares[g]``
    shares each, numbered group after group: share ``i`` goes to worker ``i mod W``. The
    shares of a group are consecutive, so with ``shares[g] <= W`` no group has two shares
    on one worker, and every worker serves about ``sum(shares) / W`` groups."""
    if any(n > n_workers for n in shares):
        raise ValueError(
            f"a group of {max(shares)} shares needs as many workers, the cluster has {n_workers}"
        )
    return [i % n_workers for i in range(sum(shares))]


class Group:
    """One group: its blocks ``blocks`` (a range of the K), its shares ``shares`` (a range
    of the N) and the code that codes them."""

    __slots__ = ("blocks", "code", "shares")

    def __init__(self, blocks: range, shares: range, code: InterpolatingCode):
        self.blocks, self.shares, self.code = blocks, shares, code

    def local(self, returned: IndexArray) -> tuple[IndexArray, IndexArray]:
        """Positions in ``returned`` of this group's shares, and those shares' indices
        within the group."""
        pos = np.flatnonzero((returned >= self.shares.start) & (returned < self.shares.stop))
        return pos, returned[pos] - self.shares.start


class GroupedCode(Code):
    """K blocks in G groups, each coded with ``code`` (an approximate, registered code).

    Parameters
    ----------
    K : int
        Data blocks, split into ``len(sizes)`` contiguous groups.
    N : int
        Coded shares: ``sum(shares)``.
    code : str
        The inner code's registry name (``"bspline"``, ``"berrut"``, ``"spline"`` or a
        ``"systematic-"`` alias).
    sizes : list of int
        Blocks per group (sum K).
    shares : list of int
        Shares per group (sum N), each more than its group's blocks.
    **options
        The inner code's options (e.g. ``support=2``).
    """

    name = "grouped"
    exact = False

    def __init__(
        self,
        K: int,
        N: int,
        code: str = "bspline",
        sizes: Sequence[int] | None = None,
        shares: Sequence[int] | None = None,
        **options: Any,
    ):
        super().__init__(K, N)
        from .registry import get_code

        if sizes is None or shares is None:
            raise TypeError("GroupedCode needs sizes= and shares= (blocks and shares per group)")
        sizes, shares = [int(k) for k in sizes], [int(n) for n in shares]
        if len(sizes) != len(shares) or not sizes:
            raise ValueError("sizes and shares must give one entry per group")
        if sum(sizes) != self.K or sum(shares) != self.N:
            raise ValueError(
                f"groups of {sizes} blocks and {shares} shares do not add up to K={K}, N={N}"
            )
        if any(k < 1 or n <= k for k, n in zip(sizes, shares, strict=True)):
            raise ValueError(
                f"every group needs blocks and more shares than blocks: {sizes}, {shares}"
            )
        self.inner = str(code)
        self.options = dict(options)
        self.groups: list[Group] = []
        b = s = 0
        for k, n in zip(sizes, shares, strict=True):
            inner = get_code(self.inner, k, n, **self.options)
            if not isinstance(inner, InterpolatingCode):
                raise ValueError(
                    f"grouped coding takes an approximate code, not {self.inner!r} (exact "
                    "codes copy blocks, which needs no groups)"
                )
            self.groups.append(Group(range(b, b + k), range(s, s + n), inner))
            b, s = b + k, s + n

    @property
    def sizes(self) -> list[int]:
        return [len(g.blocks) for g in self.groups]

    @property
    def shares_per_group(self) -> list[int]:
        return [len(g.shares) for g in self.groups]

    @property
    def min_results(self) -> int:
        return sum(g.code.min_results for g in self.groups)

    def split(self, returned: Returned) -> list[tuple[Group, IndexArray, IndexArray]]:
        """Each group with the positions of its shares in ``returned`` and their indices
        within the group."""
        idx = as_returned(returned, self.N) if len(returned) else np.zeros(0, dtype=np.intp)
        return [(g, *g.local(idx)) for g in self.groups]

    def can_decode(self, returned: Returned) -> bool:
        return len(returned) > 0 and all(
            g.code.can_decode(local) for g, _, local in self.split(returned)
        )

    @property
    def config_name(self) -> str:
        return self.groups[0].code.name  # bacc.wait.<inner code>

    def group_target(self, group: Group, target: int) -> int:
        """A group's part of a wait for ``target`` of the N results: ``target * n_g / N``
        rounded up, and (a wait short of every result) at most ``n_g - 1``, so that a
        small group too decodes without its slowest share."""
        n = len(group.shares)
        need = math.ceil(target * n / self.N - 1e-9)
        if target < self.N:
            need = min(need, n - 1)
        return max(need, group.code.min_results)

    def enough(self, returned: Returned, target: int) -> bool:
        """Every group has its part of ``target`` results (:meth:`group_target`) and can
        decode from them: a wait counts per group, or a fast group's extra results would
        stand in for a slow group's missing ones."""
        return len(returned) > 0 and all(
            local.size >= self.group_target(g, target) and g.code.can_decode(local)
            for g, _, local in self.split(returned)
        )

    def is_exact(self, returned: Returned) -> bool:
        return len(returned) > 0 and all(
            g.code.is_exact(local) for g, _, local in self.split(returned)
        )

    def encoding_matrix(self) -> FloatArray:
        E = np.zeros((self.N, self.K))
        for g in self.groups:
            E[g.shares.start : g.shares.stop, g.blocks.start : g.blocks.stop] = (
                g.code.encoding_matrix()
            )
        return E

    def decoding_matrix(self, returned: Returned) -> FloatArray:
        idx = as_returned(returned, self.N)
        D = np.zeros((self.K, idx.size))
        for n, (g, pos, local) in enumerate(self.split(idx)):
            if not g.code.can_decode(local):
                raise InsufficientResults(
                    f"group {n} (blocks {g.blocks.start}..{g.blocks.stop - 1}) cannot decode "
                    f"from its {local.size} returned share(s) of {len(g.shares)}"
                )
            D[g.blocks.start : g.blocks.stop, pos] = g.code.decoding_matrix(local)
        return D

    def get_config(self) -> CodeConfig:
        return {
            **super().get_config(),
            "code": self.inner,
            "sizes": self.sizes,
            "shares": self.shares_per_group,
            **self.options,
        }


def plan_groups(K: int, group_blocks: int, group_shares: int) -> tuple[list[int], list[int]]:
    """Sizes and shares of ``ceil(K / group_blocks)`` groups as even as possible, each with
    ``group_shares / group_blocks`` times as many shares as blocks (at least one more)."""
    G = max(1, math.ceil(K / group_blocks))
    sizes = split_evenly(K, G)
    ratio = group_shares / group_blocks
    return sizes, [max(k + 1, math.ceil(ratio * k - 1e-9)) for k in sizes]
