"""Speculative backup tasks: the classic alternative to coded computing (exact results).

K uncoded tasks run, one per worker. Once enough of them finished, a task still running
after ``multiplier`` times the median duration of the finished ones (and at least
``min_runtime``) gets one backup copy on another worker; the first copy to finish wins and
the other is cancelled. Modelled as a repetition code with N = 2K whose tasks K..2K-1 (the
backups; task ``K + j`` copies block j) are launched only when the rule fires.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from .. import config
from ..codes import RepetitionCode
from .job import CodedJob
from .placement import choose_workers
from .wait import FirstK

__all__ = ["Speculation", "SpeculativeJob"]


_PRESETS: dict[str, dict[str, Any]] = {
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

    def __post_init__(self):
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
        conf = config.get("speculative", {}) or {}
        rule = options.get("rule", conf.get("rule", "spark"))
        overrides: dict[str, Any] = {}
        for key, conf_key in (
            ("multiplier", "multiplier"),
            ("quantile", "quantile"),
            ("min_runtime", "min-runtime"),
        ):
            value = options.get(key, conf.get(conf_key))
            if value is not None:
                overrides[key] = (
                    float(parse_timedelta(value)) if key == "min_runtime" else float(value)
                )
        if "min_tasks" in options:
            overrides["min_tasks"] = int(options["min_tasks"])
        overrides["interval"] = float(
            parse_timedelta(options.get("interval", conf.get("interval", "100ms")))
        )
        return cls.preset(rule, **overrides)

    def threshold(self, n_tasks: int, durations: list[float]) -> float | None:
        """Runtime after which a task is backed up, or None while the rule is not armed."""
        if n_tasks < self.min_tasks or not durations:
            return None
        if len(durations) < max(math.floor(self.quantile * n_tasks), 1):
            return None
        return max(self.multiplier * statistics.median(durations), self.min_runtime)


class SpeculativeJob(CodedJob):
    """A job running K uncoded tasks with speculative backup copies (``code="speculative"``)."""

    def __init__(
        self,
        client: Any,
        blocks: Any,
        func: Any,
        args: tuple,
        kwargs: dict,
        speculation: Speculation,
        timeout: float | None,
        combine: str,
        workers: list[str],
    ):
        K = blocks.K
        code = RepetitionCode(K, 2 * K)
        super().__init__(
            client,
            code,
            blocks,
            func,
            args,
            kwargs,
            FirstK(K),
            timeout,
            combine,
            list(workers) + [""] * K,
        )
        self.speculation = speculation
        self.report.code = {"name": "speculative", "K": K, **asdict(speculation)}
        self.report.N = K
        self._launched_at: dict[int, float] = {}
        self._local: list[Any] | None = None
        self._call: Any = None

    def _tick_interval(self, poll: float) -> float:
        return min(poll, self.speculation.interval)

    def _block(self, j: int) -> Any:
        """Block j for an eval spec: the array itself when held here, else its future."""
        return self._local[j] if self._local is not None else self._chunks[j]

    async def _launch(self) -> None:
        from .graph import TaskSpec

        tasks: list[TaskSpec] = []
        self._call = self._call_arg(tasks)
        if self.blocks.local:
            self._local = list(self.blocks.stacked())
        else:
            self._chunks = await self.blocks.to_futures(self.client)
        tasks += [self._eval_spec(j, self._block(j), self._call) for j in range(self.code.K)]
        self._launch_graph(tasks)
        self._launched_at = dict.fromkeys(range(self.code.K), self._elapsed())

    async def _tick(self) -> None:
        K, rep, d = self.code.K, self.report, self.decider
        covered = {i % K for i in d.usable}
        losers = [i for i in d.pending if i % K in covered]
        if losers:  # the other copy won: stop this one
            futures = []
            for i in losers:
                d.withdraw(i)
                futures.append(self._evals[i])
            rep.cancelled += len(futures)
            await self.client.cancel(futures, asynchronous=True, reason="bacc: other copy won")
        now = self._elapsed()
        durations = [d.arrival[i] - self._launched_at[i] for i in d.usable]
        threshold = self.speculation.threshold(K, durations)
        wanted = []
        for j in range(K):
            if j in covered or K + j in self._evals:
                continue  # done, or already backed up (one backup per block)
            running = j in d.pending
            if not running or (threshold is not None and now - self._launched_at[j] > threshold):
                wanted.append(j)  # slow, or its only copy failed: back it up now
        if wanted:
            await self._back_up(wanted)

    async def _back_up(self, blocks: list[int]) -> None:
        """Launch backups of ``blocks`` (one graph) on workers not running a copy of this
        job's tasks."""
        K, rep = self.code.K, self.report
        info = await self.client.scheduler.identity(n_workers=-1)
        busy = {rep.workers[i] for i in self.decider.pending}
        free = {
            a: w
            for a, w in info.get("workers", {}).items()
            if a not in busy and w.get("status", "running") == "running"
        }
        if not free:
            return  # every worker runs a copy; try again at the next tick
        ordered = choose_workers(free, len(free))  # least busy first, hosts interleaved
        specs = []
        for j in blocks:
            # not where this block's first copy ran (it may have failed or be stuck there)
            addr = next((a for a in ordered if a != rep.workers[j]), None)
            if addr is None:
                continue
            ordered.remove(addr)
            i = K + j
            rep.workers[i] = addr
            rep.backups.append(i)
            rep.N += 1
            self._launched_at[i] = self._elapsed()
            specs.append(self._eval_spec(i, self._block(j), self._call, backup=True))
        self._launch_graph(specs)


def speculative_placement(workers: dict[str, Any], K: int) -> list[str]:
    """One worker per primary task (they must be distinct, as for coded tasks)."""
    return choose_workers(
        workers,
        K,
        spread_hosts=bool(config.get("spread-hosts", True)),
        oversubscribe=str(config.get("oversubscribe", "raise")),
        what="speculative tasks",
    )
