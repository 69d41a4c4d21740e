"""The ``dask bacc`` command line: registration with dask's CLI, the demo, bad arguments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from dask_bacc.bench.demo import (
    CODED,
    DEMO_CODES,
    EXCLUDED,
    DemoSettings,
    StrategyStats,
    demo,
    format_table,
)
from dask_bacc.cli import bacc
from dask_bacc.codes.registry import ALIASES, registered_codes

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--workers", "4", "--blocks", "2", "--rows", "40", "--rounds", "1"]


def test_group_help_lists_subcommands():
    result = CliRunner().invoke(bacc, ["--help"])
    assert result.exit_code == 0, result.output
    commands = result.output.split("Commands:", 1)[1].split()
    assert "demo" in commands
    assert "bench" in commands


@pytest.mark.slow
def test_dask_console_script_has_bacc():
    """The real ``dask`` script next to this interpreter finds the ``dask_cli`` entry point."""
    dask_script = Path(sys.executable).with_name("dask")
    assert dask_script.exists(), f"no dask console script at {dask_script}"
    proc = subprocess.run(
        [str(dask_script), "bacc", "--help"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "demo" in proc.stdout and "bench" in proc.stdout
    # dask warns (instead of failing) when a registered command cannot be imported
    assert "exception occurred" not in proc.stderr, proc.stderr


def test_demo_help_names_every_option():
    result = CliRunner().invoke(bacc, ["demo", "--help"])
    assert result.exit_code == 0, result.output
    for option in (
        "--workers",
        "--blocks",
        "--coded",
        "--rows",
        "--rounds",
        "--p",
        "--straggler-delay",
        "--seed",
        "--processes",
    ):
        assert option in result.output


@pytest.mark.slow
def test_demo_smoke():
    result = CliRunner().invoke(bacc, ["demo", *TINY, "--straggler-delay", "0.05"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "K=2 blocks, N=4 coded tasks" in out
    header = next(line for line in out.splitlines() if line.startswith("| strategy |"))
    for column in (
        "time to answer",
        "speed-up vs plain",
        "stragglers drawn",
        "stragglers cancelled",
        "decoded error",
    ):
        assert column in header
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    for name in ("plain", *CODED):
        cells = [c.strip() for c in rows[name].strip("|").split("|")]
        assert len(cells) == header.count("|") - 1
        assert cells[1] == ("2" if name == "plain" else "4")  # tasks: K plain, N coded
        assert cells[4].endswith("x")
    # plain and repetition are exact whatever straggled
    assert float(rows["plain"].strip("|").split("|")[-1]) == 0.0
    assert float(rows["repetition"].strip("|").split("|")[-1]) == 0.0
    assert "round 1/1" in out  # the progress line (stderr)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--blocks", "0"], "Invalid value for '--blocks'"),
        (["--blocks", "3", "--coded", "3"], "--coded must be greater than --blocks"),
        (["--workers", "4", "--blocks", "2", "--coded", "6"], "--coded 6 needs 6 workers"),
        (["--workers", "3", "--blocks", "5"], "need at least 6 workers"),
        (["--rows", "7"], "--rows 7 is not a positive multiple of --blocks 5"),
        (["--p", "1.5"], "Invalid value for '--p'"),
        (["--rounds", "0"], "Invalid value for '--rounds'"),
        (["--straggler-delay", "-1"], "Invalid value for '--straggler-delay'"),
    ],
)
def test_demo_bad_arguments(argv, message):
    result = CliRunner().invoke(demo, argv)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "LocalCluster" not in result.output  # rejected before any cluster starts


def _option_help(help_text: str, option: str) -> str:
    """The help of ``option`` in click's ``--help`` output, unwrapped to one line."""
    lines = help_text.split("Options:", 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(option + " "))
    text = [lines[start].strip()[len(option) :]]
    for line in lines[start + 1 :]:
        if line.strip().startswith("-"):
            break
        text.append(line.strip())
    return " ".join(text)


def test_demo_help_lists_the_codes_of_the_registry():
    """Issue 28 item 4: ``demo --help`` named the codes of an older version (berrut,
    systematic-berrut, repetition); its codes now come from the codes registry."""
    # wide, so that click does not wrap lines at the hyphen of a code's name
    result = CliRunner().invoke(bacc, ["demo", "--help"], terminal_width=400, max_content_width=400)
    assert result.exit_code == 0, result.output
    every = {*registered_codes(), *ALIASES}
    assert set(DEMO_CODES) | set(EXCLUDED) == every
    help_text = " ".join(result.output.split())
    # the description names the codes the demo runs by default, the systematic spline first
    description = help_text.split("Options:", 1)[0]
    assert f"{', '.join(CODED[:-1])} and {CODED[-1]} codes" in description
    # --codes offers every code of the registry but those it excludes, saying why
    codes_help = _option_help(result.output, "--codes")
    listed = codes_help.split("a comma list from ", 1)[1].split(" (", 1)[0]
    assert set(listed.split(", ")) == every - set(EXCLUDED)
    for name, why in EXCLUDED.items():
        assert f"{name}: {why}" in codes_help
    assert f"[default: {', '.join(CODED)}]" in codes_help


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--codes", "lagrange"], "the demo cannot run 'lagrange'"),
        (["--codes", "bogus"], "unknown code 'bogus'"),
        (["--codes", ","], "give at least one code"),
    ],
)
def test_demo_bad_codes(argv, message):
    result = CliRunner().invoke(demo, argv)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_demo_runs_codes_beyond_the_default():
    """``--codes`` runs any code the demo accepts; uncoded runs K tasks, the others N."""
    result = CliRunner().invoke(
        demo, [*TINY, "--straggler-delay", "0", "--codes", "uncoded,spline"]
    )
    assert result.exit_code == 0, result.output
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")]
        for line in result.output.splitlines()
        if line.startswith("| ") and not line.startswith("| strategy")
    }
    assert list(rows) == ["plain", "uncoded", "spline"]
    assert rows["uncoded"][1] == "2" and rows["spline"][1] == "4"  # tasks: K, N
    assert float(rows["uncoded"][-1]) == 0.0  # uncoded is exact


#: the smallest bench the CLI allows: 1 job, no delay, tiny blocks, 3 threaded workers
TINY_BENCH = [
    "--workers", "3", "-K", "2", "-N", "3", "--jobs", "1", "--no-baseline",
    "--base-duration", "0", "--work", "1", "--rows", "2", "--output-size", "1",
    "--straggler", "none", "--no-progress",
]  # fmt: skip


@pytest.mark.parametrize("code", [*registered_codes(), *ALIASES])
def test_the_cli_runs_every_registered_code(code, tmp_path):
    """Issue 28 item 4: ``dask bacc bench --strategies systematic-spline`` (and spline) was
    refused. Every code of the registry and every alias is a strategy the bench runs."""
    func = ["--func", "square"] if code == "lagrange" else []  # Lagrange: polynomial f
    argv = ["bench", *TINY_BENCH, *func, "--strategies", code, "--out", str(tmp_path)]
    result = CliRunner().invoke(bacc, argv)
    assert result.exit_code == 0, result.output
    header, *rows = (
        [c.strip() for c in line.strip("|").split("|")]
        for line in result.output.splitlines()
        if line.startswith("| ")
    )
    assert [row[0].removesuffix(" (approx.)") for row in rows] == [code], result.output
    cells = dict(zip(header, rows[0], strict=True))
    assert cells["jobs"] == "1" and cells["failed"] == "0", cells
    assert (tmp_path / "bench.json").exists()


def test_settings_check_matches_the_cli():
    assert DemoSettings().n_coded == 10
    assert DemoSettings(workers=7, blocks=5).n_coded == 7
    with pytest.raises(ValueError, match="greater than --blocks"):
        DemoSettings(blocks=4, coded=4).check()
    with pytest.raises(ValueError, match="needs 12 workers"):
        DemoSettings(coded=12).check()


def test_format_table():
    stats = {
        "plain": StrategyStats(
            tasks=2, time=[2.0, 0.0], drawn=[1, 0], stragglers_cancelled=[0, 0], error=[0, 0]
        ),
        "berrut": StrategyStats(
            tasks=4, time=[0.1, 0.1], drawn=[2, 1], stragglers_cancelled=[2, 0], error=[0.2, 0.4]
        ),
    }
    lines = format_table(stats).splitlines()
    assert lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    assert lines[2] == "| plain | 2 | 1.000 | 2.000 | 1.0x | 1 | 0 | 0.00e+00 |"
    assert lines[3] == "| berrut | 4 | 0.100 | 0.100 | 10.0x | 3 | 2 | 3.00e-01 |"


@pytest.mark.slow
def test_example_script_is_the_same_command():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "straggler_demo.py"), "--blocks", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Invalid value for '--blocks'" in proc.stderr


def test_version_names_the_package():
    """D8: ``dask bacc --version`` printed ``dask, version 0.1.0``."""
    import dask_bacc

    result = CliRunner().invoke(bacc, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"dask-bacc, version {dask_bacc.__version__}"
