"""The decision core of a coded job: events in, actions out (no cluster, no asyncio).

A :class:`Decider` is fed what happens to the job's coded tasks (launched, landed, failed,
lost with their worker, rejected after a look at the result) and the clock; :meth:`step`
says what to do next: :class:`Decode` from a set of results, :class:`GiveUp` when no
decodable set can arrive any more, or nothing yet. :meth:`wake_in` says when the clock alone
could change that (a grace period or the timeout ending): never an instant at which it would
not act, so a shell that sleeps until then cannot spin. The async shell in
:mod:`dask_bacc.runtime.job` only carries out its actions.
"""

from __future__ import annotations

import math
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
    and its grace period, if any, is over), ``"exact"`` (met before its target count
    because every block's own data is in: a systematic code's shortcut), ``"all"`` (an
    ``until`` policy: every result is in), ``"error"`` (the error estimate met an
    ``until`` target), ``"deadline"`` (an ``until(deadline=...)`` policy's deadline
    passed with enough results in), ``"exhausted"`` (nothing is pending: decode from what arrived),
    ``"exact-impossible"`` (only an exact decode will do, :attr:`exact_only`, and some
    block's own shares are all gone: give up) and ``"timeout"``.
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
        """Coded task ``i`` launched (again, while pending: one task, still pending)."""
        if i not in self.pending:
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
        self.pending.pop(i, None)  # (not landed yet: written off all the same)
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
        if self._met():
            trigger = self._after_grace(now)
            if trigger == "wait" and self._exact_early():
                trigger = "exact"
            elif trigger == "wait":  # until(): met only once every result is in
                trigger = getattr(self.policy, "met_trigger", "wait")
        elif error_met and not self.exact_only:  # an estimate's target: approximate only
            trigger = "error"
        elif self._deadline_met(now):
            trigger = "deadline"
        elif not self.pending:
            trigger = "exhausted"
        elif self.exact_only and not self._exact_possible():
            trigger = "exact-impossible"  # a block's own shares are all gone
        if trigger is None and self.deadline is not None and now >= self.deadline:
            trigger = "timeout"  # (also ends a grace period)
        if trigger is None:
            return None
        decodable = self.code.is_exact if self.exact_only else self.code.can_decode
        if not self.usable or not decodable(self.usable):
            return GiveUp(trigger, list(self.usable), list(self.pending))
        self.decoding = list(self.usable)
        return Decode(list(self.usable), trigger)

    def _met(self) -> bool:
        """Whether the results in hand meet the wait policy (or give every block exactly,
        when only an exact decode will do)."""
        if self.exact_only:
            return self.code.is_exact(self.usable)
        return self.policy.is_met(self.usable, self.code)

    def _policy_deadline(self) -> float | None:
        """The wait policy's deadline (``until(deadline=...)``), where it applies: to
        approximate codes, when an approximate decode is allowed."""
        if self.code.exact or self.exact_only:
            return None
        return getattr(self.policy, "deadline", None)

    def _deadline_met(self, now: float) -> bool:
        """The policy's deadline has passed and the results in are enough to decode from
        (at least its floor: a deadline never decodes from fewer)."""
        end = self._policy_deadline()
        if end is None or now < end:
            return False
        floor = self.policy.floor(self.code) if hasattr(self.policy, "floor") else 1
        return len(self.usable) >= floor and self.code.can_decode(self.usable)

    def _exact_early(self) -> bool:
        """Whether the policy is met before its target count because every block's own
        data is in (a systematic code's shortcut): the report says ``"exact"``, not
        ``"wait"``."""
        return (
            not self.code.exact
            and len(self.usable) < self.policy.target(self.code)
            and self.code.is_exact(self.usable)
        )

    def _exact_possible(self) -> bool:
        """Whether the shares of real data still in hand or pending can cover every block
        (only they decode exactly)."""
        rows = self.code.data_rows()
        alive = {rows[i] for i in (*self.usable, *self.pending) if i in rows}
        return len(alive) == self.code.K

    def _grace_applies(self) -> bool:
        """Whether a met policy still waits out a grace period (else it decodes at once)."""
        grace = self.policy.grace_for(self.code)
        return bool(grace) and bool(self.pending) and not self.code.is_exact(self.usable)

    def _after_grace(self, now: float) -> str | None:
        if self.target_met_at is None:
            self.target_met_at = now
        if not self._grace_applies():
            return "wait"
        if self.grace_until is None:
            self.grace_until = now + self.policy.grace_for(self.code) * self.target_met_at
        return "wait" if now >= self.grace_until else None

    def wake_in(self, now: float) -> float | None:
        """Seconds until the clock alone makes :meth:`step` act (None: only an event can).

        The instants that matter are the end of a grace period, while the policy is met,
        and the timeout, while tasks are pending. 0 only when :meth:`step` would act at
        ``now`` already (a deadline passed between the two calls): a state in which
        :meth:`step` waits is never asked to wake at once, over and over (a grace period
        that ended before a result was rejected no longer counts, issue 23).
        """
        if self.decoding is not None:
            return None  # the decode in flight ends (or is abandoned) first
        ends: list[float] = []
        if self.deadline is not None and self.pending:
            ends.append(self.deadline)
        end = self._policy_deadline()
        if end is not None and self._deadline_met(max(now, end)):
            # the results in suffice at the deadline (else only a landing result can help)
            if end <= now:
                return 0.0
            ends.append(end)
        if self._met():
            if not self._grace_applies():
                return 0.0  # step decodes now
            grace_until = self.grace_until
            if grace_until is None:  # met since step last ran: the grace starts now
                met_at = now if self.target_met_at is None else self.target_met_at
                grace_until = now + self.policy.grace_for(self.code) * met_at
            ends.append(grace_until)
        if not ends:
            return None
        end = min(ends)
        if end <= now:
            return 0.0
        wake = end - now
        while now + wake < end:  # so that now + wake_in(now) reaches the instant, in floats
            wake = math.nextafter(wake, math.inf)
        return wake

    def straggled(self) -> list[int]:
        """Launched tasks that neither returned nor failed (withdrawn ones included)."""
        return sorted(i for i in self.launched_ if i not in self.arrival and i not in self.failed)
