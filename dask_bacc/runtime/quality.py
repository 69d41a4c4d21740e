"""How good a coded job's answer is: error estimates, adaptive waiting, corrupted results.

A :class:`JobQuality` belongs to one :class:`~dask_bacc.runtime.job.CodedJob`. For an
approximate code (or when ``adversaries`` is set) it submits one small sketch task per coded
result, next to the result (:func:`~dask_bacc.runtime.worker.sketch_task`: a count sketch of
``bacc.accuracy.sketch`` numbers), and keeps the sketches that reach the client. Everything
else is pure NumPy on those sketches (:mod:`dask_bacc.codes.estimate`,
:mod:`dask_bacc.codes.robust`), so no result is ever gathered to the client:

* :meth:`refresh` / :meth:`target_met`: with ``wait=until(error=...)``, re-estimate the
  error each time new sketches arrived and tell the job when the target is met;
* :meth:`screen`: with ``adversaries=A``, locate up to A corrupted results before decoding;
* :meth:`finalize`: the error estimate of the decode (per block and overall) and, without
  ``adversaries``, the consistency check, into the report.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .. import config
from ..codes import Code, InterpolatingCode
from ..codes._types import FloatArray
from ..codes.estimate import (
    MIN_CALIBRATION_POINTS,
    MIN_RESULTS,
    ErrorEstimate,
    InverseRows,
    estimate_error,
    sketch,
)
from ..codes.robust import (
    DEFAULT_TAU,
    Screening,
    detect_inconsistent,
    locate_corrupted,
    required_results,
)
from ..codes.transform import Transform
from ..exceptions import ApproximationWarning, InexactDecode, SuspectResultsWarning
from . import _dist, keys
from .wait import ErrorTarget, FirstK, WaitPolicy
from .worker import sketch_task

if TYPE_CHECKING:
    from distributed import Future

    from .jobview import JobView

__all__ = [
    "JobQuality",
    "check_adversaries",
    "estimate_decode",
    "robust_max_blocks",
    "robust_n_coded",
    "robust_policy",
]


#: Relative residual, per unit of the decode's amplification, above which spare results
#: contradict an exact code's assumption (rounding gives about 1e-16 per unit).
CHECK_TOLERANCE = 1e-9


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


class JobQuality:
    """Sketches, error estimates and consistency screening for one coded job."""

    def __init__(self, job: JobView):
        # weak: a job <-> quality cycle would keep the job's output (and the futures
        # behind it) alive until the cyclic garbage collector runs
        self._job = weakref.ref(job)
        self.code = job.code
        self.transform = job.transform
        # estimates on every arrival only for an error target (a deadline alone needs none)
        self.adaptive = (
            isinstance(job.policy, ErrorTarget)
            and job.policy.error is not None
            and not self.code.exact
        )
        self.size = int(config.get("accuracy.sketch"))
        tau = config.get("accuracy.tau")
        self.tau = DEFAULT_TAU if tau is None else float(tau)
        self.seed = int(job.token[:8], 16)
        self._futures: dict[int, Future[Any]] = {}
        self._sketches: dict[int, FloatArray | None] = {}
        self._estimated: tuple[int, ...] = ()
        self.last: ErrorEstimate | None = None
        #: the decode's relative residual against the code's check matrix (exact codes
        #: with spare results), set where the decode ran
        self.residual: float | None = None

    @property
    def job(self) -> JobView:
        job = self._job()
        assert job is not None  # the job holds this object: alive while it is used
        return job

    # -- what is needed ------------------------------------------------------------------
    @property
    def adversaries(self) -> int:
        return int(getattr(self.job, "adversaries", 0) or 0)

    @property
    def enabled(self) -> bool:
        """Sketches are needed: an approximate code (estimate on), adaptive or robust."""
        if self.adversaries or self.adaptive:
            return True
        return not self.code.exact and bool(config.get("accuracy.estimate"))

    # -- sketches ------------------------------------------------------------------------
    @property
    def remote(self) -> bool:
        """Sketches are needed before the decode while the results stay on the cluster
        (adaptive or robust jobs decoding there): one small sketch task per result.
        Otherwise they are made from the gathered results on the client, or by the
        decode task on the cluster, with no task of their own."""
        job = self.job
        return self.enabled and (self.adaptive or bool(self.adversaries)) and not job.decode_here

    def track(self, i: int, fut: Future[Any]) -> None:
        """Submit the sketch of coded result ``i`` next to it (only when :attr:`remote`)."""
        if not self.remote or i in self._futures or i >= self.code.N:
            return
        job = self.job
        sk = job.client.submit(
            sketch_task,
            fut,
            self.size,
            self.seed,
            self.transform,
            key=keys.sketch_key(job.token, i),
            workers=[job.workers[i]],
            allow_other_workers=True,
        )
        self._futures[i] = sk
        if self.adaptive and job._ac is not None:
            job._ac.add(sk)  # wake the loop when it lands: the estimate may now be met

    def decode_sketch(self) -> tuple[int, int] | None:
        """``(size, seed)`` for a decode task on the cluster to sketch its inputs with."""
        return (self.size, self.seed) if self.enabled else None

    def add_sketches(self, indices: list[int], sketches: Sequence[ArrayLike | None] | None) -> None:
        """Sketches made elsewhere (by a decode task on the cluster)."""
        if sketches is None:
            return
        for i, sk in zip(indices, sketches, strict=True):
            self._sketches.setdefault(i, None if sk is None else np.asarray(sk))

    async def _fetch(self, indices: list[int], wait: bool) -> None:
        """Bring the sketches of ``indices`` to the client (only finished ones unless ``wait``)."""
        job = self.job
        if job.decode_here:  # the results come here anyway: sketch them on the client
            await job.gather_values([i for i in indices if i not in self._sketches])
            for i in indices:
                if i not in self._sketches and i in job._values:
                    self._sketches[i] = sketch(job._values[i], self.size, self.seed, self.transform)
            return
        want = {
            i: self._futures[i]
            for i in indices
            if i not in self._sketches
            and i in self._futures
            and (wait or self._futures[i].status in ("finished", "error", "cancelled"))
        }
        if not want:
            return
        if wait:  # up to sketch-timeout; not for a sketch whose result's worker left
            timeout = config.seconds("accuracy.sketch-timeout")
            got = await job.watched_gather(want, timeout)
        else:
            got = await _dist.gather(job.client, want, errors="skip")
        for i, value in got.items():
            self._sketches[i] = None if value is None else np.asarray(value)

    def _stack(self, indices: list[int]) -> tuple[list[int], FloatArray | None]:
        """The indices with a usable sketch and their sketches (equal lengths only)."""
        pairs = [(i, s) for i in indices if (s := self._sketches.get(i)) is not None]
        if not pairs:
            return [], None
        lengths = [s.shape for _, s in pairs]
        common = max(set(lengths), key=lengths.count)
        pairs = [(i, s) for i, s in pairs if s.shape == common]
        return [i for i, _ in pairs], np.stack([s for _, s in pairs])

    # -- adaptive waiting ----------------------------------------------------------------
    async def refresh(self, usable: list[int]) -> None:
        """Adaptive jobs: re-estimate from the sketches of the results that landed so far."""
        if not self.adaptive:
            return
        policy = self.job.policy
        assert isinstance(policy, ErrorTarget)  # what makes a job adaptive
        floor = policy.floor(self.code)
        if len(usable) < floor:
            return
        await self._fetch(list(usable), wait=False)
        have, Y = self._stack(list(usable))
        key = tuple(sorted(have))
        if Y is None or len(have) < floor or key == self._estimated:  # floor >= 1
            return
        self._estimated = key
        self.last = estimate_error(self.code, Y, have, transform=self.transform)
        self.job.report.estimates.append([len(have), _num(self.last.overall)])

    def target_met(self, usable: list[int]) -> bool:
        """The latest estimate (from results that are all still usable) meets the target."""
        if not self.adaptive or self.last is None:
            return False
        if not set(self._estimated) <= set(usable):
            return False  # a result it used was written off since
        policy = self.job.policy
        assert isinstance(policy, ErrorTarget)  # what makes a job adaptive
        return policy.error is not None and bool(self.last.overall <= policy.error)

    # -- robust decoding -----------------------------------------------------------------
    async def screen(self, usable: list[int]) -> list[int]:
        """``adversaries=A``: the usable results minus the (up to A) located as corrupted.

        Results whose sketch did not arrive in time are left out too (they could not be
        checked).
        """
        if not self.adversaries or self.code.exact:
            return list(usable)
        await self._fetch(list(usable), wait=True)
        have, Y = self._stack(list(usable))
        rep = self.job.report
        unchecked = [i for i in usable if i not in set(have)]
        if Y is None or len(have) < required_results(self.code.K, self.adversaries):
            # sketches lost (their workers left): too few to screen, decode what arrived
            return list(usable)
        found = locate_corrupted(self.code, Y, have, self.adversaries, tau=self.tau)
        rep.excluded = sorted(found.flagged + unchecked)
        rep.consistency = found.scores
        return [i for i in usable if i not in set(rep.excluded)]

    # -- the decoded answer ----------------------------------------------------------------
    async def finalize(self, used: list[int]) -> None:
        """Fill the report's error estimate (and consistency check) for the decode from ``used``."""
        rep = self.job.report
        rep.late = [i for i in rep.late if i not in set(rep.excluded)]
        if self.code.exact or (not self.enabled and self.code.is_exact(used)):
            estimate = estimate_error(self.code, np.zeros((len(used), 1)), used)
            self._check_exact(estimate, used)
        elif not self.enabled:
            return
        else:
            await self._fetch(list(used), wait=True)
            have, Y = self._stack(list(used))
            if len(have) != len(used):
                rep.estimate_method = "unknown"
                self._warn_unknown(
                    used, "the sketches of some results were lost with their workers"
                )
                return
            assert Y is not None  # have is used, and a decode uses at least one result
            estimate, found, moved = estimate_decode(
                self.code, Y, have, transform=self.transform, tau=self.tau
            )
            rep.suspects = found.flagged
            rep.consistency = {**rep.consistency, **found.scores}
            if found.flagged:
                self._warn_suspects(found.flagged, moved)
        rep.error_estimate = _num(estimate.overall)
        rep.block_errors = [_num(x) for x in estimate.per_block]
        rep.estimate_method = estimate.method
        self._warn(estimate, used)

    def fewer_results(self, steps: int = 3) -> list[tuple[int, float]]:
        """What a shorter wait would have given: the error estimates of decoding from the
        first m results to arrive, for m from one fewer than the decode used down to
        ``steps`` fewer (not below the code's minimum), from the sketches already here.

        For auto mode's calibration, after the job: ``[(m, estimate), ...]``; empty for
        an exact code or when a sketch is missing.
        """
        rep = self.job.report
        used = list(rep.returned)
        if self.code.exact or not used:
            return []
        have, Y = self._stack(used)
        if Y is None or len(have) != len(used):
            return []
        order = sorted(range(len(have)), key=lambda p: rep.arrival.get(have[p], math.inf))
        out = []
        for m in range(len(have) - 1, max(len(have) - 1 - steps, self.code.min_results - 1), -1):
            pos = sorted(order[:m])
            sub = [have[p] for p in pos]
            if self.code.is_exact(sub):
                out.append((m, 0.0))
            else:
                est = estimate_error(self.code, Y[pos], sub, transform=self.transform).overall
                if math.isfinite(est):
                    out.append((m, float(est)))
        return out

    def _warn_suspects(self, suspects: list[int], moved: float) -> None:
        """Results flagged as inconsistent were decoded in (their shift is already in the
        estimate, :func:`estimate_decode`): warn."""
        rep = self.job.report
        ratios = ", ".join(f"{i}: {rep.consistency.get(i, math.nan):.3g}" for i in suspects)
        self.job.warn(
            SuspectResultsWarning(
                f"the results of coded tasks {suspects} are inconsistent with the others "
                f"(leave-one-out ratio {ratios}; about 1 is consistent) and were decoded in: "
                f"they moved the answer by about {_fmt(moved)} relative (included in "
                "report.error_estimate). A worker may have returned a corrupted result; "
                + (
                    f"adversaries={self.adversaries} excluded {rep.excluded or 'none'}, "
                    "raise it to exclude more."
                    if self.adversaries
                    else "pass adversaries=k to locate and exclude up to k of them."
                )
            )
        )

    def _check_exact(self, estimate: ErrorEstimate, used: list[int]) -> None:
        """An exact code whose exactness rests on an assumption about f (Lagrange): check
        the decode against the spare results (:attr:`residual`, from the client's values or
        the decode task), raise :class:`InexactDecode` when they contradict it, and say
        "unchecked" when there was no spare result."""
        code, rep = self.code, self.job.report
        if code.assumption is None or estimate.method != "exact":
            return
        residual = self.residual
        if residual is None:  # no spare result: not a bare 0, which would claim a check
            estimate.method = "exact-unchecked"
            estimate.overall = math.nan
            estimate.per_block = np.full(code.K, math.nan)
            return
        rep.check_residual = residual
        tolerance = CHECK_TOLERANCE * max(1.0, code.amplification(used))
        if residual > tolerance:
            exc = InexactDecode(
                f"{code!r} decoded from {len(used)} results, {len(used) - code.min_results} "
                f"more than it needs, and they contradict its assumption that {code.assumption}:"
                f" relative residual {residual:.3g} (rounding gives below {tolerance:.1g}). "
                "Its decode would be wrong; use an approximate code (code='systematic-spline')"
                " or the degree of f (code_options={'degree': d})."
            )
            exc.residual = residual
            exc.report = rep
            raise exc

    def _warn(self, estimate: ErrorEstimate, used: list[int]) -> None:
        """Queue the warnings the decode deserves (the job emits them in the caller's
        thread when its result is taken)."""
        job, rep = self.job, self.job.report
        if estimate.method == "ill-conditioned":
            job.warn(
                RuntimeWarning(
                    f"{self.code!r} decoded from {len(used)} results whose points are badly "
                    f"spread (stragglers next to each other): the decode amplifies rounding "
                    f"errors by {self.code.amplification(used):.2g}, so the result may be far "
                    "from exact (report.error_estimate is None). Wait for more results, use "
                    "a smaller K, or a Berrut code."
                )
            )
            return
        if self.code.exact:
            return
        overall = estimate.overall
        if estimate.method == "unknown":
            few = len(used) < MIN_RESULTS
            self._warn_unknown(
                used, f"an estimate needs {MIN_RESULTS} results" if few else "no estimator"
            )
            return
        if estimate.method == "unreliable":
            self._warn_unknown(
                used,
                f"fewer than {MIN_CALIBRATION_POINTS} of the results can be checked against "
                "the others, or none from a position like a decoded block's, too few to "
                "vouch for an estimate; with K="
                f"{self.code.K} a systematic code is exact only when every systematic task "
                "returned",
            )
            return
        how = (
            "for an exact answer use code='repetition' (or 'lagrange' for a polynomial f), "
            "or a systematic code with wait=1.0; to get closer, raise n_coded or wait"
        )
        if (
            isinstance(job.policy, ErrorTarget)
            and job.policy.error is not None
            and not overall <= job.policy.error
        ):
            job.warn(
                ApproximationWarning(
                    f"wait=until(error={job.policy.error:g}) was not met: decoded from "
                    f"{len(used)} of N={self.code.N} results ({rep.trigger}) with an "
                    f"estimated relative error of {_fmt(overall)}; {how}"
                )
            )
            return
        limit = config.get("warn-error")
        if limit is not None and math.isfinite(overall) and overall > float(limit):
            job.warn(
                ApproximationWarning(
                    f"the decoded answer of {self.code!r} has an estimated relative error of "
                    f"{_fmt(overall)} (above bacc.warn-error={float(limit):g}), from "
                    f"{len(used)} of N={self.code.N} results; {how}. report.block_errors "
                    "has the figure per block."
                )
            )

    def _warn_unknown(self, used: list[int], why: str) -> None:
        """An approximate answer whose error could not be estimated is not passed on
        silently."""
        self.job.warn(
            ApproximationWarning(
                f"the decoded answer of {self.code!r} is approximate and its error could not "
                f"be estimated ({why}; decoded from {len(used)} of N={self.code.N} results, "
                f"{self.job.report.trigger}): report.error_estimate is None. For an exact "
                "answer use code='repetition' (or 'lagrange' for a polynomial f); for an "
                "estimate, raise n_coded or wait."
            )
        )

    def release(self) -> list[Future[Any]]:
        """Drop every sketch future; return those still pending (to cancel)."""
        pending = [f for f in self._futures.values() if f.status == "pending"]
        self._futures.clear()
        return pending


def estimate_decode(
    code: Code,
    Y: FloatArray,
    have: list[int],
    *,
    transform: Transform | None = None,
    tau: float = DEFAULT_TAU,
) -> tuple[ErrorEstimate, Screening, float]:
    """The error estimate a job reports for an approximate decode from ``have``.

    Pure NumPy on the results' sketches ``Y`` (``Y[l]`` is the sketch of result
    ``have[l]``): :func:`~dask_bacc.codes.estimate.estimate_error`, then the consistency
    check (:func:`~dask_bacc.codes.robust.detect_inconsistent`); results it flags were
    decoded in, so how far they moved the decode (with against without them) is added to
    the estimate, so that an undetected corruption cannot leave it far too low. Returns
    ``(estimate, screening, moved)``, ``moved`` the relative shift (0 without suspects).
    The benchmarks (``benchmarks/small_k.py``) call this to measure what users get.
    """
    estimate = estimate_error(code, Y, have, transform=transform)
    # also after adversaries= excluded what it located, and for a systematic set that
    # decodes exactly (a corrupted systematic result would be passed on as is)
    found = detect_inconsistent(code, Y, have, tau=tau)
    if not found.flagged:
        return estimate, found, 0.0
    suspects = found.flagged
    keep = [p for p, i in enumerate(have) if i not in set(suspects)]
    if not keep:
        return estimate, found, 0.0
    flat = Y.reshape(len(have), -1)
    with_all = code.decoding_matrix(have) @ flat
    without = code.decoding_matrix([have[p] for p in keep]) @ flat[keep]
    if transform is not None:  # row samples: compare as the user sees them
        inverse = InverseRows(transform, Y.shape[1:])
        with_all, without = inverse(with_all), inverse(without)
    shift = np.linalg.norm(with_all - without, axis=1)
    norm = np.linalg.norm(without, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(shift == 0, 0.0, shift / norm)
        moved = float(np.sqrt(np.sum(shift**2) / np.sum(norm**2)))
    estimate.per_block = np.sqrt(np.asarray(estimate.per_block) ** 2 + rel**2)
    estimate.overall = float(np.sqrt(estimate.overall**2 + moved**2))
    if estimate.method == "exact":
        estimate.method = "exact-but-suspect"
    return estimate, found, moved


def _fmt(x: float) -> str:
    return f"{x:.3g}" if math.isfinite(x) else "unknown"


# -- adversaries=: validation and defaults (called by submit_coded before submitting) ----
def check_adversaries(adversaries: object) -> int:
    """``adversaries`` as an int >= 0 (``None`` is 0); ``TypeError``/``ValueError`` otherwise."""
    if adversaries is None:
        return 0
    if isinstance(adversaries, bool) or not isinstance(adversaries, numbers.Integral):
        raise TypeError(f"adversaries must be an integer, got {type(adversaries).__name__}")
    if adversaries < 0:
        raise ValueError(f"adversaries must be >= 0, got {adversaries}")
    return int(adversaries)


def robust_max_blocks(n_workers: int, adversaries: int) -> int:
    """Default K for NumPy data with ``adversaries``: room for 2K + 2A - 1 results within
    the default wait fraction of the workers (the rest may straggle)."""
    fraction = float(config.get("wait.berrut"))
    return max(1, math.floor((fraction * n_workers - 2 * adversaries + 1) / 2))


def robust_n_coded(K: int, adversaries: int, n_workers: int, default: int) -> int:
    """Default N with ``adversaries``: 2K + 2A - 1 results needed, and as many spare tasks
    as the default wait allows (``N = ceil(need / bacc.wait.berrut)``), capped by the
    workers but never below the need (then :func:`robust_policy` explains the error)."""
    need = required_results(K, adversaries)
    fraction = float(config.get("wait.berrut"))
    return max(need, min(max(default, math.ceil(need / fraction)), n_workers))


def robust_policy(code: Code, policy: WaitPolicy, explicit: bool, adversaries: int) -> WaitPolicy:
    """Check that ``code`` and ``policy`` can locate ``adversaries`` corrupted results.

    ApproxIFER's locator needs ``2K + 2A - 1`` results: N must be at least that (plus one
    per straggler to tolerate, ``N >= 2K + S + 2A - 1``) and the wait must collect that
    many. A default wait is raised to it; an explicit one that waits for fewer is an error.
    """
    if not isinstance(code, InterpolatingCode):
        raise ValueError(
            "adversaries= is implemented for the interpolating codes (berrut, spline and "
            f"their systematic variants), not {type(code).__name__}"
        )
    need = required_results(code.K, adversaries)
    if code.N < need:
        raise ValueError(
            f"adversaries={adversaries} with K={code.K} needs N >= 2K + 2A - 1 = {need} coded "
            f"tasks (plus one per straggler to tolerate: N >= 2K + S + 2A - 1), got N={code.N}"
            "; pass n_coded (and enough workers) or fewer blocks"
        )
    if isinstance(policy, ErrorTarget):
        if policy.floor(code) < need:
            policy = dataclasses.replace(policy, min_results=need)
        return policy
    if policy.target(code) < need:
        if explicit:
            raise ValueError(
                f"adversaries={adversaries} with K={code.K} needs at least {need} results "
                f"(2K + 2A - 1) but wait= asks for {policy.target(code)}"
            )
        policy = FirstK(need, grace=policy.grace)
    return policy
