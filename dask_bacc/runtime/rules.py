"""The rule of backup copies: when a running task gets a copy (exact results).

One dataclass, :class:`Speculation`, for the two rules of the exact codes that back up
late tasks: ``code="hedged"`` (:meth:`Speculation.hedge`, a threshold from what this
function's tasks take, no "most tasks done" gate, a budget of extra tasks) and
``code="speculative"`` (:meth:`Speculation.spark`, :meth:`Speculation.cubed`: armed once
most tasks finished). A pure rule: :mod:`.speculative` builds the ``map_coded`` jobs that
follow it, :mod:`.launch` plans their backups, :mod:`.redundant` the layer jobs' copies.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import config

__all__ = ["BACKUP_CODES", "Speculation", "backup_code", "late_blocks", "share_backups"]


#: the codes that run K tasks plus backup copies of late ones, and their default rule
BACKUP_CODES = {"hedged": "hedge", "speculative": "spark"}

_PRESETS: dict[str, dict[str, Any]] = {
    "spark": {"multiplier": 3.0, "quantile": 0.9, "min_runtime": 0.1, "min_tasks": 1},
    "cubed": {"multiplier": 3.0, "quantile": 0.5, "min_runtime": 0.0, "min_tasks": 10},
    # quantile 0: no gate; the other values come from bacc.hedge (from_options)
    "hedge": {
        "multiplier": 1.5,
        "quantile": 0.0,
        "min_runtime": 0.05,
        "copies": 3,
        "budget": 0.25,
        "known": 4,
    },
}


#: the settings of each code's rule (bacc.yaml), read by :meth:`Speculation.from_options`
_SETTINGS = {
    "hedged": (
        "hedge.multiplier",
        "hedge.min-runtime",
        "hedge.known",
        "hedge.budget",
        "hedge.copies",
        "hedge.interval",
    ),
    "speculative": (
        "speculative.rule",
        "speculative.multiplier",
        "speculative.quantile",
        "speculative.min-runtime",
        "speculative.interval",
    ),
}


@dataclass(frozen=True)
class Speculation:
    """When to launch a backup copy of a running task.

    A task that has run longer than ``max(multiplier * expected, min_runtime)`` gets a
    backup (:meth:`threshold`), if there are at least ``min_tasks`` tasks. With
    ``quantile > 0`` the rule is armed only once ``max(floor(quantile * K), 1)`` tasks
    finished and ``expected`` is their median (Spark, cubed); with ``quantile == 0``
    (hedging) it is armed from the start: ``expected`` is the median of the job's finished
    tasks once ``known`` of them finished, before that the function's expected task from
    earlier jobs (``prior``), else the median of what finished.

    Attributes
    ----------
    multiplier, quantile, min_runtime, min_tasks :
        The rule. :meth:`spark` is Spark 4's ``spark.speculation.*`` defaults: 3, 0.9,
        0.1 s, 1. :meth:`cubed` is cubed's rule: 3x the median, at least half the tasks
        done, at least 10 tasks. :meth:`hedge` (``code="hedged"``): ``bacc.hedge.*``,
        1.5x the expected task, no gate, at least 50 ms.
    interval : float
        Seconds between checks (``spark.speculation.interval``: 100 ms).
    copies : int
        Most copies of one task, the first included (2: one backup). A late task gets the
        copies it may still have at once when the budget holds them for every late task
        (:func:`share_backups`), not one a threshold after the other: a backup straggles
        as often as any task, and finding that out costs another threshold, while a copy
        on an idle worker costs only capacity nobody uses.
    budget : float or None
        Extra task-seconds a job may spend on backups of late tasks, as a fraction of its
        expected task-seconds (``K * expected``; at least one task's worth); a backup is
        charged one expected task when it starts. None: no limit. Copies of failed tasks
        are not charged (they replace a task, they do not hedge one).
    known : int
        Finished tasks of the job after which their median replaces the prior.
    """

    multiplier: float = 3.0
    quantile: float = 0.9
    min_runtime: float = 0.1
    min_tasks: int = 1
    interval: float = 0.1
    rule: str = "spark"
    copies: int = 2
    budget: float | None = None
    known: int = 1

    def __post_init__(self) -> None:
        if not self.multiplier >= 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 <= self.quantile <= 1:
            raise ValueError(f"quantile must lie in [0, 1], got {self.quantile}")
        if not self.min_runtime >= 0:
            raise ValueError(f"min_runtime must be >= 0, got {self.min_runtime}")
        if not self.interval > 0:
            raise ValueError(f"interval must be positive, got {self.interval}")
        if self.copies < 2:
            raise ValueError(f"copies must be >= 2 (a task and a backup), got {self.copies}")
        if self.budget is not None and not self.budget >= 0:
            raise ValueError(f"budget must be >= 0, got {self.budget}")
        if self.known < 1:
            raise ValueError(f"known must be >= 1, got {self.known}")

    @property
    def hedges(self) -> bool:
        """Armed from the start (no "most tasks done" gate): the hedging rule."""
        return self.quantile == 0

    @classmethod
    def preset(cls, rule: str, **overrides: Any) -> Speculation:
        """The named rule (``"hedge"``, ``"spark"`` or ``"cubed"``), with some values
        overridden."""
        if rule not in _PRESETS:
            raise ValueError(f"the backup rule must be 'hedge', 'spark' or 'cubed', got {rule!r}")
        return cls(**{**_PRESETS[rule], "rule": rule, **overrides})

    @classmethod
    def spark(cls, **overrides: Any) -> Speculation:
        """Spark 4's defaults: multiplier 3, quantile 0.9, min runtime 100 ms."""
        return cls.preset("spark", **overrides)

    @classmethod
    def hedge(cls, **overrides: Any) -> Speculation:
        """Hedging (``code="hedged"``) with the built-in values (:meth:`from_options`
        reads ``bacc.hedge``)."""
        return cls.preset("hedge", **overrides)

    @classmethod
    def cubed(cls, **overrides: Any) -> Speculation:
        """cubed's rule: 3x the median, at least half of the tasks done, at least 10 tasks."""
        return cls.preset("cubed", **overrides)

    @classmethod
    def from_options(cls, options: dict[str, Any], code: str = "speculative") -> Speculation:
        """The rule of ``code`` (``"hedged"`` or ``"speculative"``) from ``code_options``
        over its configuration (``bacc.hedge`` or ``bacc.speculative``)."""
        from dask.utils import parse_timedelta

        known = {
            "rule", "multiplier", "quantile", "min_runtime", "min_tasks", "interval",
            "copies", "budget", "known",
        }  # fmt: skip
        unknown = set(options) - known
        if unknown:
            raise TypeError(f"unknown {code} option(s) {sorted(unknown)}; use {sorted(known)}")
        hedged = code == "hedged"
        conf = {
            key.split(".", 1)[1].replace("-", "_"): config.get(key)
            for key in _SETTINGS["hedged" if hedged else "speculative"]
        }
        # bacc.speculative's null values leave the chosen rule's own; bacc.hedge is whole
        values = {k: v for k, v in conf.items() if hedged or v is not None}
        values.update(options)
        rule = values.pop("rule", "hedge" if hedged else "spark")
        overrides: dict[str, Any] = {}
        for key, value in values.items():
            if value is None:
                overrides[key] = None  # budget: no limit
            elif key in ("min_runtime", "interval"):
                overrides[key] = float(parse_timedelta(value))
            elif key in ("min_tasks", "copies", "known"):
                overrides[key] = int(value)
            else:
                overrides[key] = float(value)
        return cls.preset(rule, **overrides)

    def expected(
        self, n_tasks: int, durations: list[float], prior: float | None = None
    ) -> tuple[float | None, str]:
        """The expected task of the job, in seconds, and where it came from: ``"job"``
        (the median of its finished tasks), ``"prior"`` (the function's earlier jobs,
        before ``known`` tasks of this one finished) or ``"none"``."""
        if durations and (len(durations) >= min(self.known, n_tasks) or not prior):
            return float(statistics.median(durations)), "job"
        if prior:
            return float(prior), "prior"
        return None, "none"

    def assess(
        self, n_tasks: int, durations: list[float], prior: float | None = None
    ) -> tuple[float | None, float | None, str]:
        """``(threshold, expected, source)``: the runtime after which a task is backed up
        (None while the rule is not armed), and :meth:`expected`'s answer it rests on.

        ``durations``: the run times of the job's finished tasks; ``prior``: the function's
        expected task from earlier jobs (seconds; used by the hedging rule only)."""
        expected, source = self.expected(n_tasks, durations, prior)
        if n_tasks < self.min_tasks or expected is None:
            return None, expected, source
        if not self.hedges:  # Spark, cubed: the median of the finished, once enough did
            if len(durations) < max(math.floor(self.quantile * n_tasks), 1):
                return None, expected, source
            return max(self.multiplier * expected, self.min_runtime), expected, source
        return max(self.multiplier * expected, self.min_runtime), expected, source

    def threshold(
        self, n_tasks: int, durations: list[float], prior: float | None = None
    ) -> float | None:
        """Runtime after which a task is backed up, or None while the rule is not armed
        (:meth:`assess`)."""
        return self.assess(n_tasks, durations, prior)[0]

    def budget_tasks(self, n_tasks: int) -> int | None:
        """Backups of late tasks a job of ``n_tasks`` may launch (None: no limit):
        ``budget * n_tasks`` expected tasks' worth, at least one (each is charged one)."""
        if self.budget is None:
            return None
        if self.budget == 0:
            return 0
        return max(math.floor(self.budget * n_tasks + 1e-9), 1)


def backup_code(code: object) -> str | None:
    """``"hedged"`` or ``"speculative"`` when ``code`` names a code of backup copies."""
    if isinstance(code, str):
        name = code.lower()
        if name in BACKUP_CODES:
            return name
    return None


def late_blocks(
    blocks: Iterable[int],
    since: Mapping[int, float],
    tail_since: float | None,
    now: float,
    threshold: float,
    may_copy: Callable[[int], bool],
) -> list[int]:
    """The ``blocks`` whose copies all run late by ``threshold`` seconds, latest first:
    their newest copy started (``since``) longer ago, or, once the job is in its tail
    (``tail_since``: no more blocks left than workers, so each should be running), none
    started that long after the tail began (queued behind a late task on its worker).
    ``may_copy(b)``: whether block b may have another copy at all."""
    overdue: list[tuple[float, int]] = []
    for b in blocks:
        if not may_copy(b):
            continue
        started = since.get(b)
        if started is None:
            if tail_since is not None and now - tail_since > threshold:
                overdue.append((now - tail_since, b))
        elif now - started > threshold:
            overdue.append((now - started, b))
    overdue.sort(reverse=True)
    return [b for _, b in overdue]


def share_backups(
    late: Sequence[int], room: Callable[[int], int], slots: int | None, reserve: int = 0
) -> list[int]:
    """The backups of the ``late`` blocks (latest first) launched at one check, in
    rounds: every late block gets one backup (the latest first, while ``slots`` last), and
    then each further round gives one more to every late block the rule still allows one
    (``room(b)``: the copies it may still have) only if the whole round fits in what is
    left of ``slots`` after ``reserve`` (one first backup for each block still running
    that may yet turn late). ``slots``: what is left of the budget and of the idle
    workers (None: no limit).

    Returns the blocks in launch order, a block once per backup (a block that gets two
    appears twice). A late task gets its copies together rather than a threshold apart:
    with a tenth of tasks straggling, one backup in ten straggles too, and waiting a
    threshold to find that out put about one job in seven at twice the others' tail
    (the one-wave cell of docs/regimes.md). A round goes to every late block or to none:
    a second copy for one of them could spend the budget a straggling backup of another
    needs a threshold later, and the rest stays in hand for that.
    """
    left = {b: max(int(room(b)), 0) for b in late}
    out = [b for b in late if left[b] > 0]
    if slots is not None:
        out = out[: max(slots, 0)]
    for b in out:
        left[b] -= 1
    while True:
        round_ = [b for b in late if left[b] > 0]
        if not round_ or (slots is not None and slots - len(out) < len(round_) + reserve):
            return out
        for b in round_:
            left[b] -= 1
        out += round_
