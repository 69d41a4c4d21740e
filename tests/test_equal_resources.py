"""The pure parts of benchmarks/equal_resources.py (issue 42): the strategy names, the
per-job figures, the hindsight summary, the targets and the tables. No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def eq():
    spec = importlib.util.spec_from_file_location(
        "bacc_equal_resources", ROOT / "benchmarks/equal_resources.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bacc_equal_resources"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("bacc_equal_resources", None)


# -- strategy names --


def test_every_saturation_strategy_parses(eq):
    kinds = {s: eq.parse_strategy(s).kind for s in eq.SATURATION}
    assert kinds["plain"] == "plain" and kinds["default"] == "default"
    assert {kinds[s] for s in ("hedged", "speculative", "repetition")} == {"exact"}
    assert {kinds[s] for s in eq.AUTO} == {"auto"}
    assert {kinds[s] for s in eq.APPROX} == {"approx"}
    assert len(eq.APPROX) == 10  # five codes at two ratios


def test_approximate_names_give_the_code_and_K(eq):
    s = eq.parse_strategy("berrut-r1.25")
    assert (s.code, s.ratio, s.blocks(16), s.blocks(64)) == ("berrut", 1.25, 12, 51)
    s = eq.parse_strategy("systematic-spline-r1.5")
    assert (s.code, s.blocks(16), s.blocks(64)) == ("systematic-spline", 10, 42)
    # "spline-r..." is the spline code, not the systematic one (the issue-39 cells' names
    # became systematic-spline-r...)
    assert eq.parse_strategy("spline-r1.5").code == "spline"
    assert eq.parse_strategy("systematic-berrut-r1.5").code == "systematic-berrut"
    assert eq.SPLINE == ("systematic-spline-r1.25", "systematic-spline-r1.5")


def test_exact_and_auto_names(eq):
    assert eq.parse_strategy("repetition").blocks(16) == 8
    assert eq.parse_strategy("hedged").blocks(16) == 16
    assert eq.parse_strategy("plain").blocks(16) == 16
    assert eq.parse_strategy("default").blocks(16) is None
    auto = eq.parse_strategy("auto")
    assert auto.error is None and auto.blocks(16) is None
    assert eq.parse_strategy("auto-e0.02").error == 0.02


@pytest.mark.parametrize(
    "name",
    ["foo", "berrut-rx", "berrut-r0.5", "lagrange-r1.5", "auto-e-1", "auto-e", "auto-einf", ""],
)
def test_bad_names_are_refused(eq, name):
    with pytest.raises(ValueError):
        eq.parse_strategy(name)


def test_cell_specs_keep_the_strategies_named(eq):
    cells = eq.parse_cells("stragglers-J1, sat-smooth-J6[hedged+auto*+*-r1.25],deadline-J3[]")
    assert list(cells) == ["stragglers-J1", "sat-smooth-J6", "deadline-J3"]
    assert cells["stragglers-J1"] is None
    assert eq.keep(eq.SATURATION, None) == list(eq.SATURATION)
    kept = eq.keep(eq.SATURATION, cells["sat-smooth-J6"])
    assert kept == ["plain", "hedged", "auto", "auto-e0.02"] + [
        f"{c}-r1.25" for c in eq.APPROX_CODES
    ]
    assert eq.keep(eq.SATURATION, cells["deadline-J3"]) == ["plain"]  # plain always runs
    with pytest.raises(ValueError, match="close"):
        eq.parse_cells("sat-smooth-J6[hedged")


# -- per-job figures --


def test_the_estimate_check(eq):
    assert eq.estimate_holds(0.01, 0.02)  # half the true error
    assert not eq.estimate_holds(0.009, 0.02)
    assert not eq.estimate_holds(None, 0.02)  # no estimate vouches for nothing
    assert eq.estimate_holds(0.0, 1e-16)  # an exact decode: rounding
    assert not eq.estimate_holds(None, 0.0)


def _report(name="berrut", estimate=0.01, auto=None, systematic=False):
    code = {"name": name, **({"systematic": True} if systematic else {})}
    return SimpleNamespace(
        code=code,
        K=12,
        N=16,
        trigger="wait",
        returned=list(range(12)),
        error_estimate=estimate,
        estimate_method="embedded-fh1",
        warnings=[],
        auto=auto,
    )


def test_job_record_measures_the_decoded_rows_against_the_estimate(eq):
    ref = np.ones((10, 2))
    out = ref.copy()
    out[:8] *= 1.1  # the 8 decoded rows 10% off, the 2 left over exact
    rec = eq.job_record(eq.Outcome(out, _report(), rows=8, code="berrut-r1.25"), ref, 0.5)
    assert rec["t"] == 0.5 and rec["approximate"] and rec["code"] == "berrut"
    assert rec["coded_error"] == pytest.approx(0.1)
    assert rec["error"] == pytest.approx(0.1 * math.sqrt(8 / 10))
    assert (rec["K"], rec["N"], rec["returned"]) == (12, 16, 12)
    sysrec = eq.job_record(eq.Outcome(ref, _report("spline", 0.0, systematic=True)), ref, 0.1)
    assert sysrec["code"] == "systematic-spline" and sysrec["coded_error"] == 0


def test_job_record_of_plain_exact_auto_and_failed_jobs(eq):
    ref = np.ones((4, 2))
    assert eq.job_record(ref.copy(), ref, 1.0) == {"t": 1.0, "error": 0.0}
    rep = _report("repetition", 0.0)
    assert "approximate" not in eq.job_record(eq.Outcome(ref, rep), ref, 1.0)
    chosen = {"code": "repetition", "N": 16, "k": 8, "time": 1.1, "p90": 1.4, "error": 0.0}
    rec = eq.job_record(eq.Outcome(ref, _report("repetition", 0.0, {"chosen": chosen})), ref, 1)
    assert rec["chosen"] == chosen
    rec = eq.job_record(eq.Outcome(ref, _report(auto={"chosen": None, "reason": "few"})), ref, 1)
    assert rec["chosen"] is None and rec["approximate"]
    failed = eq.job_record(RuntimeError("lost"), ref, 2.0)
    assert failed == {"t": 2.0, "failed": "RuntimeError: lost"}


def test_job_figures(eq):
    records = [
        {"t": 1, "error": 0.01, "approximate": True, "coded_error": 0.01, "estimate": 0.01},
        {"t": 1, "error": 0.03, "approximate": True, "coded_error": 0.03, "estimate": 0.001},
        {"t": 1, "error": 0.02, "approximate": True, "coded_error": 0.02, "estimate": None},
        {"t": 1, "error": 0.0, "approximate": True, "coded_error": 0.0, "estimate": 0.0},
        {"t": 9, "failed": "TimeoutError: x"},
    ]
    f = eq.job_figures(records)
    assert (f["jobs"], f["failed"], f["approximate_jobs"], f["no_estimate"]) == (5, 1, 4, 1)
    assert f["median_error"] == pytest.approx(0.015)
    assert f["mean_error"] == pytest.approx(0.015)
    assert f["max_error"] == 0.03
    assert f["estimate_ok"] == 0.5
    auto = [
        {"t": 1, "error": 0.0, "chosen": {"code": "repetition", "N": 16}},
        {"t": 1, "error": 0.0, "chosen": {"code": "repetition", "N": 16}},
        {"t": 1, "error": 0.0, "chosen": None},
    ]
    assert eq.job_figures(auto)["chosen"] == {"repetition N=16": 2, "defaults": 1}
    prices = [{"median_abs": m, "max_abs": 2 * m, "median_price": 10.0} for m in (0.1, 0.3)]
    priced = [{"t": 1, "error": 0.1, "price": p} for p in prices]
    f = eq.job_figures(priced)
    assert (f["price_median_abs"], f["price_max_abs"], f["median_price"]) == (0.2, 0.6, 10.0)


def test_summarise_is_against_plain(eq):
    r = eq.summarise([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])
    assert r["p50"] == 0.5 and r["p50_s"] == 2.0
    assert r["p90"] == pytest.approx(0.5) and r["p99"] == pytest.approx(0.5)


# -- hindsight and targets --


def _cell():
    def s(p50, p90, median=0.0, mean=None, worst=None, est=None):
        out = {"p50_s": p50, "p90_s": p90, "median_error": median,
               "mean_error": median if mean is None else mean,
               "max_error": median if worst is None else worst}  # fmt: skip
        if est is not None:
            out["estimate_ok"] = est
        return out

    return {
        "plain": s(2.0, 4.0),
        "hedged": s(1.0, 3.0),
        "speculative": s(1.5, 2.0),  # best p90, not best p50
        "repetition": s(1.2, 2.5),
        "default": s(1.2, 2.5),
        "auto": s(1.1, 2.2),
        "auto-e0.02": s(0.9, 1.0, 0.005, worst=0.015),
        "systematic-spline-r1.25": s(0.6, 0.9, 0.01, worst=0.015, est=1.0),
        "berrut-r1.25": s(0.4, 0.5, 0.3, worst=0.5, est=0.4),  # fastest but wrong
        "spline-r1.5": s(0.7, 0.95, 0.012, worst=0.03, est=0.97),
    }


def test_hindsight_picks_the_best_of_each_kind(eq):
    h = eq.hindsight(_cell())
    assert (h["best_exact_p50"], h["best_exact_p50_s"]) == ("hedged", 1.0)
    assert (h["best_exact_p90"], h["best_exact_p90_s"]) == ("speculative", 2.0)
    # berrut is faster, but its median error is above 2%
    assert h["best_approx"] == "systematic-spline-r1.25" and h["best_approx_error_ok"]
    assert h["best_approx_median_error"] == 0.01 and h["best_approx_estimate_ok"] == 1.0
    assert h["approx_over_exact_p90"] == pytest.approx(0.45)
    assert h["best_qualified"] == "systematic-spline-r1.25"  # spline-r1.5's estimate: 97%
    assert h["auto"]["p50_over_best"] == pytest.approx(1.1)
    assert h["auto"]["p90_over_best"] == pytest.approx(1.1)
    assert h["auto"]["p90_over_plain"] == pytest.approx(0.55)
    # the oracle: every strategy whose worst error is <= 0.02 (spline-r1.5's is 0.03)
    c = h["auto-e0.02"]
    assert (c["oracle_p50"], c["oracle_p90"]) == ("systematic-spline-r1.25",) * 2
    assert c["p50_over_oracle"] == pytest.approx(1.5)
    assert c["p90_over_oracle"] == pytest.approx(1.0 / 0.9)
    assert c["mean_error"] == 0.005 and c["budget"] == 0.02


def test_targets_pass_and_fail(eq):
    h = eq.hindsight(_cell())
    assert eq.targets(h, "smooth", 3) == {"a": True, "b": True, "c": False}  # c: p50 1.5x
    assert eq.targets(h, "iid", 3)["a"] is None  # (a) is for smooth rows, J = 3
    assert eq.targets(h, "smooth", 6)["a"] is None
    cell = _cell()
    cell["auto-e0.02"].update(p50_s=0.65, mean_error=0.03)
    assert eq.targets(eq.hindsight(cell), "smooth", 3)["c"] is False  # mean error
    cell["auto-e0.02"].update(mean_error=0.01)
    assert eq.targets(eq.hindsight(cell), "smooth", 3)["c"] is True
    cell["systematic-spline-r1.25"]["estimate_ok"] = 0.9  # the estimate vouched too rarely
    h = eq.hindsight(cell)  # spline-r1.5 qualifies, but at 0.475x the best exact p90
    assert h["best_qualified"] == "spline-r1.5" and eq.targets(h, "smooth", 3)["a"] is True
    cell["spline-r1.5"]["p90_s"] = 1.01  # 0.505x
    assert eq.targets(eq.hindsight(cell), "smooth", 3)["a"] is False
    cell["plain"]["p90_s"] = 2.1  # auto within 1.2x of the best but above plain's p90
    assert eq.targets(eq.hindsight(cell), "smooth", 3)["b"] is False


def test_no_approximate_code_within_the_error_is_marked(eq):
    cell = {k: v for k, v in _cell().items() if k in ("plain", "hedged", "berrut-r1.25")}
    h = eq.hindsight(cell)
    assert h["best_approx"] == "berrut-r1.25" and not h["best_approx_error_ok"]
    assert eq.targets(h, "smooth", 3) == {"a": False, "b": None, "c": None}


def test_render_and_show(eq, capsys):
    cell = _cell()
    for r in cell.values():
        r.update(p50=1.0, p90=1.0, p99=1.0, thread_seconds=1.0, records=[], times=[1.0])
    cell["auto"]["chosen"] = {"repetition N=16": 3}
    h = eq.hindsight(cell)
    results = {
        "cells": {"sat-smooth-J3": cell, "stragglers": {"plain": cell["plain"]}},
        "meta": {
            "sat-smooth-J3": {"data": "smooth", "concurrent": 3, "p": 0.1, "per_job": True},
            "deadline-J1": {"skipped": "no deadline"},
        },
        "hindsight": {"sat-smooth-J3": h},
        "targets": {"sat-smooth-J3": eq.targets(h, "smooth", 3)},
    }
    text = eq.render(json.loads(json.dumps(results)))
    assert "**deadline-J1**: skipped (no deadline)" in text
    assert "| auto | 1.00 / 1.00 / 1.00 |" in text and "repetition N=16 x3" in text
    assert "stragglers" not in text  # an issue-39 cell has no per-job table
    row = next(line for line in text.splitlines() if line.startswith("| sat-smooth-J3 |"))
    assert row.endswith("| **pass** (systematic-spline-r1.25 0.45) | **pass** | fail |")
    assert (
        "Targets overall: (a) passes in 1 of 1 cells; (b) passes in 1 of 1 cells; (c) "
        "passes in 0 of 1 cells (fails in sat-smooth-J3)." in text
    )
    eq.show("sat-smooth-J3", cell)
    shown = json.loads(capsys.readouterr().out.split(" ", 1)[1])
    assert "records" not in shown["plain"] and "times" not in shown["plain"]


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_the_issue42_cells_run(tmp_path):
    """A smoke run of a saturation cell (4 worker processes, tiny tasks, one round and one
    warm-up): every strategy has its per-job figures and the cell its hindsight."""
    out = tmp_path / "eq.json"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/equal_resources.py"), "--workers", "4",
         "--rows", "64", "--task", "0.01", "--rounds", "1", "--warmup", "1",
         "--cells", "sat-smooth-J3", "--out", str(out)],
        check=True, cwd=ROOT, timeout=230, capture_output=True,
    )  # fmt: skip
    results = json.loads(out.read_text())
    cell = results["cells"]["sat-smooth-J3"]
    assert set(cell) == set(
        ["plain", "hedged", "speculative", "repetition", "default", "auto", "auto-e0.02"]
        + [f"{c}-r{r}" for c in ("systematic-spline", "bspline", "spline", "berrut",
                                 "systematic-berrut") for r in ("1.25", "1.5")]
    )  # fmt: skip
    assert all(len(r["records"]) == 3 for r in cell.values())  # J = 3 jobs, one round
    assert all(r["max_error"] == 0 for s, r in cell.items() if s in ("plain", "repetition"))
    assert "best_exact_p90" in results["hindsight"]["sat-smooth-J3"]
    assert set(results["targets"]["sat-smooth-J3"]) == {"a", "b", "c"}
