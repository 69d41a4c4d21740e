"""The scheduler plugin that follows dask-bacc's coded jobs.

It watches the transitions of the ``("bacc-eval-<token>", i)``, ``("bacc-backup-<token>",
i)`` and ``("bacc-decode-<token>[-rN]", j)`` tasks (keys: :mod:`dask_bacc.runtime.keys`), so
its figures hold even when the client never says anything (or dies mid-job). When the
client does speak (``bacc_job`` handler, see :mod:`dask_bacc.diagnostics.monitor`), it
adds what only the client knows: the function's name, the code, the wait target, the
final status and trigger, results the client rejected (wrong shape) and the error
estimate.

Everything here runs on the scheduler's event loop: no locks.
"""

from __future__ import annotations

import weakref
from collections import Counter, OrderedDict
from typing import Any

from distributed import SchedulerPlugin
from distributed.comm import get_address_host
from distributed.metrics import time

from .. import config
from ..codes.grouped import group_of_shares
from ..codes.registry import code_label
from ..runtime.keys import FAILURE_TYPE
from ..runtime.keys import parse as parse_key
from .latency import LatencyModel, TaskObservation, TaskTimes

__all__ = ["HANDLER", "PLUGIN_NAME", "BaccDiagnostics", "current_plugin"]

#: the name the plugin is registered under on the scheduler
PLUGIN_NAME = "bacc-diagnostics"
#: the scheduler RPC handler that receives job metadata from clients
HANDLER = "bacc_job"

_TERMINAL = frozenset({"landed", "failed", "cancelled"})
#: the task keys a job is followed by: a coded job's evals, backups and decode, and the
#: primaries and copies of an exact layer job (``coded()``, ``coding()``, dataframes)
_TRACKED = frozenset({"eval", "backup", "decode", "primary", "copy"})
#: the figures of JobStats.counts()
COUNTS = ("landed", "used", "late", "excluded", "cancelled", "failed", "running", "pending")
#: task outcomes counted in the Prometheus metrics
TASK_OUTCOMES = ("used", "late", "excluded", "cancelled", "failed")
#: seconds a job may wait for its client's last word (or its last task to be released)
#: after the other has happened, before it is closed from what the scheduler saw
_SETTLE = 10.0
#: open jobs kept at most (a client that submits and never releases keys)
_MAX_OPEN = 1000
#: histogram buckets of the Prometheus metrics
DECODE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
STRAGGLER_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64)
#: client statuses (JobReport.status) -> outcome label of a closed job
_OUTCOME = {"finished": "decoded", "error": "error", "cancelled": "cancelled"}

_plugins: list[weakref.ref[BaccDiagnostics]] = []


def current_plugin() -> BaccDiagnostics | None:
    """The most recently started plugin of this process whose scheduler is still open.

    Prometheus' registry is per process, while tests may run several schedulers one
    after another in one process; the metrics follow the latest one.
    """
    for ref in reversed(_plugins):
        plugin = ref()
        if plugin is not None and not plugin.closed:
            return plugin
    return None


#: what became of the backups of hedged and speculative jobs (``report.hedge``)
BACKUP_OUTCOMES = ("launched", "won", "cancelled")


class TaskTrack:
    """One coded task (eval or speculative backup) as the scheduler saw it."""

    __slots__ = (
        "cpu",
        "dispatched",
        "ended",
        "index",
        "kind",
        "lost",
        "nbytes",
        "outcome",
        "reads",
        "reason",
        "released",
        "submitted",
        "worker",
    )

    def __init__(self, index: int, kind: str, now: float):
        self.index = index
        self.kind = kind  # "eval" or "backup"
        self.worker: str | None = None
        self.submitted = now
        self.dispatched: float | None = None
        self.ended: float | None = None
        self.released: float | None = None  # released, not (yet) forgotten
        #: "pending" (waiting for its input), "running" (sent to its worker), or the
        #: terminal "landed", "failed" and "cancelled" (released before it returned)
        self.outcome = "pending"
        self.reason: str | None = None
        self.lost = False  # its worker left (a pinned task then sits in no-worker)
        #: thread-seconds it computed, from its worker's start/stop times (None: not known
        #: yet; a task cancelled while running: from dispatch to its release)
        self.cpu: float | None = None
        #: bytes of the inputs it read (its dependencies, when it was sent to its worker)
        #: and of its result (None: not known)
        self.reads: int | None = None
        self.nbytes: int | None = None


class DecodeRound:
    """One submission of the K decode tasks (a redo after rejected results is a new round)."""

    __slots__ = ("completed", "done", "erred", "pending_at_start", "seen", "started", "used")

    def __init__(self, now: float, pending: list[int]):
        self.started = now
        self.pending_at_start = pending  # coded tasks still out when it was submitted
        self.seen: set[int] = set()
        self.done: set[int] = set()
        self.used: set[int] = set()
        self.erred = False
        self.completed: float | None = None


class JobStats:
    """One coded job: what the scheduler saw, and what its client said."""

    def __init__(self, token: str, now: float):
        self.token = token
        self.started = now
        self.func: str | None = None
        self.code: str | None = None
        self.code_config: dict[str, Any] = {}
        self.K: int | None = None
        self.N: int | None = None
        self.needed: int | None = None
        self.client: str | None = None
        self.client_gone = False
        self.span_id: str | None = None
        self.tasks: dict[int, TaskTrack] = {}
        self.rounds: dict[int, DecodeRound] = {}
        self.report: dict[str, Any] | None = None  # the client's final word
        self.rejected: dict[int, str] = {}  # landed results the client found invalid
        self.closed: float | None = None
        self.outcome: str | None = None
        self.quiet_since: float | None = None  # one of (no live task, client's word) so far
        self.cpu_counted: set[int] = set()  # tasks whose thread time is in the totals
        self.bytes_moved: int | None = None  # set by the client's clean-up (moved_bytes)

    # -- derived figures ----------------------------------------------------------------
    def decode_round(self) -> DecodeRound | None:
        """The latest completed decode round."""
        done = {r: r.completed for r in self.rounds.values() if r.completed is not None}
        return max(done, key=done.__getitem__) if done else None

    def live(self) -> bool:
        """Whether a coded task the job still waits for is out (dropped stragglers aside)."""
        dropped = self.dropped()
        return any(
            t.outcome not in _TERMINAL and t.index not in dropped for t in self.tasks.values()
        )

    def dropped(self) -> set[int]:
        """Stragglers the job gave up on when it decoded.

        The runtime cancels those still queued and leaves those already running to finish
        (a thread cannot be stopped), dropping their results: both count as cancelled.
        With the client's report: its stragglers less the late, failed and used ones;
        from transitions alone: the tasks out when the decode started that had not
        returned when it finished.
        """
        rep = self.report
        if rep is not None and rep.get("straggled") is not None:
            skip = {int(i) for i in rep.get("failed") or {}}
            skip.update(int(i) for i in (rep.get("late") or ()))
            skip.update(int(i) for i in (rep.get("returned") or ()))
            given_up = [*rep["straggled"], *(rep.get("not_needed") or ())]
            return {int(i) for i in given_up} - skip
        rnd = self.decode_round()
        if rnd is None or rnd.completed is None:  # (decode_round's rounds are completed)
            return set()
        out = set()
        for i in rnd.pending_at_start:
            t = self.tasks[i]
            returned_at = t.ended if t.outcome in ("landed", "failed") else None
            if returned_at is None or returned_at > rnd.completed:
                out.add(i)
        return out

    def _excluded(self) -> set[int]:
        """Results the client's robust decoding judged corrupted and left out."""
        return {int(i) for i in (self.report or {}).get("excluded") or ()}

    def outcome_of(
        self, t: TaskTrack, rnd: DecodeRound | None, used: set[int], dropped: set[int]
    ) -> str:
        """A task's outcome, refined once the job decoded: a dropped straggler is
        cancelled, a landed result used, late (not needed), excluded (judged corrupted)
        or failed (rejected)."""
        if t.index in dropped:
            return "cancelled"
        if t.outcome != "landed":
            return t.outcome
        if t.index in self.rejected:
            return "failed"
        if t.index in self._excluded():
            return "excluded"
        if rnd is None and not used:
            return "landed"
        return "used" if t.index in used else "late"

    def counts(self) -> dict[str, int]:
        """Coded tasks by outcome: landed (results that arrived and were not rejected as
        invalid), and used, late, excluded, cancelled, failed, running, pending."""
        rnd = self.decode_round()
        used, dropped = self._used(rnd), self.dropped()
        c: Counter[str] = Counter()
        for t in self.tasks.values():
            c[self.outcome_of(t, rnd, used, dropped)] += 1
        c["landed"] += c["used"] + c["late"] + c["excluded"]  # before decode: only "landed"
        return {k: c[k] for k in COUNTS}

    def _used(self, rnd: DecodeRound | None) -> set[int]:
        if self.report and self.report.get("returned"):
            return {int(i) for i in self.report["returned"]}
        return set(rnd.used) if rnd is not None else set()

    @property
    def status(self) -> str:
        if self.report is not None:
            return str(self.report.get("status", "finished"))
        if self.decode_round() is not None:
            return "decoded"
        if self.closed is not None:
            return "abandoned"
        return "running"

    def straggled(self) -> list[int]:
        if self.report is not None and self.report.get("straggled") is not None:
            return sorted(int(i) for i in self.report["straggled"])
        rnd = self.decode_round()
        return sorted(rnd.pending_at_start) if rnd is not None else []

    def decode_seconds(self) -> float | None:
        """Until the decoded blocks were available: the client's measure, else the
        scheduler's (from the first coded task it saw to the last decode task done)."""
        if self.report is not None and self.report.get("time_to_decode") is not None:
            return float(self.report["time_to_decode"])
        rnd = self.decode_round()
        return None if rnd is None or rnd.completed is None else rnd.completed - self.started

    def failures(self) -> dict[int, str]:
        out = {t.index: t.reason or "failed" for t in self.tasks.values() if t.outcome == "failed"}
        out.update(self.rejected)
        if self.report:  # the client's words, as in job.report (and reasons only it knows)
            out.update({int(i): str(r) for i, r in (self.report.get("failed") or {}).items()})
        return dict(sorted(out.items()))

    def summary(self) -> dict[str, Any]:
        """A JSON-serialisable summary (one row of the dashboard's table)."""
        c = self.counts()
        rnd = self.decode_round()
        rep = self.report or {}
        return {
            "token": self.token,
            "func": self.func,
            "code": self.code,
            "code_config": self.code_config,
            "K": self.K,
            "N": self.N if self.N is not None else (len(self.tasks) or None),
            "needed": self.needed,
            **c,
            "straggled": len(self.straggled()),
            # redundant copies still out at decode: protection not needed (client's report)
            "not_needed": len((self.report or {}).get("not_needed") or ()),
            "failures": {str(i): r for i, r in self.failures().items()},
            "status": self.status,
            "outcome": self.outcome,
            "trigger": rep.get("trigger"),
            "started": self.started,
            "decoded_after": (
                None if rnd is None or rnd.completed is None else rnd.completed - self.started
            ),
            "decode_seconds": self.decode_seconds(),
            "error_estimate": rep.get("error_estimate"),
            "error": rep.get("error"),
            # hedged / speculative jobs: backups launched, won, cancelled, the threshold
            "hedge": rep.get("hedge"),
            **self.savings(),
            "bytes_moved": self.bytes_moved,
            "client": self.client,
            "span_id": self.span_id,
            "closed": self.closed is not None,
        }

    def savings(self) -> dict[str, Any]:
        """Against plain Dask: ``time_saved`` and ``plain_ready`` (with its source) from the
        client's report, and the thread-seconds the scheduler saw (``total_cpu``) with the
        part an uncoded run would not have spent (``redundant_cpu``, see
        :func:`dask_bacc.runtime.savings.cpu_split`; None before the client's report)."""
        rep = self.report or {}
        cpu = {t.index: t.cpu for t in self.tasks.values() if t.cpu is not None}
        total = redundant = None
        if cpu:
            total = float(sum(cpu.values()))
            if self.report is not None:
                redundant = sum(self._redundant(i, s) for i, s in cpu.items())
        return {
            "time_saved": rep.get("time_saved"),
            "plain_ready": rep.get("plain_ready"),
            "plain_ready_source": rep.get("plain_ready_source"),
            "total_cpu": total,
            "redundant_cpu": redundant,
        }

    def _redundant(self, i: int, seconds: float) -> float:
        """The part of task ``i``'s ``seconds`` an uncoded run would not have spent (once
        the client's report says which tasks an uncoded run stands for)."""
        rep = self.report or {}
        uncoded = rep.get("uncoded_tasks")
        if uncoded:
            return 0.0 if i in {int(j) for j in uncoded} else seconds
        K, N = self.K or 0, self.N or len(self.tasks)
        return seconds * max(N - K, 0) / N if N else 0.0

    def detail(self, now: float) -> dict[str, Any]:
        """The summary plus every coded task's timeline (seconds since the job started)."""

        def rel(t: float | None) -> float | None:
            return None if t is None else t - self.started

        rnd = self.decode_round()
        used, dropped = self._used(rnd), self.dropped()
        rejected = self.rejected
        groups = group_of_shares(self.code_config) or []
        tasks = []
        for t in sorted(self.tasks.values(), key=lambda t: t.index):
            outcome = self.outcome_of(t, rnd, used, dropped)
            reason = rejected.get(t.index, t.reason)
            if t.index in dropped:
                reason = "not needed after the decode" + (
                    ", still running on its worker" if t.outcome == "running" else ""
                )
            tasks.append(
                {
                    "index": t.index,
                    "kind": t.kind,
                    "worker": t.worker,
                    "submitted": rel(t.submitted),
                    "dispatched": rel(t.dispatched),
                    "ended": rel(t.ended),
                    "cpu": t.cpu,
                    "outcome": outcome,
                    "reason": reason,
                    # grouped coding: the group whose blocks the share mixes
                    "group": groups[t.index] if t.index < len(groups) else None,
                }
            )
        return {
            **self.summary(),
            "now": now - self.started,
            "decode_started": None if rnd is None else rel(rnd.started),
            "tasks": tasks,
            "report": self.report,
        }


class BaccDiagnostics(SchedulerPlugin):
    """Scheduler plugin: a bounded history of coded jobs for the dashboard and metrics.

    Registered by the client on its first coded job (idempotent: one instance per
    scheduler), or at scheduler start with ``dask scheduler --preload
    dask_bacc.diagnostics``. On start it adds the ``/bacc`` dashboard page,
    ``/bacc/stats.json`` and the ``dask_bacc_*`` Prometheus metrics on ``/metrics``.

    Parameters
    ----------
    history : int, optional
        Finished jobs kept (default ``bacc.diagnostics.history``, read on the scheduler).
    registered_by : str
        ``"client"`` or ``"preload"``, shown in ``/bacc/stats.json``.
    """

    idempotent = True
    name = PLUGIN_NAME

    def __init__(self, history: int | None = None, registered_by: str = "client"):
        self.history = history
        self.registered_by = registered_by
        self.scheduler: Any = None
        self.jobs: OrderedDict[str, JobStats] = OrderedDict()
        self.closed = False
        self.version = 0  # bumped on every change: the page redraws only then
        self.started_at: float | None = None
        # running totals over every closed job (the Prometheus metrics)
        self.jobs_total: Counter[tuple[str, str]] = Counter()
        self.tasks_total: Counter[str] = Counter()
        self.decode_hist = _Histogram(DECODE_BUCKETS)
        self.straggler_hist = _Histogram(STRAGGLER_BUCKETS)
        #: against plain Dask, over the session: seconds saved by the closed jobs that
        #: could tell (``time_saved`` in their report), how many those were, and the
        #: thread-seconds of coded tasks, in total and the redundant part
        self.time_saved_total = 0.0
        self.time_saved_jobs = 0
        self.cpu_total = 0.0
        self.redundant_cpu_total = 0.0
        #: the straggler model (``bacc.diagnostics.model``), built on the scheduler
        self.model: LatencyModel | None = None
        #: per function, the run times of recent tasks of hedged jobs: the hedging rule's
        #: prior (``dask_bacc.runtime.speculative.task_prior``)
        self.task_times = TaskTimes()
        #: backups of hedged and speculative jobs over the session, by outcome
        #: (launched, won, cancelled; the ``dask_bacc_backups_total`` metric)
        self.backups_total: Counter[str] = Counter()

    def __getstate__(self) -> dict[str, Any]:
        # only the settings travel (client -> scheduler); state is built there
        return {"history": self.history, "registered_by": self.registered_by}

    def __setstate__(self, state: dict[str, Any]) -> None:
        type(self).__init__(self, **state)

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self, scheduler: Any) -> None:
        from .http import install_routes
        from .metrics import install_metrics

        self.scheduler = scheduler
        self.started_at = time()
        _warm_imports()
        if self.history is None:
            self.history = int(config.get("diagnostics.history"))
        if config.get("diagnostics.model.enabled"):
            self.model = LatencyModel(
                late_factor=float(config.get("diagnostics.model.late-factor")),
                half_life=float(config.get("diagnostics.model.half-life")),
                samples=int(config.get("diagnostics.model.samples")),
                max_workers=int(config.get("diagnostics.model.max-workers")),
            )
        scheduler.handlers[HANDLER] = self.handle_job
        # the same on the clients' batched streams: ordered with their update-graph messages
        scheduler.stream_handlers[HANDLER] = self._stream_job
        _plugins[:] = [r for r in _plugins if (p := r()) is not None and not p.closed]
        _plugins.append(weakref.ref(self))
        install_metrics()
        install_routes(scheduler)

    async def close(self) -> None:
        from .http import uninstall_routes

        self.closed = True
        if self.scheduler is not None:
            if self.scheduler.handlers.get(HANDLER) == self.handle_job:
                del self.scheduler.handlers[HANDLER]
            if self.scheduler.stream_handlers.get(HANDLER) == self._stream_job:
                del self.scheduler.stream_handlers[HANDLER]
            uninstall_routes(self.scheduler)

    # -- transitions ----------------------------------------------------------------------
    def transition(
        self, key: Any, start: str, finish: str, *args: Any, stimulus_id: str, **kwargs: Any
    ) -> None:
        # called for every transition of every task: leave everything else at once
        if type(key) is not tuple or not key or not isinstance(key[0], str):
            return
        if not key[0].startswith("bacc-"):
            return
        parsed = parse_key(key)
        if parsed is None or parsed.kind not in _TRACKED:
            return
        kind, token, rnd = parsed.kind, parsed.token, parsed.round
        now = time()
        # a release of a job we never saw (or dropped from the history) starts nothing
        job = self._job(token, now, create=finish not in ("released", "forgotten"))
        if job is None:
            return
        index = int(key[1])
        if kind in ("primary", "copy"):
            # exact copies of a layer's tasks (runtime.redundant): copy c of block b is
            # task b + c * K in the job's report, a primary an eval, a copy a backup
            if kind == "copy":
                if job.K is None:
                    return  # the job's start message never came: no index to give it
                index += rnd * job.K
            kind = "eval" if kind == "primary" else "backup"
        if kind in ("eval", "backup"):
            self._coded_transition(job, kind, index, key, finish, now, kwargs)
        elif kind == "decode":
            self._decode_transition(job, rnd, index, key, finish, now)
        self.version += 1

    def _coded_transition(
        self, job: JobStats, kind: str, i: int, key: Any, finish: str, now: float, kw: dict
    ) -> None:
        t = job.tasks.get(i)
        if t is None:
            if finish in ("released", "forgotten"):
                return  # an old task of a job we dropped from the history
            t = job.tasks[i] = TaskTrack(i, kind, now)
            ts = self.scheduler.tasks.get(key)
            pinned = getattr(ts, "worker_restrictions", None) or ()
            if len(pinned) == 1:  # coded tasks are strictly pinned to one worker
                t.worker = next(iter(pinned))
        if finish == "processing":
            ts = self.scheduler.tasks.get(key)
            if ts is not None and ts.processing_on is not None:
                t.worker = ts.processing_on.address
            if ts is not None:  # its inputs are all in memory now: their sizes are known
                t.reads = sum(max(int(dep.nbytes), 0) for dep in ts.dependencies)
            if t.outcome == "pending":
                t.outcome, t.dispatched = "running", now
            t.released = None
        elif finish == "memory":
            t.worker = kw.get("worker", t.worker)
            if kw.get("nbytes") is not None:
                t.nbytes = int(kw["nbytes"])
            self._note_cpu(job, t, kw)
            if t.outcome not in _TERMINAL:
                t.outcome, t.ended = "landed", now
                if kw.get("typename") == FAILURE_TYPE:  # func raised, or NaN/inf
                    t.outcome, t.reason = "failed", "failed (the job's report says why)"
            t.released = None
        elif finish == "erred":
            self._note_cpu(job, t, kw)
            if t.outcome not in _TERMINAL:
                ts = self.scheduler.tasks.get(key)
                text = kw.get("exception_text") or getattr(ts, "exception_text", None)
                t.outcome, t.ended, t.reason = "failed", now, str(text or "erred")
        elif finish == "no-worker":
            t.lost = True  # strictly pinned: its worker left, it cannot run anywhere else
        elif finish == "waiting":
            t.released = None
        elif finish == "released":
            t.released = now
            self._let_go(job, t, now)
        elif finish == "forgotten":
            self._let_go(job, t, now)
            if t.outcome not in _TERMINAL:
                t.ended = t.released or now
                if t.cpu is None and t.dispatched is not None and t.outcome == "running":
                    t.cpu = max(t.ended - t.dispatched, 0.0)  # cancelled while running
                    self._count_cpu(job)
                # its worker left (the task, or the share it waited for, went with it)
                if t.lost or (t.worker is not None and t.worker not in self.scheduler.workers):
                    t.outcome, t.reason = "failed", f"worker {t.worker} left before returning"
                else:
                    t.outcome = "cancelled"
            self._maybe_close(job, now)

    def _note_cpu(self, job: JobStats, t: TaskTrack, kw: dict[str, Any]) -> None:
        """The thread time of a task that returned: its ``compute`` start/stop pairs."""
        spans = kw.get("startstops") or ()
        seconds = [
            float(ss["stop"]) - float(ss["start"])
            for ss in spans
            if isinstance(ss, dict) and ss.get("action") == "compute"
        ]
        if seconds:
            t.cpu = max(sum(seconds), 0.0)
            self._count_cpu(job)

    def _count_cpu(self, job: JobStats) -> None:
        """Add the thread time of the job's tasks not counted yet to the session totals,
        once the client has said which tasks an uncoded run stands for (or the job closed
        without its word): tasks may end after the job closed (held stragglers)."""
        if job.report is None and job.closed is None:
            return
        for t in job.tasks.values():
            if t.cpu is not None and t.index not in job.cpu_counted:
                job.cpu_counted.add(t.index)
                self.cpu_total += t.cpu
                self.redundant_cpu_total += job._redundant(t.index, t.cpu)

    def cpu_of(self, token: str, now: float) -> dict[int, float] | None:
        """Thread-seconds of each coded task of job ``token`` so far: measured for those
        that returned, since dispatch for those still running; None for an unknown job."""
        job = self.jobs.get(token)
        if job is None:
            return None
        out = {}
        for t in job.tasks.values():
            if t.cpu is not None:
                out[t.index] = t.cpu
            elif t.outcome == "running" and t.dispatched is not None:
                out[t.index] = max(now - t.dispatched, 0.0)
        return out

    def moved_bytes(self, token: str, used: list[int], in_specs: int) -> int | None:
        """Bytes moved for job ``token``'s answer, kept for its dashboard row: the inputs
        each coded task sent to a worker read (its dependencies: the blocks of its share),
        ``in_specs`` bytes of shares carried inside the tasks (small in-memory input),
        and the results of ``used``, which the decode reads. None for an unknown job."""
        job = self.jobs.get(token)
        if job is None:
            return None
        tasks = job.tasks
        reads = sum(t.reads for t in tasks.values() if t.reads is not None)
        results = sum(tasks[i].nbytes or 0 for i in used if i in tasks)
        job.bytes_moved = int(in_specs + reads + results)
        return job.bytes_moved

    def _let_go(self, job: JobStats, t: TaskTrack, now: float) -> None:
        """A landed result was let go before the client said anything: a job decoded on
        the client (no decode task) drops its results as soon as it has decoded."""
        if t.outcome != "landed" or job.report is not None or job.rounds:
            return
        pending = sorted(i for i, x in job.tasks.items() if x.outcome not in _TERMINAL)
        rnd = job.rounds[1] = DecodeRound(now, pending)
        rnd.used = {i for i, x in job.tasks.items() if x.outcome == "landed"}
        rnd.completed = now

    def _decode_transition(
        self, job: JobStats, r: int, j: int, key: Any, finish: str, now: float
    ) -> None:
        rnd = job.rounds.get(r)
        if rnd is None:
            if finish in ("released", "forgotten"):
                return
            pending = sorted(i for i, t in job.tasks.items() if t.outcome not in _TERMINAL)
            rnd = job.rounds[r] = DecodeRound(now, pending)
        if finish == "waiting" or (finish == "processing" and j not in rnd.seen):
            if j not in rnd.seen:
                rnd.seen.add(j)
                rnd.completed = None  # one more block to decode
                ts = self.scheduler.tasks.get(key)
                deps = list(getattr(ts, "dependencies", ()) or ())
                while deps:  # the coded results it decodes, directly or through a stack task
                    dep = deps.pop()
                    p = parse_key(dep.key)
                    if p is not None and p.kind in ("eval", "backup"):
                        rnd.used.add(int(p.index or 0))
                    elif p is not None and p.kind == "stack":
                        deps.extend(dep.dependencies)
        elif finish == "memory":
            rnd.done.add(j)
            need = job.K if job.K is not None else len(rnd.seen)
            if rnd.completed is None and len(rnd.done) >= need and rnd.done >= rnd.seen:
                rnd.completed = now
                self._maybe_close(job, now)  # its stragglers no longer keep it open
        elif finish == "erred":
            rnd.erred = True

    # -- client messages -------------------------------------------------------------------
    def _stream_job(self, event: str, token: str, info: dict[str, Any], **_: Any) -> None:
        self.handle_job(event=event, token=token, info=info)

    def handle_job(self, event: str, token: str, info: dict[str, Any]) -> None:
        """Scheduler handler ``bacc_job``: a client reports a job's start or its end.

        Parameters
        ----------
        event : {"start", "finish"}
        token : str
            The job's token (as in its task keys).
        info : dict
            ``start``: func, code (``code.get_config()``), K, N, needed, client, span_id.
            ``finish``: the job's report (``JobReport.to_dict()`` less workers/arrival).
        """
        now = time()
        job = self._job(token, now, create=True)
        if job is None:
            return
        if event == "start":
            job.func = info.get("func")
            job.code_config = dict(info.get("code") or {})
            job.code = code_label(job.code_config)
            job.K, job.N = info.get("K"), info.get("N")
            job.needed = info.get("needed")
            job.client = info.get("client")
            job.span_id = info.get("span_id")
            if job.client is not None and job.client not in self.scheduler.clients:
                job.client_gone = True
        elif event == "finish":
            job.report = dict(info)
            decoded_at = info.get("time_to_decode")
            if info.get("status") == "finished" and decoded_at is not None:
                if job.decode_round() is None:  # decoded on the client: no decode tasks
                    rnd = DecodeRound(min(job.started + float(decoded_at), now), [])
                    rnd.used = {int(i) for i in info.get("returned") or ()}
                    rnd.completed = rnd.started
                    job.rounds[max(job.rounds, default=0) + 1] = rnd
            for i, reason in (info.get("failed") or {}).items():
                t = job.tasks.get(int(i))
                if t is not None and t.outcome == "landed":
                    job.rejected[int(i)] = str(reason)  # e.g. a result of the wrong shape
            self._count_cpu(job)
            self._maybe_close(job, now)
        self.version += 1

    def remove_client(self, scheduler: Any, client: str) -> None:
        now = time()
        for job in list(self.jobs.values()):
            if job.closed is None and job.client == client:
                job.client_gone = True
                self._maybe_close(job, now)
        self.version += 1

    # -- bookkeeping -------------------------------------------------------------------------
    def _job(self, token: str, now: float, create: bool = True) -> JobStats | None:
        job = self.jobs.get(token)
        if job is None and create:
            job = self.jobs[token] = JobStats(token, now)
            self._trim()
        return job

    def _maybe_close(self, job: JobStats, now: float) -> None:
        """Close a job once its client has had its say (or left) and no task is out."""
        if job.closed is not None:
            return
        heard = job.report is not None or job.client is None or job.client_gone
        live = job.live()
        if heard and not live:
            self._close(job, now)
        elif heard or not live:
            job.quiet_since = job.quiet_since or now

    def _close(self, job: JobStats, now: float) -> None:
        job.closed = now
        if job.report is not None:
            job.outcome = _OUTCOME.get(str(job.report.get("status")), "error")
        else:
            # no word from the client: a decode task seen, or (for jobs decoded on the
            # client, which leave no task) the results it needed all landed
            landed = sum(t.outcome == "landed" for t in job.tasks.values())
            enough = job.needed is not None and landed >= job.needed
            job.outcome = "decoded" if job.decode_round() is not None or enough else "abandoned"
        self.jobs_total[(job.code or "unknown", job.outcome)] += 1
        c = job.counts()
        for outcome in TASK_OUTCOMES:
            self.tasks_total[outcome] += c[outcome]
        seconds = job.decode_seconds()
        if seconds is not None and job.outcome == "decoded":
            self.decode_hist.observe(seconds)
        self.straggler_hist.observe(len(job.straggled()))
        saved = (job.report or {}).get("time_saved")
        if saved is not None:
            self.time_saved_total += float(saved)
            self.time_saved_jobs += 1
        self._count_cpu(job)
        if self.model is not None:
            self.model.observe_job(self._observations(job, now))
        self._trim()

    def _observations(self, job: JobStats, now: float) -> list[TaskObservation]:
        """The job's eval tasks as the straggler model sees them: returned ones finished,
        dropped or still running ones censored at their elapsed time; failed ones and
        those never sent to a worker are no latencies."""
        rnd = job.decode_round()
        used, dropped = job._used(rnd), job.dropped()
        workers = self.scheduler.workers if self.scheduler is not None else {}
        out = []
        for t in job.tasks.values():
            if t.kind != "eval" or t.worker is None or t.dispatched is None:
                continue
            outcome = job.outcome_of(t, rnd, used, dropped)
            if outcome in ("failed", "pending"):
                continue
            returned = t.outcome == "landed" and t.ended is not None
            end = t.ended if t.ended is not None else now
            ws = workers.get(t.worker)
            out.append(
                TaskObservation(
                    worker=t.worker,
                    host=ws.host if ws is not None else _host(t.worker),
                    duration=end - t.dispatched,
                    finished=returned,
                )
            )
        return out

    def learn_backups(self, func: str, seconds: list[float], hedge: dict[str, Any]) -> None:
        """A finished hedged or speculative job (any entry point): the run times of its
        finished tasks (the prior of ``func``'s next jobs) and its backups' outcomes."""
        self.task_times.observe(func, seconds)
        for outcome in BACKUP_OUTCOMES:
            self.backups_total[outcome] += int(hedge.get(outcome) or 0)
        self.version += 1

    def remove_worker(self, scheduler: Any, worker: str, **kwargs: Any) -> None:
        if self.model is not None:
            self.model.forget(worker)

    def sweep(self, now: float | None = None) -> None:
        """Close jobs whose client's word or last task release never came (lost message)."""
        now = time() if now is None else now
        for job in list(self.jobs.values()):
            if job.closed is None and job.quiet_since is not None:
                if now - job.quiet_since > _SETTLE:
                    self._close(job, now)
                    self.version += 1

    def _trim(self) -> None:
        history = int(self.history if self.history is not None else 100)
        closed = [t for t, j in self.jobs.items() if j.closed is not None]
        for token in closed[: max(0, len(closed) - history)]:
            del self.jobs[token]
        open_ = [t for t, j in self.jobs.items() if j.closed is None]
        for token in open_[: max(0, len(open_) - _MAX_OPEN)]:
            del self.jobs[token]

    # -- read-out ------------------------------------------------------------------------------
    def stats(self, token: str | None = None) -> dict[str, Any]:
        """What ``/bacc/stats.json`` serves: every job's summary, newest first, and totals.

        With ``token``: that job's summary with each coded task's timeline (``None`` if
        the job is unknown).
        """
        now = time()
        self.sweep(now)
        if token is not None:
            job = self.jobs.get(token)
            return None if job is None else job.detail(now)  # type: ignore[return-value]
        return {
            "registered_by": self.registered_by,
            "history": self.history,
            "jobs": [j.summary() for j in reversed(self.jobs.values())],
            "totals": {
                "jobs": [
                    {"code": code, "outcome": outcome, "count": n}
                    for (code, outcome), n in sorted(self.jobs_total.items())
                ],
                "tasks": dict(self.tasks_total),
                "running": sum(1 for j in self.jobs.values() if j.closed is None),
                # against plain Dask, over the session (jobs closed, thread time as seen)
                "time_saved": self.time_saved_total,
                "time_saved_jobs": self.time_saved_jobs,
                "cpu": self.cpu_total,
                "redundant_cpu": self.redundant_cpu_total,
                # backups of hedged and speculative jobs, every entry point
                "backups": dict(self.backups_total),
            },
            # the hedging rule's prior: per function, its recent tasks' median run time
            "task_times": self.task_times.snapshot(),
            # the straggler model: per worker, per host and the cluster (None when off)
            "workers": None if self.model is None else self.model.snapshot(),
        }


def _warm_imports() -> None:
    """Import pandas and xarray (where installed) as the plugin starts, once, not while
    jobs run: importing dask_bacc no longer does (a worker unpickles dask-bacc's plugin in
    its event loop, and needs neither unless a job's data does), and a scheduler that
    imported them in the middle of its jobs, when a message first needed them, would grow
    by their tens of megabytes then (the soak test measures the scheduler's memory per job)."""
    import importlib
    import importlib.util

    for name in ("pandas", "xarray"):
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)


def _host(address: str) -> str:
    """The host part of a worker's address (the worker is gone from the scheduler)."""
    try:
        return str(get_address_host(address))
    except ValueError:
        return address


class _Histogram:
    """Cumulative counts for a Prometheus histogram (``le`` buckets, sum, count)."""

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.total = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        for k, b in enumerate(self.bounds):
            if value <= b:
                self.counts[k] += 1
        self.total += 1
        self.sum += value
