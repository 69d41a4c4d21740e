"""What happened in a coded job, for users, tests, benchmarks and the dashboard."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..codes.registry import code_label
from ..diagnostics.words import describe_method, describe_trigger

__all__ = ["JobReport"]


@dataclass
class JobReport:
    """The record of one coded job (``CodedJob.report``).

    Times are seconds since the job was submitted. Coded task indices run over ``range(N)``.

    Attributes
    ----------
    token : str
        Hex token in the job's task keys (``bacc-eval-<token>`` ...).
    func : str
        Name of the mapped function.
    code : dict
        ``code.get_config()``: name, K, N and options.
    K, N : int
        Data blocks and coded tasks.
    wait_target : int
        Usable results the wait policy asked for.
    workers : list of str
        Worker address of each coded task.
    returned : list of int
        Coded tasks whose results were decoded, in arrival order.
    straggled : list of int
        Coded tasks still running or queued at decode time (then cancelled); for a code
        with plain shares (repetition, hedged, speculative, the systematic codes), only
        the plain shares: a redundant copy still out is ``not_needed``.
    not_needed : list of int
        Redundant tasks (not a block's plain share: a repetition's or a hedge's backup, a
        systematic code's parity task) still running or queued at decode time, then
        cancelled: protection that was not needed, not a straggler.
    late : list of int
        Coded tasks that finished after the decode had started (not used).
    failed : dict of int to str
        Coded tasks that failed, with the reason (exception, NaN/inf, wrong shape, worker left).
    cancelled : int
        Eval tasks cancelled while still running or queued (stragglers after decoding; with
        the speculative strategy also the losing copy of a block).
    backups : list of int
        Hedged and speculative strategies: backup copies launched (coded index
        ``c * K + j`` is copy ``c`` of block j).
    hedge : dict or None
        Hedged and speculative jobs (every entry point): what the backup rule did.
        ``rule`` (``"hedge"``, ``"spark"``, ``"cubed"``); ``threshold``, the run time
        after which a task was backed up at the last check, and ``expected``, the
        expected task it rests on (seconds; None: the rule never armed); ``source``,
        where ``expected`` came from (``"job"``: the median of the job's finished tasks,
        ``"prior"``: the function's earlier jobs on this cluster, ``"none"``);
        ``budget``, the backups of late tasks the job could launch (None: no limit);
        ``launched``, ``won`` (a backup gave its block) and ``cancelled`` (the losing
        backups). The extra thread-seconds are ``redundant_cpu``. None for other codes.
    resent : int
        In-memory input: blocks sent from the client again because the worker holding one
        left or stopped answering (the tasks reading them were launched again).
    rerouted : dict of int to str
        ``CodedData.map``: coded tasks evaluated on a spare worker instead of the one
        holding their share (it still ran a cancelled straggler, or holds two shares).
    arrival : dict of int to float
        When each finished result arrived.
    trigger : str or None
        What started the decode: ``"wait"`` (policy met), ``"exact"`` (a systematic or
        repetition code: every block's own data arrived before the wait target),
        ``"all"`` / ``"error"`` (``dask_bacc.until``), ``"timeout"`` or ``"exhausted"``
        (no more results can arrive, decoding from what did);
        ``dask_bacc.diagnostics.words.describe_trigger`` says each in words.
    target_met : float or None
        When the wait policy's target was met (the decode follows at once, or after the
        policy's grace period for approximate codes).
    time_to_decode : float or None
        Until the decoded blocks were available.
    slowest_used : float or None
        Arrival time of the last result used.
    status : str
        ``"running"``, ``"finished"``, ``"error"`` or ``"cancelled"``.
    error : str or None
        Why the job failed.
    error_estimate : float or None
        Estimated relative error ``||decoded - f(X)|| / ||f(X)||`` of the whole output: 0
        for an exact decode, ``None`` when it could not be estimated (docs/accuracy.md).
    block_errors : list of float or None
        The same per decoded block (``None`` entries: unknown).
    estimate_method : str or None
        ``"exact"``, ``"embedded-fh1"`` (Berrut codes), ``"embedded-fh3"`` (spline
        codes), ``"ill-conditioned"``, ``"unreliable"`` (too few results check the
        estimate: none is given, and the job warns) or ``"unknown"``.
    estimates : list of [int, float or None]
        Adaptive waiting (``dask_bacc.until``): each estimate computed while waiting, as
        ``[number of results, estimated error]`` (None: it could not be estimated).
    adversaries : int
        Corrupted results the job was asked to locate and exclude (``adversaries=``).
    excluded : list of int
        Coded tasks whose results were judged corrupted and left out of the decode.
    suspects : list of int
        Without ``adversaries``: results inconsistent with the others (reported only,
        still decoded in).
    consistency : dict of int to float
        Leave-one-out consistency ratio of the results the screening looked at closely
        (about 1 for consistent results; above ``bacc.accuracy.tau`` is flagged).
    transform : str or None
        Name of the transform the job decoded in (``transform=``), if any.
    check_residual : float or None
        Lagrange: the relative residual of the used results against "f is a polynomial of
        the code's degree" (about 1e-15 when it holds; the job raises ``InexactDecode``
        when it does not). None when no spare result was decoded from
        (``estimate_method`` ``"exact-unchecked"``).
    dashboard : str or None
        The job on the dashboard's ``/bacc`` page, when the scheduler has a dashboard.
    auto : dict or None
        Auto mode (``n_coded``, ``wait`` or ``code`` ``"auto"``): what was chosen and why
        (``"chosen"``: code, N, k, predicted time in median tasks, its 90th percentile and
        predicted error; ``"reason"``; ``"alternatives"`` weighed; ``"error_budget"``;
        ``"calibration"``; ``"model_jobs"``). ``"chosen"`` is None when the defaults ran
        (the model knew too little). ``"exact_only"`` says why only exact codes were
        weighed (func failed on coded shares in an earlier job). None without auto mode.
    warnings : list of str
        The warnings about the answer (``ApproximationWarning``, ``SuspectResultsWarning``,
        ...), as ``"Kind: message"``; each is also emitted where the result is taken.
    domain_failure : list of int
        Coded tasks mixing blocks on which func raised or returned NaN/inf while it
        succeeded on shares of real data: f is not defined on coded blocks. The job then
        warned and (``bacc.on-domain-failure: exact``) decoded from real data only.
    plain_shares : list of int
        The coded task standing for each block in an uncoded run (its *plain share*: the
        lowest coded index whose share is the block's own data: a systematic share,
        repetition's copy b, a primary). Empty for codes without such shares (Berrut,
        spline, Lagrange). See docs/diagnostics.md, "What a job saved".
    uncoded_tasks : list of int
        The K coded tasks whose thread time an uncoded run would have spent too: per
        block, the first share of its own data whose result was used (the winning copy),
        else its plain share. Empty without plain shares.
    plain_ready : float or None
        The plain-Dask counterfactual: when every block would have been ready uncoded
        (seconds since submit), the latest of the plain shares' finish times: measured
        where the plain share returned, estimated where it was still out when the job
        stopped following it. None when it cannot be told: no plain shares, a plain share
        failed, or the job did not decode.
    plain_ready_estimated : bool
        Whether any block's time in ``plain_ready`` is an estimate (``plain_estimated``).
    plain_ready_source : str or None
        The least certain source among the blocks: ``"measured"`` (every plain share
        returned), ``"model"`` (the scheduler's straggler model estimated a cancelled
        share's finish) or ``"lower-bound"`` (a cancelled share's time is when the job
        stopped waiting for it: it would have finished later).
    plain_estimated : list of int
        Blocks whose uncoded finish time was estimated.
    time_saved : float or None
        ``plain_ready - time_to_decode``: seconds the coded job answered before plain
        Dask would have (negative: the coding cost time). With a ``"lower-bound"`` source
        it is a lower bound too.
    total_cpu : float or None
        Thread-seconds spent by the job's coded tasks (CodedJob: each task's compute time
        as its worker reported it to the scheduler, a straggler still running at the job's
        clean-up counted until then; RedundantJob: each copy from its start event until it
        returned or was cancelled, on the client's clock). None without the scheduler
        plugin (CodedJob) and until the job's clean-up round trip, just after the output
        is handed over.
    redundant_cpu : float or None
        The part of ``total_cpu`` an uncoded run would not have spent: every task but the
        ``uncoded_tasks``. Without plain shares, ``(N - K) / N`` of ``total_cpu`` (the
        coded tasks do equal work).
    bytes_moved : int or None
        Bytes moved to answer (CodedJob): the inputs every coded task that was sent to a
        worker read (the blocks its share mixes, as the scheduler sized them, or its
        share inside its spec for small in-memory input), plus the results the decode
        read. Inputs already on a task's worker are counted too: it is what moves when
        no two tasks share a worker. A Berrut or spline share reads all K blocks, a
        ``bspline`` share at most 4 (docs/codes.md). None without the scheduler plugin,
        for a RedundantJob, and until the clean-up round trip after the output is
        handed over.
    """

    token: str
    func: str
    code: dict[str, Any]
    K: int
    N: int
    wait_target: int
    workers: list[str] = field(default_factory=list)
    returned: list[int] = field(default_factory=list)
    straggled: list[int] = field(default_factory=list)
    not_needed: list[int] = field(default_factory=list)
    late: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)
    cancelled: int = 0
    backups: list[int] = field(default_factory=list)
    hedge: dict[str, Any] | None = None
    resent: int = 0
    rerouted: dict[int, str] = field(default_factory=dict)
    arrival: dict[int, float] = field(default_factory=dict)
    trigger: str | None = None
    target_met: float | None = None
    time_to_decode: float | None = None
    slowest_used: float | None = None
    status: str = "running"
    error: str | None = None
    error_estimate: float | None = None
    block_errors: list[float | None] | None = None
    estimate_method: str | None = None
    estimates: list[list[float | None]] = field(default_factory=list)
    adversaries: int = 0
    excluded: list[int] = field(default_factory=list)
    suspects: list[int] = field(default_factory=list)
    consistency: dict[int, float] = field(default_factory=dict)
    transform: str | None = None
    check_residual: float | None = None
    warnings: list[str] = field(default_factory=list)
    domain_failure: list[int] = field(default_factory=list)
    dashboard: str | None = None
    auto: dict[str, Any] | None = None
    plain_shares: list[int] = field(default_factory=list)
    uncoded_tasks: list[int] = field(default_factory=list)
    plain_ready: float | None = None
    plain_ready_estimated: bool = False
    plain_ready_source: str | None = None
    plain_estimated: list[int] = field(default_factory=list)
    time_saved: float | None = None
    total_cpu: float | None = None
    redundant_cpu: float | None = None
    bytes_moved: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable copy."""
        out = asdict(self)
        out["failed"] = {str(k): v for k, v in self.failed.items()}
        out["arrival"] = {str(k): v for k, v in self.arrival.items()}
        out["consistency"] = {str(k): v for k, v in self.consistency.items()}
        out["rerouted"] = {str(k): v for k, v in self.rerouted.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobReport:
        """Rebuild a report from :meth:`to_dict` output (integer keys and lists restored:
        msgpack, e.g. the scheduler's event log, hands lists back as tuples)."""

        def lists(value: Any) -> Any:
            if isinstance(value, (list, tuple)):
                return [lists(v) for v in value]
            if isinstance(value, dict):
                return {k: lists(v) for k, v in value.items()}
            return value

        data = {k: lists(v) for k, v in data.items()}
        for key in ("failed", "arrival", "consistency", "rerouted"):
            data[key] = {int(k): v for k, v in (data.get(key) or {}).items()}
        return cls(**data)

    def decoded_line(self) -> str:
        """``"decoded from 6 results when the wait target was met"``: the same words in
        the reprs and on the ``/bacc`` page."""
        if self.trigger is None:
            return "not decoded yet" if self.status == "running" else "not decoded"
        return f"decoded from {len(self.returned)} results when {describe_trigger(self.trigger)}"

    def savings_line(self) -> str | None:
        """``"time saved 1.234s against plain Dask (ready at ...), extra CPU ..."``, or
        None when neither is known."""
        parts = []
        if self.time_saved is not None and self.plain_ready is not None:
            how = "" if not self.plain_ready_estimated else f", {self.plain_ready_source} estimate"
            bound = self.plain_ready_source == "lower-bound"
            if bound and self.time_saved < 0.0005:
                # a bound of zero or less says nothing: not "at least -0.000s"
                parts.append(
                    f"time saved against plain Dask unknown (plain Dask: ready at "
                    f"{self.plain_ready:.3f}s or later{how})"
                )
            else:
                at = "at least " if bound else ""
                parts.append(
                    f"time saved {at}{self.time_saved:.3f}s against plain Dask (ready at "
                    f"{at}{self.plain_ready:.3f}s{how})"
                )
        if self.redundant_cpu is not None and self.total_cpu is not None:
            parts.append(
                f"extra CPU {self.redundant_cpu:.3f}s of {self.total_cpu:.3f}s thread time"
            )
        if self.bytes_moved is not None:
            from dask.utils import format_bytes

            parts.append(f"moved {format_bytes(self.bytes_moved)}")
        return ", ".join(parts) or None

    @property
    def groups(self) -> list[dict[str, Any]] | None:
        """Grouped coding (K blocks too many for the workers, docs/codes.md): per group,
        ``{"blocks": [first, last], "shares": [first, last], "returned": results its
        decode used, "error_estimate": the root mean square of its blocks' estimates (None
        when not known)}``; None for a job that was not grouped."""
        if self.code.get("name") != "grouped":
            return None
        used = set(self.returned)
        out, b, s = [], 0, 0
        for k, n in zip(self.code["sizes"], self.code["shares"], strict=True):
            errs = (self.block_errors or [None] * (b + k))[b : b + k]
            known = [e for e in errs if e is not None]
            rms = float(np.sqrt(np.mean(np.square(known)))) if known and len(known) == k else None
            out.append(
                {
                    "blocks": [b, b + k - 1],
                    "shares": [s, s + n - 1],
                    "returned": sum(1 for i in range(s, s + n) if i in used),
                    "error_estimate": rms,
                }
            )
            b, s = b + k, s + n
        return out

    def _repr_html_(self) -> str:
        from ..diagnostics.html import report_html

        return report_html(self)

    def __repr__(self) -> str:
        def t(x: float | None) -> str:
            return "-" if x is None else f"{x:.3f}s"

        lines = [
            f"<JobReport {code_label(self.code)} {self.func} token={self.token} "
            f"status={self.status}>",
            f"  K={self.K} N={self.N} wait for {self.wait_target}; {self.decoded_line()}",
            f"  time to decode {t(self.time_to_decode)}, slowest result used "
            f"{t(self.slowest_used)}",
            f"  straggled {len(self.straggled)}"
            + (f", not needed {len(self.not_needed)}" if self.not_needed else "")
            + f" (cancelled {self.cancelled}), late "
            f"{len(self.late)}, failed {len(self.failed)}"
            + (f", backups {len(self.backups)}" if self.backups else "")
            + (f", rerouted {len(self.rerouted)}" if self.rerouted else ""),
        ]
        waves = self.code.get("waves")
        if waves:
            lines.append(
                f"  in waves: K={self.K} blocks on {waves['workers']} workers (one worker per "
                f"task, as a coded job runs them, needs {waves['needs']})"
            )
        savings = self.savings_line()
        if savings:
            lines.append(f"  {savings}")
        for i, reason in sorted(self.failed.items()):
            lines.append(
                f"    task {i} on {self.workers[i] if i < len(self.workers) else '?'}: {reason}"
            )
        if self.error_estimate is not None:
            worst = max((e for e in self.block_errors or [] if e is not None), default=None)
            lines.append(
                f"  estimated relative error {self.error_estimate:.3g}"
                + (f" (worst block {worst:.3g})" if worst is not None else "")
                + f"; {describe_method(self.estimate_method)}"
            )
        elif self.estimate_method == "exact-unchecked":
            lines.append(f"  {describe_method(self.estimate_method)}")
        elif self.estimate_method is not None:
            lines.append(
                f"  estimated relative error unknown; {describe_method(self.estimate_method)}"
            )
        groups = self.groups
        if groups:
            got = [g["returned"] for g in groups]
            errs = [g["error_estimate"] for g in groups if g["error_estimate"] is not None]
            lines.append(
                f"  {len(groups)} groups: {min(got)}-{max(got)} results used per group"
                + (f", worst group's estimate {max(errs):.3g}" if errs else "")
                + " (report.groups)"
            )
        if self.adversaries:
            lines.append(
                f"  adversaries {self.adversaries}: excluded as corrupted {self.excluded or 'none'}"
            )
        if self.suspects:
            lines.append(f"  inconsistent with the others (still decoded): {self.suspects}")
        if self.error:
            lines.append(f"  error: {self.error}")
        return "\n".join(lines)


def split_redundant(
    out: list[int],
    returned: list[int],
    plain: Collection[int],
    data_rows: Mapping[int, int],
    K: int,
) -> tuple[list[int], list[int]]:
    """Tasks still out at decode time as ``(straggled, not_needed)``.

    ``plain``: each block's plain share (what plain Dask runs); ``data_rows``: task -> the
    block whose own data it holds (plain shares, a repetition's copies). A plain share
    still out straggled. Another task still out was not needed when what it reads was
    given exactly without it: a copy of a block another copy of which returned, a task
    mixing blocks once every block's own data returned; otherwise it straggled too (a
    decode that had to estimate would have used it)."""
    given = {data_rows[i] for i in returned if i in data_rows}
    straggled: list[int] = []
    not_needed: list[int] = []
    for i in out:
        block = data_rows.get(i)
        if i in plain:
            redundant = False
        else:
            redundant = len(given) == K if block is None else block in given
        (not_needed if redundant else straggled).append(i)
    return straggled, not_needed
