"""``submit_coded`` and ``map_coded``: validate, place, submit and (optionally) wait."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import numbers
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import config, diagnostics
from ..codes import Code, get_code
from ..codes.grouped import GroupedCode, cyclic_placement, plan_groups
from ..codes.registry import ALIASES, code_class, registered_codes, unknown_code
from ..codes.transform import Transform, TransformSpec, get_transform
from ..collections import Blocks, adapt, is_numpy
from ..collections.base import COMBINE_CHOICES
from ..collections.layer import Layer, is_dask_frame, partitions_layer
from . import _dist, auto_cache
from ._dist import default_client
from .auto import (
    AUTO,
    AUTO_CODES,
    EXACT_AUTO_CODES,
    HEDGED,
    Calibration,
    ModelView,
    NoSetting,
    Overheads,
    Plan,
    is_auto,
    plan,
)
from .handle import sync_guarded
from .job import CodedJob
from .keys import function_key
from .placement import choose_workers
from .quality import check_adversaries, robust_max_blocks, robust_n_coded, robust_policy
from .redundant import EXACT_LAYER_CODES, RedundantJob, policy_for
from .rules import BACKUP_CODES, Speculation, backup_code
from .speculative import speculative_job, speculative_placement
from .wait import ErrorTarget, WaitPolicy, resolve_timeout, resolve_wait
from .waves import BlocksJob, in_waves, submit_waves

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["map_coded", "submit_coded"]

#: workers a coded job started from this context must not run coded tasks on: the rewrite's
#: driver sets its own worker, so that no straggler of its job holds the thread the output
#: chunks (on the driver's worker, with its result) need
AVOID_WORKERS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "bacc_avoid_workers", default=()
)


def default_n_coded(code_name: str, K: int, n_workers: int, options: dict[str, Any]) -> int:
    """N when the user gives none: ``ceil(bacc.redundancy * K)`` capped by the workers.

    Lagrange gets its recovery threshold ``degree*(K-1)+1`` plus the same number of spare
    tasks, ``ceil(redundancy*K) - K``; uncoded runs N = K.
    """
    redundancy = float(config.get("redundancy"))
    if redundancy < 1:
        raise ValueError(f"bacc.redundancy must be >= 1, got {redundancy}")
    spare = max(1, math.ceil(redundancy * K) - K)
    if code_name == "uncoded":
        return K
    if code_name == "lagrange":
        threshold = int(options.get("degree", 1)) * (K - 1) + 1
        return max(threshold, min(threshold + spare, n_workers))
    return max(K + 1, min(K + spare, n_workers))


def _check_common(
    func: object, code: object, n_coded: object, timeout: object, code_options: object
) -> None:
    if not callable(func):
        raise TypeError(f"func must be callable, got {type(func).__name__}")
    if not isinstance(code, (str, Code)):
        raise TypeError(f"code must be a code name or a Code instance, got {type(code).__name__}")
    if isinstance(code, str):
        known = [*registered_codes(), *ALIASES, *BACKUP_CODES, AUTO]
        if code.lower().replace("_", "-") not in known:
            raise unknown_code(code, known)
    if is_auto(n_coded):
        if isinstance(code, Code):
            raise ValueError("n_coded='auto' chooses N, which a Code instance fixes")
    elif n_coded is not None:
        if isinstance(n_coded, bool) or not isinstance(n_coded, numbers.Integral):
            raise TypeError(f"n_coded must be an integer or 'auto', got {type(n_coded).__name__}")
        if isinstance(code, Code):
            raise ValueError("give n_coded or a Code instance, not both (the code fixes N)")
    resolve_timeout(timeout)
    if code_options is not None and not isinstance(code_options, dict):
        raise TypeError("code_options must be a dict")


def _build_code(
    code: str | Code, K: int, n_coded: int | None, n_workers: int, options: dict[str, Any]
) -> Code:
    if isinstance(code, Code):
        if code.K != K:
            raise ValueError(f"the code is for K={code.K} blocks but the data has K={K}")
        if code.name != "uncoded" and code.N <= code.K:
            raise ValueError(f"{code!r} has N <= K: coded computing needs N > K")
        return code
    name = code.lower().replace("_", "-")  # get_code resolves aliases (systematic-berrut)
    if n_coded is None:
        n_coded = default_n_coded(name, K, n_workers, options)
        if n_coded > n_workers and groupable(name, n_workers):
            return grouped_code(name, K, n_workers, options)
        if n_coded > n_workers and config.get("oversubscribe") != "warn":
            # the user chose K (n_blocks or the chunks), not N: say what to change
            raise ValueError(
                f"K={K} data blocks need at least N={n_coded} coded tasks for code "
                f"{code!r}, each on its own worker, but the cluster has {n_workers} "
                "workers; use fewer blocks (a smaller n_blocks, or larger chunks), add "
                "workers, or set bacc.oversubscribe to 'warn'"
            )
    elif name != "uncoded" and n_coded <= K:
        raise ValueError(
            f"n_coded={n_coded} must exceed the K={K} data blocks (coded computing adds "
            "redundancy); use code='uncoded' to run exactly K tasks"
        )
    return get_code(name, K, n_coded, **options)


def groupable(name: str, n_workers: int) -> bool:
    """Whether K blocks too many for ``n_workers`` are coded in groups with code ``name``:
    an approximate code (exact codes copy blocks: :mod:`.redundant`, speculative), and
    at least 2 workers for a group's 1 block and 2 shares."""
    return n_workers >= 2 and not code_class(name).exact


def grouped_code(name: str, K: int, n_workers: int, options: dict[str, Any]) -> GroupedCode:
    """K blocks in groups of ``n_workers / bacc.redundancy`` (at least 1), each coded with
    ``name`` and its default N (at most ``n_workers``: a group's shares on distinct
    workers). docs/codes.md, "Many partitions: grouped coding"."""
    redundancy = max(float(config.get("redundancy")), 1.0)
    k = max(1, min(K, int(n_workers / redundancy), n_workers - 1))
    sizes, shares = plan_groups(K, k, default_n_coded(name, k, n_workers, options))
    return GroupedCode(K, sum(shares), name, sizes, shares, **options)


async def _live_workers(client: Client) -> tuple[dict[str, dict[str, Any]], int]:
    """The scheduler's workers (address -> info), and how many of them are running."""
    info = await _dist.identity(client)
    workers: dict[str, dict[str, Any]] = info.get("workers", {})
    return workers, sum(1 for w in workers.values() if w.get("status", "running") == "running")


async def _running_workers(client: Client) -> tuple[dict[str, dict[str, Any]], int]:
    """:func:`_live_workers`, waiting while there are workers but every one is paused
    (memory pressure): plain Dask waits for them too (the caller bounds it by timeout)."""
    poll = config.seconds("poll-interval")
    while True:
        workers, running = await _live_workers(client)
        if running or not workers:
            return workers, running
        await asyncio.sleep(poll)


async def _workers_within(
    client: Client, timeout: float | None
) -> tuple[dict[str, dict[str, Any]], int]:
    """:func:`_running_workers`, bounded by the job's ``timeout`` (which bounds the whole
    call, reaching the scheduler included)."""
    try:
        return await asyncio.wait_for(_running_workers(client), timeout)
    except asyncio.TimeoutError:
        raise TimeoutError(
            f"no running worker within timeout={timeout:g}s: the scheduler at "
            f"{_dist.scheduler(client).address} could not be reached, or every worker stayed "
            "paused (memory pressure)"
        ) from None


def _adapt(
    data: Any,
    code: str | Code,
    n_workers: int,
    n_blocks: int | None,
    blocks: int | None,
    labels: dict[str, Any],
) -> Blocks:
    """``adapt`` with the defaults of a coded job: K up to ``workers / redundancy``; for
    the codes of backup copies (hedged, speculative), which run one task per worker and
    back up only late ones, K up to ``workers``."""
    redundancy = 1.0 if backup_code(code) else float(config.get("redundancy"))
    if isinstance(code, Code) and n_blocks is None and blocks is None and is_numpy(data):
        n_blocks = code.K  # a Code instance fixes K
    return adapt(
        data,
        n_blocks=n_blocks,
        blocks=blocks,
        max_blocks=max(1, int(n_workers / max(redundancy, 1.0))),
        **labels,
    )


logger = logging.getLogger(__name__)

#: how the jobs' error estimates compare with the accuracy model, per function
_calibration = Calibration()
#: what each code costs a function's job besides its tasks
_overheads = Overheads()
#: functions seen failing on coded shares (not defined on mixed blocks): code="auto"
#: weighs only exact codes for them
_exact_only: set[str] = set()


def safe_code() -> str:
    """The code ``code="auto"`` runs while the straggler model learns
    (``bacc.auto.safe-code``; never "auto" itself)."""
    name = str(config.get("auto.safe-code"))
    if is_auto(name):
        raise ValueError("bacc.auto.safe-code must name a code, not 'auto'")
    return name


def _wants_auto(code: object, n_coded: object, wait: object) -> bool:
    return any(is_auto(x) for x in (code, n_coded, wait))


def _auto_spelling(value: Any) -> Any:
    """``"Auto"``, ``"AUTO"``... as ``"auto"``; anything else as it is."""
    return AUTO if is_auto(value) else value


def check_error_budget(error: object, auto: bool) -> float | None:
    """``error=``: a positive number, and only with auto mode (None: ``bacc.auto.error``,
    itself None by default: no budget, so ``code="auto"`` weighs exact strategies only)."""
    if error is None:
        budget = config.get("auto.error") if auto else None
        return None if budget is None else check_error_budget(budget, auto)
    if not auto:
        raise ValueError(
            "error= is the error budget of auto mode (n_coded, wait or code 'auto'); to "
            "decode once the estimated error is small enough, pass wait=dask_bacc.until(error=...)"
        )
    if isinstance(error, bool) or not isinstance(error, numbers.Real):
        raise TypeError(f"error must be a number, got {type(error).__name__}")
    if not 0 < float(error) < math.inf:
        raise ValueError(f"error must be a positive number, got {error!r}")
    return float(error)


async def auto_view(
    client: Client, workers: Mapping[str, Mapping[str, Any]]
) -> tuple[ModelView | None, str]:
    """What the scheduler's straggler model predicts of ``workers`` (least busy first,
    hosts interleaved), or None and why the defaults must run instead.

    From the client's cached view when it covers the same workers (refreshed by every
    coded job's clean-up round trip: :mod:`.auto_cache`); asked of the scheduler
    otherwise.
    """
    order = choose_workers(workers, len(workers), spread_hosts=bool(config.get("spread-hosts")))
    view = auto_cache.views.get(client, order)
    if view is None:
        seed = int(np.random.default_rng().integers(2**31))
        raw = await _dist.run_on_scheduler(
            client, diagnostics.model_view, order, int(config.get("auto.draws")), seed
        )
        auto_cache.views.put(client, order, raw)
        if raw is None:
            return None, (
                "no straggler model on the scheduler yet (the plugin starts with the first "
                "coded job) or it is off (bacc.diagnostics.enabled, "
                "bacc.diagnostics.model.enabled): the defaults"
            )
        view = auto_cache.as_view(raw, order, order)
    min_jobs = int(config.get("auto.min-jobs"))
    if view.jobs < min_jobs:
        return None, (
            f"the straggler model has learned from {view.jobs} jobs, fewer than "
            f"bacc.auto.min-jobs={min_jobs}: the defaults"
        )
    return view, ""


def weighed_codes(budget: float | None, exact_only: bool = False) -> tuple[str, ...]:
    """What ``code="auto"`` weighs: the approximate codes only under an error budget,
    and not for a function that failed on coded shares before."""
    return EXACT_AUTO_CODES if budget is None or exact_only else AUTO_CODES


def fixed_code_budget() -> float:
    """The error a fixed approximate code's auto N or wait keeps to when no budget was
    given: ``bacc.warn-error``, the estimate past which its job warns (0.1 when off)."""
    warn = config.get("warn-error")
    return 0.1 if warn is None else float(warn)


def planned_wait(chosen: Plan) -> WaitPolicy:
    """The wait of a planned approximate job: its k results, and more while the job's own
    error estimate is above the budget (``until(error=budget, min_results=k)``): a
    prediction that was wrong for this function (its calibration not learned yet, or its
    data rougher than its earlier jobs') costs time, never an answer beyond the budget
    taken on trust. Once every result is in, or every systematic one, the job decodes as
    any ``until`` job does."""
    return ErrorTarget(chosen.error_budget, min_results=chosen.chosen.k)


def plan_job(
    view: ModelView,
    K: int,
    codes: list[tuple[str, dict[str, Any]]],
    error: float | None,
    func_name: str,
    n_coded: int | None = None,
    wait: Any = None,
    placement: list[str] | None = None,
) -> Plan:
    """:func:`.auto.plan` with the settings of ``bacc.auto``, the function's calibration
    and its last choice (the incumbent); the plan of the same inputs is reused
    (:data:`.auto_cache.plans`): a steady-state job with an unchanged model plans once.
    ``error`` None: no budget was given (:func:`fixed_code_budget` for approximate codes)."""
    if error is None:
        error = fixed_code_budget()
    fixed_wait = None
    if not (isinstance(wait, str) and wait == AUTO):

        def fixed_wait(code: Code) -> int:
            try:
                return resolve_wait(wait, code).target(code)
            except ValueError:
                return 0  # this N cannot take that wait: not weighed

    settings = {
        "max-redundancy": float(config.get("auto.max-redundancy")),
        "tolerance": float(config.get("auto.tolerance")),
        "late-cost": float(config.get("auto.late-cost")),
        "cost-weight": float(config.get("auto.cost-weight")),
        "exact-preference": float(config.get("auto.exact-preference")),
        "confidence": float(config.get("auto.confidence")),
        "hysteresis": float(config.get("auto.hysteresis")),
    }
    hedge_budget = config.get("hedge.budget")
    hedge = (
        float(config.get("hedge.multiplier")),
        int(config.get("hedge.copies")),
        None if hedge_budget is None else float(hedge_budget),
    )
    key: Hashable = (
        func_name,
        K,
        tuple((name, repr(sorted(opts.items()))) for name, opts in codes),
        n_coded,
        repr(wait),
        error,
        None if placement is None else tuple(placement),
    )
    inputs: Hashable = (
        view.jobs,
        tuple(view.workers),
        view.draws.shape,
        _calibration.jobs(func_name),
        _overheads.jobs(func_name),
        tuple(sorted(settings.items())),
        hedge,
    )
    cached = auto_cache.plans.get(key, inputs)
    if cached is not None:
        return cached
    max_n = max(K + 1, math.ceil(settings["max-redundancy"] * K - 1e-9))
    chosen = plan(
        view,
        K,
        codes,
        error=error,
        max_n=max_n,
        n_coded=n_coded,
        wait=fixed_wait,
        calibration=_calibration.scale(func_name),
        tolerance=settings["tolerance"],
        late_cost=settings["late-cost"],
        placement=placement,
        cost_weight=settings["cost-weight"],
        exact_preference=settings["exact-preference"],
        sigma=_calibration.sigma(func_name),
        confidence=settings["confidence"],
        hysteresis=settings["hysteresis"],
        incumbent=auto_cache.plans.incumbent(key),
        overhead=_overheads.units(func_name),
        hedge=hedge,
    )
    auto_cache.plans.put(key, inputs, chosen)
    return chosen


def learn_domain(job: CodedJob, key: str) -> None:
    """After any job: remember a function found not defined on coded shares (a done
    callback; code="auto" then weighs exact codes only for it)."""
    if job.domain_failure:
        _exact_only.add(key)


def learn_overhead(job: CodedJob, key: str, code: str | None) -> None:
    """After a job of ``code`` (a registered name): what it cost besides its tasks (a done
    callback; :class:`.auto.Overheads`): the median over its returned tasks of arrival
    less run time, plus the decode after the wait was met."""
    rep = job.report
    seconds = job.task_seconds
    met = rep.target_met if rep.target_met is not None else rep.slowest_used
    if code is None or rep.status != "finished" or rep.time_to_decode is None or met is None:
        return
    ran = {i: seconds[i] for i in rep.returned if i in seconds and i in rep.arrival}
    if not ran:
        return
    startup = float(np.median([rep.arrival[i] - t for i, t in ran.items()]))
    extra = max(startup, 0.0) + max(rep.time_to_decode - met, 0.0)
    _overheads.observe(key, code, extra, float(np.median(list(ran.values()))))


def learn_calibration(job: CodedJob, key: str) -> None:
    """After an auto job: fit its function's calibration (kept under ``key``) to the job's
    error estimate, to those of its shorter waits (the same results, fewer of them) and to
    those it made while waiting past its planned k (``report.estimates``: a job whose
    estimates stayed above the budget until its systematic tasks made it exact still says
    how far off the function's decodes were).

    A done callback: a failure is logged, never raised (the job's answer is already out).
    """
    rep = job.report
    if rep.status != "finished" or rep.error_estimate is None or not rep.returned:
        return
    try:
        points = [
            (len(rep.returned), rep.error_estimate),
            *job.quality.fewer_results(),
            *((int(m), float(e)) for m, e in rep.estimates if m is not None and e is not None),
        ]
        _calibration.observe(key, job.code, points)
    except Exception:
        logger.warning("auto mode could not learn from job %s", rep.token, exc_info=True)


async def _auto_setup(
    client: Client,
    workers: Mapping[str, Mapping[str, Any]],
    K: int,
    ks: Sequence[int],
    code: str,
    n_coded: int | str | None,
    wait: Any,
    error: float | None,
    options: dict[str, Any],
    avoid: tuple[str, ...],
    func_name: str,
) -> tuple[Code, WaitPolicy, list[str], dict[str, Any]]:
    """Code, wait policy, placement and ``report.auto`` of an auto job, for ``K`` blocks
    or, when the planner may choose it (in-memory input), one of ``ks`` (``K`` when the
    model cannot plan yet and the defaults run).

    Where K is chosen, a task's time is taken to follow its block's rows: a plan at K is
    scored in tasks of the largest K (its score times ``max(ks) / K``), so fewer, larger
    blocks buy redundancy on the same workers only where it pays (``report.auto["K"]``).
    ``code="auto"`` chooses the hedged strategy as ``code=HEDGED``: the caller runs it as
    a backup job (``report.auto["chosen"]["code"]``)."""
    if code == AUTO and options:
        raise ValueError("code='auto' chooses the code: code_options do not apply")
    running = {a: w for a, w in workers.items() if w.get("status", "running") == "running"}
    others = {a: w for a, w in running.items() if a not in avoid}
    view, why = await auto_view(client, others or running)
    free_wait = wait == AUTO or (code == AUTO and wait is None)
    fixed_n = None
    if n_coded != AUTO:
        if n_coded is None and code != AUTO:
            fixed_n = default_n_coded(code.lower(), K, len(others or running), options)
        elif n_coded is not None:
            fixed_n = int(n_coded)
    exact_only = code == AUTO and func_name in _exact_only  # failed on coded shares before
    names = weighed_codes(error, exact_only)
    codes = [(c, {}) for c in names] if code == AUTO else [(code, options)]
    chosen = None
    if view is not None:
        plans: list[tuple[float, int, Plan]] = []
        for k in ks:
            try:
                p = plan_job(
                    view, k, codes, error, func_name, n_coded=fixed_n,
                    wait=AUTO if free_wait else wait,
                )  # fmt: skip
            except NoSetting as exc:
                why = f"{exc}: the defaults"
                continue
            plans.append((p.chosen.score * max(ks) / k, -k, p))
        if plans:
            _, neg_k, chosen = min(plans, key=lambda t: t[:2])
            K = -neg_k
    note: dict[str, Any] = {"K": K}
    if len(ks) > 1:
        note["K_weighed"] = list(ks)
    if exact_only:
        note["exact_only"] = "func failed on coded shares in an earlier job"
    if chosen is None:  # the defaults, and why
        name = code
        if code == AUTO:
            name = "repetition" if exact_only else safe_code()
        coder = _build_code(name, K, fixed_n, len(others or running), options)
        default = resolve_wait(None if free_wait else wait, coder)
        auto = {"chosen": None, "reason": why, **note}
        return coder, default, _place(workers, coder, avoid), auto
    c = chosen.chosen
    name = "uncoded" if c.code == HEDGED else c.code  # (hedging decodes as K copies)
    coder = get_code(name, K, c.N, **dict(codes)[c.code])
    if free_wait and not coder.exact:
        policy: WaitPolicy = planned_wait(chosen)
    else:
        policy = resolve_wait(None if free_wait else wait, coder)
    return coder, policy, chosen.workers, {**chosen.as_dict(), **note}


def _block_counts(data: Any, n_workers: int) -> list[int]:
    """The K ``code="auto"`` weighs for in-memory input: as many blocks as the workers,
    and the fewer that leave room for 1.25, 1.5 and 2 tasks per block on them (each
    the largest K up to that which splits the rows evenly)."""
    rows = int(np.shape(data)[0]) if np.ndim(data) else 0
    ks = set()
    for r in (1.0, 1.25, 1.5, 2.0):
        cap = max(1, int(n_workers / r))
        ks.add(next(k for k in range(min(cap, max(rows, 1)), 0, -1) if rows % k == 0))
    return sorted(ks, reverse=True)


async def _submit(
    client: Client,
    func: Callable[..., Any],
    data: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    code: str | Code,
    n_coded: int | None,
    wait: int | float | WaitPolicy | None,
    timeout: float | None,
    n_blocks: int | None,
    blocks: int | None,
    combine: str,
    code_options: dict[str, Any],
    labels: dict[str, Any],
    progress: bool | None = None,
    adversaries: int = 0,
    avoid: tuple[str, ...] = (),
    transform: Transform | None = None,
    error: float | None = None,
) -> CodedJob | RedundantJob | BlocksJob:
    timeout = resolve_timeout(timeout)
    auto_mode = _wants_auto(code, n_coded, wait)
    coded_job = n_coded is not None or wait is not None or adversaries or transform is not None
    if runs_as_layer(code, data) and not coded_job and not auto_mode:
        from ..collections.dataframe import frame_layer_input  # pandas: only for frames

        data = frame_layer_input(data, n_blocks=n_blocks, blocks=blocks, **labels)
        layer = partitions_layer(func, data, args, kwargs, labels.get("meta"))
        return await submit_layer(client, layer, str(code), code_options, timeout, avoid)
    workers, n_workers = await _workers_within(client, timeout)
    if adversaries and n_blocks is None and blocks is None and not isinstance(code, Code):
        # default K leaves room for the 2K + 2A - 1 results robust decoding needs
        labels = {**labels, "max_blocks": robust_max_blocks(n_workers, adversaries)}
        data_blocks = adapt(data, **labels)
    else:
        data_blocks = _adapt(data, code, n_workers, n_blocks, blocks, labels)
    free = all(x is None or is_auto(x) for x in (n_coded, wait))
    if code == AUTO and free and not adversaries and transform is None:
        if data_blocks.K > n_workers:
            # more blocks than workers: no one-wave plan fits; hedged copies in waves
            # (exact; a grouped approximate code is not planned)
            waves = await submit_waves(
                client, data_blocks, func, args, kwargs, HEDGED, {}, timeout, workers,
                avoid, combine,
            )  # fmt: skip
            waves.report.auto = {
                "chosen": None,
                "reason": (
                    f"K={data_blocks.K} blocks on {n_workers} workers: more than one task per "
                    "worker, which auto does not plan; hedged, in waves"
                ),
                "K": data_blocks.K,
            }
            return waves
    if in_waves(code, data_blocks.K, n_workers) and not coded_job and not auto_mode:
        # more blocks than a coded job can give a worker each: copies in waves instead
        return await submit_waves(
            client,
            data_blocks,
            func,
            args,
            kwargs,
            str(code),
            code_options,
            timeout,
            workers,
            avoid,
            combine,
        )
    backups = backup_code(code)
    auto: dict[str, Any] | None = None
    rule: Speculation | None = None  # a job of K tasks and backups (hedged, speculative)
    if auto_mode:
        if adversaries:
            raise ValueError("adversaries= needs a fixed n_coded and wait, not 'auto'")
        assert isinstance(code, str)  # a Code instance is refused with auto mode
        plan_k = code == AUTO and n_blocks is None and blocks is None and is_numpy(data)
        coder, policy, placement, auto = await _auto_setup(
            client,
            workers,
            data_blocks.K,
            _block_counts(data, n_workers) if plan_k else [data_blocks.K],
            code,
            n_coded,
            wait,
            error,
            code_options,
            avoid,
            function_key(func),
        )
        if auto["K"] != data_blocks.K:
            data_blocks = _adapt(data, code, n_workers, auto["K"], None, labels)
        if (auto.get("chosen") or {}).get("code") == HEDGED:
            rule = Speculation.from_options({}, HEDGED)
    elif backups is not None:
        if adversaries:
            raise ValueError(f"adversaries= is implemented for the Berrut codes, not {backups}")
        if n_coded is not None or wait is not None:
            raise ValueError(
                f"code={backups!r} runs K tasks plus backups and waits for every block: "
                "n_coded and wait do not apply"
            )
        rule = Speculation.from_options(code_options, backups)
        placement = speculative_placement(workers, data_blocks.K)
    else:
        if adversaries and n_coded is None and isinstance(code, str):
            default = default_n_coded(code.lower(), data_blocks.K, n_workers, code_options)
            n_coded = robust_n_coded(data_blocks.K, adversaries, n_workers, default)
        spare = max(n_workers - len(set(avoid) & set(workers)), 1)  # default N: off `avoid`
        coder = _build_code(code, data_blocks.K, n_coded, spare, code_options)
        policy = resolve_wait(wait, coder)
        if adversaries:  # before anything is submitted: N and wait must allow locating them
            policy = robust_policy(coder, policy, wait is not None, adversaries)
        placement = _place(workers, coder, avoid)
    job: CodedJob
    if rule is not None:
        job = speculative_job(
            client, data_blocks, func, args, kwargs, rule, timeout, combine, placement,
            transform=transform,
        )  # fmt: skip
    else:
        job = CodedJob(
            client,
            coder,
            data_blocks,
            func,
            args,
            kwargs,
            policy,
            timeout,
            combine,
            placement,
            transform=transform,
        )
    job.report.auto = auto
    job.progress = progress
    job.adversaries = job.report.adversaries = adversaries
    await job._submit()
    key = function_key(func)
    if job._task is not None:
        job._task.add_done_callback(lambda _: learn_domain(job, key))
        if job.report.auto is not None:
            job._task.add_done_callback(lambda _: learn_calibration(job, key))
        chosen = (job.report.auto or {}).get("chosen")
        name = (
            chosen["code"]
            if chosen
            else code.lower().replace("_", "-")
            if isinstance(code, str)
            else None
        )
        if name is not None and name != AUTO:
            job._task.add_done_callback(lambda _: learn_overhead(job, key, name))
    return job


def runs_as_layer(code: object, data: Any) -> bool:
    """An exact code that copies the tasks of the map itself (:mod:`.redundant`): any
    number of partitions, any partition sizes, pandas objects end to end."""
    return isinstance(code, str) and code.lower() in EXACT_LAYER_CODES and is_dask_frame(data)


async def submit_layer(
    client: Client,
    layer: Layer,
    code: str,
    code_options: Mapping[str, Any] | None,
    timeout: float | None,
    avoid: tuple[str, ...] = (),
    gather: bool = False,
) -> RedundantJob:
    """Start a :class:`~.redundant.RedundantJob` over ``layer`` (exact codes)."""
    policy = policy_for(code.lower(), code_options)
    timeout = resolve_timeout(timeout)
    workers, _ = await _workers_within(client, timeout)
    job = RedundantJob(client, layer, policy, timeout, workers, avoid, gather=gather)
    await job._submit()
    return job


def _place(
    workers: Mapping[str, Mapping[str, Any]], code: Code | int, avoid: tuple[str, ...]
) -> list[str]:
    """One worker per coded task, off the ``avoid`` workers when the others suffice; a
    grouped code's shares cyclically (no group has two shares on one worker)."""
    spread_hosts = bool(config.get("spread-hosts"))
    others = {a: w for a, w in workers.items() if a not in avoid}
    if isinstance(code, GroupedCode):
        widest = max(code.shares_per_group)
        pool = others if len(others) >= widest else workers
        order = choose_workers(pool, len(pool), spread_hosts=spread_hosts)
        return [order[w] for w in cyclic_placement(code.shares_per_group, len(order))]
    n = code if isinstance(code, int) else code.N
    oversubscribe = str(config.get("oversubscribe"))
    if avoid and len(others) >= n:
        return choose_workers(others, n, spread_hosts=spread_hosts, oversubscribe=oversubscribe)
    # N = every worker: none can be spared
    return choose_workers(workers, n, spread_hosts=spread_hosts, oversubscribe=oversubscribe)


def submit_coded(
    func: Callable[..., Any],
    data: Any,
    *args: Any,
    code: str | Code | None = None,
    n_coded: int | str | None = None,
    wait: int | float | str | WaitPolicy | None = None,
    timeout: float | None = None,
    client: Client | None = None,
    n_blocks: int | None = None,
    blocks: int | None = None,
    combine: str = "auto",
    code_options: dict[str, Any] | None = None,
    meta: Any = None,
    columns: Any = None,
    dim: Hashable | None = None,
    progress: bool | None = None,
    adversaries: int | None = None,
    transform: TransformSpec = None,
    error: float | None = None,
    **kwargs: Any,
) -> CodedJob | RedundantJob:
    """Start a coded map of ``func`` over the blocks of ``data``; return at once.

    Parameters are those of :func:`map_coded`. Returns a :class:`CodedJob`, or a
    :class:`RedundantJob` where an exact code copies the tasks instead: a dask DataFrame's
    map, or K blocks more than the workers (in waves, ``report.code["waves"]``). With an
    asynchronous client, an awaitable that gives one.
    """
    if code is None:
        code = config.get("code")
    code, n_coded, wait = (_auto_spelling(x) for x in (code, n_coded, wait))
    _check_common(func, code, n_coded, timeout, code_options)
    if isinstance(code, Code) and wait == AUTO:
        raise ValueError(
            "wait='auto' plans among codes by name: pass code='<name>' (and n_coded) "
            "instead of a Code instance"
        )
    error = check_error_budget(error, _wants_auto(code, n_coded, wait))
    adversaries = check_adversaries(adversaries)
    transform = get_transform(transform)
    if combine not in COMBINE_CHOICES:
        raise ValueError(f"combine must be one of {COMBINE_CHOICES}, got {combine!r}")
    client = client if client is not None else default_client()
    return sync_guarded(
        client,
        "submit_coded",
        _submit,
        client,
        func,
        data,
        args,
        kwargs,
        code,
        n_coded,
        wait,
        timeout,
        n_blocks,
        blocks,
        combine,
        dict(code_options or {}),
        {"meta": meta, "columns": columns, "dim": dim},
        progress=progress,
        adversaries=adversaries,
        avoid=AVOID_WORKERS.get(),
        transform=transform,
        error=error,
    )


def map_coded(
    func: Callable[..., Any],
    data: Any,
    *args: Any,
    code: str | Code | None = None,
    n_coded: int | str | None = None,
    wait: int | float | str | WaitPolicy | None = None,
    timeout: float | None = None,
    client: Client | None = None,
    n_blocks: int | None = None,
    blocks: int | None = None,
    combine: str = "auto",
    code_options: dict[str, Any] | None = None,
    meta: Any = None,
    columns: Any = None,
    dim: Hashable | None = None,
    progress: bool | None = None,
    adversaries: int | None = None,
    transform: TransformSpec = None,
    error: float | None = None,
    **kwargs: Any,
) -> Any:
    """Map ``func`` over the blocks of ``data`` with coded computing; return the decoded output.

    The K blocks are encoded into N > K coded blocks, ``func`` runs on each coded block on
    its own worker, and as soon as the wait policy is met the K outputs are decoded on the
    cluster and the remaining (straggling) coded tasks are cancelled.

    Parameters
    ----------
    func : callable
        ``func(block, *args, **kwargs)`` returning a real numeric array (or scalar) whose
        shape does not depend on the values in the block.
    data : numpy.ndarray, list, dask.array.Array, DataFrame, Series, DataArray or Dataset
        NumPy arrays are split along axis 0 into K equal blocks (see ``n_blocks``/``blocks``);
        a list holds the K blocks; a dask array's chunks along axis 0 are the blocks (other
        axes are rechunked to one chunk; axis-0 chunks must be equal). A dask
        DataFrame/Series maps over its partitions and a pandas one over K row blocks; an
        xarray object over its chunks (or K blocks) along ``dim``. See
        ``docs/collections.md`` for how labelled blocks are coded and rebuilt.
    *args, **kwargs
        Passed unchanged to every call of ``func`` (e.g. model weights).
    code : str or Code, default ``bacc.code`` ("systematic-spline")
        ``"systematic-spline"``, ``"spline"``, ``"berrut"``, ``"systematic-berrut"``
        (approximate), ``"lagrange"`` (give ``code_options={"degree": d}``),
        ``"repetition"``, ``"uncoded"`` (exact), ``"speculative"``, or a Code instance.
        docs/accuracy.md compares them. ``"auto"``: the code, N and the wait are chosen
        per job from the straggler model (unless ``n_coded`` or ``wait`` is given).
    n_coded : int or "auto", optional
        N, the number of coded tasks; default ``ceil(bacc.redundancy * K)`` (2K), capped by
        the number of workers and at least K+1. ``"auto"``: chosen per job from the
        straggler model (see ``error``).
    wait : int, float, "auto" or WaitPolicy, optional
        Decode after the first ``wait`` results (int), after ``ceil(wait * N)`` (float in
        (0, 1]), or per a policy. Default: ``bacc.wait.spline`` / ``bacc.wait.berrut``
        (0.75 of N) for the approximate codes; exact
        codes their recovery threshold. ``"auto"``: the number of results is chosen per
        job from the straggler model.
    timeout : float, optional
        Seconds after which the job decodes from whatever arrived (``bacc.timeout``).
    client : distributed.Client, optional
        Defaults to the current client.
    n_blocks, blocks : int, optional
        NumPy input only: the number of blocks K, or the rows per block. Default: the largest
        K up to ``workers / redundancy`` that divides the rows.
    combine : {"auto", "concat", "stack"}
        How the K decoded outputs form the result: ``"auto"`` concatenates along axis 0 when
        f keeps a block's rows (output first dimension == block rows) and stacks otherwise.
    code_options : dict, optional
        Options for the code, e.g. ``{"systematic": True}`` or ``{"degree": 2}``.
    meta : optional
        Dataframes and xarray: an empty object like ``func``'s output for one block (as
        in ``map_partitions``); inferred by calling ``func`` on a mock block otherwise.
    columns : list of str, optional
        Dataframes: the numeric columns ``func`` sees (default: all, and non-numeric
        columns raise ``TypeError``).
    dim : str, optional
        xarray: the dimension to map along (default: the only chunked dimension).
    progress : bool, optional
        Show a progress bar (tqdm; a widget in Jupyter) of results landed against
        results needed, closing at decode. Default ``bacc.progress``: on in interactive
        sessions, off in scripts.
    adversaries : int, optional
        Berrut codes: locate up to this many corrupted (Byzantine) results among those
        returned and decode without them (``report.excluded``). Needs N >= 2K + 2A - 1
        coded tasks, plus one per straggler to tolerate; the default N and wait are raised
        to that, an explicit one that is too small is a ``ValueError``. Without it,
        inconsistent results are only reported (``report.suspects``). See
        ``docs/accuracy.md``.
    transform : str, ``(forward, inverse)`` or Transform, optional
        Decode in a transformed domain: ``forward`` runs on each coded result inside its
        task, the code decodes the transformed results and ``inverse`` maps each decoded
        block back (``inverse(decode(forward(results)))``). Presets: ``"log"`` (for
        positive outputs such as probabilities) and ``"log-probabilities"`` (also
        renormalises each row, the last axis, to sum to 1). Exact codes stay exact up to
        rounding. See :func:`dask_bacc.codes.transform.get_transform` and
        ``docs/accuracy.md``.
    error : float, optional
        Auto mode's error budget (default ``bacc.auto.error``): with ``n_coded``,
        ``wait`` or ``code`` ``"auto"``, the setting with the least expected time to
        answer whose predicted relative error is at most ``error`` runs, on the workers
        predicted fastest; ``report.auto`` says what was chosen and why. Until the
        scheduler's model has seen ``bacc.auto.min-jobs`` jobs the defaults run.
        docs/adaptive.md.

    Returns
    -------
    numpy.ndarray, list, dask.array.Array, DataFrame, Series, DataArray or Dataset
        Same kind as ``data``: NumPy array, list of arrays, dask array (backed by the
        decoded futures), pandas or dask DataFrame/Series, or xarray object.

    Raises
    ------
    TypeError, ValueError
        Bad input, raised before anything is submitted.
    dask_bacc.InsufficientResults
        Too few usable results arrived to decode (all workers failed or left, or the
        timeout passed first).

    Notes
    -----
    The report of the job is available through :func:`submit_coded`:
    ``job = submit_coded(...); job.result(); job.report``.
    """
    client = client if client is not None else default_client()
    job_or_coro = submit_coded(
        func,
        data,
        *args,
        code=code,
        n_coded=n_coded,
        wait=wait,
        timeout=timeout,
        client=client,
        n_blocks=n_blocks,
        blocks=blocks,
        combine=combine,
        code_options=code_options,
        meta=meta,
        columns=columns,
        dim=dim,
        progress=progress,
        adversaries=adversaries,
        transform=transform,
        error=error,
        **kwargs,
    )
    if client.asynchronous:
        # an asynchronous client's submit_coded gives an awaitable of the job
        pending = cast("Awaitable[CodedJob]", job_or_coro)

        async def run() -> Any:
            job = await pending
            return await job._result_warn()

        return run()
    return job_or_coro._result_sync(None, stacklevel=3)
