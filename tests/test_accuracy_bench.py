"""The accuracy benchmark on a tiny grid: it runs, reports every code and writes its outputs."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dask_bacc.bench.accuracy import (
    COMPARE_CODES,
    ESTIMATED,
    LOCAL,
    AccuracyConfig,
    CompareConfig,
    _accuracy,
    accuracy_markdown,
    compare_markdown,
    run_accuracy,
    run_compare,
    straggler_levels,
    write_accuracy,
    write_compare,
)
from dask_bacc.bench.cli import bench

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_straggler_levels():
    assert straggler_levels(4, 8, full=False) == [0, 1, 2, 3, 4]
    assert straggler_levels(8, 16, full=True) == list(range(9))
    assert straggler_levels(4, 5, full=False) == [0, 1]


@pytest.mark.slow
def test_run_accuracy_tiny_grid(tmp_path):
    config = AccuracyConfig(
        K=(2,), ratios=(2.0,), trials=2, workloads=("tanh-smooth", "square-random", "digits")
    )
    result = run_accuracy(config)
    cells = result["cells"]
    assert {c["workload"] for c in cells} == {"tanh-smooth", "square-random", "digits"}
    for c in cells:
        assert {"berrut", "systematic-berrut", "repetition", *LOCAL} <= set(c["error"])
        # a local code's error is None when every trial was skipped (a gap)
        assert all(v >= 0 for v in c["error"].values() if v is not None)
        assert set(c["ratio_estimate"]) == set(ESTIMATED)
        assert set(c["skipped"]) == set(LOCAL)
        assert all(0 <= n <= config.trials for n in c["skipped"].values())
        assert isinstance(c["beats_repetition"], bool)
    # Lagrange only for the polynomial workload; accuracy only for the classifier
    assert all(("lagrange" in c["error"]) == (c["workload"] == "square-random") for c in cells)
    assert all(("accuracy" in c) == (c["workload"] == "digits") for c in cells)
    # no stragglers: systematic Berrut and repetition are exact
    for c in cells:
        if c["S"] == 0:
            assert c["error"]["systematic-berrut"] < 1e-12 and c["error"]["repetition"] == 0
    summary = result["summary"]
    assert 0 <= summary["calibration"]["berrut"]["cells_within_2x"] <= 1
    assert set(summary["by_workload"]) == {"tanh-smooth", "square-random", "digits"}
    assert set(summary["skipped"]) == set(LOCAL)
    text = accuracy_markdown(result)
    assert "Calibration of the error estimate" in text and "| digits |" in text
    paths = write_accuracy(result, tmp_path)
    assert json.loads(paths["json"].read_text())["cells"] == json.loads(json.dumps(cells))
    for png in paths["plots"]:
        assert png.read_bytes().startswith(PNG_MAGIC)


def test_config_validation():
    with pytest.raises(ValueError, match="unknown workloads"):
        run_accuracy(AccuracyConfig(workloads=("nope",)))
    with pytest.raises(ValueError, match="patterns"):
        run_accuracy(AccuracyConfig(patterns=("diagonal",)))


@pytest.mark.slow
def test_cli_accuracy(tmp_path):
    out = tmp_path / "acc"
    result = CliRunner().invoke(
        bench, ["--accuracy", "-K", "2", "--out", str(out), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert "Calibration of the error estimate" in result.output
    assert (out / "accuracy.json").is_file() and (out / "accuracy.md").is_file()


@pytest.mark.slow
def test_run_compare_tiny(tmp_path):
    config = CompareConfig(
        ratios=(2, 4),
        stragglers=(0, 2),
        tasks=("digits-logistic", "tanh-smooth"),
        trials=3,
        convergence_tasks=("tanh-smooth",),
        convergence_N=(16, 32),
        convergence_trials=2,
    )
    result = run_compare(config)
    cells = result["cells"]
    assert {(c["task"], c["N"], c["s"]) for c in cells} == {
        (t, N, s) for t in config.tasks for N in (16, 32) for s in (0, 2)
    }
    for c in cells:
        rows = set(c["mean_error"])
        assert set(COMPARE_CODES) <= rows
        transformed = {
            f"{code}+{t}" for code in COMPARE_CODES for t in ("log", "log-probabilities")
        }
        # the log transforms only for the positive outputs (class probabilities)
        if c["task"] == "digits-logistic":
            assert transformed <= rows
        else:
            assert not transformed & rows
        if c["s"] == 0:  # nothing lost: repetition and the systematic codes are exact
            exact = ("repetition", "systematic-berrut", "systematic-spline")
            for k in rows:
                if k.partition("+")[0] in exact:
                    assert c["mean_error"][k] < 1e-12, k
            if "accuracy" in c:
                assert c["accuracy"]["repetition"] == c["accuracy"]["uncoded"]
        assert set(c["ratio_estimate"]) == rows - {k for k in rows if k.startswith("repetition")}
    # the spline beats Berrut on smooth data at N = 4K
    smooth = [c for c in cells if c["task"] == "tanh-smooth" and c["N"] == 32]
    assert all(c["mean_error"]["spline"] < c["mean_error"]["berrut"] for c in smooth)
    assert all(0 <= v["cells_within_2x"] <= 1 for v in result["calibration"].values())
    assert {c["N"] for c in result["convergence"]} == {16, 32}
    text = compare_markdown(result)
    assert "### digits-logistic" in text and "| spline+log |" in text and "s = 2" in text
    assert "Calibration of the error estimate" in text and "Convergence" in text
    paths = write_compare(result, tmp_path)
    assert json.loads(paths["json"].read_text())["config"]["trials"] == 3
    for png in paths["plots"]:
        assert png.read_bytes().startswith(PNG_MAGIC)


def test_digits_accuracy_counts_missing_blocks_as_wrong():
    decoded = np.zeros((2, 3, 4))
    decoded[0, :, 1] = 1.0  # block 0 predicts class 1 for every row; block 1 is missing
    labels = np.array([[1, 1, 0], [0, 0, 0]])
    assert _accuracy(decoded, labels) == pytest.approx(2 / 6)
