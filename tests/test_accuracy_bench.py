"""The accuracy benchmark on a tiny grid: it runs, reports every code and writes its outputs."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dask_bacc.bench.accuracy import (
    AccuracyConfig,
    accuracy_markdown,
    run_accuracy,
    straggler_levels,
    write_accuracy,
)
from dask_bacc.bench.cli import bench

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_straggler_levels():
    assert straggler_levels(4, 8, full=False) == [0, 1, 2, 3, 4]
    assert straggler_levels(8, 16, full=True) == list(range(9))
    assert straggler_levels(4, 5, full=False) == [0, 1]


def test_run_accuracy_tiny_grid(tmp_path):
    config = AccuracyConfig(
        K=(2,), ratios=(2.0,), trials=2, workloads=("tanh-smooth", "square-random", "digits")
    )
    result = run_accuracy(config)
    cells = result["cells"]
    assert {c["workload"] for c in cells} == {"tanh-smooth", "square-random", "digits"}
    for c in cells:
        assert {"berrut", "systematic-berrut", "repetition"} <= set(c["error"])
        assert all(v >= 0 for v in c["error"].values())
        assert set(c["ratio_estimate"]) == {"berrut", "systematic-berrut"}
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


def test_cli_accuracy(tmp_path):
    out = tmp_path / "acc"
    result = CliRunner().invoke(
        bench, ["--accuracy", "-K", "2", "--out", str(out), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert "Calibration of the error estimate" in result.output
    assert (out / "accuracy.json").is_file() and (out / "accuracy.md").is_file()
