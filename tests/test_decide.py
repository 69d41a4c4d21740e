"""The decision core, without a cluster: every wait policy, failures, timeouts, grace."""

from __future__ import annotations

import copy

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dask_bacc.codes import get_code
from dask_bacc.runtime.decide import Decider, Decode, GiveUp
from dask_bacc.runtime.wait import ErrorTarget, FirstK, Fraction, resolve_wait, until


def launched(code, policy, timeout=None):
    d = Decider(code, policy, timeout)
    for i in range(code.N):
        d.launched(i)
    return d


def test_first_k_decodes_at_the_kth_result_and_lists_the_stragglers():
    code = get_code("berrut", 4, 8)
    d = launched(code, FirstK(6))
    for t, i in enumerate([3, 0, 7, 1, 5]):
        d.landed(i, t)
        assert d.step(t) is None
    d.landed(2, 5.0)
    action = d.step(5.0)
    assert action == Decode([3, 0, 7, 1, 5, 2], "wait")
    assert d.straggled() == [4, 6]
    assert d.step(6.0) is None  # one decode at a time
    d.decode_abandoned()
    assert isinstance(d.step(6.0), Decode)


def test_grace_period_waits_then_decodes_or_ends_when_all_arrived():
    code = get_code("berrut", 2, 4)
    d = launched(code, FirstK(2, grace=0.5))
    d.landed(0, 1.0)
    d.landed(1, 2.0)
    assert d.step(2.0) is None  # target met at t=2: grace until 3
    assert d.wake_in(2.0) == pytest.approx(1.0)
    d.landed(2, 2.5)
    assert d.step(2.5) is None
    assert d.step(3.0) == Decode([0, 1, 2], "wait")
    # every task answered: the grace period ends at once
    d2 = launched(code, FirstK(2, grace=10.0))
    for i in range(4):
        d2.landed(i, 1.0)
    assert d2.step(1.0) == Decode([0, 1, 2, 3], "wait")


def test_exact_codes_have_no_grace():
    code = get_code("repetition", 2, 4)
    d = launched(code, resolve_wait(None, code))
    d.landed(0, 1.0)
    d.landed(3, 1.0)
    assert d.step(1.0) == Decode([0, 3], "wait")


def test_failures_exhaust_and_give_up_with_the_reasons():
    code = get_code("lagrange", 3, 6, degree=2)  # needs 5
    d = launched(code, resolve_wait(None, code))
    for i in range(4):
        d.landed(i, 1.0)
    d.erred(4, 1.0, "ZeroDivisionError: boom")
    assert d.step(1.0) is None  # one still pending
    assert d.lost(5, "worker left") is False
    action = d.step(2.0)
    assert isinstance(action, GiveUp) and action.trigger == "exhausted"
    assert d.failed == {4: "ZeroDivisionError: boom", 5: "worker left"}


def test_exhausted_decodes_from_what_arrived_when_it_can():
    code = get_code("berrut", 4, 8)
    d = launched(code, FirstK(8))
    for i in range(5):
        d.landed(i, 1.0)
    for i in range(5, 8):
        d.erred(i, 1.0, "InvalidResult: NaN")
    assert d.step(1.0) == Decode([0, 1, 2, 3, 4], "exhausted")


def test_timeout_decodes_or_gives_up():
    code = get_code("berrut", 4, 8)
    d = launched(code, FirstK(8), timeout=5.0)
    d.landed(2, 1.0)
    assert d.step(4.9) is None
    assert d.wake_in(4.0) == pytest.approx(1.0)
    assert d.step(5.0) == Decode([2], "timeout")
    d = launched(code, FirstK(8), timeout=5.0)
    action = d.step(5.0)
    assert isinstance(action, GiveUp) and action.trigger == "timeout"
    assert action.pending == list(range(8))


def test_until_error_and_all():
    code = get_code("berrut", 4, 8)
    policy = ErrorTarget(0.01)
    d = launched(code, policy)
    for i in range(5):
        d.landed(i, 1.0)
    assert d.step(1.0) is None
    assert d.step(1.0, error_met=True) == Decode([0, 1, 2, 3, 4], "error")
    d = launched(code, policy)
    for i in range(8):
        d.landed(i, 1.0)
    assert d.step(1.0) == Decode(list(range(8)), "all")


def test_a_lost_result_abandons_the_decode_that_used_it():
    code = get_code("berrut", 2, 4)
    d = launched(code, FirstK(2))
    d.landed(0, 1.0)
    d.landed(1, 1.0)
    assert d.step(1.0) == Decode([0, 1], "wait")
    assert d.lost(1, "worker left holding the result") is True
    assert d.step(1.0) is None  # target no longer met
    d.landed(2, 2.0)
    assert d.step(2.0) == Decode([0, 2], "wait")
    d.rejected(2, "InvalidResult: shape")
    assert d.failed[2] == "InvalidResult: shape" and d.usable == [0]


def test_landing_twice_or_after_a_write_off_is_ignored():
    code = get_code("berrut", 2, 4)
    d = launched(code, FirstK(3))
    assert d.landed(0, 1.0) and not d.landed(0, 2.0)
    d.lost(1, "worker left")
    assert not d.landed(1, 3.0) and d.usable == [0]
    d.withdraw(2)
    assert 2 not in d.pending and 2 not in d.failed


events = st.lists(
    st.tuples(st.sampled_from(["land", "fail", "lose"]), st.integers(0, 11)), max_size=40
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    events=events,
    code_name=st.sampled_from(["berrut", "systematic-berrut", "repetition", "lagrange"]),
    wait=st.integers(1, 12),
)
def test_any_event_order_ends_in_one_sound_action(events, code_name, wait):
    K, N = 4, 12
    code = get_code(code_name, K, N)
    policy = resolve_wait(min(max(wait, code.min_results), N), code)
    d = launched(code, policy)
    now = 0.0
    decoded = None
    for kind, i in events:
        now += 1.0
        if kind == "land":
            d.landed(i, now)
        elif kind == "fail":
            d.erred(i, now, "x")
        else:
            d.lost(i, "gone")
        # invariants: a task is in at most one of pending, usable, failed
        assert not set(d.pending) & set(d.usable)
        assert not set(d.usable) & set(d.failed)
        assert len(d.usable) == len(set(d.usable))
        action = d.step(now)
        if isinstance(action, Decode):
            assert code.can_decode(action.used)
            assert set(action.used) <= set(range(N)) and not set(action.used) & set(d.failed)
            assert action.trigger in ("wait", "exhausted")
            decoded = action
            break
        if isinstance(action, GiveUp):
            assert not d.pending  # only once nothing more can arrive (no timeout set)
            assert not code.can_decode(d.usable)
            break
    else:
        if not d.pending:  # nothing more can arrive: the core always acts
            assert d.step(now) is not None
    if decoded is not None and decoded.trigger in ("wait", "exact"):
        assert policy.is_met(decoded.used, code)


def test_a_rejected_result_after_the_grace_period_does_not_ask_to_wake_at_once():
    """Issue 23 item 5: f's output shape depends on the values and one task straggles. The
    grace period ends, the decode rejects the (correct) systematic result, the policy is no
    longer met and a task is still pending: the core waits for an event (or the timeout),
    it must not answer "wake in 0 s" at every turn (the job's loop span a CPU forever)."""
    code = get_code("systematic-spline", 2, 4)  # rows 1 and 2 are the data blocks
    for timeout in (None, 10.0):
        d = launched(code, resolve_wait(None, code), timeout)  # 0.75 of N, grace 0.2
        for i in (1, 0, 3):
            d.landed(i, 1.0)
        assert d.step(1.0) is None  # target met at t=1: grace until 1.2
        assert d.wake_in(1.0) == pytest.approx(0.2)
        assert d.step(1.25) == Decode([1, 0, 3], "wait")
        d.rejected(1, "InvalidResult: shape (3,) differs from the others' (2,)")
        assert d.decoding is None and list(d.pending) == [2]
        for now in (1.5, 2.0, 5.0):
            assert d.step(now) is None
            assert d.wake_in(now) == (None if timeout is None else timeout - now)
        if timeout is not None:
            assert d.step(timeout) == Decode([0, 3], "timeout")


def test_the_timeout_ends_a_grace_period():
    code = get_code("berrut", 2, 4)
    d = launched(code, FirstK(2, grace=4.0), timeout=3.0)
    d.landed(0, 1.0)
    d.landed(1, 2.0)
    assert d.step(2.0) is None  # grace until 2 + 4 * 2 = 10, after the timeout
    assert d.wake_in(2.0) == 1.0
    assert d.step(3.0) == Decode([0, 1], "timeout")


# the property below: small codes, so that random events meet the policies often
_CODES = [
    ("systematic-spline", 2, 4, {}),
    ("systematic-spline", 3, 5, {}),
    ("berrut", 2, 4, {}),
    ("repetition", 2, 4, {}),
    ("lagrange", 2, 4, {"degree": 2}),
    ("uncoded", 2, None, {}),
]
_POLICIES = [
    None,  # the default for the code (approximate codes: 0.75 of N with a grace of 0.2)
    FirstK(2),
    FirstK(3, grace=0.5),
    Fraction(0.5, grace=2.0),
    Fraction(1.0, grace=0.25),
    until(error=0.01),
    ErrorTarget(0.01, min_results=3, grace=1.0),
    until(deadline=0.75),
    until(error=0.01, deadline=2.0, min_results=2),
]
_TASK_EVENTS = ["land"] * 4 + ["fail", "lose", "reject", "reject", "withdraw"]
_EVENT = st.one_of(
    st.tuples(st.sampled_from(_TASK_EVENTS), st.integers(0, 4)),
    st.tuples(st.just("tick"), st.sampled_from([0.125, 0.5, 1.0, 3.0])),
    st.tuples(st.sampled_from(["sleep", "abandon", "error-met", "exact-only"]), st.just(0)),
)


# issue 23's case: the grace period ends, the decode rejects a result, a task is pending
_ISSUE_23 = [("tick", 1.0), ("land", 1), ("land", 0), ("land", 3), ("sleep", 0), ("reject", 0)]
# a grace period that would end after the timeout
_GRACE_PAST_TIMEOUT = [("land", 0), ("tick", 1.0), ("land", 1)]


def _acts(d: Decider, now: float) -> bool:
    """Whether ``step(now)`` would act, without changing ``d`` (step only assigns
    attributes: a shallow copy keeps the original as it was)."""
    return copy.copy(d).step(now) is not None


@settings(max_examples=400, deadline=None)
@example(code_index=0, policy_index=0, timeout=None, events=_ISSUE_23)
@example(code_index=2, policy_index=3, timeout=2.0, events=_GRACE_PAST_TIMEOUT)
@given(
    code_index=st.integers(0, len(_CODES) - 1),
    policy_index=st.integers(0, len(_POLICIES) - 1),
    timeout=st.sampled_from([None, None, 0.5, 2.0, 6.0]),
    events=st.lists(_EVENT, max_size=30),
)
def test_no_state_asks_to_wake_at_once_without_acting(code_index, policy_index, timeout, events):
    """Issue 23 item 5, "no busy loop, no hang", over random event orders: in every state
    either step() acts, or wake_in() is None (only an event can change the answer: the
    clock alone never makes it act) or a positive delay after which the clock alone makes
    it act, and not before. Past the deadline the core always acts; with nothing
    decodable in hand it gives up."""
    name, K, N, options = _CODES[code_index]
    code = get_code(name, K, N, **options)
    policy = _POLICIES[policy_index]
    if policy is None:
        policy = resolve_wait(None, code)
    try:
        policy.validate(code)
        assert policy.target(code) <= code.N
    except (ValueError, AssertionError):
        return
    d = launched(code, policy, timeout)
    now = 0.0
    for kind, arg in events:
        error_met = False
        if kind == "tick":
            now += arg
        elif kind == "sleep":  # the shell sleeps until the core's wake-up time
            wake = d.wake_in(now)
            if wake is not None:
                now += wake
        elif kind == "error-met":
            error_met = isinstance(policy, ErrorTarget)
        elif kind == "abandon":
            d.decode_abandoned()
        elif kind == "exact-only":  # f turned out not to be defined on coded shares
            d.exact_only = True
        elif arg < code.N:
            i = arg
            if kind == "land":
                d.landed(i, now)
            elif kind == "fail":
                d.erred(i, now, "x")
            elif kind == "lose":
                d.lost(i, "gone")
            elif kind == "reject":  # mostly a landed result, as in the job
                j = d.usable[i % len(d.usable)] if d.usable and i % 4 else i
                d.rejected(j, "InvalidResult: shape")
            else:
                d.withdraw(i)
        assert not set(d.pending) & set(d.usable)
        assert not set(d.usable) & set(d.failed)
        assert not set(d.pending) & set(d.failed)
        decoding = d.decoding is not None
        action = d.step(now, error_met=error_met)
        if decoding:
            assert action is None  # one decode at a time
        elif d.deadline is not None and now >= d.deadline:
            assert action is not None, "past the deadline the core acts"
            decodable = code.is_exact if d.exact_only else code.can_decode
            if not d.usable or not decodable(d.usable):
                assert isinstance(action, GiveUp)
        if isinstance(action, GiveUp):
            return  # the job raises InsufficientResults
        if isinstance(action, Decode):
            assert set(action.used) == set(d.usable) and code.can_decode(action.used)
            continue  # the decode is in flight; later events may abandon it
        wake = d.wake_in(now)
        if wake is None:  # only an event can make it act: not the clock, however late
            assert not _acts(d, now + 1e6)
            continue
        assert wake > 0, f"asked to wake at once, but step() waits (state {vars(d)})"
        assert not _acts(d, now + wake / 2)
        assert _acts(d, now + wake), "woken up, the core must act"


def test_plan_backups_is_the_speculative_rule():
    from dask_bacc.runtime.launch import plan_backups
    from dask_bacc.runtime.speculative import Speculation

    rule = Speculation.spark(min_runtime=0.0)  # 3x the median once 90% of K finished
    K = 4
    launched = dict.fromkeys(range(K), 0.0)
    arrival = {1: 1.0, 2: 1.0, 3: 1.0}
    # three of four done in 1 s: block 0 is backed up once it has run more than 3 s

    def plan(*args):
        p = plan_backups(K, rule, *args)
        return p.losers, p.blocks

    assert plan([1, 2, 3], [0], launched, arrival, 2.9) == ([], [])
    assert plan([1, 2, 3], [0], launched, arrival, 3.1) == ([], [0])
    # too few finished to arm the rule, but a failed block (no copy running) at once
    assert plan([1], [0, 2], launched, {1: 1.0}, 10.0) == ([], [3])
    # backed up already: not again; the first copy to land makes the other a loser
    launched[K + 0] = 3.1
    arrival[K + 0] = 3.5
    assert plan([1, 2, 3, K + 0], [0], launched, arrival, 4.0) == ([0], [])


def test_the_old_name_of_error_target_still_works_with_a_warning():
    import dask_bacc

    with pytest.warns(FutureWarning, match="renamed dask_bacc.ErrorTarget"):
        old = dask_bacc.UntilError
    assert old is dask_bacc.ErrorTarget
    assert isinstance(dask_bacc.until(0.01), dask_bacc.ErrorTarget)


def test_exact_only_ignores_an_error_target_and_gives_up_once_exactness_is_impossible():
    """Review of issue 23: an until() target met while only an exact decode will do gave
    up with the real share still pending; and with a block's own share gone the job
    waited for every mixed share before giving up."""
    code = get_code("systematic-spline", 2, 4)
    rows = code.data_rows()
    real = sorted(rows)
    mixed = [i for i in range(4) if i not in rows]
    d = Decider(code, until(2.0))
    for i in range(4):
        d.launched(i)
    d.exact_only = True
    d.landed(real[0], 0.1)
    d.landed(mixed[0], 0.1)
    assert d.step(0.2, error_met=True) is None  # the other real share is still pending
    d.erred(real[1], 0.3, "NaN/inf on its own data")
    action = d.step(0.3)
    assert isinstance(action, GiveUp) and action.trigger == "exact-impossible"
    assert mixed[1] in action.pending  # given up without waiting for it


def test_a_deadline_decodes_from_the_results_in_but_never_from_fewer_than_its_floor():
    code = get_code("systematic-spline", 4, 8)
    d = launched(code, until(deadline=1.0))  # floor: K = 4 results
    for t, i in enumerate([0, 5, 2]):
        d.landed(i, 0.1 * t)
    assert d.step(0.5) is None
    assert d.wake_in(0.5) is None  # 3 results: the deadline alone would not decode
    d.landed(7, 0.6)
    assert d.wake_in(0.6) == pytest.approx(0.4)  # 4 results: the deadline wakes the job
    assert d.step(1.0) == Decode([0, 5, 2, 7], "deadline")
    assert d.straggled() == [1, 3, 4, 6]
    late = launched(code, until(deadline=1.0))
    for t, i in enumerate([0, 5, 2]):
        late.landed(i, 0.1 * t)
    assert late.step(1.0) is None  # passed with 3 results: never decoded from fewer than 4
    assert late.wake_in(1.0) is None  # only a landing result can meet it now
    late.landed(6, 1.2)
    assert late.step(1.2) == Decode([0, 5, 2, 6], "deadline")


def test_a_deadline_does_not_hurry_an_exact_code_or_an_exact_only_job():
    rep = get_code("repetition", 2, 4)
    d = launched(rep, until(deadline=0.5))
    d.landed(0, 0.1)
    assert d.step(5.0) is None and d.wake_in(5.0) is None  # block 1 missing: no answer
    d.landed(3, 6.0)
    assert d.step(6.0) == Decode([0, 3], "all")  # (an until policy's trigger)
    spline = get_code("systematic-spline", 2, 4)
    d = launched(spline, until(deadline=0.5, min_results=2))
    d.exact_only = True  # f is not defined on coded shares: only real data will do
    d.landed(3, 0.1)
    d.landed(2, 0.2)
    assert d.step(1.0) is None


@pytest.mark.parametrize(
    "kwargs", [{}, {"deadline": 0}, {"deadline": -1.0}, {"deadline": True}, {"error": 0}]
)
def test_until_needs_a_positive_error_or_deadline(kwargs):
    with pytest.raises(ValueError, match=r"until\(\) needs|must be a positive"):
        until(**kwargs)
