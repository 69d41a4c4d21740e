"""How a coded job judges its failed tasks: f's error on a block's own data is the user's
(raised, as plain Dask raises it), on a mix of blocks an erasure once f is seen to work on
real data; NaN/inf and values outside ``transform=`` on mixed shares mean f is not defined
on them (a warning), and NaN/inf on a block's own data is an answer no mixing code can
give (a ValueError). The base of :class:`~.job.CodedJob` that holds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..codes import Code
from ..exceptions import ApproximationWarning
from . import _dist
from .decide import Decider
from .handle import JobHandle
from .worker import (
    EvalFailure,
)

if TYPE_CHECKING:
    from distributed import Future

__all__ = ["JudgingJob"]


class JudgingJob(JobHandle):
    """The failure verdicts of a coded job (the attributes are the job's)."""

    code: Code
    decider: Decider
    workers: dict[int, str]
    domain_failure: bool
    _chunks: list[Future[Any]]
    _cause: BaseException | None
    _data_rows: dict[int, int]
    _mixed_failed: list[int]
    _on_domain: str
    _on_error: str
    _unjudged: dict[int, EvalFailure]

    async def _why_cancelled(self, i: int, fut: Future[Any]) -> str:
        """Why eval ``i`` ended without a result or an exception: its worker left, an input
        chunk it reads went with the workers that held it, else someone else's doing."""
        if self.workers[i] not in await _dist.running_workers(self.client):
            return f"worker {self.workers[i]} left before returning"
        if any(c.status in ("lost", "cancelled") for c in self._chunks):
            return f"task {fut.status}: an input block it reads was lost with worker(s) that left"
        return f"task {fut.status} (by another client, or its input data was lost)"

    def _failed(self, i: int, now: float, failure: EvalFailure) -> bool:
        """Coded task ``i`` returned ``failure``: func raised, or its result is NaN/inf or
        not numeric. f's exception on a block's own data fails the job with it, as in
        plain Dask (``bacc.on-error``); on a mixed share it is an erasure once f is seen
        to work on real data, the user's error otherwise. False if ``i`` was written off."""
        block = self._data_rows.get(i)
        where = f"block {block}'s own data" if block is not None else "a mix of blocks"
        if failure.kind == "unsupported":  # f's output type: the same on every share
            raise TypeError(failure.reason.removeprefix("InvalidResult: "))
        if failure.kind == "nonfinite" and block is not None:
            # f's NaN/inf on real data is plain Dask's answer for that block, which no mix
            # of blocks can give: erased, the block would be decoded from the other shares
            # as if f were finite there (a confident wrong answer)
            raise ValueError(
                f"func returned NaN or inf on block {block}'s own data (coded share {i} of "
                f"coded job {self.token}): plain Dask's answer has them there, and a code "
                "that mixes blocks cannot decode them. Use an exact code "
                "that copies blocks (code='repetition', 'hedged' or 'speculative'): it "
                "passes NaN and inf through as plain Dask does."
            )
        reason = failure.reason
        if failure.kind in ("raised", "domain"):  # f's error, or f's output outside transform=
            if self._cause is None:
                self._cause = failure.exception
            if self._on_error == "raise" and block is not None:
                raise self._user_error(i, failure, where)
        if failure.kind == "raised":
            reason = f"func raised on coded share {i} ({where}): {failure.reason}"
        if not self.decider.erred(i, now, reason):
            return False
        # with bacc.on-error "erase" an exception is a worker's fault, not f's: only
        # NaN/inf or a value outside the transform then tells that f is not defined on
        # coded blocks
        counts = failure.kind in ("nonfinite", "domain") or (
            failure.kind == "raised" and self._on_error == "raise"
        )
        if block is None and counts:
            self._mixed_failed.append(i)
            if self.domain_failure:
                self.report.domain_failure.append(i)
            elif failure.kind == "raised":
                self._unjudged[i] = failure
                # f's error or the mixing's? Only a share of real data can tell: decode
                # from nothing but real data until one has answered (the verdict must not
                # depend on which results came first)
                self.decider.exact_only = True
        self._judge()
        return True

    def _user_error(self, i: int, failure: EvalFailure, where: str) -> BaseException:
        """func's own exception (or a ``RuntimeError`` naming it, when it did not pickle),
        with a note on where it was raised."""
        exc = failure.exception
        if failure.kind == "domain":  # f's result on real data, outside transform=
            exc = ValueError(failure.reason.removeprefix("InvalidResult: "))
        elif exc is None:
            exc = RuntimeError(f"func raised on coded share {i}: {failure.reason}")
        note = (
            f"raised by func on coded share {i} of coded job {self.token} ({where}); "
            "bacc.on-error='erase' treats an exception on a coded share as an erasure"
        )
        add_note = getattr(exc, "add_note", None)  # Python >= 3.11
        if add_note is not None and note not in getattr(exc, "__notes__", ()):
            add_note(note)
        return exc

    def _judge(self) -> None:
        """Once func succeeded on a share of real data, the mixed shares that raised or
        gave NaN/inf show that f is not defined on coded blocks: warn once, erase them,
        and (``bacc.on-domain-failure: exact``) decode only from real data."""
        if not self._mixed_failed or self.domain_failure:
            return
        if not any(i in self._data_rows for i in self.decider.usable):
            return
        self.domain_failure = True
        self._unjudged.clear()  # f works on real data: those were the mixing's doing
        covered = set(self._data_rows.values()) >= set(range(self.code.K))
        exact = self._on_domain == "exact" and covered
        self.decider.exact_only = exact  # (it held the decode while unjudged)
        what = (
            "the job decodes from the shares of real data only (exact), as "
            "bacc.on-domain-failure='exact' asks"
            if exact
            else "their results are erased and the job decodes from the rest"
        )
        self.warn(
            ApproximationWarning(
                f"func failed (raised, returned NaN/inf or a value outside transform=) on "
                f"coded share(s) {sorted(self._mixed_failed)} that mix blocks, while it "
                "succeeded on shares of real data: f is not defined on coded blocks (e.g. "
                f"log, sqrt or a division outside the data's range); {what}. Coded shares protect "
                "this f only through its exact copies: use code='repetition' or "
                "'speculative'."
            )
        )
        self.report.domain_failure = sorted(self._mixed_failed)

    def _raise_unjudged(self) -> None:
        """``bacc.on-error: raise``: func raised on a mixed share and no share of real data
        has shown that it works on the data: that exception is the user's."""
        if self._unjudged and not self.domain_failure:
            i, failure = next(iter(self._unjudged.items()))
            raise self._user_error(
                i, failure, "a mix of blocks, and func succeeded on no share of real data"
            )
