"""Wait policies: when a coded job has enough results to decode."""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from dataclasses import dataclass

from .. import config
from ..codes import Code

__all__ = [
    "ErrorTarget",
    "FirstK",
    "Fraction",
    "WaitPolicy",
    "check_timeout",
    "resolve_timeout",
    "resolve_wait",
    "until",
]


class WaitPolicy:
    """Decide when to decode. Subclasses give the number of usable results to wait for.

    Decoding also requires the returned set to be decodable by the code (an exact code needs
    its recovery threshold; repetition needs a copy of every block). A set that is already
    exact decodes at once (see :meth:`is_met`), and a job whose wait target can no longer be
    reached (too many failures) decodes from everything that arrived, if that is decodable.
    """

    #: Once the target is met, keep collecting results for ``grace`` times the time it took
    #: to meet it (approximate codes only): results that arrive in the same burst make the
    #: estimate better, while stragglers are far behind. 0 decodes at the target at once.
    grace: float = 0.0
    #: Decode before the target once the results give every block exactly (a systematic
    #: code's shortcut). The default waits do; a ``wait=`` the caller gave is kept to
    #: (its extra results screen the systematic ones: a corrupted one would be decoded
    #: as "exact" otherwise).
    early_exact: bool = True

    def target(self, code: Code) -> int:
        """Usable results to wait for with this code (clipped to ``[min_results, N]``)."""
        raise NotImplementedError

    def grace_for(self, code: Code) -> float:
        """The grace factor that applies to ``code`` (none for exact codes)."""
        return 0.0 if code.exact else float(self.grace)

    def is_met(self, returned: Collection[int], code: Code) -> bool:
        """Whether the results in ``returned`` are enough to decode now.

        Met at the target count if the set is decodable, or, with :attr:`early_exact`,
        earlier when the set already gives every block exactly (systematic Berrut once all
        K systematic tasks returned).
        """
        returned = list(returned)
        if code.enough(returned, self.target(code)):
            return True
        # an approximate (systematic) code whose set is exact; an exact code waits for
        # its target (Lagrange's default includes a spare result to check the decode)
        return self.early_exact and not code.exact and code.is_exact(returned)

    def validate(self, code: Code) -> None:
        """Raise ``ValueError`` if the code can never decode from what this policy waits for."""


@dataclass(frozen=True)
class FirstK(WaitPolicy):
    """Decode after the first ``k`` usable results."""

    k: int
    grace: float = 0.0
    early_exact: bool = True

    def __post_init__(self) -> None:
        _check_grace(self.grace)
        if isinstance(self.k, bool) or not isinstance(self.k, numbers.Integral):
            raise TypeError(f"wait count must be an integer, got {self.k!r}")
        if self.k < 1:
            raise ValueError(f"wait must be >= 1 result, got {self.k}")

    def target(self, code: Code) -> int:
        return int(self.k)

    def validate(self, code: Code) -> None:
        if self.k > code.N:
            raise ValueError(f"wait={self.k} exceeds the number of coded tasks N={code.N}")
        if self.k < code.min_results:
            raise ValueError(
                f"{type(code).__name__} cannot decode from {self.k} results: it needs at "
                f"least {code.min_results}; pass wait >= {code.min_results}"
            )


@dataclass(frozen=True)
class Fraction(WaitPolicy):
    """Decode after ``ceil(fraction * N)`` usable results (at least the code's minimum)."""

    fraction: float
    grace: float = 0.0
    early_exact: bool = True

    def __post_init__(self) -> None:
        _check_grace(self.grace)
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, numbers.Real):
            raise TypeError(f"wait fraction must be a float, got {self.fraction!r}")
        if not 0 < self.fraction <= 1:
            raise ValueError(f"wait fraction must lie in (0, 1], got {self.fraction}")

    def target(self, code: Code) -> int:
        return max(1, math.ceil(self.fraction * code.N - 1e-9))

    def validate(self, code: Code) -> None:
        if self.target(code) < code.min_results:
            raise ValueError(
                f"wait={self.fraction} means {self.target(code)} of N={code.N} results, but "
                f"{type(code).__name__} needs at least {code.min_results}"
            )


@dataclass(frozen=True)
class ErrorTarget(WaitPolicy):
    """Decode once the estimated relative error is at most ``error``, or at a deadline.

    The job re-estimates the error of decoding from the results that landed each time new
    ones arrive (from small sketches of them, see docs/accuracy.md) and decodes as soon as
    the estimate over the whole output is at most ``error``, or ``deadline`` seconds after
    the job started, or when every result is in, or at the job's ``timeout``, whichever
    comes first; ``report.trigger`` says which (``"error"``, ``"deadline"``, ``"all"``,
    ``"timeout"``; ``"exhausted"`` when failures left nothing more to wait for). Exact
    codes decode as soon as the set is decodable (their error is 0 then; a deadline does
    not make them answer earlier).

    A deadline that passes before ``min_results`` decodable results are in decodes as soon
    as they are: the deadline never decodes from fewer.

    Parameters
    ----------
    error : float, optional
        Target relative error, e.g. 0.01 for 1% (None: only the deadline, or every result).
    min_results : int, optional
        Never decode on the estimate or at the deadline from fewer results (default K, the
        number of blocks; at least 3): with very few points the estimate itself is
        unreliable, and the decode too.
    deadline : float, optional
        Seconds after the job started at which to decode from the results in.
    """

    error: float | None
    min_results: int | None = None
    grace: float = 0.0
    deadline: float | None = None

    #: ``report.trigger`` when the policy is met by every result being in
    met_trigger = "all"

    def __post_init__(self) -> None:
        if self.error is None and self.deadline is None:
            raise ValueError("until() needs an error target, a deadline or both")
        for name in ("error", "deadline"):
            v = getattr(self, name)
            real = isinstance(v, numbers.Real) and not isinstance(v, bool)
            if v is not None and not (real and 0 < float(v) < math.inf):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        m = self.min_results
        if m is not None and (isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1):
            raise ValueError(f"min_results must be an integer >= 1, got {m!r}")
        _check_grace(self.grace)

    def target(self, code: Code) -> int:
        # exact codes: the threshold, plus Lagrange's spare result that checks the decode
        return min(code.N, code.min_results + code.check_spare) if code.exact else code.N

    def is_met(self, returned: Collection[int], code: Code) -> bool:
        """Every result is in (approximate codes; an exact set of a systematic code is met
        by its estimate, 0, as trigger ``"error"``), or an exact code can decode."""
        if code.exact:
            return super().is_met(returned, code)
        return code.enough(list(returned), self.target(code))

    def floor(self, code: Code) -> int:
        """Fewest results the job may decode from on the strength of the estimate."""
        if code.exact:
            return code.min_results
        m = code.K if self.min_results is None else int(self.min_results)
        return min(code.N, max(m, code.min_results, 3))

    def validate(self, code: Code) -> None:
        if self.min_results is not None and self.min_results > code.N:
            raise ValueError(
                f"min_results={self.min_results} exceeds the number of coded tasks N={code.N}"
            )


def until(
    error: float | None = None,
    *,
    deadline: float | None = None,
    min_results: int | None = None,
) -> ErrorTarget:
    """Wait policy: decode as soon as the estimated relative error is at most ``error``,
    or ``deadline`` seconds after the job started.

    ``map_coded(f, X, wait=dask_bacc.until(error=0.01))`` decodes once the error estimate
    is below 1%, or when every result is in, or at ``timeout``;
    ``wait=dask_bacc.until(deadline=0.5)`` decodes an approximate code from the results in
    half a second after the job started (from at least ``min_results``, default K). See
    :class:`ErrorTarget`.
    """
    return ErrorTarget(error, min_results=min_results, deadline=deadline)


def _check_grace(grace: float) -> None:
    # a grace of inf (or NaN) would hold a decode for ever once its target is met
    if isinstance(grace, bool) or not isinstance(grace, numbers.Real) or not 0 <= grace < math.inf:
        raise ValueError(f"grace must be a finite number >= 0, got {grace!r}")


def check_timeout(timeout: object, name: str = "timeout") -> float | None:
    """``timeout`` as seconds: None (no limit), or a finite number > 0.

    NaN compares false with everything, so a NaN timeout would never fire and a job's loop
    would spin for ever; ``inf`` means no limit and is spelled None. Durations such as
    ``"10s"`` (as in the config) are parsed with :func:`dask.utils.parse_timedelta`.
    """
    if timeout is None:
        return None
    if isinstance(timeout, str):
        from dask.utils import parse_timedelta

        try:
            timeout = parse_timedelta(timeout, default="s")
        except (ValueError, KeyError) as exc:
            raise ValueError(f"{name} must be a number of seconds, got {timeout!r}") from exc
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"{name} must be a number of seconds, got {type(timeout).__name__}")
    seconds = float(timeout)
    if not 0 < seconds < math.inf:
        raise ValueError(
            f"{name} must be a positive, finite number of seconds (None for no limit), "
            f"got {timeout!r}"
        )
    return seconds


def resolve_timeout(timeout: object) -> float | None:
    """A job's timeout: ``timeout=`` if given, else ``bacc.timeout``; checked
    (:func:`check_timeout`)."""
    if timeout is None:
        return check_timeout(config.get("timeout"), "bacc.timeout")
    return check_timeout(timeout)


def resolve_wait(wait: int | float | str | WaitPolicy | None, code: Code) -> WaitPolicy:
    """Turn the user's ``wait=`` into a policy and check that ``code`` can decode from it.

    Defaults: an approximate code waits for ``bacc.wait.<name>`` (Berrut and spline: a
    fraction of N, 0.75 out of the box; a fraction below 1 that rounds up to all N
    results, at a small N, waits for N - 1), then keeps collecting for ``bacc.wait.grace`` (0.2)
    times the time that took;
    exact codes wait for their recovery threshold (Lagrange: ``degree*(K-1)+1``, plus one
    spare result that checks the decode when N allows; repetition: a copy of every block;
    uncoded: all K). An explicit ``wait=k`` or
    ``wait=fraction`` has no grace and is waited for even when the systematic results
    give every block exactly before (they are screened against the others); pass
    ``FirstK(k, grace=...)`` for a grace, ``early_exact=True`` for the shortcut.
    """
    if wait is None:
        if code.exact:  # Lagrange: one spare result checks that f is a polynomial
            policy: WaitPolicy = FirstK(min(code.N, code.min_results + code.check_spare))
        else:
            policy = Fraction(
                float(config.get("wait").get(code.config_name, config.get("wait.other"))),
                grace=float(config.get("wait.grace")),
            )
            if policy.fraction < 1 and policy.target(code) >= code.N > code.min_results:
                # a small N (Berrut, 2 blocks on 4 workers: N = 3, ceil(0.75 * 3) = 3)
                # rounds a fraction below 1 up to every result: as slow as the slowest task
                policy = FirstK(code.N - 1, grace=policy.grace)
    elif isinstance(wait, WaitPolicy):
        policy = wait
    elif isinstance(wait, bool):
        raise TypeError("wait must be an int, a float in (0, 1] or a WaitPolicy, not a bool")
    elif isinstance(wait, numbers.Integral):
        policy = FirstK(int(wait), early_exact=False)
    elif isinstance(wait, numbers.Real):
        policy = Fraction(float(wait), early_exact=False)
    else:
        raise TypeError(
            "wait must be an int, a float in (0, 1], 'auto' or a WaitPolicy, "
            f"got {type(wait).__name__}"
        )
    policy.validate(code)
    return policy
