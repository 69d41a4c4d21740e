"""Auto mode: the planner on synthetic draws and histories (no cluster), then one cluster
run per straggler regime, for behaviour (what is chosen and where), not speed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import math
import time
import warnings

import dask
import numpy as np
import pytest
from cluster_helpers import gen_cluster, idle

import dask_bacc
from dask_bacc.codes import get_code
from dask_bacc.codes.predict import expected_error
from dask_bacc.diagnostics.latency import LatencyModel, TaskObservation
from dask_bacc.runtime.auto import (
    AUTO,
    AUTO_CODES,
    Calibration,
    ModelView,
    NoSetting,
    index_order,
    order_workers,
    plan,
)
from dask_bacc.runtime.submit import function_key, plan_job
from dask_bacc.runtime.wait import resolve_wait
from dask_bacc.testing import Bimodal, SlowWorkers, inject_stragglers, smooth_blocks

K = 8
WORKERS = [f"tcp://10.0.{k // 4}.{k}:1" for k in range(16)]
SPLINE = [("systematic-spline", {})]


def bimodal_draws(rng, p, size=512, late=20.0, slow=()):
    D = rng.lognormal(0.0, 0.05, (size, len(WORKERS)))
    D[rng.random(D.shape) < p] = late
    D[:, list(slow)] = late
    return D


def view(D, **kw):
    return ModelView(WORKERS, D, jobs=10, **kw)


# -- the accuracy model ------------------------------------------------------------------------


def test_expected_error_falls_with_more_results_and_exact_codes_are_exact():
    code = get_code("systematic-spline", K, 16)
    errors = [expected_error(code, k) for k in range(8, 17)]
    assert errors[-1] == 0.0  # every systematic result: exact
    assert all(a >= b - 1e-3 for a, b in itertools.pairwise(errors))
    assert errors[0] > 5 * errors[-2]
    assert expected_error(get_code("repetition", K, 12), 8) == 0.0
    assert expected_error(get_code("lagrange", K, 12, degree=1), 3) == math.inf  # < threshold
    with pytest.raises(ValueError):
        expected_error(code, 17)


def curve_points(code, ks, est):
    """One job's points: the estimate ``est(model error)`` at each k of ``ks``."""
    return [(k, est(expected_error(code, k))) for k in ks]


def test_calibration_starts_at_the_model_and_learns_a_constant_factor():
    code = get_code("berrut", K, 12)
    cal = Calibration(size=2)
    m9 = expected_error(code, 9)
    assert cal.scale("f")(m9) == pytest.approx(m9)  # never seen: the model itself
    cal.observe("f", code, curve_points(code, [10, 9, 8], lambda e: 3 * e))
    assert m9 < cal.scale("f")(m9) < 3 * m9  # one job moves it part of the way
    for _ in range(30):
        cal.observe("f", code, curve_points(code, [10, 9, 8], lambda e: 3 * e))
    for k in (8, 10, 11):
        assert cal.scale("f")(expected_error(code, k)) == pytest.approx(
            3 * expected_error(code, k), rel=0.05
        )
    assert cal.scale("f")(0.0) == 0.0  # an exact decode stays exact


def test_calibration_learns_a_flat_error_curve_from_the_shorter_waits():
    """A nonlinear f whose error barely falls with more results: a job that waited for
    11 of 16 must not make 9 of 16 look far worse than it is (a single factor would)."""
    code = get_code("systematic-spline", K, 16)
    cal = Calibration()
    for _ in range(30):
        cal.observe(
            "f", code, curve_points(code, [11, 10, 9, 8], lambda e: 0.08 * (e / 0.05) ** 0.2)
        )
    _, b = cal.fit("f")
    assert b == pytest.approx(0.2, abs=0.05)
    m9, m11 = expected_error(code, 9), expected_error(code, 11)
    assert cal.scale("f")(m9) == pytest.approx(0.08 * (m9 / 0.05) ** 0.2, rel=0.05)
    assert cal.scale("f")(m9) / cal.scale("f")(m11) < 0.5 * m9 / m11


def test_calibration_ignores_what_says_nothing_and_is_bounded():
    code = get_code("berrut", K, 12)
    cal = Calibration(size=2)
    m8 = expected_error(code, 8)
    cal.observe("f", code, [(8, 0.0), (7, math.nan)])  # exact decode, unknown estimate
    cal.observe("f", get_code("repetition", K, 12), [(8, 0.5)])  # exact code
    assert cal.scale("f")(m8) == pytest.approx(m8)
    for name in ("f", "g", "h"):
        cal.observe(name, code, [(8, 4 * m8)])
    assert cal.scale("f")(m8) == pytest.approx(m8)  # the oldest function is forgotten
    assert cal.scale("h")(m8) > m8


# -- the planner on synthetic draws --------------------------------------------------------------


def test_heavy_stragglers_get_full_redundancy_and_a_short_wait():
    rng = np.random.default_rng(0)
    p = plan(view(bimodal_draws(rng, 0.3)), K, SPLINE, error=0.1, max_n=16, calibration=0.6)
    assert p.chosen.N == 16
    # the default waits for 12 of 16: P(more than 4 of 16 late) ~ 55% at p = 0.3
    assert p.chosen.k <= 10
    assert p.chosen.error <= 0.1
    assert p.chosen.p90 < 4  # its 90th percentile does not wait for a straggler
    assert sorted(p.workers) == sorted(WORKERS)
    assert "least expected time" in p.reason
    assert p.alternatives and all(o != p.chosen for o in p.alternatives)
    assert p.as_dict()["chosen"]["N"] == 16


def test_a_quiet_cluster_pays_for_less_redundancy():
    rng = np.random.default_rng(1)
    quiet = plan(view(bimodal_draws(rng, 0.0)), K, SPLINE, error=0.1, max_n=16)
    heavy = plan(view(bimodal_draws(rng, 0.3)), K, SPLINE, error=0.1, max_n=16)
    assert quiet.chosen.N < heavy.chosen.N
    assert quiet.chosen.N <= 10
    assert quiet.chosen.time < 1.2


def test_slow_workers_get_no_task():
    rng = np.random.default_rng(2)
    slow = {3, 7, 12}
    p = plan(view(bimodal_draws(rng, 0.0, slow=slow)), K, SPLINE, error=0.1, max_n=16)
    assert p.chosen.N <= 13
    assert not {WORKERS[j] for j in slow} & set(p.workers)


def test_systematic_tasks_go_to_the_fastest_workers():
    rng = np.random.default_rng(3)
    D = rng.lognormal(0.0, 0.01, (256, 16)) * np.linspace(1.0, 1.45, 16)  # worker j slower
    code_name = "systematic-berrut"
    p = plan(view(D), K, [(code_name, {})], error=1.0, max_n=16, n_coded=16)
    code = get_code(code_name, K, 16)
    systematic = {p.workers[i] for i in code.systematic_workers}
    assert systematic == set(WORKERS[:K])
    order = index_order(code)
    assert set(order[:K]) == {int(i) for i in code.systematic_workers}


def test_correlated_hosts_are_spread():
    hosts = [w.split("//")[1].rsplit(".", 1)[0] for w in WORKERS]  # 4 workers per host
    D = np.ones((64, 16)) + np.arange(16) * 1e-3
    v = ModelView(WORKERS, D, jobs=10, hosts=hosts, correlated=frozenset({"10.0.0"}))
    order = order_workers(v, late_cost=4.0)
    # host 10.0.0 (workers 0-3, the fastest) gives its first worker, the others go last
    assert order[0] == 0 and set(order[-3:]) == {1, 2, 3}
    free = order_workers(ModelView(WORKERS, D, jobs=10, hosts=hosts), late_cost=4.0)
    assert free == list(range(16))


def test_fixed_n_and_fixed_wait_are_kept():
    rng = np.random.default_rng(4)
    D = bimodal_draws(rng, 0.3)
    p = plan(view(D), K, SPLINE, error=0.1, max_n=16, n_coded=12)
    assert p.chosen.N == 12
    p = plan(view(D), K, SPLINE, error=1.0, max_n=16, wait=lambda code: code.N - 1)
    assert p.chosen.k == p.chosen.N - 1


def test_an_unreachable_budget_takes_the_most_accurate_setting():
    rng = np.random.default_rng(5)
    p = plan(view(bimodal_draws(rng, 0.3)), K, [("berrut", {})], error=1e-6, max_n=16)
    assert "no setting is predicted within" in p.reason
    assert p.chosen.k == p.chosen.N  # every result: Berrut's least error
    assert p.chosen.error == min(o.error for o in [p.chosen, *p.alternatives])


def test_code_auto_may_take_an_exact_code():
    rng = np.random.default_rng(6)
    codes = [(c, {}) for c in ("systematic-berrut", "repetition", "uncoded")]
    # a budget no approximate setting meets: an exact code, as fast as can be
    p = plan(view(bimodal_draws(rng, 0.1)), K, codes, error=1e-9, max_n=16)
    assert p.chosen.code in ("repetition", "uncoded") and p.chosen.error == 0.0
    assert p.chosen.code == "repetition" and p.chosen.N == 16  # uncoded waits for all 8


def test_a_fixed_wait_with_code_auto_weighs_only_the_codes_that_take_it():
    """wait=3 of K=4: repetition cannot decode from 3 results, so it is not weighed."""
    D = bimodal_draws(np.random.default_rng(11), 0.3)
    p = plan_job(view(D), 4, [(c, {}) for c in AUTO_CODES], 0.1, "t", wait=3)
    code = get_code(p.chosen.code, 4, p.chosen.N)
    assert resolve_wait(3, code).target(code) == 3 == p.chosen.k


def test_a_fixed_n_is_kept_above_the_compute_budget_not_above_the_workers():
    D = bimodal_draws(np.random.default_rng(12), 0.1)
    # K = 4: auto's own budget is 2K = 8 tasks; a fixed 12 (of 16 workers) stays
    assert plan_job(view(D), 4, SPLINE, 0.1, "t", n_coded=12, wait=AUTO).chosen.N == 12
    with pytest.raises(NoSetting):
        plan(view(D), 4, SPLINE, error=0.1, max_n=8, n_coded=17)
    # fewer workers than K + 1: nothing to plan (the caller runs the defaults)
    few = ModelView(WORKERS[:5], D[:, :5], jobs=10)
    with pytest.raises(NoSetting):
        plan(few, K, SPLINE, error=0.1, max_n=16)


def test_n_coded_auto_starts_at_a_codes_threshold():
    """Lagrange of degree 2 needs N >= 2 (K - 1) + 1 = 7 for K = 4."""
    D = bimodal_draws(np.random.default_rng(13), 0.1)
    p = plan_job(view(D), 4, [("lagrange", {"degree": 2})], 0.1, "t", wait=AUTO)
    assert p.chosen.N >= 7 and p.chosen.error == 0.0


def test_the_calibration_key_names_the_function():
    def g(x, y):
        return x

    assert function_key(g).endswith("test_the_calibration_key_names_the_function.<locals>.g")
    assert function_key(functools.partial(g, y=1)) == function_key(g)
    assert function_key(np.tanh) != function_key(g)
    first, second = (lambda x: x), (lambda x: x + 1)
    assert function_key(first) == function_key(second)  # one line: one key
    third = lambda x: x * 2  # noqa: E731
    assert function_key(third) != function_key(first)  # lambdas apart by their line


def test_a_fixed_placement_chooses_only_the_wait():
    rng = np.random.default_rng(7)
    D = bimodal_draws(rng, 0.0, slow={0, 1})
    where = WORKERS[:12]  # shares on two slow workers among them
    p = plan(view(D), K, SPLINE, error=0.2, max_n=16, n_coded=12, placement=where)
    assert p.workers == where and p.chosen.N == 12
    assert p.chosen.k <= 10  # never waits for the two slow ones
    with pytest.raises(ValueError):
        plan(view(D), K, SPLINE, error=0.2, max_n=16, placement=where)  # no n_coded


# -- the model and the planner in a closed loop, on synthetic histories -----------------------


def simulate(model, rng, slow, jobs, error=0.1):
    """``jobs`` jobs: plan from the model, run on synthetic latencies (the slow workers'
    tasks take 20x the median), decode at the k-th result (cutting the rest short, as the
    runtime does) and feed the model what the scheduler plugin would. Returns the plans."""
    plans = []
    for _ in range(jobs):
        draws = model.sample(WORKERS, rng, size=256)
        p = plan(ModelView(WORKERS, draws, jobs=model.jobs), K, SPLINE, error=error, max_n=16)
        d = {w: float(rng.lognormal(0, 0.05)) * (20 if w in slow else 1) for w in p.workers}
        end = sorted(d.values())[p.chosen.k - 1] * 1.05  # decode, then the clean-up
        model.observe_job(
            TaskObservation(w, w.split("//")[1].rsplit(".", 1)[0], min(t, end), t <= end)
            for w, t in d.items()
        )
        plans.append(p)
    return plans


def test_a_moving_slow_set_is_followed_within_a_few_jobs():
    rng = np.random.default_rng(8)
    model = LatencyModel()
    first, then = set(WORKERS[:3]), set(WORKERS[8:11])
    before = simulate(model, rng, first, 20)
    assert not first & set(before[-1].workers)
    pre = np.median([p.chosen.time for p in before[-5:]])
    after = simulate(model, rng, then, 10)
    recovered = next((j for j, p in enumerate(after) if not then & set(p.workers)), None)
    assert recovered is not None and recovered < 10, [sorted(then & set(p.workers)) for p in after]
    assert after[-1].chosen.time <= 1.1 * pre
    # the first slow set recovered: its workers are drawn like the others again in time
    assert not then & set(after[-1].workers)


def test_heavy_stragglers_learned_through_censoring():
    """A first-k decode cuts most stragglers short: the model must still see them."""
    rng = np.random.default_rng(9)
    model = LatencyModel()
    for _ in range(30):
        d = {w: float(rng.lognormal(0, 0.05)) * (20 if rng.random() < 0.3 else 1) for w in WORKERS}
        end = sorted(d.values())[11] * 1.2  # the default: 12 of 16 plus its grace
        model.observe_job(TaskObservation(w, "h", min(t, end), t <= end) for w, t in d.items())
    p_late = np.mean([model.predict(w).p_late for w in WORKERS])
    assert 0.2 < p_late < 0.45
    draws = model.sample(WORKERS, rng, size=512)
    p = plan(
        ModelView(WORKERS, draws, jobs=model.jobs), K, SPLINE, error=0.1, max_n=16, calibration=0.6
    )
    assert p.chosen.N == 16 and p.chosen.k <= 10


# -- one cluster run per regime: behaviour ---------------------------------------------------


def f(x):
    time.sleep(0.02)
    return np.tanh(x)


DATA = smooth_blocks(K, 4, 3, np.random.default_rng(0)).reshape(K * 4, 3)
NTHREADS = [("127.0.0.1", 1)] * 16
MAX_CALLS = 30  # coded-data calls at most, waiting for the model to learn a slow worker


@contextlib.contextmanager
def quiet():
    """Approximate answers warn when their estimate is large: expected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dask_bacc.ApproximationWarning)
        yield


async def run(c, s, workers, jobs, **kw):
    """``jobs`` coded jobs one after the other, each on an idle cluster."""
    out = []
    for _ in range(jobs):
        job = await dask_bacc.submit_coded(f, DATA, n_blocks=K, client=c, **kw)
        with quiet():
            await job
        out.append(job)
        await idle(workers)
    return out


async def model_jobs(s, n):
    from dask_bacc.diagnostics import PLUGIN_NAME

    while s.plugins.get(PLUGIN_NAME) is None or s.plugins[PLUGIN_NAME].model.jobs < n:
        await asyncio.sleep(0.01)


@pytest.mark.slow
@gen_cluster(client=True, nthreads=NTHREADS, timeout=180)
async def test_cluster_heavy_regime_leaves_room_for_the_stragglers(c, s, *workers):
    spline = {"code": "systematic-spline"}  # the approximate code whose N and wait are planned
    # time alone: a cost on task time (30% of tasks run 20x long) may trade the room away
    with dask.config.set({"bacc.auto.cost-weight": 0.0}):
        first = await run(c, s, workers, 1, n_coded="auto", wait="auto", error=0.1, **spline)
        assert first[0].report.auto["chosen"] is None  # no model yet: the defaults
        assert "defaults" in first[0].report.auto["reason"]
        assert first[0].report.N == 16 and first[0].report.wait_target == 12
        async with inject_stragglers(Bimodal(p=0.3, delay=2.0), seed=1, client=c):
            # warm-up with the default wait (12 of 16): it often waits for a straggler, so
            # the model sees lateness directly as well as through the tasks cut short
            await run(c, s, workers, 6, n_coded=16, wait=12, **spline)
            await model_jobs(s, 7)
            jobs = await run(c, s, workers, 3, n_coded="auto", wait="auto", error=0.1, **spline)
        # the first planned job: its calibration learned from one job only (the first)
        chosen = jobs[0].report.auto["chosen"]
        assert chosen["error"] <= 0.1
        # room for the stragglers: about 30% of tasks are late, and the plan is not predicted
        # to wait for one in most jobs (overhead aside). Before issue 42 this asked for none
        # at the 90th percentile either: with N <= 16 and the budget's k >= 9, P(more than
        # N - k of N late) at p = 0.3 is 0.07 at best and 0.22 at the (14, 9) usually
        # chosen, so only a model that took the planned workers for faster than they are
        # (the winner's curse, docs/adaptive.md) predicted that
        assert chosen["N"] - chosen["k"] >= 0.3 * chosen["N"], jobs[0].report.auto
        time, p90 = chosen["time"] - chosen["overhead"], chosen["p90"] - chosen["overhead"]
        assert p90 < 1.5 or time < 0.5 * p90, jobs[0].report.auto
        for job in jobs:
            chosen = job.report.auto["chosen"]
            assert chosen is not None
            assert job.report.N == chosen["N"]
            # the planned k, and more while the estimate is above the budget
            assert job.policy == dask_bacc.until(error=0.1, min_results=chosen["k"])
            assert len(job.report.returned) >= chosen["k"]
            assert len(set(job.report.workers)) == job.report.N  # one task per worker


@pytest.mark.slow
@gen_cluster(client=True, nthreads=NTHREADS, timeout=180)
async def test_cluster_stationary_regime_decodes_within_budget(c, s, *workers):
    async with inject_stragglers(Bimodal(p=0.1, delay=5.0), seed=2, client=c):
        await run(c, s, workers, 6, n_coded=16, wait=10)
        await model_jobs(s, 6)
        jobs = await run(c, s, workers, 3, code="auto", error=0.1)
    exact = f(DATA)
    for job in jobs:
        chosen = job.report.auto["chosen"]
        assert chosen is not None and job.report.code["name"] in (
            "spline",
            "berrut",
            "repetition",
            "uncoded",
            "hedged",
        )
        assert chosen["N"] <= 16 and chosen["error"] <= 0.1
        assert job.report.status == "finished"
        if not job.code.exact:
            # what its shorter waits would have given, from the same results
            k = len(job.report.returned)
            fewer = job.quality.fewer_results()
            # one to three fewer results, each with an estimate; a count whose decode
            # the estimate cannot vouch for (the spline codes' data point midway between
            # 6 results, issue 41: docs/accuracy.md "Small K") is left out
            ms = [m for m, _ in fewer]
            assert ms == sorted(set(ms), reverse=True) and set(ms) <= set(range(k - 3, k))
            assert len(fewer) >= 1 and all(e >= 0 for _, e in fewer)
    # an approximate code that never decodes exactly: its shorter waits are always
    # estimated, and the job teaches the calibration (fresh for each test)
    from dask_bacc.runtime import submit

    berrut = await dask_bacc.submit_coded(
        f, DATA, n_blocks=K, client=c, code="berrut", n_coded="auto", wait="auto", error=0.2
    )
    with quiet():
        await berrut
    k = len(berrut.report.returned)
    fewer = berrut.quality.fewer_results()
    assert [m for m, _ in fewer] == list(range(k - 1, k - 4, -1))
    assert all(e > 0 for _, e in fewer)
    for _ in range(100):  # the done callback runs right after the job
        if function_key(f) in submit._calibration._sums:
            break
        await asyncio.sleep(0.01)
    assert submit._calibration.fit(function_key(f)) != submit._calibration.fit("never seen")
    out = await dask_bacc.submit_coded(f, DATA, n_blocks=K, client=c, code="auto", error=0.1)
    with quiet():
        got = await out
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < 0.3


@pytest.mark.slow
@gen_cluster(client=True, nthreads=NTHREADS, timeout=300)
async def test_cluster_moving_slow_set_is_avoided(c, s, *workers):
    names = [str(w.name) for w in workers]
    addr = {str(w.name): w.address for w in workers}
    first, then = names[:3], names[8:11]
    async with inject_stragglers(SlowWorkers(tuple(first), delay=5.0), client=c):
        await run(c, s, workers, 6)
        # the systematic spline (the code whose N auto picks here): repetition's N = 2K
        # leaves fewer fast workers to pick from
        spline = {"code": "systematic-spline", "n_coded": "auto", "wait": "auto"}
        jobs = await run(c, s, workers, 4, error=0.2, **spline)
    assert not {addr[n] for n in first} & set(jobs[-1].report.workers)
    slow = {addr[n] for n in then}
    avoided: list[bool] = []
    async with inject_stragglers(SlowWorkers(tuple(then), delay=5.0), client=c):
        # a worker turned slow is mostly cut short before it looks late (its censored
        # tasks count as late only in proportion to its record), so how many jobs the
        # model needs varies with the machine's load: up to 16, then ten from the first
        # that avoids it
        while (len(avoided) < 16 or any(avoided)) and not (
            any(avoided) and len(avoided) - avoided.index(True) >= 10
        ):
            (job,) = await run(c, s, workers, 1, error=0.2, **spline)
            avoided.append(not slow & set(job.report.workers))
    assert any(avoided), avoided
    first_avoided = avoided.index(True)
    # once learned, most jobs keep off the slow set, not all: the model forgets by design
    # (half-life bacc.diagnostics.model.half-life = 3 jobs, a rate shrunk towards the
    # cluster's), so a worker avoided for a few jobs is drawn much like the others again
    # and tried once more, and a job sent back to it is mostly cut short there (counted
    # late only in part), so it may take two visits to relearn. Measured trajectories of
    # the 10 jobs from the first avoiding one: [T, T, F, T, T, T, T, T, T, T],
    # [T, F, T, T, T, T, T, T, T, T], [T, T, T, F, F, T, T, T, T, T] (under a CPU hog)
    # and, on a loaded CI machine, re-tries at jobs 9 and 10. A placement blind to the
    # model avoids 3 given workers of 16 with N = 9 to 12 in under 2% of jobs, so a
    # majority of 10 is far above chance.
    learned = avoided[first_avoided : first_avoided + 10]
    assert sum(learned) >= 6, avoided


@pytest.mark.slow
@gen_cluster(client=True, nthreads=NTHREADS, timeout=180)
async def test_cluster_coded_data_adapts_between_calls(c, s, *workers):
    names = [str(w.name) for w in workers]
    addr = {str(w.name): w.address for w in workers}
    async with inject_stragglers(SlowWorkers(tuple(names[:2]), delay=5.0), client=c):
        await run(c, s, workers, 6)
        await model_jobs(s, 6)
        data = await dask_bacc.encode(
            DATA, code="systematic-spline", n_coded="auto", n_blocks=K, client=c, error=0.2
        )
        assert data.auto["chosen"] is not None
        assert not {addr[n] for n in names[:2]} & set(data.workers)
    # the worker of share 0 becomes slow
    name0 = next(str(w.name) for w in workers if w.address == data.workers[0])
    calls = []
    async with inject_stragglers(SlowWorkers((name0,), delay=5.0), client=c):
        # the model learns it from share 0's evals, mostly cut short (a censored task
        # counts as late only in part, and the planner's view is a random draw from the
        # model): how many calls that takes is not fixed, so call until one moves it
        for _ in range(MAX_CALLS):
            job = await data.submit(f, wait="auto", error=0.2)
            with quiet():
                await job
            calls.append(job)
            await idle(workers)
            if 0 in job.report.rerouted:
                break
    # the share on the worker that became slow is evaluated elsewhere once the model
    # knows: on a worker that holds no other share of this call
    moved = calls[-1].report.rerouted
    assert 0 in moved, f"share 0 never moved off its slow worker in {MAX_CALLS} calls"
    others = set(data.workers[1:]) - {data.workers[i] for i in moved}
    assert moved[0] != data.workers[0] and moved[0] not in others
    assert all(j.report.auto is not None for j in calls)
    data.release()


def test_bad_auto_input_is_refused_before_anything_runs():
    with pytest.raises(ValueError, match="error= is the error budget"):
        dask_bacc.submit_coded(f, DATA, error=0.1, client=object())
    with pytest.raises(ValueError, match="positive"):
        dask_bacc.submit_coded(f, DATA, n_coded="auto", error=-1.0, client=object())
    with pytest.raises(TypeError):
        dask_bacc.submit_coded(f, DATA, n_coded="auto", error="x", client=object())
    with pytest.raises(ValueError, match="Code instance"):
        dask_bacc.submit_coded(
            f, DATA, code=get_code("berrut", K, 12), n_coded="auto", client=object()
        )
    with pytest.raises(ValueError, match="Code instance"):
        dask_bacc.submit_coded(
            f, DATA, code=get_code("berrut", K, 12), wait="auto", client=object()
        )
    # any spelling of "auto" is auto mode (else error= would be refused as out of place)
    with pytest.raises(ValueError, match="positive"):
        dask_bacc.submit_coded(f, DATA, n_coded="AUTO", error=-1.0, client=object())
    with pytest.raises(ValueError, match="positive"):
        dask_bacc.submit_coded(f, DATA, wait="Auto", error=-1.0, client=object())
    import dask.array as da

    with pytest.raises(ValueError, match="fixed settings"):
        dask_bacc.coded(da.ones((8, 2), chunks=(2, 2)).map_blocks(np.tanh), n_coded="auto")


# -- issue 42: no budget, exact strategies only; hedging weighed; K planned ------------------


def test_without_a_budget_code_auto_weighs_exact_strategies_only():
    from dask_bacc.runtime.auto import EXACT_AUTO_CODES
    from dask_bacc.runtime.submit import weighed_codes

    assert weighed_codes(None) == EXACT_AUTO_CODES
    for name in EXACT_AUTO_CODES:  # (hedging decodes as K uncoded tasks and copies)
        assert get_code(
            "uncoded" if name == "hedged" else name, 4, 4 if name != "repetition" else 8
        ).exact
    assert set(weighed_codes(0.02)) > set(EXACT_AUTO_CODES)  # a budget adds the approximate
    assert weighed_codes(0.02, exact_only=True) == EXACT_AUTO_CODES
    assert dask.config.get("bacc.auto.error") is None  # no budget unless one is given


def test_a_hedge_never_answers_later_than_the_task_it_copies():
    from dask_bacc.runtime.auto import _Times

    rng = np.random.default_rng(4)
    D = bimodal_draws(rng, 0.2)
    for K in (4, 12, 16):  # idle workers for every copy, for some, for none
        T, _, cpu = _Times(D).hedged(K, 1.5)
        plain = D[:, :K].max(axis=1)
        assert np.all(T[:, 0] <= plain + 1e-12)
        assert cpu >= D[:, :K].sum(axis=1).mean()  # copies cost their run, never less
        # two backups at once where the budget holds them: sooner on the whole, dearer
        _, mean3, cpu3 = _Times(D).hedged(K, 1.5, copies=3, budget=None)
        assert mean3[0] < T.mean() and cpu3 > cpu
        # a budget of one backup: a draw with two late blocks waits for one of them
        T1, _, _ = _Times(D).hedged(K, 1.5, copies=3, budget=1 / K)
        two = (D[:, :K] > 1.5).sum(axis=1) >= 2
        assert two.any() and np.all(T1[two, 0] > 1.5)
    quiet_draws = np.full((64, 16), 1.0)  # nobody late: no copy, the plain job's time
    T, _, cpu = _Times(quiet_draws).hedged(16, 1.5)
    assert np.all(T == 1.0) and cpu == pytest.approx(16.0)


@pytest.mark.parametrize("p", [0.0, 0.1])
def test_the_exact_plan_hedges_a_one_wave_job(p):
    """K = W: no spare worker for repetition; hedging is plain's tasks, insured."""
    from dask_bacc.runtime.auto import EXACT_AUTO_CODES

    D = bimodal_draws(np.random.default_rng(5), p)
    p16 = plan(view(D), 16, [(c, {}) for c in EXACT_AUTO_CODES], error=0.05, max_n=32)
    assert p16.chosen.code == "hedged" and p16.chosen.N == 16
    assert p16.workers == [WORKERS[j] for j in order_workers(view(D), 4.0)[:16]]
    if p:  # stragglers: a copy after 1.5 tasks beats waiting 20 for the straggler
        plain = next(o for o in p16.alternatives if o.code == "uncoded")
        assert p16.chosen.time < 0.5 * plain.time


def test_block_counts_weighed_for_in_memory_input():
    from dask_bacc.runtime.submit import _block_counts

    assert _block_counts(np.zeros((3840, 2)), 16) == [16, 12, 10, 8]
    assert _block_counts(np.zeros((3841, 2)), 16) == [1]  # 23 * 167: no divisor up to 16
    assert _block_counts(np.zeros((10, 2)), 64) == [10]  # never more blocks than rows
    assert _block_counts(np.zeros((10, 2)), 8) == [5, 2]


@pytest.mark.slow
@gen_cluster(client=True, nthreads=NTHREADS, timeout=180)
async def test_cluster_auto_without_a_budget_answers_exactly_and_plans_k(c, s, *workers):
    X = np.random.default_rng(1).standard_normal((96, 3))  # i.i.d. rows: no smooth help
    async with inject_stragglers(Bimodal(p=0.2, delay=1.0), seed=4, client=c):
        jobs = []
        for _ in range(6):
            job = await dask_bacc.submit_coded(f, X, code="auto", client=c)
            with quiet():
                out = await job
            np.testing.assert_array_equal(out, np.tanh(X))  # plain Dask's answer, bit for bit
            jobs.append(job)
            await idle(workers)
    assert jobs[0].report.auto["chosen"] is None  # the model learns first: repetition
    assert jobs[0].report.code["name"] == "repetition"
    planned = [j for j in jobs if j.report.auto["chosen"] is not None]
    assert planned, [j.report.auto["reason"] for j in jobs]
    for job in planned:
        auto = job.report.auto
        assert auto["chosen"]["code"] in ("hedged", "repetition", "uncoded")
        assert auto["K_weighed"] == [16, 12, 8] and auto["K"] in auto["K_weighed"]
        assert job.report.K == auto["K"]
        assert job.report.code["name"] == auto["chosen"]["code"]


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 4)
async def test_auto_with_more_blocks_than_workers_hedges_in_waves(c, s, *workers):
    """No one-wave plan fits K > W: exact copies in waves, with or without a budget (it
    used to fail asking for K + 1 workers for repetition, the safe code)."""
    X = np.random.default_rng(2).standard_normal((40, 3))
    for kw in ({}, {"error": 0.05}):
        job = await dask_bacc.submit_coded(np.tanh, X, n_blocks=10, code="auto", client=c, **kw)
        out = await job
        np.testing.assert_array_equal(out, np.tanh(X))
        assert job.report.code["name"] == "hedged" and job.report.K == 10
        assert "more than one task per worker" in job.report.auto["reason"]


def test_a_job_that_waited_to_exact_still_calibrates_its_function():
    """A planned approximate job whose estimates stayed above the budget ends exact (its
    systematic tasks in: estimate 0, which says nothing); the estimates it made while
    waiting teach the calibration that the function is rough, so the next plan moves on."""
    from types import SimpleNamespace

    from dask_bacc.runtime import submit

    code = get_code("systematic-spline", 12, 16)
    report = SimpleNamespace(
        status="finished", error_estimate=0.0, returned=list(range(14)),
        estimates=[[12, 0.31], [13, 0.24]], token="t",
    )  # fmt: skip
    job = SimpleNamespace(report=report, code=code, quality=SimpleNamespace(fewer_results=list))
    key = "rough-function-of-test_auto"
    before = submit._calibration.scale(key)(expected_error(code, 12))
    submit.learn_calibration(job, key)
    assert submit._calibration.jobs(key) == 1
    after = submit._calibration.scale(key)(expected_error(code, 12))
    assert after > 1.5 * before and after > 0.02  # one job moves it part of the way
