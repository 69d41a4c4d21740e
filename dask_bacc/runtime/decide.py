"""The decision core of a coded job: events in, actions out (no cluster, no asyncio).

A :class:`Decider` is fed what happens to the job's coded tasks (launched, landed, failed,
lost with their worker, rejected after a look at the result) and the clock; :meth:`step`
says what to do next: :class:`Decode` from a set of results, :class:`GiveUp` when no
decodable set can arrive any more, or nothing yet. :meth:`wake_in` says when the clock alone
could change that (a grace period or the timeout ending). The async shell in
:mod:`dask_bacc.runtime.job` only carries out its actions.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..codes import Code
from .wait import WaitPolicy

__all__ = ["Decider", "Decode", "GiveUp"]


@dataclass(frozen=True)
class Decode:
    """Decode from ``used`` (in arrival order); ``trigger`` says why now."""

    used: list[int]
    trigger: str


@dataclass(frozen=True)
class GiveUp:
    """No decodable set of results can be had: ``trigger`` says what ended the wait."""

    trigger: str
    usable: list[int]
    pending: list[int]


class Decider:
    """When to decode a coded job, from which results, and when to give up.

    Times are seconds since the job started. Triggers: ``"wait"`` (the wait policy is met
    and its grace period, if any, is over), ``"all"`` (an ``until`` policy: every result
    is in), ``"error"`` (the error estimate met an ``until`` target), ``"exhausted"``
    (nothing is pending: decode from what arrived) and ``"timeout"``.
    """

    def __init__(self, code: Code, policy: WaitPolicy, timeout: float | None = None):
        self.code = code
        self.policy = policy
        self.deadline = timeout
        self.launched_: list[int] = []
        self.pending: dict[int, None] = {}  # ordered set: launched, not yet answered
        self.usable: list[int] = []  # landed and still usable, in arrival order
        self.failed: dict[int, str] = {}
        self.arrival: dict[int, float] = {}
        self.target_met_at: float | None = None
        self.grace_until: float | None = None
        self.decoding: list[int] | None = None  # the results of a decode in flight
        #: decode only from a set that gives every block exactly (set by the job when f
        #: turned out not to be defined on coded shares)
        self.exact_only = False

    # -- events ---------------------------------------------------------------------------
    def launched(self, i: int) -> None:
        self.launched_.append(i)
        self.pending[i] = None

    def landed(self, i: int, now: float) -> bool:
        """Coded task ``i`` returned a result; False when it was already written off."""
        if i not in self.pending:
            return False
        del self.pending[i]
        self.arrival[i] = now
        self.usable.append(i)
        return True

    def erred(self, i: int, now: float, reason: str) -> bool:
        """Coded task ``i`` failed (raised, bad result, cancelled by someone else)."""
        if i not in self.pending:
            return False
        del self.pending[i]
        self.arrival[i] = now
        self.failed[i] = reason
        return True

    def lost(self, i: int, reason: str) -> bool:
        """Task ``i``'s worker left: a pending task never returns, a landed result is gone.
        True when a decode in flight used it (the shell must abandon that decode)."""
        if i in self.pending:
            del self.pending[i]
        elif i in self.usable:
            self.usable.remove(i)
        else:
            return False
        self.failed[i] = reason
        if self.decoding is not None and i in self.decoding:
            self.decoding = None
            return True
        return False

    def withdraw(self, i: int) -> None:
        """Stop waiting for task ``i`` (not a failure: e.g. another copy of it won)."""
        self.pending.pop(i, None)

    def rejected(self, i: int, reason: str) -> None:
        """A landed result turned out unusable (e.g. its shape differs from the others')."""
        if i in self.usable:
            self.usable.remove(i)
        self.failed[i] = reason
        if self.decoding is not None and i in self.decoding:
            self.decoding = None

    def decode_abandoned(self) -> None:
        """The decode in flight was dropped (its inputs changed): decide again."""
        self.decoding = None

    # -- decisions ------------------------------------------------------------------------
    def step(self, now: float, error_met: bool = False) -> Decode | GiveUp | None:
        """What to do at time ``now``; ``error_met``: an ``until`` error target is met."""
        if self.decoding is not None:
            return None
        trigger = None
        if self.exact_only:
            met = self.code.is_exact(self.usable)
        else:
            met = self.policy.is_met(self.usable, self.code)
        if met:
            trigger = self._after_grace(now)
            if trigger == "wait":  # until(): met only once every result is in
                trigger = getattr(self.policy, "met_trigger", "wait")
        elif error_met:
            trigger = "error"
        elif not self.pending:
            trigger = "exhausted"
        elif self.deadline is not None and now >= self.deadline:
            trigger = "timeout"
        if trigger is None:
            return None
        decodable = self.code.is_exact if self.exact_only else self.code.can_decode
        if not self.usable or not decodable(self.usable):
            return GiveUp(trigger, list(self.usable), list(self.pending))
        self.decoding = list(self.usable)
        return Decode(list(self.usable), trigger)

    def _after_grace(self, now: float) -> str | None:
        if self.target_met_at is None:
            self.target_met_at = now
        grace = self.policy.grace_for(self.code)
        if not grace or not self.pending or self.code.is_exact(self.usable):
            return "wait"
        if self.grace_until is None:
            self.grace_until = now + grace * self.target_met_at
        return "wait" if now >= self.grace_until else None

    def wake_in(self, now: float) -> float | None:
        """Seconds until the clock alone may change :meth:`step`'s answer (None: never)."""
        ends = [t for t in (self.deadline, self.grace_until) if t is not None]
        if self.decoding is not None or not ends:
            return None
        return max(0.0, min(ends) - now)

    def straggled(self) -> list[int]:
        """Launched tasks that neither returned nor failed (withdrawn ones included)."""
        return sorted(i for i in self.launched_ if i not in self.arrival and i not in self.failed)
