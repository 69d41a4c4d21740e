"""Speculative backup tasks: the classic alternative to coded computing (exact results).

K uncoded tasks run, one per worker. Once enough of them finished, a task still running
after ``multiplier`` times the median duration of the finished ones (and at least
``min_runtime``) gets one backup copy on another worker; the first copy to finish wins and
the other is cancelled. A launch policy (:class:`~.launch.SpeculativeLaunch`, its rule
:func:`~.launch.plan_backups`), decoded as copies: task ``K + j`` is the backup of block j.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from .. import config
from ..codes import RepetitionCode
from ..codes.transform import Transform
from ..collections import Blocks
from .job import CodedJob
from .launch import SpeculativeLaunch
from .placement import choose_workers
from .wait import FirstK

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["Speculation", "speculative_job"]


_PRESETS: dict[str, dict[str, float]] = {
    "spark": {"multiplier": 3.0, "quantile": 0.9, "min_runtime": 0.1, "min_tasks": 1},
    "cubed": {"multiplier": 3.0, "quantile": 0.5, "min_runtime": 0.0, "min_tasks": 10},
}


@dataclass(frozen=True)
class Speculation:
    """When to launch a backup copy of a running task.

    A task that has run longer than ``max(multiplier * median, min_runtime)`` gets a backup
    once at least ``max(floor(quantile * K), 1)`` tasks finished, if there are at least
    ``min_tasks`` tasks (``median``: durations of the finished tasks).

    Attributes
    ----------
    multiplier, quantile, min_runtime, min_tasks :
        The rule. :meth:`spark` (the default) is Spark 4's ``spark.speculation.*``
        defaults: 3, 0.9, 0.1 s, 1. :meth:`cubed` is cubed's rule: 3x the median, at least
        half the tasks done, at least 10 tasks.
    interval : float
        Seconds between checks (``spark.speculation.interval``: 100 ms).
    """

    multiplier: float = 3.0
    quantile: float = 0.9
    min_runtime: float = 0.1
    min_tasks: int = 1
    interval: float = 0.1
    rule: str = "spark"

    def __post_init__(self) -> None:
        if not self.multiplier >= 1:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")
        if not 0 < self.quantile <= 1:
            raise ValueError(f"quantile must lie in (0, 1], got {self.quantile}")
        if not self.min_runtime >= 0:
            raise ValueError(f"min_runtime must be >= 0, got {self.min_runtime}")
        if not self.interval > 0:
            raise ValueError(f"interval must be positive, got {self.interval}")

    @classmethod
    def preset(cls, rule: str, **overrides: Any) -> Speculation:
        """The named rule (``"spark"`` or ``"cubed"``), with some values overridden."""
        if rule not in _PRESETS:
            raise ValueError(f"speculative rule must be 'spark' or 'cubed', got {rule!r}")
        return cls(**{**_PRESETS[rule], "rule": rule, **overrides})

    @classmethod
    def spark(cls, **overrides: Any) -> Speculation:
        """Spark 4's defaults: multiplier 3, quantile 0.9, min runtime 100 ms."""
        return cls.preset("spark", **overrides)

    @classmethod
    def cubed(cls, **overrides: Any) -> Speculation:
        """cubed's rule: 3x the median, at least half of the tasks done, at least 10 tasks."""
        return cls.preset("cubed", **overrides)

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> Speculation:
        """The rule from ``code_options`` over ``bacc.speculative`` in the configuration."""
        from dask.utils import parse_timedelta

        known = {"rule", "multiplier", "quantile", "min_runtime", "min_tasks", "interval"}
        unknown = set(options) - known
        if unknown:
            raise TypeError(f"unknown speculative option(s) {sorted(unknown)}; use {sorted(known)}")
        rule = options.get("rule", config.get("speculative.rule"))
        overrides: dict[str, Any] = {}
        for key, conf_key in (
            ("multiplier", "speculative.multiplier"),
            ("quantile", "speculative.quantile"),
            ("min_runtime", "speculative.min-runtime"),
        ):
            value = options.get(key, config.get(conf_key))
            if value is not None:
                overrides[key] = (
                    float(parse_timedelta(value)) if key == "min_runtime" else float(value)
                )
        if "min_tasks" in options:
            overrides["min_tasks"] = int(options["min_tasks"])
        overrides["interval"] = float(
            parse_timedelta(options.get("interval", config.get("speculative.interval")))
        )
        return cls.preset(rule, **overrides)

    def threshold(self, n_tasks: int, durations: list[float]) -> float | None:
        """Runtime after which a task is backed up, or None while the rule is not armed."""
        if n_tasks < self.min_tasks or not durations:
            return None
        if len(durations) < max(math.floor(self.quantile * n_tasks), 1):
            return None
        return max(self.multiplier * statistics.median(durations), self.min_runtime)


def speculative_job(
    client: Client,
    blocks: Blocks,
    func: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    speculation: Speculation,
    timeout: float | None,
    combine: str,
    workers: list[str],
    transform: Transform | None = None,
) -> CodedJob:
    """A job of K uncoded tasks with speculative backup copies (``code="speculative"``).

    Its decoder is a repetition code over the copies (task ``K + j`` is the backup of block
    j, the first copy of a block to land gives it); the backups are launched by
    :class:`~.launch.SpeculativeLaunch` only when its rule fires.
    """
    K = blocks.K
    job = CodedJob(
        client,
        RepetitionCode(K, 2 * K),
        blocks,
        func,
        args,
        kwargs,
        FirstK(K),
        timeout,
        combine,
        workers,
        launch=SpeculativeLaunch(speculation),
        transform=transform,
    )
    job.report.code = {"name": "speculative", "K": K, **asdict(speculation)}
    job.report.N = K
    return job


def speculative_placement(workers: Mapping[str, Mapping[str, Any]], K: int) -> list[str]:
    """One worker per primary task (they must be distinct, as for coded tasks)."""
    return choose_workers(
        workers,
        K,
        spread_hosts=bool(config.get("spread-hosts")),
        oversubscribe=str(config.get("oversubscribe")),
        what="speculative tasks",
    )
