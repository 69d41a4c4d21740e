"""Auto mode's cost and stability (issue 27): the stored accuracy model, the planner's
cost weight, exact preference, learned overheads and hysteresis (no cluster), the
client-side caches, and one cluster run that counts the scheduler round trips of a
steady-state auto job against a fixed one."""

from __future__ import annotations

import collections
import math
import time

import dask
import numpy as np
import pytest
from cluster_helpers import gen_cluster, idle

import dask_bacc
from dask_bacc.codes import get_code, predict
from dask_bacc.runtime import _dist, auto_cache, submit
from dask_bacc.runtime.auto import AUTO_CODES, Calibration, ModelView, Overheads, plan

K = 8
WORKERS = [f"tcp://10.0.{k // 4}.{k}:1" for k in range(32)]
SPLINE = [("systematic-spline", {})]
ALL = [(c, {}) for c in AUTO_CODES]


def draws(p: float, W: int = 32, size: int = 256, seed: int = 0, late: float = 10.0):
    rng = np.random.default_rng(seed)
    D = rng.lognormal(0.0, 0.05, (size, W))
    D[rng.random(D.shape) < p] = late
    return D


def view(D):
    return ModelView(WORKERS[: D.shape[1]], D, jobs=10)


# -- the stored accuracy model -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "K_", "N", "k"),
    [
        ("systematic-spline", 8, 13, 9),
        ("spline", 20, 23, 14),
        ("berrut", 31, 40, 33),
        ("systematic-berrut", 5, 10, 3),
        ("spline", 32, 64, 64),
    ],
)
def test_the_stored_model_is_what_expected_error_computes(name, K_, N, k):
    code = get_code(name, K_, N)
    stored = predict.stored_errors(code, [k])
    assert stored is not None, "the table must hold the planner's range for K <= 32"
    live = predict._expected(code.name, K_, N, predict._options(code), k)
    assert stored[0] == pytest.approx(live, rel=1e-5, abs=1e-9)


def test_outside_the_stored_model_the_error_is_computed():
    code = get_code("berrut", 8, 12, systematic=False)
    assert predict.stored_errors(code, [2]) is None  # k below the stored range
    assert predict.stored_errors(get_code("berrut", 33, 40), [30]) is None  # K above it
    assert predict.stored_errors(get_code("repetition", 8, 16), [8]) is None
    assert predict.expected_error(code, 2) == pytest.approx(
        predict._expected(code.name, 8, 12, predict._options(code), 2)
    )


def test_a_first_plan_costs_milliseconds():
    """No reference decode at plan time for K <= 32: the planner runs on the table."""
    predict._expected.cache_clear()
    plan(view(draws(0.05)), 16, ALL, error=0.05, max_n=32)
    assert predict._expected.cache_info().misses == 0  # before the table: ~1,000 decodes


# -- the score: cost weight, exact preference, overheads -----------------------------------------


def test_the_cost_weight_takes_redundancy_off_a_quiet_cluster():
    quiet = view(draws(0.0))
    codes = [("repetition", {}), ("uncoded", {})]
    free = plan(quiet, K, codes, error=0.05, max_n=16, tolerance=0.0)
    costed = plan(quiet, K, codes, error=0.05, max_n=16, cost_weight=0.5, tolerance=0.0)
    assert free.chosen.code == "repetition"  # two copies: the faster of two is a bit faster
    assert costed.chosen.code == "uncoded"  # ... not worth 8 more tasks when they cost
    assert costed.chosen.score == pytest.approx(
        costed.chosen.time + 0.5 * costed.chosen.cpu / len(quiet.workers)
    )
    heavy = plan(view(draws(0.1)), K, codes, error=0.05, max_n=16, cost_weight=0.5)
    assert heavy.chosen.code == "repetition"  # stragglers: worth every copy
    assert "score" in costed.reason


def test_an_exact_code_within_the_preference_wins():
    v = view(draws(0.05))
    codes = [("systematic-spline", {}), ("repetition", {})]
    kw = {"error": 0.2, "max_n": 16, "cost_weight": 0.5}
    approx = plan(v, K, codes, exact_preference=0.0, **kw)
    assert approx.chosen.code == "systematic-spline"  # fewer tasks: a better score
    rep = plan(v, K, codes[1:], **kw).chosen
    gap = rep.score / approx.chosen.score - 1
    assert gap > 0
    exact = plan(v, K, codes, exact_preference=gap + 0.01, **kw)
    assert exact.chosen.code == "repetition" and "exact" in exact.reason
    assert exact.confidence == 1.0


def test_a_codes_overhead_moves_the_choice():
    v = view(draws(0.05))
    codes = [("systematic-spline", {}), ("repetition", {})]
    kw = {"error": 0.2, "max_n": 16, "cost_weight": 0.5}
    assert plan(v, K, codes, **kw).chosen.code == "systematic-spline"
    slow = plan(v, K, codes, overhead={"systematic-spline": 3.0}, **kw)
    assert slow.chosen.code == "repetition" and slow.chosen.overhead == 0.0
    spline = plan(v, K, codes[:1], overhead={"systematic-spline": 3.0}, **kw).chosen
    assert spline.overhead == 3.0 and spline.time > 3.0


def test_overheads_are_learned_per_function_and_code():
    o = Overheads(weight=0.5)
    assert o.units("f") == {} and o.jobs("f") == 0
    o.observe("f", "berrut", seconds=0.4, tau=0.1)  # 0.4 s besides its tasks
    assert o.units("f")["berrut"] == pytest.approx(4.0)
    o.observe("f", "repetition", seconds=0.02, tau=0.1)
    assert o.units("f")["repetition"] == pytest.approx(0.2)
    o.observe("f", "berrut", seconds=0.0, tau=0.1)
    assert o.units("f")["berrut"] == pytest.approx(2.0)  # half weight per job
    assert o.units("g") == {} and o.jobs("f") == 3
    o.observe("f", "berrut", seconds=math.nan, tau=0.1)
    o.observe("f", "berrut", seconds=1.0, tau=0.0)
    o.observe("f", "berrut", seconds=-1.0, tau=0.1)
    assert o.jobs("f") == 3  # nothing learned from what says nothing
    o.observe("f", "berrut", seconds=0.2, tau=0.3)  # tau averaged too: 0.1 -> 0.2
    assert o.units("f")["berrut"] == pytest.approx(1.0)  # 0.2 s over a median task of 0.2 s


# -- hysteresis near the budget --------------------------------------------------------------------


def test_the_choice_does_not_flip_on_noise_near_the_budget():
    """Calibrations 10% apart, alternating, around a budget between two waits: without
    hysteresis the chosen wait flips with them; with it, it settles and stays."""
    v = view(draws(0.2, seed=3))
    code = get_code("systematic-spline", K, 16)
    budget = 1.03 * predict.expected_error(code, 10)  # k = 10 within at 1.0, not at 1.1
    kw = {"error": budget, "max_n": 16, "n_coded": 16}
    free = [plan(v, K, SPLINE, calibration=x, **kw).chosen.k for x in (1.0, 1.1)]
    assert free == [10, 11], "the setup must sit on the budget's edge"
    last = None
    chosen = []
    for factor in (1.0, 1.1, 1.0, 1.1, 1.0, 1.1):
        p = plan(
            v,
            K,
            SPLINE,
            calibration=factor,
            sigma=0.1,
            confidence=0.7,
            hysteresis=0.1,
            incumbent=last,
            **kw,
        )
        last = _key(p)
        chosen.append(p.chosen.k)
        assert p.chosen.error <= budget
        assert p.kept == (len(chosen) > 2)
    assert chosen == [10, 11, 11, 11, 11, 11]


def test_a_newcomer_needs_the_confidence_margin():
    v = view(draws(0.2, seed=3))
    kw = {"error": 0.05, "max_n": 16, "n_coded": 16}
    first = plan(v, K, SPLINE, **kw)
    assert not first.kept and first.confidence == 1.0  # sigma 0: sure of a point estimate
    # with an incumbent elsewhere, every other setting must be within the budget / margin
    unsure = plan(
        v, K, SPLINE, sigma=1.0, confidence=0.9, incumbent=("systematic-spline", 16, 5), **kw
    )
    assert unsure.chosen.error <= 0.05 / math.exp(1.2815515655446004 * 1.0) + 1e-12
    assert unsure.chosen.k > first.chosen.k and 0.9 < unsure.confidence < 1.0
    kept = plan(v, K, SPLINE, sigma=1.0, confidence=0.9, incumbent=_key(first), **kw)
    assert kept.kept and kept.chosen == first.chosen
    assert "last job" in kept.reason and kept.as_dict()["kept"] is True
    assert 0.5 <= kept.confidence < 0.9  # within the budget, not by the margin


def _key(p):
    return (p.chosen.code, p.chosen.N, p.chosen.k)


def test_calibration_uncertainty_falls_with_jobs():
    cal = Calibration()
    code = get_code("berrut", K, 12)
    assert cal.sigma("f") == pytest.approx(math.log(2.0))
    rng = np.random.default_rng(0)
    sigmas = []
    for _ in range(12):
        noise = math.exp(0.2 * rng.standard_normal())
        cal.observe("f", code, [(10, noise * predict.expected_error(code, 10))])
        sigmas.append(cal.sigma("f"))
    assert sigmas[-1] < 0.3 < sigmas[0]
    assert cal.jobs("f") == 12 and cal.jobs("g") == 0


# -- the caches ----------------------------------------------------------------------------------


def test_the_plan_cache_reuses_a_plan_while_its_inputs_hold():
    v = view(draws(0.1))
    first = submit.plan_job(v, K, SPLINE, 0.1, "f", wait="auto")
    assert submit.plan_job(v, K, SPLINE, 0.1, "f", wait="auto") is first  # same inputs
    moved = ModelView(v.workers, draws(0.1, seed=1), jobs=11)  # the model learned a job
    again = submit.plan_job(moved, K, SPLINE, 0.1, "f", wait="auto")
    assert again is not first
    assert auto_cache.plans.incumbent(next(iter(auto_cache.plans._plans))) == _key(again)
    other = submit.plan_job(v, K, SPLINE, 0.2, "f", wait="auto")  # another budget
    assert other is not first and submit.plan_job(v, K, SPLINE, 0.2, "f", wait="auto") is other
    with dask.config.set({"bacc.auto.cost-weight": 0.9}):
        assert submit.plan_job(v, K, SPLINE, 0.2, "f", wait="auto") is not other
    cache = auto_cache.PlanCache(size=2)
    for key in "abc":
        cache.put(key, 0, first)
    assert cache.get("a", 0) is None and cache.get("c", 0) is first and cache.get("c", 1) is None


def test_the_view_cache_follows_its_workers():
    cache = auto_cache.ViewCache()

    class Client:  # weakly referenced, as a distributed Client
        pass

    c = Client()
    D = draws(0.1, W=4)
    raw = {
        "jobs": 5,
        "draws": D,
        "hosts": ["a", "b", "c", "d"],
        "correlated": [],
        "late_factor": 1.5,
    }
    ws = WORKERS[:4]
    assert cache.get(c, ws) is None and cache.wanted(c) is None
    cache.put(c, ws, raw)
    assert cache.wanted(c) == (ws, 5)
    turned = cache.get(c, ws[::-1])
    assert turned is not None and turned.workers == ws[::-1]
    np.testing.assert_array_equal(turned.draws, D[:, ::-1])
    assert turned.hosts == ["d", "c", "b", "a"]
    assert cache.get(c, ws[:3]) is None  # a worker left: ask again
    cache.put(c, ws, None)  # the model is off
    assert cache.wanted(c) is None
    cache.put(c, ws, raw)
    del c
    import gc

    gc.collect()
    assert len(cache._views) == 0  # a client's view goes with it


# -- one cluster: scheduler round trips of a steady-state auto job -------------------------------


def f(x):
    time.sleep(0.01)
    return np.tanh(x)


DATA = np.random.default_rng(0).standard_normal((K * 4, 3))


@pytest.mark.slow
@gen_cluster(client=True, nthreads=[("127.0.0.1", 1)] * 16, timeout=180)
async def test_a_steady_state_auto_job_makes_no_extra_round_trip(c, s, *workers):
    calls: collections.Counter[str] = collections.Counter()
    real = _dist.run_on_scheduler

    def counting(client, function, *args):
        calls[function.__name__] += 1
        return real(client, function, *args)

    async def one(**kw):
        calls.clear()
        job = await dask_bacc.submit_coded(f, DATA, n_blocks=K, client=c, **kw)
        await job
        await job._task  # its clean-up round trip included
        await idle(workers)
        # the straggler model's quantiles for plain shares still out at the decode are
        # asked in the background, never waited for, and only when such a share is still
        # running then (timing): not a round trip the job pays
        return job, {k: v for k, v in calls.items() if k != "_model_quantiles"}

    _dist.run_on_scheduler = counting
    try:
        auto = {"code": "auto", "n_coded": "auto", "wait": "auto", "error": 0.1}
        for _ in range(5):  # the model learns (bacc.auto.min-jobs), the view is cached
            job, _ = await one(**auto)
        assert job.report.auto["chosen"] is not None
        job, auto_calls = await one(**auto)
        chosen = job.report.auto["chosen"]
        fixed = {"code": chosen["code"]}
        if chosen["code"] != "hedged":  # (hedging runs K tasks and backups: no N)
            fixed["n_coded"] = chosen["N"]
        if not job.code.exact:
            fixed["wait"] = chosen["k"]
        _, fixed_calls = await one(**fixed)
    finally:
        _dist.run_on_scheduler = real
    assert "model_view" not in auto_calls, auto_calls
    assert sum(auto_calls.values()) == sum(fixed_calls.values()), (auto_calls, fixed_calls)
    assert auto_cache.views.wanted(c) is not None  # refreshed by the clean-up round trip
    # the planned jobs taught the client what their code costs beyond its tasks
    key = submit.function_key(f)
    assert submit._overheads.jobs(key) >= 2
    assert set(submit._overheads.units(key)) >= {chosen["code"]}
    assert all(v >= 0 for v in submit._overheads.units(key).values())
    assert job.task_seconds and all(v > 0 for v in job.task_seconds.values())
