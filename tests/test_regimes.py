"""The regime map's pieces that need no cluster: its straggler wrapper, its cells and the
summary that picks each cell's best strategy and checks the default (benchmarks/regimes.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from dask_bacc.bench import workloads as wl
from dask_bacc.testing import Bimodal, SlowHosts

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def regimes():
    spec = importlib.util.spec_from_file_location("bacc_regimes", ROOT / "benchmarks/regimes.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bacc_regimes"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("bacc_regimes", None)


class Recorder:
    """A straggler model that records what the wrapper asked it and returns no delay."""

    def __init__(self):
        self.calls = []

    def task_delay(self, seed, seq, index, worker_name="", elapsed=0.0):
        self.calls.append((seed, seq, index, worker_name, elapsed))
        return 0.0


def test_straggling_calls_func_and_asks_the_model_with_the_job_number():
    model = Recorder()
    task = wl.SleepTask(0.0)
    f = wl.Straggling(task, model, seed=3, job=42)
    block = np.ones((4, 8))
    np.testing.assert_array_equal(f(block), task.apply(block))
    f(block)
    assert [c[:2] for c in model.calls] == [(3, 42), (3, 42)]
    assert model.calls[0][2] != model.calls[1][2]  # each call draws on its own index
    assert model.calls[0][3] == ""  # not on a worker
    assert f.func is task and f.__name__ == "sleep_task"  # one calibration per f in auto mode


def test_straggling_counts_its_thread_time_delay_included():
    before = wl.thread_seconds()
    f = wl.Straggling(wl.SleepTask(0.0), Bimodal(p=1.0, delay=0.05), seed=0, job=1)
    f(np.ones((2, 8)))
    assert wl.thread_seconds() - before >= 0.05


def test_slow_host_model_hits_only_its_host_through_the_wrapper():
    model = SlowHosts(hosts=("h1",), factor=10.0)
    assert model.task_delay(0, 1, 5, "h1-w3", 0.1) == pytest.approx(0.9)
    assert model.task_delay(0, 1, 5, "h0-w3", 0.1) == 0.0


def test_inference_task_gives_probabilities_on_digit_rows():
    pytest.importorskip("sklearn")
    rows = wl.digits_rows(50, seed=0)
    p = wl.InferenceTask(hidden=32).apply(rows)
    assert p.shape == (50, 10)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert np.mean(p.argmax(axis=1) == wl.InferenceTask(hidden=32)(rows).argmax(axis=1)) == 1.0


def test_frame_task_keeps_the_index():
    part = wl.frame_partition(2, rows=10)
    out = wl.FrameTask()(part)
    assert list(out.columns) == ["u", "v"] and out.index.equals(part.index)
    assert part.index[0] == 20


def test_cells_fit_the_grid(regimes):
    quick = regimes.quick_cells()
    assert {c.workload for c in quick} == {"sleep", "inference", "dataframe"}
    models = {"bimodal", "pareto", "slow-host", "correlated", "moving"}
    assert {c.model for c in quick} <= models and len({c.model for c in quick}) >= 3
    assert {c.spare for c in quick} >= {1.0, 2.0}
    assert any(c.jobs > 1 for c in quick)
    assert all(c.workers == round(c.spare * 2 * c.K) for c in quick)
    assert next(c for c in regimes.frame_cells() if c.workload == "dataframe").rows >= 8_000_000
    full = regimes.full_cells()
    assert {c.K for c in full} == {8, 16, 32} and {c.spare for c in full} == {1.0, 1.5, 2.0}
    assert {c.duration for c in full} == {0.05, 2.0}
    assert {c.model for c in full} == models
    hosts = ["h0", "h1", "h2", "h3"]
    for c in quick + full:
        assert regimes.straggler_model(c, hosts) is not None


def _jobs(regimes, cell, strategy, latencies, error=None):
    return [
        regimes.Job(cell=cell, strategy=strategy, round=r, latency=t, error=error, cpu=1.0)
        for r, t in enumerate(latencies)
    ]


def test_summary_ratios_best_strategy_and_the_default_check(regimes):
    cells = [regimes.Cell("sleep", "bimodal", 0.1, 2.0)]
    strategies = ("plain", "default", "repetition", "berrut")
    jobs = (
        _jobs(regimes, 0, "plain", [1.0] * 9 + [3.0], error=0.0)
        + _jobs(regimes, 0, "default", [0.6] * 10, error=0.02)
        + _jobs(regimes, 0, "repetition", [0.5] * 10, error=0.0)
        # fastest, but its worst error is over the budget: never the best
        + _jobs(regimes, 0, "berrut", [0.1] * 9 + [0.1], error=0.5)
    )
    summary = regimes.summarize(cells, jobs, strategies)
    per = summary[0]["strategies"]
    assert per["plain"]["p50"] == pytest.approx(1.0)
    assert per["repetition"]["p50_vs_plain"] == pytest.approx(0.5)
    assert regimes.best_of(summary[0], 0.1, "p50") == "repetition"
    check = regimes.default_check(summary, 0.1)[0]
    assert check["p50_best"] == "repetition"
    assert check["p50_vs_best"] == pytest.approx(1.2)
    assert check["ok"]  # 1.2x the best, below plain's p90, error within the budget
    ranked = regimes.candidates(summary, 0.1)
    assert [c["strategy"] for c in ranked] == ["repetition", "plain", "berrut"]
    assert ranked[0]["cells_met"] == 1 and ranked[-1]["worst_error"] == pytest.approx(0.5)
    assert "| berrut |" in regimes.candidates_table(ranked) and "0.5 |" in (
        regimes.candidates_table(ranked)
    )
    jobs = [j for j in jobs if j.strategy != "default"] + _jobs(
        regimes, 0, "default", [0.7] * 10, error=0.02
    )
    check = regimes.default_check(regimes.summarize(cells, jobs, strategies), 0.1)[0]
    assert not check["ok"]  # 1.4x the best
    text = regimes.tables(regimes.summarize(cells, jobs, strategies), strategies, 0.1)
    assert "**best**" in text and "0.5 (0.5)" in text


def test_failed_strategies_are_reported_not_ranked(regimes):
    cells = [regimes.Cell("sleep", "bimodal", 0.1, 2.0)]
    jobs = _jobs(regimes, 0, "plain", [1.0] * 10, error=0.0) + [
        regimes.Job(cell=0, strategy="default", round=r, failure="ValueError: no")
        for r in range(10)
    ]
    summary = regimes.summarize(cells, jobs, ("plain", "default"))
    assert summary[0]["strategies"]["default"]["failed"] == 10
    assert regimes.best_of(summary[0], 0.1, "p90") == "plain"
    assert not regimes.default_check(summary, 0.1)[0]["ok"]
    assert "failed: ValueError: no" in regimes.tables(summary, ("plain", "default"), 0.1)
