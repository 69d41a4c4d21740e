"""Every ``python`` block of the README runs as written, in order, in one interpreter, on
the 4-worker cluster the first block creates (as a notebook user pasting them would)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def readme_blocks() -> list[str]:
    return FENCE.findall((ROOT / "README.md").read_text())


def test_the_readme_has_the_notebook_example_first():
    blocks = readme_blocks()
    assert len(blocks) >= 8
    first = blocks[0]
    assert "LocalCluster(n_workers=4" in first
    assert len(first.strip().splitlines()) <= 12  # the short example a user pastes


@pytest.mark.multiprocess
def test_every_readme_python_block_runs_in_order(tmp_path):
    blocks = readme_blocks()
    # one script, each block announced, so a failure names its block; given with -c (as
    # a notebook's kernel: no __main__ file for the worker processes to re-import)
    script = "\n".join(
        f"print('--- README block {i}', flush=True)\n{code}" for i, code in enumerate(blocks)
    )
    script += "\nclient.close()\nprint('--- README done', flush=True)\n"
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "--- README done" in proc.stdout, out[-4000:]
    assert "Traceback" not in out, out[-4000:]


def test_ci_runs_the_readme_test_command_word_for_word():
    """The README opens with two commands (the demo, the tests); CI's entry point runs the
    second word for word, then the ci/ scripts."""
    bash = re.findall(r"^```bash\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    demo, tests = (block.strip() for block in bash[:2])
    assert demo.endswith("dask bacc demo") and "pytest -q" in tests
    run = (ROOT / ".ci" / "run").read_text()
    assert tests in run.splitlines()
    for script in ("browser", "typecheck", "docs", "notebooks", "soak"):
        assert f"bash ci/{script}.sh" in run, script
        assert (ROOT / "ci" / f"{script}.sh").exists(), script


def test_the_readme_says_what_it_is_and_when_to_use_it_first():
    """Issue 28 item 10: the README opened with commands; now a short lead says what
    dask-bacc is, when to use it and when not, then come the two commands."""
    text = (ROOT / "README.md").read_text()
    lead = text[: text.index("```bash")]
    assert "straggler-resistant" in lead and "map over chunks" in lead
    assert "**When to use it**" in lead and "**When not to:**" in lead
    assert "docs/regimes.md" in lead  # the plain-words guide it summarises
    assert len(lead.splitlines()) <= 40  # a lead, not a chapter


DATED = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_dated_figures_live_in_the_benchmarks_page():
    """The README's "Measured" section read like a lab notebook (dated reruns of the demo);
    they are in docs/benchmarks.md, each with its command and date."""
    readme = (ROOT / "README.md").read_text()
    assert not DATED.findall(readme)
    demo = (ROOT / "docs" / "benchmarks.md").read_text().split("## The demo\n", 1)[1]
    demo = demo.split("\n## ", 1)[0]
    assert "`dask bacc demo` (10 threaded workers on 2 cores" in demo
    times, dash = "\N{MULTIPLICATION SIGN}", "\N{EN DASH}"
    for figure in ("20.9", "9.2", "2.9", "9.5x", "0.30", f"1.21{dash}1.46x"):
        figure += times if figure[-1].isdigit() else ""
        assert figure in demo, figure
    assert {"2026-12-02", "2026-12-03"} <= set(DATED.findall(demo))
