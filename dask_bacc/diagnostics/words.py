"""A coded job's report in words: the same words in its reprs and on the ``/bacc`` page,
so one job tells one story wherever it is read."""

from __future__ import annotations

__all__ = ["METHODS", "TRIGGERS", "describe_method", "describe_trigger"]

#: what started a job's decode (``JobReport.trigger``), in words: the reprs and the
#: ``/bacc`` page say it this way
TRIGGERS = {
    "wait": "the wait target was met",
    "exact": "every block's own data was in (exact, before the wait target)",
    "all": "every result was in",
    "error": "the error estimate met its target",
    "exhausted": "no more results could arrive",
    "timeout": "the timeout",
    "exact-impossible": "no exact decode was possible any more",
}

#: how a job's error estimate was made (``JobReport.estimate_method``), in words
METHODS = {
    "exact": "the decode is exact",
    "embedded-fh1": "against the degree-1 Floater-Hormann interpolant of the same results",
    "embedded-fh3": "against the degree-3 Floater-Hormann interpolant of the same results",
    "ill-conditioned": "the decode is too ill-conditioned to estimate",
    "unreliable": "too few results to check an estimate against",
    "exact-unchecked": "exact if f is a polynomial of the code's degree (no spare result "
    "to check it)",
    "unknown": "no estimate could be made",
}


def describe_trigger(trigger: str | None) -> str:
    """What started the decode, in words (``"-"`` before it)."""
    if trigger is None:
        return "-"
    return TRIGGERS.get(trigger, trigger)


def describe_method(method: str | None) -> str:
    """The error estimate's method in words, with its name (as in ``estimate_method`` and
    docs/accuracy.md): ``"embedded-fh1: against the degree-1 ..."``."""
    if method is None:
        return "-"
    words = METHODS.get(method)
    return method if words is None else f"{method}: {words}"
