"""What a job saved against plain Dask: the uncoded counterfactual and the extra CPU.

Pure functions (no cluster): :class:`~.job.CodedJob` and :class:`~.redundant.RedundantJob`
call them with what they saw, and write the answer into the :class:`~.report.JobReport`
(``plain_ready``, ``time_saved``, ``total_cpu``, ``redundant_cpu`` ...).

**The time plain Dask would have taken** (``plain_ready``): an uncoded run computes each
block once, on one task, and is ready when the last of them is. The task standing for
block b is its *plain share*, :func:`plain_shares`: the lowest coded index whose share is
block b's own data (the systematic share, repetition's copy b, the speculative strategy's
and an exact layer's primary). Per block:

* the plain share returned: its arrival time, **measured** (seconds since submit, on the
  client's clock, as ``report.arrival``);
* it was still out when the job stopped following it (cancelled or held after the
  decode, or the other copy won): it would have finished *after* ``since``, the time the
  job stopped waiting. With the scheduler's straggler model, the estimate is the job's
  median task time (the median arrival of the results that came) times the smallest of
  the worker's latency quantiles q50, q90, q99 (relative to the job's median task) that
  lies beyond the time it had already run: **model**. Without the model, or when the
  share has run beyond the worker's q99, ``since`` itself: a **lower bound**;
* it failed (func raised, its worker left): unknown, and so is ``plain_ready`` (plain
  Dask would have failed or recomputed it, which no figure here predicts).

``plain_ready`` is the latest block; its source is the least certain of its blocks'
(``"measured"`` < ``"model"`` < ``"lower-bound"``). Codes without a share of real data
for every block (Berrut, spline, Lagrange) have no plain share: ``plain_ready`` is None,
never made up.

**CPU** (``total_cpu``, ``redundant_cpu``): thread-seconds of the job's coded tasks.
:func:`cpu_split` counts as redundant everything beyond the K tasks an uncoded run would
have run: for each block, the share of its own data whose result was used (repetition's
and the speculative strategy's winning copy), else its plain share. A code without
shares of real data has no such tasks: its redundant part is ``(N - K) / N`` of the total,
the coded tasks doing equal work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .report import JobReport

__all__ = [
    "Counterfactual",
    "copy_savings",
    "cpu_split",
    "estimate_finish",
    "plain_ready",
    "plain_shares",
    "uncoded_tasks",
    "write_counterfactual",
]

#: sources of a block's uncoded finish time, least certain last
SOURCES = ("measured", "model", "lower-bound")


def plain_shares(data_rows: Mapping[int, int], K: int) -> list[int] | None:
    """For each block, the lowest coded index whose share is that block's own data (the
    task an uncoded run stands for); None when some block has none (Berrut, spline,
    Lagrange)."""
    first: dict[int, int] = {}
    for i, b in sorted(data_rows.items()):
        first.setdefault(b, i)
    if any(b not in first for b in range(K)):
        return None
    return [first[b] for b in range(K)]


def estimate_finish(
    since: float, unit: float | None, quantiles: Sequence[float] | None
) -> tuple[float, str]:
    """When a share still out at ``since`` (seconds since submit) would have finished.

    ``unit`` is the job's median task time in seconds, ``quantiles`` the worker's relative
    latencies (q50, q90, q99) from the straggler model. The answer is ``unit`` times the
    smallest quantile that lies beyond ``since / unit`` (``"model"``), else ``since``
    (``"lower-bound"``: the share had not finished then).
    """
    if unit is not None and unit > 0 and quantiles:
        ran = since / unit
        beyond = [q for q in sorted(quantiles) if q > ran]
        if beyond:
            return beyond[0] * unit, "model"
    return since, "lower-bound"


@dataclass
class Counterfactual:
    """The uncoded run's ready time and how it was found (see the module's docstring)."""

    plain_ready: float | None = None
    source: str | None = None
    #: blocks whose time is an estimate (model or lower bound)
    estimated: list[int] = field(default_factory=list)


def _median(xs: Iterable[float]) -> float | None:
    s = sorted(xs)
    if not s:
        return None
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def plain_ready(
    plain: Sequence[int] | None,
    arrival: Mapping[int, float],
    failed: Iterable[int],
    since: Mapping[int, float],
    workers: Sequence[str] = (),
    predictions: Mapping[str, Sequence[float]] | None = None,
) -> Counterfactual:
    """The time every block would have been ready uncoded.

    Parameters
    ----------
    plain : sequence of int or None
        Each block's plain share (:func:`plain_shares`); None: no counterfactual.
    arrival : mapping of int to float
        Arrival time of every coded task that returned (seconds since submit).
    failed : iterable of int
        Coded tasks that failed.
    since : mapping of int to float
        For a plain share still out when the job stopped following it: that time.
    workers : sequence of str
        Worker of each coded task (for the model's figures).
    predictions : mapping of str to (q50, q90, q99), optional
        The straggler model's relative latency quantiles per worker.
    """
    out = Counterfactual()
    if plain is None or not plain:
        return out
    failed = set(failed)
    unit = _median(arrival.values())
    worst, ready = 0, 0.0
    for b, i in enumerate(plain):
        if i in arrival:
            t, source = arrival[i], "measured"
        elif i in failed or i not in since:
            return Counterfactual()  # unknown: plain Dask would have failed or retried it
        else:
            worker = workers[i] if i < len(workers) else ""
            quantiles = (predictions or {}).get(worker)
            t, source = estimate_finish(since[i], unit, quantiles)
            out.estimated.append(b)
        ready = max(ready, t)
        worst = max(worst, SOURCES.index(source))
    out.plain_ready, out.source = ready, SOURCES[worst]
    return out


def uncoded_tasks(
    data_rows: Mapping[int, int], plain: Sequence[int] | None, used: Iterable[int]
) -> list[int] | None:
    """The K coded tasks whose thread time an uncoded run would have spent too: per block,
    the first share of its own data that was ``used`` (the winning copy), else its plain
    share; None without plain shares."""
    if plain is None:
        return None
    kept: dict[int, int] = {}
    for i in used:
        b = data_rows.get(i)
        if b is not None and b not in kept:
            kept[b] = i
    return [kept.get(b, i) for b, i in enumerate(plain)]


def cpu_split(
    cpu: Mapping[int, float], K: int, N: int, uncoded: Iterable[int] | None
) -> tuple[float, float]:
    """``(total, redundant)`` thread-seconds of the coded tasks ``cpu`` (index -> seconds):
    redundant is every task but the ``uncoded`` ones (:func:`uncoded_tasks`); without
    them, ``(N - K) / N`` of the total."""
    total = float(sum(cpu.values()))
    if uncoded is None:
        return total, total * max(N - K, 0) / N if N else 0.0
    needed = set(uncoded)
    return total, float(sum(s for i, s in cpu.items() if i not in needed))


def write_counterfactual(rep: JobReport, cf: Counterfactual) -> None:
    """``cf`` into ``rep`` (every kind of job): ``plain_ready`` and its source, the blocks
    estimated, and ``time_saved`` against the job's ``time_to_decode``."""
    rep.plain_ready, rep.plain_ready_source = cf.plain_ready, cf.source
    rep.plain_estimated, rep.plain_ready_estimated = cf.estimated, bool(cf.estimated)
    if cf.plain_ready is not None and rep.time_to_decode is not None:
        rep.time_saved = cf.plain_ready - rep.time_to_decode


def copy_savings(rep: JobReport, started_at: Mapping[tuple[int, int], float]) -> None:
    """Fill ``rep``'s savings for a job of copies (copy c of block b is task ``b + c*K``),
    against plain Dask, which runs the primaries alone (docs/diagnostics.md, "What a job
    saved"): a primary that won gives its block's time, measured; one that lost had not
    finished when the other copy won (a lower bound). Thread time on the client's clock
    (``started_at``: (block, copy) -> its start event): each copy from its start until it
    won, or until the winner of its block arrived (a cancelled copy that was running runs
    on: at least that)."""
    K = rep.K
    won_at: dict[int, float] = {}  # block -> when its winner arrived
    winners: dict[int, int] = {}  # block -> copy that won
    for i in rep.returned:
        won_at[i % K], winners[i % K] = rep.arrival[i], i // K
    write_counterfactual(rep, plain_ready(rep.plain_shares, rep.arrival, rep.failed, won_at))
    cpu: dict[int, float] = {}
    for (b, c), start in started_at.items():
        end = won_at.get(b)
        if end is not None and end > start:
            cpu[b + c * K] = end - start
    rep.uncoded_tasks = [b + winners.get(b, 0) * K for b in range(K)]
    rep.total_cpu, rep.redundant_cpu = cpu_split(cpu, K, rep.N, rep.uncoded_tasks)
