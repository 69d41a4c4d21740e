"""The benchmark harness: smoke runs on a tiny grid, its outputs, and the CLI's checks.

No timing assertions: only that the harness runs every strategy, measures every job and
writes the table, the JSON fields and the figures.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from dask_bacc.bench import (
    BenchConfig,
    StragglerSpec,
    TaskModel,
    markdown_report,
    run_bench,
    write_outputs,
)
from dask_bacc.bench.cli import bench
from dask_bacc.bench.harness import JobRecord, quantile, summarize
from dask_bacc.bench.report import CLEAN_COLUMNS, TABLE_COLUMNS

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TINY = ["--K", "2", "--N", "4", "--workers", "4", "--jobs", "2", "--base-duration", "0.01"]


def _header(columns: tuple[str, ...]) -> str:
    return "| " + " | ".join(columns) + " |"


def _check_json(path, strategies: list[str], jobs: int) -> dict:
    data = json.loads(path.read_text())
    for key in ("config", "environment", "wall_seconds", "strategies", "notes", "cells", "jobs"):
        assert key in data, key
    assert data["config"]["K"] == [2] and data["config"]["N"] == [4]
    (cell,) = data["cells"]
    assert (cell["K"], cell["N"]) == (2, 4)
    assert sorted(cell["strategies"]) == sorted(strategies)
    for s, v in cell["strategies"].items():
        assert v["jobs"] == jobs and v["clean_jobs"] == jobs, s
        for q in ("p50", "p90", "p99"):
            assert isinstance(v["latency"][q], float) and v["latency"][q] > 0
            assert q in v["vs_uncoded"] and q in v["vs_clean"]
        assert set(v["rel_error"]) == {"median", "max", "mean"}
        assert v["compute"]["per_job"] >= 0
        assert "stragglers_per_job" in v and "cancelled_per_job" in v
    assert len(data["jobs"]) == 2 * jobs * len(strategies)
    for rec in data["jobs"]:
        assert {"strategy", "condition", "latency", "rel_error", "compute", "stragglers"} <= set(
            rec
        )
    return data


def _check_pngs(out) -> None:
    for name in ("latency_cdf_K2_N4.png", "error_vs_stragglers_K2_N4.png"):
        path = out / name
        assert path.is_file(), name
        assert path.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.slow
def test_run_bench_api_smoke(tmp_path):
    """Every strategy (Lagrange too: f is a polynomial) on a tiny grid, through the API."""
    config = BenchConfig(
        K=(2,),
        N=(4,),
        workers=4,
        jobs=2,
        task=TaskModel(func="square", base_duration=0.01, rows=8, work=16, output_size=3),
        stragglers=StragglerSpec(kind="bimodal", p=0.5, factor=3.0),
        seed=1,
    )
    result = run_bench(config, progress=False)
    ran = result.strategies
    assert set(ran) | set(result.skipped) == {
        "plain",
        "uncoded",
        "repetition",
        "speculative",
        "berrut",
        "systematic-berrut",
        "lagrange",
    }
    assert "lagrange" in ran and "berrut" in ran
    assert len(result.records) == 2 * 2 * len(ran)  # jobs x conditions x strategies
    for rec in result.records:
        assert rec.ok, rec.error
        assert rec.rel_error is not None and rec.compute > 0
        if rec.strategy not in ("berrut", "systematic-berrut"):
            assert rec.rel_error < 1e-8, rec  # exact strategies
    assert all(r.stragglers == 0 for r in result.records if r.condition == "clean")

    md = markdown_report(result)
    assert _header(TABLE_COLUMNS) in md and _header(CLEAN_COLUMNS) in md
    for s in ran:
        assert f"\n| {s} |" in md or f"\n| {s} (approx.) |" in md
    assert "Berrut p50 / its own no-straggler p50" in md

    paths = write_outputs(result, tmp_path / "out")
    _check_json(paths["json"], ran, jobs=2)
    _check_pngs(tmp_path / "out")
    assert paths["markdown"].read_text() == md


@pytest.mark.slow
def test_cli_smoke(tmp_path):
    out = tmp_path / "bench"
    runner = CliRunner()
    res = runner.invoke(
        bench,
        [*TINY, "--strategies", "plain,uncoded,berrut", "--no-progress", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert _header(TABLE_COLUMNS) in res.stdout
    assert "\n| uncoded |" in res.stdout and "\n| berrut (approx.) |" in res.stdout
    assert "\n| plain |" in res.stdout
    assert "lagrange" not in res.stdout.split("Notes:")[0]
    _check_json(out / "bench.json", ["plain", "uncoded", "berrut"], jobs=2)
    _check_pngs(out)
    assert (out / "bench.md").read_text() == res.stdout


@pytest.mark.slow
def test_kills_smoke():
    """A worker is closed during every straggler job and replaced; uncoded cannot survive it."""
    config = BenchConfig(
        K=(2,),
        N=(3,),
        workers=4,
        jobs=1,
        strategies=("plain", "berrut"),
        task=TaskModel(base_duration=0.05, rows=8, work=8, output_size=2),
        stragglers=StragglerSpec(kind="kills", kills=1),
        warmup=False,
    )
    result = run_bench(config, progress=False)
    hit = [r for r in result.records if r.condition == "stragglers"]
    assert len(hit) == 2
    for rec in hit:
        assert len(rec.killed) == 1
        assert rec.ok, rec.error  # plain reschedules, Berrut decodes from the rest
    assert all(not r.killed for r in result.records if r.condition == "clean")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--K", "0"], "must be >= 1"),
        (["--K", "two"], "is not an integer"),
        (["--K", "4", "--N", "4"], "N must exceed K"),
        (["--K", "2", "--N", "8", "--workers", "4"], "need N distinct workers"),
        (["--strategies", "berrut,nope"], "unknown strategy 'nope'"),
        (["--strategies", "lagrange"], "lagrange needs a polynomial f"),
        (["--jobs", "0"], "--jobs"),
        (["--p", "1.5"], "--p"),
        (["--wait", "2.5"], "fraction must lie in (0, 1]"),
        (["--straggler", "sometimes"], "--straggler"),
        (["--straggler", "kills", "--scheduler", "tcp://127.0.0.1:1"], "needs the embedded"),
        (["--straggler", "slow-workers", "--slow-workers", "40"], "slow workers but"),
    ],
)
def test_cli_bad_arguments(args, message):
    res = CliRunner().invoke(bench, [*args, "--no-progress"])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert "Traceback" not in res.output


def test_dask_cli_group_help():
    from dask_bacc.cli import bacc

    res = CliRunner().invoke(bacc, ["bench", "--help"])
    assert res.exit_code == 0, res.output
    for option in ("--scheduler", "--straggler", "--strategies", "--jobs", "--out"):
        assert option in res.output


def test_quantile_counts_failed_jobs_as_slowest():
    assert quantile([1.0, 2.0, 3.0], 0.5) == 2.0
    assert quantile([1.0, 2.0, math.inf], 0.5) == 2.0
    assert quantile([1.0, 2.0, math.inf], 0.99) == math.inf
    assert quantile([1.0, math.inf, math.inf], 0.5) == math.inf
    assert np.isclose(quantile(list(range(31)), 0.9), 27.0)
    assert math.isnan(quantile([], 0.5))


def test_summarize_ratios():
    def rec(strategy: str, condition: str, latency: float | None) -> JobRecord:
        return JobRecord(
            K=2,
            N=4,
            strategy=strategy,
            condition=condition,
            round=0,
            seq=0,
            latency=latency,
            rel_error=None if latency is None else 0.0,
            tasks=2,
            compute=1.0,
        )

    records = [
        rec("uncoded", "stragglers", 4.0),
        rec("uncoded", "clean", 1.0),
        rec("berrut", "stragglers", 1.0),
        rec("berrut", "clean", 0.5),
        rec("repetition", "stragglers", None),
        rec("repetition", "clean", 1.0),
    ]
    s = summarize(records, [(2, 4)], ["uncoded", "repetition", "berrut"])[(2, 4)]
    assert s["berrut"]["vs_uncoded"]["p50"] == 0.25
    assert s["berrut"]["vs_clean"]["p99"] == 2.0
    assert s["uncoded"]["vs_uncoded"]["p90"] == 1.0
    assert s["repetition"]["failed"] == 1
    assert s["repetition"]["latency"]["p50"] == math.inf
    assert s["repetition"]["vs_uncoded"]["p50"] == math.inf
